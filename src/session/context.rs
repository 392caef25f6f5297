//! The context a transcript's entries stand for.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use rustc_hash::FxHasher;

use crate::contract::message::{Message, Role};
use crate::services::guarantee::newest_summary_at;

/// The context a transcript's entries stand for: the last compaction summary, the entries it
/// kept, and everything after it.
pub(crate) fn derive_context(entries: &[Arc<Message>]) -> Vec<Arc<Message>> {
    let Some(last) = newest_summary_at(entries) else {
        return entries.to_vec();
    };
    let summary = &entries[last];
    let kept_from = match &summary.body {
        crate::contract::message::MessageBody::CompactionSummary(s) => s
            .first_kept_entry_id
            .as_ref()
            .and_then(|id| entries[..last].iter().position(|m| &m.id == id)),
        _ => None,
    };
    let mut out = vec![Arc::clone(summary)];
    if let Some(i) = kept_from {
        out.extend(
            entries[i..last]
                .iter()
                .filter(|m| m.role() != Role::CompactionSummary)
                .cloned(),
        );
    }
    out.extend(entries[last + 1..].iter().cloned());
    out
}

/// The ids of a context's messages, for asking whether the context holds an id without
/// walking it: built at the first question, kept up to date by indexing only the messages
/// appended since the last one, and built again after the context was replaced (a new
/// `generation`). Empty until asked (most sessions never are).
#[derive(Debug, Default)]
pub(crate) struct ContextIds {
    /// The context generation the set was built for (`None`: never built).
    generation: Option<u64>,
    /// How many of the context's messages are in the set.
    indexed: usize,
    ids: HashSet<String, BuildHasherDefault<FxHasher>>,
}

impl ContextIds {
    /// Whether `context` (of `generation`: a context that only grew keeps its generation)
    /// holds a message whose id is `id`. An empty id is never held.
    pub(crate) fn holds(&mut self, generation: u64, context: &[Arc<Message>], id: &str) -> bool {
        if id.is_empty() {
            return false;
        }
        if self.generation != Some(generation) || self.indexed > context.len() {
            self.ids.clear();
            self.indexed = 0;
            self.generation = Some(generation);
        }
        for m in context.get(self.indexed..).unwrap_or_default() {
            if !m.id.is_empty() {
                self.ids.insert(m.id.clone());
            }
        }
        self.indexed = context.len();
        self.ids.contains(id)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

    use super::*;

    fn with_id(id: &str) -> Arc<Message> {
        let mut m = Message::user(format!("text of {id}"));
        m.id = id.to_owned();
        Arc::new(m)
    }

    #[test]
    fn the_id_index_follows_appends_and_is_built_again_after_a_replace() {
        let mut ids = ContextIds::default();
        let mut context = vec![with_id("a"), with_id("b")];
        assert!(ids.holds(1, &context, "a"));
        assert!(!ids.holds(1, &context, "c"));
        // Appended since the last question: indexed now.
        context.push(with_id("c"));
        assert!(ids.holds(1, &context, "c"));
        // Replaced (a new generation): what it no longer holds is not found.
        let replaced = vec![with_id("x")];
        assert!(!ids.holds(2, &replaced, "a"));
        assert!(ids.holds(2, &replaced, "x"));
        // Shorter than what was indexed under the same generation: built again too.
        assert!(!ids.holds(2, &[], "x"));
        // An empty id is never held, even by a message without one.
        assert!(!ids.holds(3, &[with_id("")], ""));
    }
}
