//! The mirror of a client's transcript: OpenClaw keeps its own transcript and hands each
//! lifecycle call the messages it holds (or, over a delta connection, what changed in them:
//! [`super::views`]). The mirror is ctxhost's copy of the client's view: one place per client
//! message, in the client's order, each naming the session entry that stores it. The session's
//! transcript only appends; the mirror is what can be cut and rewritten.
//!
//! **Exactly once.** A message is stored once however often a call carrying it comes. Stored
//! messages that are no place of the view any more (cut off by a shorter view or a rewrite,
//! or stored by a call that ended before its save: a crash) are kept as *detached*: the
//! client's next new messages are matched against them (by fingerprint, in order where they
//! can be, else anywhere: a client may bring them back in another order) before anything is
//! stored. The detached list is saved with the mirror, so a matching view may come in a later
//! call or a later process.
//!
//! **Saved** with the engine's state and the call's entries in one store commit (the
//! session's extra record): the places as runs of consecutive entries, the client's hash at
//! the end of the view, and the detached entries. Fingerprints are computed again from the
//! stored messages when a session opens; the record also says how many transcript entries it
//! accounts for, and entries stored after that are detached, not yet ingested. The commit
//! keeps entries and record together, so only a state an earlier ctxhost saved (it appended
//! and saved in two steps), or entries committed before any record (a failed state save), can
//! leave such entries.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use rustc_hash::FxHasher;
use serde::{Deserialize, Serialize};

use crate::contract::message::{Message, Role};
use crate::error::Result;
use crate::services::fnv::Fnv;
use crate::session::{SavedRecord, Session};

/// How many detached entries are kept as candidates (the newest): a view that cut off more
/// (OpenClaw's history limit drops the oldest turns) matches them in the same call; older ones
/// stay stored but are not matched against later views.
const DETACHED_CAP: usize = 256;

/// How far ahead an earlier ctxhost's fingerprint is looked for among the stored messages.
const LEGACY_SEARCH: usize = 1024;

/// The mirror as an earlier ctxhost saved it (a fingerprint per place), read once.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LegacyMirror {
    /// A fingerprint of each client message mirrored, in the client's order.
    #[serde(default)]
    pub fingerprints: Vec<String>,
}

/// The mirror as it is saved.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SavedView {
    /// The number of client messages in the view.
    pub count: usize,
    /// The client's hash at the end of the view (hex), when the last call that changed it
    /// gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// The places, in order: `[first entry, n]` for n places stored as consecutive entries
    /// (entry numbers are the hex ids), or a fingerprint (hex) for a place whose entry is not
    /// known (read from an earlier ctxhost's record).
    pub places: Vec<SavedRun>,
    /// Detached entries (number, whether the engine ingested it), in transcript order.
    pub detached: Vec<(u64, bool)>,
}

/// Places saved together.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SavedRun {
    /// `n` places stored as consecutive entries from `first`.
    Entries(u64, usize),
    /// One place known only by its fingerprint.
    Unknown(String),
}

/// One client message as ctxhost holds it.
#[derive(Clone, Debug)]
pub(super) struct Place {
    /// The stored message (`None` when only an earlier ctxhost's fingerprint is known).
    pub(super) stored: Option<Arc<Message>>,
    /// Its entry number ([`entry_number`]).
    pub(super) entry: Option<u64>,
    /// Its [`fingerprint`].
    pub(super) fp: u64,
    /// The client's rolling hash of its view up to and including this message, when a delta
    /// call gave one.
    pub(super) hash: Option<u64>,
}

impl Place {
    /// The place of the stored message `m`, with the client's hash after it.
    fn of(m: &Arc<Message>, hash: Option<u64>) -> Place {
        Place {
            stored: Some(Arc::clone(m)),
            entry: entry_number(m),
            fp: fingerprint(m),
            hash,
        }
    }
}

/// A stored message that is no place of the view (see the module doc).
#[derive(Clone, Debug)]
pub(super) struct Detached {
    pub(super) stored: Arc<Message>,
    pub(super) fp: u64,
    /// The engine ingested it (it was cut off a view); a message stored by a call that never
    /// saved was not: the engine's state is from before it.
    pub(super) ingested: bool,
}

/// The mirror of one session's client view.
#[derive(Debug, Default)]
pub(super) struct Mirror {
    pub(super) places: Vec<Place>,
    /// Entry number → place, for the places whose entry is known.
    index: HashMap<u64, usize, BuildHasherDefault<FxHasher>>,
    /// The places as they are saved, each run with the place it starts at (kept as places
    /// change, so a save costs the runs, not the places).
    runs: Vec<(usize, SavedRun)>,
    pub(super) detached: Vec<Detached>,
}

/// New messages for the view: stored now, or found among the detached.
pub(super) struct Placed {
    /// The messages as stored, in order.
    pub(super) stored: Vec<Arc<Message>>,
    /// Those the engine has not ingested yet (new, or stored by a call that never saved).
    pub(super) to_ingest: Vec<Arc<Message>>,
}

impl Mirror {
    /// The mirror a session opens with, from the record its state held (`record` `None`: no
    /// record was ever saved, as after a crash between the session's first append and its
    /// first save).
    pub(super) fn open(
        s: &Session,
        view: Option<SavedView>,
        legacy: Option<LegacyMirror>,
        record: Option<&SavedRecord>,
    ) -> Mirror {
        let all = s.stored_since(0);
        let by_entry: HashMap<u64, &Arc<Message>> = all
            .iter()
            .filter_map(|m| entry_number(m).map(|n| (n, m)))
            .collect();
        let mut mirror = Mirror::default();
        let mut detached: Vec<(u64, bool)> = Vec::new();
        let mut end_hash = None;
        if let Some(v) = view {
            for run in &v.places {
                match run {
                    SavedRun::Entries(first, n) => {
                        for e in (*first..).take(*n) {
                            match by_entry.get(&e) {
                                Some(m) => mirror.push(Place::of(m, None)),
                                None => tracing::warn!(
                                    session = s.id(),
                                    entry = e,
                                    "the mirror names an entry the transcript lacks; left out"
                                ),
                            }
                        }
                    }
                    SavedRun::Unknown(fp) => mirror.push(Place {
                        stored: None,
                        entry: None,
                        fp: u64::from_str_radix(fp, 16).unwrap_or_default(),
                        hash: None,
                    }),
                }
            }
            end_hash = v.hash.as_deref().and_then(parse_hash);
            detached = v.detached;
        } else if let Some(old) = legacy {
            // An earlier ctxhost kept fingerprints only: their entries are the stored client
            // messages with the same fingerprints, in order.
            let candidates: Vec<&Arc<Message>> = all
                .iter()
                .filter(|m| m.role() != Role::CompactionSummary)
                .collect();
            let mut next = 0;
            for fp in &old.fingerprints {
                let fp = u64::from_str_radix(fp, 16).unwrap_or_default();
                let window = candidates.get(next..).unwrap_or_default();
                let found = window
                    .iter()
                    .take(LEGACY_SEARCH)
                    .position(|m| fingerprint(m) == fp);
                match found {
                    Some(k) => {
                        next += k + 1;
                        mirror.push(Place::of(window[k], None));
                    }
                    None => mirror.push(Place {
                        stored: None,
                        entry: None,
                        fp,
                        hash: None,
                    }),
                }
            }
        }
        if let (Some(last), Some(h)) = (mirror.places.last_mut(), end_hash) {
            last.hash = Some(h);
        }
        for (e, ingested) in detached {
            if mirror.index.contains_key(&e) {
                continue;
            }
            if let Some(m) = by_entry.get(&e) {
                mirror.detached.push(Detached {
                    stored: Arc::clone(m),
                    fp: fingerprint(m),
                    ingested,
                });
            }
        }
        // Client messages stored after what the record accounts for: a call that ended before
        // its save stored them (none saved at all: everything stored is such).
        let accounted = match record {
            None => 0,
            Some(r) => r.entries.unwrap_or(all.len()),
        };
        for m in all.get(accounted..).unwrap_or_default() {
            let placed = entry_number(m).is_some_and(|e| mirror.index.contains_key(&e));
            if m.role() != Role::CompactionSummary && !placed {
                mirror.detached.push(Detached {
                    stored: Arc::clone(m),
                    fp: fingerprint(m),
                    ingested: false,
                });
            }
        }
        mirror
    }

    /// The mirror as it is saved.
    pub(super) fn saved(&self) -> SavedView {
        SavedView {
            count: self.places.len(),
            hash: self.end_hash().map(|h| format!("{h:016x}")),
            places: self.runs.iter().map(|(_, r)| r.clone()).collect(),
            detached: self
                .detached
                .iter()
                .filter_map(|d| entry_number(&d.stored).map(|e| (e, d.ingested)))
                .collect(),
        }
    }

    /// The number of client messages in the view.
    pub(super) fn count(&self) -> usize {
        self.places.len()
    }

    /// The client's hash at the end of the view, when known.
    pub(super) fn end_hash(&self) -> Option<u64> {
        self.places.last().and_then(|p| p.hash)
    }

    /// The client's hash after the first `n` messages of the view, when known.
    pub(super) fn hash_at(&self, n: usize) -> Option<u64> {
        n.checked_sub(1)
            .and_then(|i| self.places.get(i))
            .and_then(|p| p.hash)
    }

    /// The place holding the stored entry `m` (by its id), if any.
    pub(super) fn place_of(&self, m: &Message) -> Option<usize> {
        if self.index.is_empty() {
            return None;
        }
        entry_number(m).and_then(|e| self.index.get(&e).copied())
    }

    /// Appends a place.
    pub(super) fn push(&mut self, place: Place) {
        let at = self.places.len();
        match place.entry {
            Some(e) => {
                self.index.insert(e, at);
                match self.runs.last_mut() {
                    Some((_, SavedRun::Entries(first, n))) if *first + *n as u64 == e => *n += 1,
                    _ => self.runs.push((at, SavedRun::Entries(e, 1))),
                }
            }
            None => self
                .runs
                .push((at, SavedRun::Unknown(format!("{:016x}", place.fp)))),
        }
        self.places.push(place);
    }

    /// Cuts the view to its first `n` places; the stored messages of the places cut off are
    /// detached (ingested: the engine saw them).
    pub(super) fn cut(&mut self, n: usize) {
        if n >= self.places.len() {
            return;
        }
        while self.runs.last().is_some_and(|(at, _)| *at >= n) {
            self.runs.pop();
        }
        if let Some((at, SavedRun::Entries(_, len))) = self.runs.last_mut() {
            *len = (*len).min(n - *at);
        }
        for p in self.places.drain(n..) {
            if let Some(e) = p.entry {
                self.index.remove(&e);
            }
            if let Some(m) = p.stored {
                self.detached.push(Detached {
                    stored: m,
                    fp: p.fp,
                    ingested: true,
                });
            }
        }
        self.detached
            .sort_by_cached_key(|d| entry_number(&d.stored).unwrap_or(u64::MAX));
        self.detached
            .dedup_by(|a, b| Arc::ptr_eq(&a.stored, &b.stored));
    }

    /// Replaces the whole view by `places`.
    pub(super) fn replace(&mut self, places: Vec<Place>) {
        self.places.clear();
        self.index.clear();
        self.runs.clear();
        for p in places {
            self.push(p);
        }
    }

    /// Stores `messages` (new client messages, in order) once: each is matched against the
    /// detached messages first (by fingerprint: in order where it can be, else anywhere),
    /// and only the ones not found are appended to the transcript. With `from_first`, nothing
    /// is matched unless the first message is (a client's own compaction summary: what it kept
    /// must follow it in the transcript). Returns the messages as stored, in order; matched
    /// ones leave the detached list.
    pub(super) fn place_new(
        &mut self,
        s: &mut Session,
        messages: Vec<Message>,
        from_first: bool,
    ) -> Result<Placed> {
        let mut found: Vec<Option<usize>> = vec![None; messages.len()];
        let mut taken = vec![false; self.detached.len()];
        let mut cursor = 0;
        for (i, m) in messages.iter().enumerate() {
            if from_first && i > 0 && found[0].is_none() {
                break;
            }
            let fp = fingerprint(m);
            let free = |k: &usize| !taken[*k] && self.detached[*k].fp == fp;
            // In order first (equal texts keep their order); else anywhere: a client may
            // bring cut-off messages back in another order than they were stored.
            let k = (cursor..self.detached.len())
                .find(free)
                .or_else(|| (0..cursor.min(self.detached.len())).find(free));
            if let Some(k) = k {
                found[i] = Some(k);
                taken[k] = true;
                cursor = k + 1;
            }
        }
        let known = found.iter().flatten().count();
        if known > 0 {
            tracing::info!(
                session = s.id(),
                known,
                "client messages already stored (cut off a view, or stored by a call that ended before its save) are not stored again"
            );
        }
        let fresh: Vec<Message> = messages
            .into_iter()
            .zip(&found)
            .filter_map(|(m, f)| f.is_none().then_some(m))
            .collect();
        let mut appended = s.store_messages(fresh)?.into_iter();
        let mut stored = Vec::with_capacity(found.len());
        let mut to_ingest = Vec::new();
        for f in &found {
            match f {
                Some(k) => {
                    let d = &self.detached[*k];
                    if !d.ingested {
                        to_ingest.push(Arc::clone(&d.stored));
                    }
                    stored.push(Arc::clone(&d.stored));
                }
                None => {
                    if let Some(m) = appended.next() {
                        to_ingest.push(Arc::clone(&m));
                        stored.push(m);
                    }
                }
            }
        }
        if known > 0 {
            let mut k = 0;
            self.detached.retain(|_| {
                k += 1;
                !taken[k - 1]
            });
        }
        self.trim_detached();
        Ok(Placed { stored, to_ingest })
    }

    /// Keeps the newest [`DETACHED_CAP`] detached messages as candidates.
    pub(super) fn trim_detached(&mut self) {
        if self.detached.len() > DETACHED_CAP {
            let over = self.detached.len() - DETACHED_CAP;
            self.detached.drain(..over);
        }
    }

    /// Places for `stored` (as [`Mirror::place_new`] returned them), with the client's hashes.
    pub(super) fn places_for(stored: &[Arc<Message>], hashes: Option<&[u64]>) -> Vec<Place> {
        stored
            .iter()
            .enumerate()
            .map(|(i, m)| Place::of(m, hashes.and_then(|h| h.get(i).copied())))
            .collect()
    }
}

/// A session entry's number (its id is hex), when it has one.
pub(super) fn entry_number(m: &Message) -> Option<u64> {
    if m.id.is_empty() {
        return None;
    }
    u64::from_str_radix(&m.id, 16).ok()
}

/// A client's hash as it travels: 1 to 16 hex digits.
pub(super) fn parse_hash(h: &str) -> Option<u64> {
    if h.is_empty() || h.len() > 16 {
        return None;
    }
    u64::from_str_radix(h, 16).ok()
}

/// A fingerprint of a client message that stays the same across processes and releases
/// (FNV-1a over its role, text, tool call ids and names). Fields the client adds or changes
/// between calls (ids, metadata) do not count.
pub(super) fn fingerprint(m: &Message) -> u64 {
    let mut h = Fnv::new();
    h.write(m.role().as_str().as_bytes());
    h.write(&[0]);
    h.write(m.text().as_bytes());
    h.write(&[0]);
    h.write(m.tool_call_id().unwrap_or_default().as_bytes());
    for c in m.tool_calls() {
        h.write(&[0]);
        h.write(c.id.as_bytes());
        h.write(&[0]);
        h.write(c.name.as_bytes());
    }
    h.0
}
