//! `builtin:tool-pruning`: the design's session pruning (OpenClaw's context pruning) as a
//! `prune` hook. Under token pressure, in memory only (the history is never rewritten):
//!
//! 1. soft trim: each tool result older than the last `keepTurns` turns whose text is longer
//!    than `softTrimChars` keeps its first `headChars` and last `tailChars` around a marker;
//! 2. hard clear, oldest first: while the list is over the call's budget, old tool results are
//!    replaced by `placeholder`.
//!
//! The same steps as the stdlib's `prune.tool_results` (sizes in UTF-8 bytes, never cutting a
//! character), and the same result as `scripts/hooks/tool_pruner.lua`: the list it returns is
//! what the call is fitted from. Settings (all optional): `keepTurns` 2, `softTrimChars` 4000, `headChars` 1500,
//! `tailChars` 1500, `placeholder` `"[Old tool result content cleared]"`.

use std::sync::Arc;

use serde_json::{Map, Value as Json, json};

use crate::contract::Method;
use crate::contract::message::{Content, ContentBlock, Message, MessageBody, Role};
use crate::engine::api::HostCall;

use super::{Builtin, known, number, string, window_budget};

/// The placeholder a cleared tool result gets.
pub(crate) const PLACEHOLDER: &str = "[Old tool result content cleared]";

/// The hook and its settings.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ToolPruning {
    keep_turns: usize,
    soft_trim_chars: usize,
    head_chars: usize,
    tail_chars: usize,
    placeholder: String,
}

impl ToolPruning {
    /// Reads the settings; an error names the setting.
    pub(super) fn from_config(settings: &Json) -> Result<Self, (&'static str, String)> {
        known(
            settings,
            &[
                "keepTurns",
                "softTrimChars",
                "headChars",
                "tailChars",
                "placeholder",
            ],
        )?;
        let count =
            |field: &'static str, default: usize| -> Result<usize, (&'static str, String)> {
                match number(settings, field)? {
                    None => Ok(default),
                    Some(n) if n >= 0.0 && n.fract() == 0.0 => Ok(n as usize),
                    Some(n) => Err((field, format!("must be a whole number ≥ 0, got {n}"))),
                }
            };
        Ok(ToolPruning {
            keep_turns: count("keepTurns", 2)?,
            soft_trim_chars: count("softTrimChars", 4_000)?,
            head_chars: count("headChars", 1_500)?,
            tail_chars: count("tailChars", 1_500)?,
            placeholder: string(settings, "placeholder")?.unwrap_or_else(|| PLACEHOLDER.into()),
        })
    }

    /// The pruned list and how many results were trimmed and cleared.
    pub(crate) fn prune(
        &self,
        messages: &[Arc<Message>],
        budget: u64,
        count: impl Fn(&Arc<Message>) -> u64,
    ) -> (Vec<Arc<Message>>, usize, usize) {
        let protected = protected_from(messages, self.keep_turns);
        let mut out = messages.to_vec();
        let mut candidates = Vec::new();
        let mut trimmed = 0;
        for (i, m) in out.iter_mut().enumerate().take(protected) {
            let MessageBody::ToolResult(r) = &m.body else {
                continue;
            };
            let text = r.content.joined_text();
            if text == self.placeholder {
                continue;
            }
            candidates.push(i);
            if text.len() > self.soft_trim_chars && text.len() > self.head_chars + self.tail_chars {
                let head = head(&text, self.head_chars);
                let tail = tail(&text, self.tail_chars);
                let omitted = text.len() - head.len() - tail.len();
                let cut =
                    format!("{head}\n[... {omitted} bytes of tool output trimmed ...]\n{tail}");
                *m = Arc::new(with_text(m, &cut));
                trimmed += 1;
            }
        }
        let mut total: u64 = out.iter().map(&count).sum();
        let mut cleared = 0;
        for i in candidates {
            if total <= budget {
                break;
            }
            let before = count(&out[i]);
            out[i] = Arc::new(with_text(&out[i], &self.placeholder));
            total = total.saturating_sub(before) + count(&out[i]);
            cleared += 1;
        }
        (out, trimmed, cleared)
    }
}

impl Builtin for ToolPruning {
    const METHODS: &'static [Method] = &[Method::Prune];

    fn call(
        &mut self,
        call: &HostCall,
        _method: Method,
        fields: &Map<String, Json>,
    ) -> Result<Json, String> {
        let budget = window_budget(call, fields);
        let tokens = &call.services().tokens;
        let (pruned, trimmed, cleared) = self.prune(call.context(), budget, |m| tokens.message(m));
        let messages = serde_json::to_value(pruned.iter().map(|m| &**m).collect::<Vec<&Message>>())
            .map_err(|e| format!("messages: {e}"))?;
        Ok(json!({
            "messages": messages,
            "dropped": {"trimmed": trimmed, "cleared": cleared},
        }))
    }
}

/// The index of the first message of the last `keep_turns` turns (the length when 0).
fn protected_from(messages: &[Arc<Message>], keep_turns: usize) -> usize {
    if keep_turns == 0 {
        return messages.len();
    }
    let mut seen = 0;
    for (i, m) in messages.iter().enumerate().rev() {
        if m.role() == Role::User {
            seen += 1;
            if seen == keep_turns {
                return i;
            }
        }
    }
    0
}

/// At most `n` bytes from the start of `s`, never cutting a character.
fn head(s: &str, n: usize) -> &str {
    let mut end = n.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// At most `n` bytes from the end of `s`, never cutting a character.
fn tail(s: &str, n: usize) -> &str {
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// A copy of tool result `m` (same id) whose text is `text`; its other blocks (images) kept.
fn with_text(m: &Message, text: &str) -> Message {
    let mut copy = m.clone();
    if let MessageBody::ToolResult(r) = &mut copy.body {
        r.content = match &r.content {
            Content::Text(_) => Content::Text(text.to_owned()),
            Content::Blocks(blocks) => Content::Blocks(
                std::iter::once(ContentBlock::text(text))
                    .chain(
                        blocks
                            .iter()
                            .filter(|b| !matches!(b, ContentBlock::Text(_)))
                            .cloned(),
                    )
                    .collect(),
            ),
        };
    }
    copy
}
