//! What the client knows of each conversation, and the tally of what went wrong: checked
//! against every `assemble` window and, at the end, against what the store holds.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::disk::{is_summary, key_of};
use super::views::Known;

/// What the client knows of one conversation.
pub(super) struct Conversation {
    pub(super) id: String,
    pub(super) view: Vec<Value>,
    /// What the bridge believes ctxhost holds of it (delta views).
    pub(super) known: Option<Known>,
    /// Messages a call carrying them was answered for.
    pub(super) acknowledged: BTreeSet<String>,
}

impl Conversation {
    /// The messages `range` of the view were carried by a call that was answered.
    pub(super) fn acknowledge(&mut self, range: std::ops::Range<usize>) {
        for m in &self.view[range] {
            self.acknowledged.insert(key_of(m));
        }
    }
}

/// Counts of what went wrong, over every conversation.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) acknowledged: usize,
    /// Messages (conversation: message) a transcript or a window held more than once, with
    /// the most copies seen.
    pub(super) twice: BTreeMap<String, usize>,
    /// Acknowledged messages missing from the transcript or from a later window.
    pub(super) lost: BTreeSet<String>,
    pub(super) out_of_order: Vec<String>,
}

impl Tally {
    /// An assemble window (the engine keeps everything): every acknowledged message of the
    /// conversation is in it once, in the client's order, and nothing else but summaries.
    pub(super) fn window(&mut self, c: &Conversation, result: &Value, log: &[String]) {
        let got: Vec<String> = result["messages"]
            .as_array()
            .expect("assemble messages")
            .iter()
            .filter(|m| !is_summary(m))
            .map(key_of)
            .collect();
        let want: Vec<String> = c.view.iter().map(key_of).collect();
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for k in &got {
            assert!(
                want.contains(k),
                "{}: a window holds a message the client never sent: {k}",
                c.id
            );
            *seen.entry(k.clone()).or_default() += 1;
        }
        if got != want && got.len() == want.len() && seen.values().all(|&n| n == 1) {
            self.out_of_order.push(format!("{} (window)", c.id));
        }
        for k in &c.acknowledged {
            let n = seen.get(k).copied().unwrap_or(0);
            if n == 0 && self.lost.insert(format!("{}: {k}", c.id)) {
                eprintln!(
                    "kills: {}: {k:?} missing from a window after\n  {}",
                    c.id,
                    log[log.len().saturating_sub(16)..].join("\n  ")
                );
            }
            if n > 1 {
                let e = self.twice.entry(format!("{}: {k}", c.id)).or_default();
                *e = (*e).max(n);
            }
        }
    }

    /// What the store holds of a conversation at the end (client messages, in order): every
    /// message the client sent is there once, in its order, and nothing it did not send.
    pub(super) fn stored(&mut self, c: &Conversation, got: &[String]) {
        self.acknowledged += c.acknowledged.len();
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for k in got {
            *counts.entry(k.as_str()).or_default() += 1;
        }
        let sent: Vec<String> = c.view.iter().map(key_of).collect();
        for k in &sent {
            match counts.get(k.as_str()) {
                None => {
                    self.lost.insert(format!("{}: {k}", c.id));
                }
                Some(&n) if n > 1 => {
                    let e = self.twice.entry(format!("{}: {k}", c.id)).or_default();
                    *e = (*e).max(n);
                }
                _ => {}
            }
        }
        if got != sent && counts.values().all(|&n| n == 1) && got.len() == sent.len() {
            self.out_of_order.push(c.id.clone());
        }
        for k in counts.keys() {
            assert!(
                sent.iter().any(|s| s == k),
                "{}: a message no client sent: {k}",
                c.id
            );
        }
    }
}
