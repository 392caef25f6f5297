//! Token counting: a fast CJK-weighted estimate and exact BPE counts, behind one trait, with a
//! per-message cache so that a growing session costs only its new messages.
//!
//! ```
//! use ctxhost::tokens::{Estimate, TokenCounter};
//! assert_eq!(Estimate.count_text("abcdefgh"), 2);
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::message::{Content, ContentBlock, Message, MessageBody};

/// Tokens an image counts for, whatever its size (OpenClaw's heuristic).
pub const IMAGE_TOKENS: u64 = 2_000;

/// Counts tokens. Implementations differ only in how text becomes tokens; the shape of a
/// message (which parts count, images, tool calls) is [`message_tokens`], shared by all.
pub trait TokenCounter: Send + Sync + std::fmt::Debug {
    /// The name used in config and output (`estimate`, `o200k`, `cl100k`).
    fn name(&self) -> &'static str;
    /// Tokens of a piece of text.
    fn count_text(&self, text: &str) -> u64;
    /// Tokens of a whole message as a model would receive it.
    fn count_message(&self, message: &Message) -> u64 {
        message_tokens(|t| self.count_text(t), message)
    }
}

/// Tokens of a message, given how to count text: text and thinking blocks, tool calls as name
/// plus JSON arguments, images at [`IMAGE_TOKENS`], summaries with their wrapper text, and
/// nothing for messages excluded from context.
pub fn message_tokens(count_text: impl Fn(&str) -> u64, message: &Message) -> u64 {
    let content = |c: &Content| match c {
        Content::Text(t) => count_text(t),
        Content::Blocks(blocks) => blocks.iter().map(|b| block_tokens(&count_text, b)).sum(),
    };
    match &message.body {
        MessageBody::User(u) => content(&u.content),
        MessageBody::Assistant(a) => a.content.iter().map(|b| block_tokens(&count_text, b)).sum(),
        MessageBody::ToolResult(r) => content(&r.content),
        MessageBody::CompactionSummary(_) | MessageBody::BranchSummary(_) => message
            .model_text_for_summary()
            .map(|t| count_text(&t))
            .unwrap_or(0),
        MessageBody::Custom(c) if c.exclude_from_context => 0,
        MessageBody::Custom(c) => content(&c.content),
    }
}

fn block_tokens(count_text: &impl Fn(&str) -> u64, block: &ContentBlock) -> u64 {
    match block {
        ContentBlock::Text(t) => count_text(&t.text),
        ContentBlock::Thinking(t) => count_text(&t.thinking),
        ContentBlock::Image(_) => IMAGE_TOKENS,
        ContentBlock::ToolCall(c) => {
            let args = serde_json::to_string(&c.arguments).unwrap_or_default();
            count_text(&c.name) + count_text(&args)
        }
        ContentBlock::Other(_) => 0,
    }
}

/// The default counter: characters / 4, with CJK characters weighted as whole tokens' worth.
#[derive(Clone, Copy, Debug, Default)]
pub struct Estimate;

/// Characters per token in the estimate.
pub const CHARS_PER_TOKEN: u64 = 4;

impl TokenCounter for Estimate {
    fn name(&self) -> &'static str {
        "estimate"
    }

    fn count_text(&self, text: &str) -> u64 {
        // ASCII is the common case: its byte length is its char count.
        let weighted = if text.is_ascii() {
            text.len() as u64
        } else {
            text.chars()
                .map(|c| if is_cjk(c) { CHARS_PER_TOKEN } else { 1 })
                .sum()
        };
        weighted.div_ceil(CHARS_PER_TOKEN)
    }
}

/// Whether a character is CJK (ideographs, kana, hangul, CJK punctuation, full-width forms),
/// which tokenizers encode at about one token per character.
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x1100..=0x11FF | 0x2E80..=0x2FDF | 0x3000..=0x303F | 0x3040..=0x30FF | 0x3100..=0x312F
        | 0x3130..=0x318F | 0x31A0..=0x31FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xA960..=0xA97F
        | 0xAC00..=0xD7AF | 0xF900..=0xFAFF | 0xFE30..=0xFE4F | 0xFF00..=0xFFEF
        | 0x20000..=0x2FA1F)
}

/// A per-session cache of message token counts, keyed by entry id.
///
/// A hit requires the very same stored message (`Arc` identity), so an engine that returns a
/// modified copy under the same id is counted afresh, never served a stale number.
#[derive(Debug)]
pub struct TokenCache {
    counter: Arc<dyn TokenCounter>,
    entries: Mutex<HashMap<String, (Arc<Message>, u64)>>,
}

impl TokenCache {
    /// An empty cache over a counter.
    pub fn new(counter: Arc<dyn TokenCounter>) -> Self {
        TokenCache {
            counter,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The counter behind the cache.
    pub fn counter(&self) -> &Arc<dyn TokenCounter> {
        &self.counter
    }

    /// Tokens of one message, from the cache when it is a stored message counted before.
    pub fn message(&self, message: &Arc<Message>) -> u64 {
        if message.id.is_empty() {
            return self.counter.count_message(message);
        }
        if let Some((cached, n)) = self.entries.lock().get(&message.id)
            && Arc::ptr_eq(cached, message)
        {
            return *n;
        }
        let n = self.counter.count_message(message);
        self.entries
            .lock()
            .insert(message.id.clone(), (Arc::clone(message), n));
        n
    }

    /// Tokens of a list of messages.
    pub fn messages(&self, messages: &[Arc<Message>]) -> u64 {
        messages.iter().map(|m| self.message(m)).sum()
    }

    /// Tokens of a piece of text (not cached).
    pub fn text(&self, text: &str) -> u64 {
        self.counter.count_text(text)
    }
}
