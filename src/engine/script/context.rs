//! How the session context changed since a VM's resident copy was made, so each adapter
//! marshals only what is new.

use std::sync::{Arc, Weak};

use crate::contract::message::Message;
use crate::engine::api::HeldMessage;

/// How the session context changed since the resident copy was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ContextChange {
    /// The very same context: nothing to do.
    Same,
    /// Messages appended from this index on: marshal only them.
    Appended(usize),
    /// Anything else (a compaction gives `[summary, kept…]`): rebuild, reusing what is resident.
    Rebuilt,
}

/// What a VM keeps of the context it last mirrored. Not the context itself: holding it would
/// make the session copy the whole context at its next append (`Arc::make_mut`), a cost that
/// grows with the history on every call. A weak handle tells the very same context; the
/// messages' addresses, in order, tell an append. The addresses stay the messages' own while
/// the VM's resident copy holds those messages, which it does until its next sync.
#[derive(Debug)]
pub(crate) struct ContextSeen {
    handle: Weak<Vec<Arc<Message>>>,
    order: Vec<usize>,
}

impl ContextSeen {
    /// The context `ctx` as mirrored now.
    pub(crate) fn of(ctx: &Arc<Vec<Arc<Message>>>) -> ContextSeen {
        ContextSeen {
            handle: Arc::downgrade(ctx),
            order: ctx.iter().map(|m| Arc::as_ptr(m) as usize).collect(),
        }
    }

    /// Brings what was seen up to `ctx`, which `change` says how it differs from it: an append
    /// adds only the new messages' addresses (a long session's context is not walked again).
    pub(crate) fn update(
        seen: &mut Option<ContextSeen>,
        ctx: &Arc<Vec<Arc<Message>>>,
        change: ContextChange,
    ) {
        match (seen.as_mut(), change) {
            (Some(s), ContextChange::Same) => s.handle = Arc::downgrade(ctx),
            (Some(s), ContextChange::Appended(n)) if n == s.order.len() => {
                s.handle = Arc::downgrade(ctx);
                s.order
                    .extend(ctx[n..].iter().map(|m| Arc::as_ptr(m) as usize));
            }
            _ => *seen = Some(ContextSeen::of(ctx)),
        }
    }

    /// The messages' addresses, in order.
    pub(crate) fn keys(&self) -> &[usize] {
        &self.order
    }
}

/// Compares the resident context (`old`, if any) with the call's.
pub(crate) fn context_change(
    old: Option<&ContextSeen>,
    new: &Arc<Vec<Arc<Message>>>,
) -> ContextChange {
    match old {
        // The weak handle keeps the old allocation: a context changed since (always moved to a
        // new one while the handle exists) cannot have its address.
        Some(old) if std::ptr::eq(old.handle.as_ptr(), Arc::as_ptr(new)) => ContextChange::Same,
        Some(old)
            if old.order.len() <= new.len()
                && old
                    .order
                    .iter()
                    .zip(new.iter())
                    .all(|(a, b)| *a == Arc::as_ptr(b) as usize) =>
        {
            ContextChange::Appended(old.order.len())
        }
        _ => ContextChange::Rebuilt,
    }
}

/// The context's held messages as `host` functions are passed them (`p.messages`, shared),
/// kept in `slot` from call to call: extended by the `len - held` messages appended since
/// (`item(i)` is the i-th message of the resident copy), started afresh when the copy is
/// shorter than what is held. `None`, and `slot` emptied, when an item is not a resident
/// message. The list is copied only when a caller still holds its previous version.
pub(crate) fn held_context(
    slot: &mut Option<Arc<Vec<Arc<HeldMessage>>>>,
    len: usize,
    mut item: impl FnMut(usize) -> Option<Arc<HeldMessage>>,
) -> Option<Arc<Vec<Arc<HeldMessage>>>> {
    let held = slot.get_or_insert_with(Arc::default);
    if held.len() > len {
        *held = Arc::default();
    }
    if held.len() < len {
        let items = Arc::make_mut(held);
        for i in items.len()..len {
            let Some(m) = item(i) else {
                *slot = None;
                return None;
            };
            items.push(m);
        }
    }
    slot.clone()
}
