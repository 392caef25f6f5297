//! The context a transcript's entries stand for.

use std::sync::Arc;

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
