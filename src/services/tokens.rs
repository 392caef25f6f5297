//! Token counting: a fast CJK-weighted estimate and exact BPE counts, behind one trait, with a
//! per-message cache so that a growing session costs only its new messages.
//!
//! ```
//! use ctxhost::services::tokens::{Estimate, TokenCounter};
//! assert_eq!(Estimate.count_text("abcdefgh"), 2);
//! ```

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::contract::message::{Content, ContentBlock, Message, MessageBody};
use crate::error::{Error, Result};
use crate::services::id_map::IdMap;

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

/// Which tokenizer counts tokens: the cheap estimate, or an exact OpenAI BPE for providers that
/// use one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tokenizer {
    /// [`Estimate`]: characters / 4, CJK-weighted. No tables to load.
    #[default]
    Estimate,
    /// OpenAI's `o200k_base` (GPT-4o, o-series, GPT-5).
    #[serde(alias = "o200k_base")]
    O200k,
    /// OpenAI's `cl100k_base` (GPT-4, GPT-3.5).
    #[serde(alias = "cl100k_base")]
    Cl100k,
}

impl Tokenizer {
    /// Every tokenizer, in the order help text lists them.
    pub const ALL: [Tokenizer; 3] = [Tokenizer::Estimate, Tokenizer::O200k, Tokenizer::Cl100k];

    /// The name used in config and output, as [`TokenCounter::name`] reports it.
    pub fn name(self) -> &'static str {
        match self {
            Tokenizer::Estimate => "estimate",
            Tokenizer::O200k => "o200k",
            Tokenizer::Cl100k => "cl100k",
        }
    }
}

impl fmt::Display for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Tokenizer {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "estimate" => Ok(Tokenizer::Estimate),
            "o200k" | "o200k_base" => Ok(Tokenizer::O200k),
            "cl100k" | "cl100k_base" => Ok(Tokenizer::Cl100k),
            _ => Err(Error::Tokenizer {
                name: s.to_owned(),
                message: "unknown tokenizer; expected one of estimate, o200k (o200k_base), \
                          cl100k (cl100k_base)"
                    .to_owned(),
            }),
        }
    }
}

/// A counter for the given tokenizer. BPE tables are built once per process, lazily, and shared
/// by every counter handed out: the first request starts the build on a background thread and
/// returns at once, so building a host never waits for it; the first count waits only for
/// what is left of the build.
pub fn counter(t: Tokenizer) -> Result<Arc<dyn TokenCounter>> {
    static O200K: OnceLock<Arc<Bpe>> = OnceLock::new();
    static CL100K: OnceLock<Arc<Bpe>> = OnceLock::new();
    let (cell, name) = match t {
        Tokenizer::Estimate => return Ok(Arc::new(Estimate)),
        Tokenizer::O200k => (&O200K, "o200k_base"),
        Tokenizer::Cl100k => (&CL100K, "cl100k_base"),
    };
    let mut started = false;
    let bpe = cell.get_or_init(|| {
        started = true;
        Arc::new(Bpe {
            name: t.name(),
            encoding: name,
            table: OnceLock::new(),
        })
    });
    if started {
        bpe.warm();
    }
    Ok(bpe.clone())
}

/// An exact OpenAI BPE counter (toktok), whose counts equal tiktoken's `encode_ordinary` and
/// which is several times faster. Special-token text such as `<|endoftext|>` counts as ordinary
/// text, as it would in a transcript sent to a model.
///
/// The table is built on first use (or by [`counter`]'s background warm-up, whichever comes
/// first). The tables are embedded in the binary, so building can fail only in a broken build
/// of the crate; the counter then logs the error once and counts with the [`Estimate`] rather
/// than take the host down.
pub struct Bpe {
    name: &'static str,
    encoding: &'static str,
    table: OnceLock<std::result::Result<toktok::Tokenizer, String>>,
}

impl Bpe {
    /// The table, built now if nobody has built it yet (a concurrent build is waited for).
    fn table(&self) -> Option<&toktok::Tokenizer> {
        build_table(self.encoding, &self.table).as_ref().ok()
    }

    /// Builds the table on a background thread; a count that comes first builds it itself,
    /// and the thread then finds it built.
    fn warm(self: &Arc<Self>) {
        let bpe = self.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("ctxhost-bpe-{}", self.name))
            .spawn(move || {
                bpe.table();
            });
        if let Err(e) = spawned {
            tracing::debug!(encoding = self.encoding, error = %e,
                "no thread to warm the BPE table; it is built on first use");
        }
    }
}

/// The table in `cell`, built now unless it was built (or is being built) already.
fn build_table<'a>(
    encoding: &'static str,
    cell: &'a OnceLock<std::result::Result<toktok::Tokenizer, String>>,
) -> &'a std::result::Result<toktok::Tokenizer, String> {
    cell.get_or_init(|| {
        // A panic in the crate's table decoding would be a broken build of it; it must not
        // take the host down with it.
        let built = std::panic::catch_unwind(|| toktok::Tokenizer::builtin(encoding));
        let result = match built {
            Ok(Ok(t)) => Ok(t),
            Ok(Err(e)) => Err(format!("building the BPE table failed: {e}")),
            Err(panic) => Err(match panic.downcast_ref::<&str>() {
                Some(m) => format!("building the BPE table panicked: {m}"),
                None => match panic.downcast_ref::<String>() {
                    Some(m) => format!("building the BPE table panicked: {m}"),
                    None => "building the BPE table panicked".to_owned(),
                },
            }),
        };
        if let Err(message) = &result {
            tracing::error!(encoding, %message, "exact token counts fall back to the estimate");
        }
        result
    })
}

impl fmt::Debug for Bpe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bpe").field("name", &self.name).finish()
    }
}

impl TokenCounter for Bpe {
    fn name(&self) -> &'static str {
        self.name
    }

    fn count_text(&self, text: &str) -> u64 {
        match self.table() {
            Some(t) => t.count(text.as_bytes()) as u64,
            None => Estimate.count_text(text),
        }
    }
}

/// A per-session cache of message token counts, keyed by entry id.
///
/// A hit requires the very same stored message (`Arc` identity), so an engine that returns a
/// modified copy under the same id is counted afresh, never served a stale number. Such a copy
/// is not cached either: it would evict the stored message's count, and the session would
/// recount that message on every turn. The cache holds messages weakly, so messages the session
/// drops (after a compaction) are freed, and their entries are pruned as the cache grows.
#[derive(Debug)]
pub struct TokenCache {
    counter: Arc<dyn TokenCounter>,
    state: Mutex<CacheState>,
    /// The last whole context counted and its total (a `Weak`, so its address is not reused
    /// and the context cannot be changed in place while it is held).
    last_context: Mutex<Option<CountedContext>>,
}

/// A context counted whole, and its total.
type CountedContext = (Weak<Vec<Arc<Message>>>, u64);

#[derive(Debug, Default)]
struct CacheState {
    /// Entry id -> (the message that was counted, its tokens). Hashed with Fx, not SipHash:
    /// every message of every turn is looked up here, and ids are the host's own (kept as
    /// numbers, [`IdMap`]: a replay's cache holds every message of the session).
    entries: IdMap<(Weak<Message>, u64)>,
    /// Prune dead entries when the map reaches this size.
    prune_at: usize,
}

/// The smallest map size at which dead entries are pruned.
const MIN_PRUNE_AT: usize = 256;

impl CacheState {
    fn insert(&mut self, message: &Arc<Message>, n: u64) {
        // Another caller may have cached the stored message meanwhile: keep it.
        if let Some((cached, _)) = self.entries.get(&message.id)
            && cached.strong_count() > 0
        {
            return;
        }
        if self.entries.len() >= self.prune_at.max(MIN_PRUNE_AT) {
            self.entries.retain(|(m, _)| m.strong_count() > 0);
            self.prune_at = self.entries.len() * 2;
        }
        self.entries
            .insert(&message.id, (Arc::downgrade(message), n));
    }
}

/// What the cache knows about a message.
enum Lookup {
    /// Counted before: the number.
    Hit(u64),
    /// A live, different message is stored under this id: count the copy, keep the stored one.
    Copy,
    /// Nothing (or only a dropped message) under this id: count and cache.
    Miss,
}

impl TokenCache {
    /// An empty cache over a counter.
    pub fn new(counter: Arc<dyn TokenCounter>) -> Self {
        TokenCache {
            counter,
            state: Mutex::new(CacheState::default()),
            last_context: Mutex::new(None),
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
        let lookup = match self.state.lock().entries.get(&message.id) {
            // The Weak keeps the allocation, so its address cannot be reused by another message.
            Some((cached, n)) if std::ptr::eq(cached.as_ptr(), Arc::as_ptr(message)) => {
                Lookup::Hit(*n)
            }
            Some((cached, _)) if cached.strong_count() > 0 => Lookup::Copy,
            _ => Lookup::Miss,
        };
        match lookup {
            Lookup::Hit(n) => n,
            Lookup::Copy => self.counter.count_message(message),
            Lookup::Miss => {
                // Counted outside the lock so that other callers are not held up.
                let n = self.counter.count_message(message);
                self.state.lock().insert(message, n);
                n
            }
        }
    }

    /// Tokens of a list of messages.
    pub fn messages(&self, messages: &[Arc<Message>]) -> u64 {
        messages.iter().map(|m| self.message(m)).sum()
    }

    /// Tokens of a whole context, remembered for the last one asked: a pipeline tells its hooks
    /// the context's size on every call, and a tool loop asks again of the same context.
    pub fn context(&self, context: &Arc<Vec<Arc<Message>>>) -> u64 {
        if let Some((seen, n)) = &*self.last_context.lock()
            && std::ptr::eq(seen.as_ptr(), Arc::as_ptr(context))
        {
            return *n;
        }
        let n = self.messages(context);
        *self.last_context.lock() = Some((Arc::downgrade(context), n));
        n
    }

    /// Tokens of a piece of text (not cached).
    pub fn text(&self, text: &str) -> u64 {
        self.counter.count_text(text)
    }
}

#[cfg(test)]
#[path = "tokens_tests.rs"]
mod tests;
