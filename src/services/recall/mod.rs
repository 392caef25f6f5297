//! Recall of a session's stored messages: a full-text index over every message the transcript
//! holds, compacted ones included, behind `host.search` and `host.fetch`.
//!
//! The transcript is append-only, so the index is too: [`RecallIndex::add`] indexes the
//! messages a session appends as they are stored, and a search ranks the postings it already
//! has with BM25 (no rebuild per call). Text is cut into terms by [`terms`]: an identifier such
//! as `src/foo.rs`, `mia_li_3668`, `#123` or `ERR_X` is one term *and* its parts (`src`, `foo`,
//! `rs`), so asking for the whole identifier finds it exactly and asking for a part still
//! matches.
//!
//! (The example of this paragraph is the unit test `the_module_example_finds_a_file_name`.)

mod terms;

pub(crate) use terms::terms;

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use rustc_hash::FxHasher;

use parking_lot::Mutex;

use crate::contract::message::{ContentBlock, Message, MessageBody, Role};
use crate::services::id_map::IdMap;

/// BM25's term-frequency saturation.
const K1: f64 = 1.2;
/// BM25's length normalisation.
const B: f64 = 0.75;

/// The stored messages of one session and their inverted index. Shared (behind an `Arc`) by
/// the session, which appends, and every `host` call of its engine, which reads.
#[derive(Debug, Default)]
pub struct RecallIndex {
    inner: Mutex<Inner>,
}

/// A hash map with a fast, non-keyed hash: the index's keys are the session's own text, and a
/// search reads the postings it finds, so a crafted collision costs its sender alone.
type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

#[derive(Debug, Default)]
struct Inner {
    /// Every indexed message, in transcript order; a document is its position here.
    messages: Vec<Held>,
    /// Summaries held whole that may be packed once nothing else holds them (documents).
    packable: Vec<u32>,
    /// Terms of each document.
    lengths: Vec<u32>,
    /// The position of each message id (the first, should an id repeat).
    by_id: IdMap<u32>,
    /// Each term's number: its postings are `postings[number]`. A term's text is kept once.
    terms: FastMap<Box<str>, u32>,
    /// Term number → its (document, occurrences) pairs, documents ascending.
    postings: Vec<Postings>,
    /// Sum of `lengths`.
    total_terms: u64,
    /// The occurrences of each term in the document being added (reused).
    counts: FastMap<u32, u32>,
}

/// Which stored messages a search may return.
#[derive(Clone, Debug, Default)]
pub struct SearchFilter {
    /// Only these roles (all when empty).
    pub roles: Vec<Role>,
    /// Only messages stored before the message with this id.
    pub before: Option<String>,
}

/// One ranked search result.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    /// The stored message's id (what `host.fetch` takes).
    pub id: String,
    /// Its role.
    pub role: Role,
    /// Its BM25 score (higher is better), rounded to thousandths so every language sees the
    /// same number.
    pub score: f64,
    /// Its position in the transcript, 1-based, as scripts count.
    pub position: usize,
    /// The query terms it contains, in query order.
    pub matched: Vec<String>,
}

/// Why a search could not run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SearchError {
    /// `before` names no stored message.
    #[error("before: no stored message has id \"{0}\"")]
    UnknownBefore(String),
}

impl RecallIndex {
    /// Indexes `messages` (just appended to the transcript, in order).
    pub fn add(&self, messages: &[Arc<Message>]) {
        let mut inner = self.inner.lock();
        for m in messages {
            inner.add(m);
        }
    }

    /// How many messages are indexed.
    pub fn len(&self) -> usize {
        self.inner.lock().messages.len()
    }

    /// Whether no message is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The messages stored after the first `n`, in order (empty when there are no more).
    pub fn since(&self, n: usize) -> Vec<Arc<Message>> {
        self.inner
            .lock()
            .messages
            .get(n..)
            .map(|held| held.iter().map(Held::message).collect())
            .unwrap_or_default()
    }

    /// The stored messages with these ids, in the order asked; ids that name no stored message
    /// are left out.
    pub fn fetch<S: AsRef<str>>(&self, ids: &[S]) -> Vec<Arc<Message>> {
        let inner = self.inner.lock();
        ids.iter()
            .filter_map(|id| inner.by_id.get(id.as_ref()))
            .map(|&i| inner.messages[i as usize].message())
            .collect()
    }

    /// The best `limit` messages for `query` among those `filter` allows, best first (equal
    /// scores: the newer first). A query with no indexable term finds nothing.
    pub fn search(&self, query: &str, filter: &SearchFilter, limit: usize) -> Vec<Hit> {
        self.try_search(query, filter, limit).unwrap_or_default()
    }

    /// [`search`](Self::search), failing when `filter.before` names no stored message.
    pub fn try_search(
        &self,
        query: &str,
        filter: &SearchFilter,
        limit: usize,
    ) -> Result<Vec<Hit>, SearchError> {
        let inner = self.inner.lock();
        let end = match &filter.before {
            None => inner.messages.len(),
            Some(id) => *inner
                .by_id
                .get(id.as_str())
                .ok_or_else(|| SearchError::UnknownBefore(id.clone()))?
                as usize,
        };
        Ok(inner.search(query, filter, end, limit))
    }
}

impl Inner {
    fn add(&mut self, m: &Arc<Message>) {
        let Ok(doc) = u32::try_from(self.messages.len()) else {
            return;
        };
        let mut counts = std::mem::take(&mut self.counts);
        let mut length = 0u32;
        terms::each_term(&searchable_text(m), |term| {
            let number = match self.terms.get(term) {
                Some(&n) => n,
                None => {
                    let n = u32::try_from(self.postings.len()).unwrap_or(u32::MAX);
                    self.terms.insert(term.into(), n);
                    self.postings.push(Postings::default());
                    n
                }
            };
            *counts.entry(number).or_default() += 1;
            length = length.saturating_add(1);
        });
        for (&number, &n) in &counts {
            if let Some(list) = self.postings.get_mut(number as usize) {
                list.push(doc, n);
            }
        }
        counts.clear();
        self.counts = counts;
        if !self.by_id.contains_key(m.id.as_str()) {
            self.by_id.insert(m.id.as_str(), doc);
        }
        self.lengths.push(length);
        self.total_terms += u64::from(length);
        if summary_text(m).is_some_and(|t| t.len() >= PACK_AT_LEAST) {
            self.packable.push(doc);
        }
        self.messages.push(Held::Whole(Arc::clone(m)));
        self.pack_unshared();
    }

    /// Packs every summary waiting in `packable` that only this index still holds (the
    /// session's context let it go when a newer summary replaced it).
    /// A weak reference (the token cache keeps one to every message it counted) does not
    /// keep a summary whole: it stops upgrading, as it would had the message been dropped.
    fn pack_unshared(&mut self) {
        let messages = &mut self.messages;
        self.packable.retain(|&doc| {
            let Some(held) = messages.get_mut(doc as usize) else {
                return false;
            };
            match held {
                Held::Whole(arc) if Arc::strong_count(arc) == 1 => {}
                Held::Whole(_) => return true,
                Held::Packed(_) => return false,
            }
            let taken = std::mem::replace(held, Held::Whole(Arc::clone(&NOTHING)));
            *held = match taken {
                Held::Whole(arc) => match Arc::try_unwrap(arc) {
                    Ok(message) => Held::pack(message),
                    Err(arc) => Held::Whole(arc),
                },
                packed => packed,
            };
            false
        });
    }

    fn search(&self, query: &str, filter: &SearchFilter, end: usize, limit: usize) -> Vec<Hit> {
        let n = self.messages.len();
        if n == 0 || limit == 0 || end == 0 {
            return Vec::new();
        }
        let mut query_terms: Vec<String> = Vec::new();
        for t in terms(query) {
            if !query_terms.contains(&t) {
                query_terms.push(t);
            }
        }
        let average = (self.total_terms as f64 / n as f64).max(1.0);
        let mut scores: FastMap<u32, (f64, Vec<usize>)> = FastMap::default();
        for (qi, term) in query_terms.iter().enumerate() {
            let Some(list) = self
                .terms
                .get(term.as_str())
                .and_then(|&n| self.postings.get(n as usize))
            else {
                continue;
            };
            let df = f64::from(list.len);
            let idf = ((n as f64 - df + 0.5) / (df + 0.5) + 1.0).ln();
            for (doc, tf) in list.iter() {
                let d = doc as usize;
                if d >= end || !role_allowed(&filter.roles, self.messages[d].role()) {
                    continue;
                }
                let tf = f64::from(tf);
                let norm = 1.0 - B + B * f64::from(self.lengths[d]) / average;
                let entry = scores.entry(doc).or_default();
                entry.0 += idf * tf * (K1 + 1.0) / (tf + K1 * norm);
                entry.1.push(qi);
            }
        }
        let mut ranked: Vec<(u32, f64, Vec<usize>)> = scores
            .into_iter()
            .map(|(doc, (score, matched))| (doc, (score * 1000.0).round() / 1000.0, matched))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
        ranked.truncate(limit);
        ranked
            .into_iter()
            .map(|(doc, score, matched)| {
                let m = self.messages[doc as usize].bare();
                Hit {
                    id: m.id.clone(),
                    role: m.role(),
                    score,
                    position: doc as usize + 1,
                    matched: matched
                        .into_iter()
                        .map(|i| query_terms[i].clone())
                        .collect(),
                }
            })
            .collect()
    }
}

/// What a slot holds for the moment a summary is taken out to be packed.
static NOTHING: std::sync::LazyLock<Arc<Message>> =
    std::sync::LazyLock::new(|| Arc::new(Message::user(String::new())));

/// Summaries shorter than this stay whole when packed (packing would save little).
const PACK_AT_LEAST: usize = 1024;

/// One stored message as the index holds it.
#[derive(Debug)]
enum Held {
    /// The message itself, shared with the session (its context, the store's answer).
    Whole(Arc<Message>),
    /// A summary only the index still holds: its text deflated. A long session writes
    /// thousands of them (each 10-20 KB at 200,000 messages, ~45 MB in all), each read again
    /// only when `host.fetch` or `stored_since` asks for it.
    Packed(Box<Packed>),
}

/// A summary message with its text deflated.
#[derive(Debug)]
struct Packed {
    /// The message with an empty summary text: id, role and every other field as stored.
    bare: Message,
    /// The summary text, deflated (`miniz_oxide`, raw DEFLATE).
    text: Box<[u8]>,
}

impl Held {
    /// `message` held with its summary text deflated (whole when it would not shrink).
    fn pack(mut message: Message) -> Held {
        let Some(text) = summary_text_mut(&mut message) else {
            return Held::Whole(Arc::new(message));
        };
        let deflated = miniz_oxide::deflate::compress_to_vec(text.as_bytes(), 1);
        if deflated.len() >= text.len() / 2 {
            return Held::Whole(Arc::new(message));
        }
        text.clear();
        text.shrink_to_fit();
        Held::Packed(Box::new(Packed {
            bare: message,
            text: deflated.into_boxed_slice(),
        }))
    }

    /// The stored message, whole (a packed summary inflated into a new `Arc`).
    fn message(&self) -> Arc<Message> {
        match self {
            Held::Whole(m) => Arc::clone(m),
            Held::Packed(p) => {
                let mut m = p.bare.clone();
                let inflated = inflate(&p.text, &m.id);
                if let Some(text) = summary_text_mut(&mut m) {
                    *text = inflated;
                }
                Arc::new(m)
            }
        }
    }

    /// The message without a packed summary's text: its id, role and other fields.
    fn bare(&self) -> &Message {
        match self {
            Held::Whole(m) => m,
            Held::Packed(p) => &p.bare,
        }
    }

    fn role(&self) -> Role {
        self.bare().role()
    }
}

/// The text `deflated` holds. What [`Held::pack`] deflated always inflates; should it not, the
/// error is logged and the summary reads empty rather than failing the caller's `fetch`.
fn inflate(deflated: &[u8], id: &str) -> String {
    match miniz_oxide::inflate::decompress_to_vec(deflated).map(String::from_utf8) {
        Ok(Ok(text)) => text,
        failed => {
            tracing::error!(id, ?failed, "recall: a packed summary does not inflate");
            String::new()
        }
    }
}

/// A summary message's text.
fn summary_text(m: &Message) -> Option<&str> {
    match &m.body {
        MessageBody::CompactionSummary(s) => Some(&s.summary),
        MessageBody::BranchSummary(s) => Some(&s.summary),
        _ => None,
    }
}

/// A summary message's text, to change.
fn summary_text_mut(m: &mut Message) -> Option<&mut String> {
    match &mut m.body {
        MessageBody::CompactionSummary(s) => Some(&mut s.summary),
        MessageBody::BranchSummary(s) => Some(&mut s.summary),
        _ => None,
    }
}

/// One term's postings, (document, occurrences) pairs with documents ascending, kept as
/// variable-length deltas: most pairs take 1 byte instead of 8 (at 200,000 messages about 7
/// million pairs).
#[derive(Debug, Default)]
struct Postings {
    /// Each pair as one LEB128 number, the document's distance from the previous one times
    /// two, plus one when the occurrences are not 1; then, only in that case, the occurrences
    /// (LEB128). A term is once in most messages that have it, and the next such message is
    /// seldom 64 or more messages on: one byte a pair.
    bytes: Vec<u8>,
    /// The last document pushed.
    last: u32,
    /// Pairs held (the term's document frequency).
    len: u32,
}

/// The most bytes one pair takes: a 33-bit number and a 32-bit one, LEB128.
const MAX_PAIR_BYTES: usize = 10;

impl Postings {
    /// Adds a pair; `doc` is above every document pushed before.
    fn push(&mut self, doc: u32, occurrences: u32) {
        let delta = if self.len == 0 { doc } else { doc - self.last };
        // Grown by an eighth, not doubled: a term's list only ever grows, and the room doubling
        // leaves (a quarter of the index on average) is held for the whole session.
        if self.bytes.capacity() - self.bytes.len() < MAX_PAIR_BYTES {
            self.bytes
                .reserve_exact((self.bytes.len() / 8).max(2 * MAX_PAIR_BYTES));
        }
        let once = occurrences == 1;
        put_varint(&mut self.bytes, (u64::from(delta) << 1) | u64::from(!once));
        if !once {
            put_varint(&mut self.bytes, u64::from(occurrences));
        }
        self.last = doc;
        self.len += 1;
    }

    /// The pairs, documents ascending.
    fn iter(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        let mut at = 0;
        let mut doc = 0u32;
        std::iter::from_fn(move || {
            let head = get_varint(&self.bytes, &mut at)?;
            let occurrences = if head & 1 == 0 {
                1
            } else {
                u32::try_from(get_varint(&self.bytes, &mut at)?).unwrap_or(u32::MAX)
            };
            doc = doc.wrapping_add(u32::try_from(head >> 1).unwrap_or(u32::MAX));
            Some((doc, occurrences))
        })
    }
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// The LEB128 number at `*at`, moving `*at` past it; `None` at the end (or past 64 bits).
fn get_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut n = 0u64;
    let mut shift = 0;
    loop {
        let b = *bytes.get(*at)?;
        *at += 1;
        n |= u64::from(b & 0x7f).checked_shl(shift)?;
        if b < 0x80 {
            return Some(n);
        }
        shift += 7;
    }
}

fn role_allowed(roles: &[Role], role: Role) -> bool {
    roles.is_empty() || roles.contains(&role)
}

/// What a search reads of a message: its text, plus the names and arguments of the tools an
/// assistant called (a path is often only there).
pub(crate) fn searchable_text(m: &Message) -> String {
    let mut text = m.text();
    if let MessageBody::Assistant(a) = &m.body {
        for block in &a.content {
            if let ContentBlock::ToolCall(c) = block {
                text.push('\n');
                text.push_str(&c.name);
                text.push(' ');
                text.push_str(&c.arguments.to_string());
            }
        }
    }
    if let MessageBody::ToolResult(r) = &m.body {
        text.push('\n');
        text.push_str(&r.tool_name);
    }
    text
}

#[cfg(test)]
#[path = "recall_tests.rs"]
mod tests;
