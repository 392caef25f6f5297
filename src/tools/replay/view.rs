//! What the model saw at one model call, message by message, and what changed since the call
//! before: the data behind `replay --show`, `replay --json --contexts` and the report's
//! context view.
//!
//! Each message's [`Origin`] comes from what the host knows, never from the engine's word:
//!
//! - **summary**: a compaction or branch summary entry the host stored (built-in compaction or
//!   an engine's `compact` result), sent unchanged;
//! - **original**: any other message the host stored (user, assistant, tool result), sent
//!   unchanged;
//! - **pinned**: an original sent although a *newer* message of the session's context was left
//!   out of this call: it survived a cut that took messages after it (the first user message, a
//!   `DECISION:` line, whatever the engine's own rule kept). Pins live in engine state, which
//!   the host cannot read, so this is the structural definition;
//! - **host-repaired**: put in or changed by the host after `assemble`: the current request or
//!   the newest summary the engine left out (contract guarantee), or an assistant message whose
//!   orphan tool calls the pairing repair removed;
//! - **engine-made**: not in the transcript as sent: a message the engine wrote (a summary as a
//!   user message, a note) or an edited copy of a stored one (same id, other content).
//!
//! The host's store is known through the session's context at each call: a message appended
//! and compacted away inside one call (never in any context the replay saw) counts as
//! engine-made if an engine sends it later.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::Serialize;

use crate::contract::message::{ContentBlock, Message, MessageBody, Role};
use crate::services::tokens::TokenCache;
use crate::session::Assembly;

/// Longest first line kept per message, in characters.
const FIRST_LINE: usize = 100;

/// Where a message of an assembled context came from (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// A stored conversation message, unchanged.
    Original,
    /// A stored compaction or branch summary.
    Summary,
    /// An original kept although a newer message of the context was left out.
    Pinned,
    /// Put in or changed by the host after `assemble` (guarantee or pairing repair).
    HostRepaired,
    /// Written by the engine, or a stored message the engine changed.
    EngineMade,
}

impl Origin {
    /// The name used in tables and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Original => "original",
            Origin::Summary => "summary",
            Origin::Pinned => "pinned",
            Origin::HostRepaired => "host-repaired",
            Origin::EngineMade => "engine-made",
        }
    }
}

/// One message of an assembled context.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextMessage {
    /// 0-based position in the context sent to the model.
    pub index: usize,
    /// The transcript entry id (empty for a message the engine made up).
    pub id: String,
    /// The message's role.
    pub role: String,
    /// Where it came from.
    pub origin: Origin,
    /// Its tokens, counted by the host.
    pub tokens: u64,
    /// Its first non-empty line (tool calls named when there is no text), clipped.
    pub first_line: String,
    /// Whether the previous model call's context did not have it.
    pub new: bool,
    /// The whole text of a message the engine wrote or changed (`replay --show` prints it;
    /// stored messages are in the transcript), `None` for every other origin.
    #[serde(skip)]
    pub engine_text: Option<String>,
}

/// A message the previous model call had and this one has not.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GoneMessage {
    /// The transcript entry id (empty for an engine-made message).
    pub id: String,
    /// The message's role.
    pub role: String,
    /// Its tokens, counted by the host.
    pub tokens: u64,
    /// Its first line, clipped.
    pub first_line: String,
}

/// The assembled context of one model call and how it differs from the call before.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextView {
    /// The `systemPromptAddition` the engine returned.
    pub system_prompt_addition: Option<String>,
    /// Its tokens, counted by the host.
    pub system_prompt_tokens: u64,
    /// The messages, in the order the model sees them.
    pub messages: Vec<ContextMessage>,
    /// Messages the previous call had too.
    pub kept: usize,
    /// Messages the previous call did not have.
    pub new: usize,
    /// Left out by the engine: the previous call had them and they are still in the session's
    /// context.
    pub dropped: Vec<GoneMessage>,
    /// Compacted: the previous call had them and they are no longer in the session's context
    /// (a summary stands for them).
    pub summarized: Vec<GoneMessage>,
}

impl ContextView {
    /// How many messages of each origin, in [`Origin`] order, for one-line reports.
    pub fn origin_counts(&self) -> Vec<(Origin, usize)> {
        [
            Origin::Original,
            Origin::Summary,
            Origin::Pinned,
            Origin::HostRepaired,
            Origin::EngineMade,
        ]
        .into_iter()
        .map(|o| (o, self.messages.iter().filter(|m| m.origin == o).count()))
        .filter(|(_, n)| *n > 0)
        .collect()
    }
}

/// Follows one session's model calls: what the host stored and what the previous call sent.
#[derive(Debug)]
pub struct ContextTracker {
    tokens: TokenCache,
    stored: HashMap<String, Arc<Message>>,
    previous: Vec<(String, GoneMessage)>,
}

impl ContextTracker {
    /// A tracker counting tokens with `tokens` (the host's counter).
    pub fn new(tokens: TokenCache) -> Self {
        ContextTracker {
            tokens,
            stored: HashMap::new(),
            previous: Vec::new(),
        }
    }

    /// Describes the call that produced `assembly`, `context` being the session's context at
    /// that call, and remembers it as the previous call.
    pub fn observe(&mut self, context: &[Arc<Message>], assembly: &Assembly) -> ContextView {
        for m in context {
            if !m.id.is_empty() {
                self.stored
                    .entry(m.id.clone())
                    .or_insert_with(|| Arc::clone(m));
            }
        }
        let sent_ids: HashSet<&str> = assembly.messages.iter().map(|m| m.id.as_str()).collect();
        // The newest context message the call left out: any original older than it is pinned.
        let newest_left_out = context
            .iter()
            .rposition(|m| !is_summary(m) && !sent_ids.contains(m.id.as_str()));
        let position: HashMap<&str, usize> = context
            .iter()
            .enumerate()
            .map(|(i, m)| (m.id.as_str(), i))
            .collect();
        let before: HashSet<&str> = self.previous.iter().map(|(k, _)| k.as_str()).collect();

        let mut messages = Vec::with_capacity(assembly.messages.len());
        let mut keys = Vec::with_capacity(assembly.messages.len());
        for (index, m) in assembly.messages.iter().enumerate() {
            let origin = self.origin(
                m,
                assembly,
                |id| matches!((position.get(id), newest_left_out), (Some(p), Some(n)) if *p < n),
            );
            let key = self.key(m);
            let tokens = self.tokens.message(m);
            messages.push(ContextMessage {
                index,
                id: m.id.clone(),
                role: m.role().as_str().to_owned(),
                origin,
                tokens,
                first_line: first_line(m),
                new: !before.contains(key.as_str()),
                engine_text: (origin == Origin::EngineMade).then(|| m.text()),
            });
            keys.push((key, gone(m, tokens)));
        }
        let now: HashSet<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
        let in_context: HashSet<&str> = context.iter().map(|m| m.id.as_str()).collect();
        let (mut dropped, mut summarized) = (Vec::new(), Vec::new());
        for (key, g) in &self.previous {
            if now.contains(key.as_str()) {
                continue;
            }
            let compacted = !g.id.is_empty()
                && self.stored.contains_key(&g.id)
                && !in_context.contains(g.id.as_str());
            if compacted {
                summarized.push(g.clone());
            } else {
                dropped.push(g.clone());
            }
        }
        let new = messages.iter().filter(|m| m.new).count();
        let view = ContextView {
            system_prompt_tokens: assembly
                .system_prompt_addition
                .as_deref()
                .map_or(0, |a| self.tokens.text(a)),
            system_prompt_addition: assembly.system_prompt_addition.clone(),
            kept: messages.len() - new,
            new,
            messages,
            dropped,
            summarized,
        };
        self.previous = keys;
        view
    }

    fn origin(&self, m: &Arc<Message>, a: &Assembly, pinned: impl Fn(&str) -> bool) -> Origin {
        if !m.id.is_empty() && a.host_added.iter().any(|id| *id == m.id) {
            return Origin::HostRepaired;
        }
        match self.stored.get(&m.id) {
            Some(s) if Arc::ptr_eq(s, m) || **s == **m => {
                if is_summary(m) {
                    Origin::Summary
                } else if pinned(&m.id) {
                    Origin::Pinned
                } else {
                    Origin::Original
                }
            }
            Some(s) if a.pairing_repairs > 0 && lost_only_tool_calls(s, m) => Origin::HostRepaired,
            _ => Origin::EngineMade,
        }
    }

    /// What identifies a message from one call to the next: its id when the host stored it,
    /// else its role and text.
    fn key(&self, m: &Message) -> String {
        if !m.id.is_empty() && self.stored.contains_key(&m.id) {
            return m.id.clone();
        }
        let mut h = crate::services::fnv::Fnv::new();
        h.write(m.role().as_str().as_bytes());
        h.write(&[0]);
        h.write(m.text().as_bytes());
        format!("~{:016x}", h.0)
    }
}

fn is_summary(m: &Message) -> bool {
    matches!(m.role(), Role::CompactionSummary | Role::BranchSummary)
}

/// Whether `sent` is `stored` with some tool calls removed and nothing else changed.
fn lost_only_tool_calls(stored: &Message, sent: &Message) -> bool {
    let (MessageBody::Assistant(s), MessageBody::Assistant(t)) = (&stored.body, &sent.body) else {
        return false;
    };
    let kept: Vec<&ContentBlock> = s
        .content
        .iter()
        .filter(|b| match b {
            ContentBlock::ToolCall(c) => t
                .content
                .iter()
                .any(|x| matches!(x, ContentBlock::ToolCall(y) if y.id == c.id)),
            _ => true,
        })
        .collect();
    t.content.len() < s.content.len() && kept.len() == t.content.len()
}

fn gone(m: &Message, tokens: u64) -> GoneMessage {
    GoneMessage {
        id: m.id.clone(),
        role: m.role().as_str().to_owned(),
        tokens,
        first_line: first_line(m),
    }
}

/// The first non-empty line of the message's text; for a message without text, its tool
/// calls; clipped to `FIRST_LINE` characters.
pub fn first_line(m: &Message) -> String {
    let text = m.text();
    let line = text.lines().map(str::trim).find(|l| !l.is_empty());
    let line = match line {
        Some(l) => l.to_owned(),
        None => {
            let calls: Vec<&str> = m.tool_calls().map(|c| c.name.as_str()).collect();
            if calls.is_empty() {
                String::new()
            } else {
                format!("[tool calls: {}]", calls.join(", "))
            }
        }
    };
    if line.chars().count() <= FIRST_LINE {
        line
    } else {
        let mut cut: String = line.chars().take(FIRST_LINE - 1).collect();
        cut.push('…');
        cut
    }
}
