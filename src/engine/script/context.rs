//! How the session context changed since a VM's resident copy was made, so each adapter
//! marshals only what is new.

use std::sync::Arc;

use crate::contract::message::Message;

/// How the session context changed since the resident copy was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextChange {
    /// The very same context: nothing to do.
    Same,
    /// Messages appended from this index on: marshal only them.
    Appended(usize),
    /// Anything else (a compaction gives `[summary, kept…]`): rebuild, reusing what is resident.
    Rebuilt,
}

/// Compares the resident context (`old`, if any) with the call's.
pub fn context_change(
    old: Option<&Arc<Vec<Arc<Message>>>>,
    new: &Arc<Vec<Arc<Message>>>,
) -> ContextChange {
    match old {
        Some(old) if Arc::ptr_eq(old, new) => ContextChange::Same,
        Some(old)
            if old.len() <= new.len()
                && old.iter().zip(new.iter()).all(|(a, b)| Arc::ptr_eq(a, b)) =>
        {
            ContextChange::Appended(old.len())
        }
        _ => ContextChange::Rebuilt,
    }
}
