//! The mirror of a client's transcript: OpenClaw keeps its own transcript and hands each
//! lifecycle call the messages it holds. Serve appends that view to the session's store as it
//! grows (each new message ingested once), then calls the engine through the session's
//! primitives, so a served call keeps every promise a driven turn keeps.
//!
//! A second `assemble` of a turn receives the first call's output back: its messages carry the
//! session's own entry ids, so that view is recognised as an echo and never mirrored again;
//! only what follows the echoed window (a tool loop's calls and results) joins the context,
//! for that call only. An engine's compaction summary lives in the store, so every later view
//! is assembled from the compacted context even though the client never applies the summary
//! to its own transcript.
//!
//! A crash between a call's transcript append and its state write (which holds the mirror)
//! stores messages the saved mirror does not know. The state file records how many stored
//! messages the mirror accounts for; after a restart, the first client view is matched
//! against the messages stored beyond that (by fingerprint, in order), and those are taken as
//! stored instead of being appended again.

use std::collections::HashSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::contract::Operation;
use crate::error::Result;
use crate::contract::message::{Message, Role};
use crate::services::fnv::Fnv;
use crate::session::{Assembly, ClientAssemble, SavedRecord, Session};

/// How much of a client-owned transcript a session has mirrored, saved with the session so a
/// new server process continues where the last one stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientMirror {
    /// A fingerprint of each client message mirrored so far, in the client's order.
    pub fingerprints: Vec<String>,
}

/// The mirror as a served session holds it: what is saved, and how the saved record relates
/// to what the store holds.
#[derive(Debug, Default)]
pub(super) struct Mirror {
    /// What is saved with the session's state.
    pub(super) saved: ClientMirror,
    /// How many stored messages the saved record accounts for: the store's length when the
    /// record was last saved. Messages stored after it were appended by a call whose save never
    /// happened (a crash); the client's next view is matched against them instead of appending
    /// them again.
    pub(super) stored: usize,
    /// The store holds messages after `stored` that no client view was matched against yet:
    /// saves keep `stored` where it is until one is.
    pub(super) unmatched: bool,
}

impl Mirror {
    /// The mirror a session opens with: `saved` as its state's `record` held it, over a store
    /// of `len` messages. When no record was ever saved (a crash between the session's first
    /// append and its first save), what the store holds is matched against the client's next
    /// view rather than stored a second time.
    pub(super) fn opened(saved: ClientMirror, record: Option<&SavedRecord>, len: usize) -> Mirror {
        let (stored, unmatched) = match record.map(|r| r.entries) {
            None => (0, len > 0),
            Some(Some(n)) => (n, n < len),
            // Saved by a ctxhost that did not count: taken as accounting for everything.
            Some(None) => (len, false),
        };
        Mirror {
            saved,
            stored,
            unmatched,
        }
    }
}

/// `ingest` / `ingestBatch` from a client: the messages join the mirror (and the store)
/// and are ingested once. Returns how many were new.
pub(super) fn ingest(
    s: &mut Session,
    mirror: &mut Mirror,
    messages: Vec<Message>,
    is_heartbeat: bool,
) -> Result<usize> {
    s.follow_reload()?;
    let mut fresh: Vec<Message> = messages
        .into_iter()
        .filter(|m| !is_own_entry(s, m))
        .collect();
    // A call re-sent after its answer was lost (the bridge retries a call whose process
    // died under it) carries what the mirror already ends with: stored once, not again.
    // A real transcript never repeats its last message verbatim; if one did, the next view
    // (assemble, afterTurn) carries it and it joins the mirror there.
    let prints: Vec<String> = fresh.iter().map(fingerprint).collect();
    let repeated = (1..=prints.len())
        .rev()
        .find(|&k| mirror.saved.fingerprints.ends_with(&prints[..k]))
        .unwrap_or(0);
    if repeated > 0 {
        tracing::info!(
            session = s.id(),
            repeated,
            "an ingest repeats the last mirrored message(s): a retried call, not stored again"
        );
        fresh.drain(..repeated);
    }
    mirror
        .saved
        .fingerprints
        .extend(prints.into_iter().skip(repeated));
    let stored = store_once(s, mirror, fresh)?;
    s.ingest_stored(&stored, is_heartbeat)?;
    Ok(stored.len())
}

/// `assemble` from a client: mirror the client's view, then assemble, repair, re-measure
/// and recover from overflow exactly like a driven turn.
pub(super) fn assemble(
    s: &mut Session,
    mirror: &mut Mirror,
    messages: Vec<Message>,
    request: ClientAssemble,
) -> Result<Assembly> {
    s.follow_reload()?;
    s.require(Operation::AgentRun)?;
    let tail = mirror_view(s, mirror, messages)?;
    s.assemble_with_tail(tail, request)
}

/// `afterTurn` from a client: mirror the snapshot, then the engine's `afterTurn` if it
/// defines one.
pub(super) fn after_turn(
    s: &mut Session,
    mirror: &mut Mirror,
    messages: Vec<Message>,
    pre_prompt_message_count: usize,
    token_budget: Option<u64>,
    is_heartbeat: bool,
) -> Result<()> {
    s.follow_reload()?;
    mirror_view(s, mirror, messages)?;
    s.client_after_turn(pre_prompt_message_count, token_budget, is_heartbeat)
}

/// Appends client messages that join the mirror, except those a call that crashed before
/// its save already stored: the messages stored after what the saved record accounts for
/// are matched (by fingerprint, in order) against the start of `fresh`, and the ones that
/// match are taken as stored. Returns every message of `fresh` as stored, in order. The
/// engine's state was saved with the record, so it never saw those messages: all of them
/// are ingested again.
fn store_once(
    s: &mut Session,
    mirror: &mut Mirror,
    mut fresh: Vec<Message>,
) -> Result<Vec<Arc<Message>>> {
    // The session's own summaries among them are not the client's: they never match.
    let unsaved: Vec<Arc<Message>> = if mirror.unmatched {
        s.stored_since(mirror.stored)
            .into_iter()
            .filter(|m| m.role() != Role::CompactionSummary)
            .collect()
    } else {
        Vec::new()
    };
    mirror.unmatched = false;
    let known = fresh
        .iter()
        .zip(&unsaved)
        .take_while(|(f, u)| fingerprint(f) == fingerprint(u))
        .count();
    if known == 0 {
        return s.store_messages(fresh);
    }
    tracing::info!(
        session = s.id(),
        known,
        "client messages stored by a call that ended before its save are not stored again"
    );
    let rest = fresh.split_off(known);
    let mut stored: Vec<Arc<Message>> = unsaved.into_iter().take(known).collect();
    stored.extend(s.store_messages(rest)?);
    Ok(stored)
}

fn is_own_entry(s: &Session, m: &Message) -> bool {
    !m.id.is_empty() && s.context().iter().any(|c| c.id == m.id)
}

/// Mirrors a client view into the store; returns the messages that follow an echoed window
/// (empty for a plain view).
fn mirror_view(
    s: &mut Session,
    mirror: &mut Mirror,
    messages: Vec<Message>,
) -> Result<Vec<Message>> {
    let own: HashSet<&str> = s.context().iter().map(|m| m.id.as_str()).collect();
    if let Some(last) = messages
        .iter()
        .rposition(|m| !m.id.is_empty() && own.contains(m.id.as_str()))
    {
        drop(own);
        let tail: Vec<Message> = messages
            .into_iter()
            .skip(last + 1)
            .filter(|m| !is_own_entry(s, m))
            .collect();
        return Ok(tail);
    }
    drop(own);
    let prints: Vec<String> = messages.iter().map(fingerprint).collect();
    let seen = mirror.saved.fingerprints.len();
    let agree = prints
        .iter()
        .zip(&mirror.saved.fingerprints)
        .take_while(|(a, b)| a == b)
        .count();
    let rebase = agree != seen.min(prints.len())
        && messages
            .first()
            .is_some_and(|m| m.role() == Role::CompactionSummary);
    let fresh: Vec<Message> = if rebase {
        // The client compacted its own transcript: adopt its view after what we hold.
        tracing::info!(
            session = s.id(),
            "the client's transcript was compacted; mirroring its new view"
        );
        mirror.saved.fingerprints = prints;
        messages
    } else if let Some(new) = (agree != seen.min(prints.len()))
        .then(|| gaps(&mirror.saved.fingerprints, &prints))
        .flatten()
    {
        // Everything mirrored is in the view, in order, with messages between that never
        // arrived (a call carrying them was given up while later ones got through): those
        // are new, stored once (after what is stored; the transcript only appends).
        tracing::info!(
            session = s.id(),
            new = new.iter().filter(|n| **n).count(),
            "the client's view holds messages the mirror lacks between mirrored ones"
        );
        mirror.saved.fingerprints = prints;
        messages
            .into_iter()
            .zip(new)
            .filter_map(|(m, n)| n.then_some(m))
            .collect()
    } else {
        // The view repeats, shortens or extends what was mirrored — or the client rewrote
        // history (pruning, an edit): either way keep the longest view seen, and append
        // only what lies beyond it.
        if agree != seen.min(prints.len()) {
            tracing::debug!(
                session = s.id(),
                agree,
                seen,
                "the client's view differs from the mirror; appending only what lies beyond it"
            );
        }
        if prints.len() > seen {
            mirror
                .saved
                .fingerprints
                .extend(prints[seen..].iter().cloned());
            messages.into_iter().skip(seen).collect()
        } else {
            Vec::new()
        }
    };
    if !fresh.is_empty() {
        let stored = store_once(s, mirror, fresh)?;
        if rebase {
            // The client's summary now stands for everything before it, as on a reopen.
            s.adopt_summaries();
        }
        s.ingest_stored(&stored, false)?;
    }
    Ok(Vec::new())
}

/// Which messages of `view` are not in `mirror` when `mirror` is a subsequence of `view`
/// (matched in order, each to its earliest match); `None` when it is not.
fn gaps(mirror: &[String], view: &[String]) -> Option<Vec<bool>> {
    let mut next = mirror.iter().peekable();
    let new: Vec<bool> = view
        .iter()
        .map(|v| {
            if next.peek() == Some(&v) {
                next.next();
                false
            } else {
                true
            }
        })
        .collect();
    next.peek().is_none().then_some(new)
}

/// A fingerprint of a client message that stays the same across processes and releases
/// (FNV-1a over its role, text, tool call ids and names). Fields the client adds or changes
/// between calls (ids, metadata) do not count.
fn fingerprint(m: &Message) -> String {
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
    format!("{:016x}", h.0)
}
