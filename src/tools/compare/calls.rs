//! The per-call log behind `compare --report`: each model call's figures and the context it
//! sent, every distinct block (message or `systemPromptAddition`) kept once and each call's
//! context as indices into them, so the log grows with what changed, not with calls × context.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;

use crate::contract::message::Message;
use crate::services::recall::searchable_text;

use super::prefix::{Block, Shape};

/// The longest preview of a block kept, in characters.
pub const PREVIEW_CHARS: usize = 160;

/// What an engine sent over one transcript: the distinct blocks and the calls that sent them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallLog {
    /// Every distinct block any call sent, once, in the order first sent.
    pub blocks: Vec<BlockEntry>,
    /// Every model call, in order.
    pub calls: Vec<CallEntry>,
}

/// One distinct block: enough to recognise it across engines and to show it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockEntry {
    /// A digest of the block's value (its first 16 hex digits of SHA-256): equal blocks of any
    /// engine's calls have equal digests.
    pub digest: String,
    /// The message's role, or `systemPromptAddition`.
    pub role: String,
    /// The message's id (none for an addition).
    pub id: Option<String>,
    /// Host-counted tokens.
    pub tokens: u64,
    /// The block's searchable text, whitespace collapsed, cut at [`PREVIEW_CHARS`].
    pub preview: String,
}

/// One model call of the log.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallEntry {
    /// The conversation of the transcript, 1-based.
    pub conversation: u32,
    /// The turn within the conversation, 1-based.
    pub turn: u32,
    /// The engine that answered (`legacy` on a fallback).
    pub engine: String,
    /// Whether `legacy` answered in place of the engine.
    pub fallback: bool,
    /// Input tokens sent.
    pub input_tokens: u64,
    /// Of those, served by prefix reuse.
    pub cached_tokens: u64,
    /// The input's cost at the chosen prices (fresh and cached; output is the same for every
    /// engine and is in the row's `cost` only).
    pub input_cost: f64,
    /// Whether the session came to hold a summary since the previous call.
    pub compacted: bool,
    /// Why the prefix broke, when this call is a cache break.
    pub break_cause: Option<String>,
    /// The call's blocks in order, as indices into [`CallLog::blocks`].
    pub context: Vec<u32>,
}

/// Builds a [`CallLog`], recognising a block already logged by pointer first and by value
/// second.
#[derive(Debug, Default)]
pub struct CallRecorder {
    log: CallLog,
    by_digest: HashMap<String, u32>,
    /// Messages already logged, by address; the `Arc`s are held so no address is reused.
    by_ptr: HashMap<usize, u32>,
    held: Vec<Arc<Message>>,
}

impl CallRecorder {
    /// The indices of a call's blocks, logging the ones not seen before.
    pub fn context(&mut self, shape: &Shape) -> Vec<u32> {
        shape.iter().map(|(b, t)| self.index(b, *t)).collect()
    }

    /// Logs a call (its context from [`CallRecorder::context`]).
    pub fn push(&mut self, entry: CallEntry) {
        self.log.calls.push(entry);
    }

    /// The log so far.
    pub fn finish(self) -> CallLog {
        self.log
    }

    fn index(&mut self, block: &Block, tokens: u64) -> u32 {
        let ptr = match block {
            Block::Message(m) => Some(Arc::as_ptr(m) as usize),
            Block::Addition(_) => None,
        };
        if let Some(i) = ptr.and_then(|p| self.by_ptr.get(&p)) {
            return *i;
        }
        let (digest, role, id, text) = match block {
            Block::Message(m) => (
                digest(&serde_json::to_vec(&**m).unwrap_or_default()),
                m.role().as_str().to_owned(),
                Some(m.id.clone()),
                searchable_text(m),
            ),
            Block::Addition(a) => (
                digest(format!("systemPromptAddition\0{a}").as_bytes()),
                "systemPromptAddition".to_owned(),
                None,
                a.clone(),
            ),
        };
        let next = u32::try_from(self.log.blocks.len()).unwrap_or(u32::MAX);
        let i = *self.by_digest.entry(digest.clone()).or_insert_with(|| {
            self.log.blocks.push(BlockEntry {
                digest,
                role,
                id,
                tokens,
                preview: preview(&text),
            });
            next
        });
        if let (Some(p), Block::Message(m)) = (ptr, block) {
            self.by_ptr.insert(p, i);
            self.held.push(Arc::clone(m));
        }
        i
    }
}

/// The first 16 hex digits of the SHA-256 of `bytes`.
fn digest(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `text` with runs of whitespace as one space, cut at [`PREVIEW_CHARS`] (an ellipsis marks a
/// cut).
fn preview(text: &str) -> String {
    let mut out = String::new();
    for (n, word) in text.split_whitespace().enumerate() {
        if n > 0 {
            out.push(' ');
        }
        out.push_str(word);
        if out.chars().count() > PREVIEW_CHARS {
            let cut: String = out.chars().take(PREVIEW_CHARS - 1).collect();
            return cut + "…";
        }
    }
    out
}
