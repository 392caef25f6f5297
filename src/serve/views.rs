//! A client's view of its transcript into the mirror ([`super::mirror`]), in the two forms a
//! connection may speak (`initialize` negotiates: [`super::protocol::ClientCapabilities`]):
//!
//! - **Full**: every `assemble` and `afterTurn` carries the whole history, every `ingest` its
//!   message (older bridges, other clients). The mirror works out what is new: a view that
//!   extends the mirror appends what lies beyond; one that holds mirrored messages with new
//!   ones between them stores those; a view starting with the client's own compaction summary
//!   is adopted whole; any other difference keeps the longest view seen. A second `assemble`
//!   of a turn that echoes the first call's window (its messages carry the session's entry
//!   ids) mirrors nothing: only what follows the echoed window joins that call's context.
//! - **Delta**: the client sends how many of its messages it believes ctxhost holds (`base`)
//!   and its rolling hash of them, then only its messages from there on, each with its hash
//!   after it ([`Delta`]). The base is checked against the hash ctxhost kept for that place:
//!   a mismatch is answered [`OutOfSync`] with what ctxhost holds, never accepted. From the
//!   base on, messages equal (by fingerprint) to the ones held keep their places (a retried
//!   call changes nothing); from the first that differs the view is the client's: the places
//!   after it are cut off (detached) and the new messages placed, each stored once.
//!
//! Over a delta connection `assemble` answers with references to the client's own messages
//! ([`window`]), so the client rebuilds the context from its own objects.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::contract::Operation;
use crate::contract::message::{Message, Role};
use crate::error::Result;
use crate::session::{Assembly, ClientAssemble, Session};

use super::mirror::{Mirror, fingerprint};

/// A delta view: the client's messages from `base` on (see the module doc).
#[derive(Clone, Debug)]
pub(super) struct Delta {
    /// How many of the client's messages it believes ctxhost holds.
    pub(super) base: usize,
    /// The client's hash of those (`None` only for 0).
    pub(super) base_hash: Option<u64>,
    /// The client's messages from `base` on: after the call, its view is `base` of those
    /// ctxhost held followed by these.
    pub(super) append: Vec<Message>,
    /// The client's hash after each of `append`.
    pub(super) hashes: Vec<u64>,
}

/// What a client's view disagreed on: ctxhost's view, for the client to send again from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct OutOfSync {
    /// How many client messages ctxhost holds.
    pub(super) count: usize,
    /// The client's hash after them, as ctxhost kept it (`None`: not known, send all).
    pub(super) hash: Option<u64>,
}

/// A delta call's outcome: done, or refused with what ctxhost holds.
pub(super) type Synced<T> = std::result::Result<T, OutOfSync>;

/// A view taken into the mirror: the messages this call's context gets after it, and the
/// client's `tail` when those are exactly it (so the answer may refer to them).
struct Taken {
    context_tail: Vec<Message>,
    tail: Vec<Message>,
}

/// A delta applied: how many messages took new places, and the tail of an echo the client
/// did not recognise as one.
struct Applied {
    placed: usize,
    echo: Option<Vec<Message>>,
}

/// How an `assemble` or `afterTurn` carries the client's view.
#[derive(Debug)]
pub(super) enum View {
    /// The whole history.
    Full(Vec<Message>),
    /// What changed, and (`assemble`) the messages after a window the client echoed back,
    /// for this call's context only.
    Delta(Delta, Vec<Message>),
}

/// `ingest` / `ingestBatch` in the full form: the messages join the mirror (and the store)
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
    let prints: Vec<u64> = fresh.iter().map(fingerprint).collect();
    let repeated = (1..=prints.len())
        .rev()
        .find(|&k| ends_with(mirror, &prints[..k]))
        .unwrap_or(0);
    if repeated > 0 {
        tracing::info!(
            session = s.id(),
            repeated,
            "an ingest repeats the last mirrored message(s): a retried call, not stored again"
        );
        fresh.drain(..repeated);
    }
    let placed = mirror.place_new(s, fresh, false)?;
    for p in Mirror::places_for(&placed.stored, None) {
        mirror.push(p);
    }
    s.ingest_stored(&placed.to_ingest, is_heartbeat)?;
    Ok(placed.stored.len())
}

/// `ingest` / `ingestBatch` in the delta form; returns how many messages took new places.
pub(super) fn ingest_delta(
    s: &mut Session,
    mirror: &mut Mirror,
    delta: Delta,
    is_heartbeat: bool,
) -> Result<Synced<usize>> {
    s.follow_reload()?;
    Ok(apply(s, mirror, delta, is_heartbeat)?.map(|a| a.placed))
}

/// `assemble` from a client: the view into the mirror, then assemble, repair, re-measure and
/// recover from overflow exactly like a driven turn. Returns the assembly and the `tail` the
/// client sent (the messages after the view it may be referred to by), for [`window`].
pub(super) fn assemble(
    s: &mut Session,
    mirror: &mut Mirror,
    view: View,
    request: ClientAssemble,
) -> Result<Synced<(Assembly, Vec<Message>)>> {
    s.follow_reload()?;
    s.require(Operation::AgentRun)?;
    let Taken { context_tail, tail } = match take_view(s, mirror, view)? {
        Ok(taken) => taken,
        Err(out) => return Ok(Err(out)),
    };
    let assembly = s.assemble_with_tail(context_tail, request)?;
    Ok(Ok((assembly, tail)))
}

/// `afterTurn` from a client: the view into the mirror, then the engine's `afterTurn` if it
/// defines one.
pub(super) fn after_turn(
    s: &mut Session,
    mirror: &mut Mirror,
    view: View,
    pre_prompt_message_count: usize,
    token_budget: Option<u64>,
    is_heartbeat: bool,
) -> Result<Synced<()>> {
    s.follow_reload()?;
    if let Err(out) = take_view(s, mirror, view)? {
        return Ok(Err(out));
    }
    s.client_after_turn(pre_prompt_message_count, token_budget, is_heartbeat)?;
    Ok(Ok(()))
}

/// Takes a view into the mirror.
fn take_view(s: &mut Session, mirror: &mut Mirror, view: View) -> Result<Synced<Taken>> {
    match view {
        View::Full(messages) => full_view(s, mirror, messages).map(|t| {
            Ok(Taken {
                context_tail: t,
                tail: Vec::new(),
            })
        }),
        View::Delta(delta, mut tail) => {
            let applied = apply(s, mirror, delta, false)?;
            tail.retain(|m| !is_own_entry(s, m));
            Ok(applied.map(|a| match a.echo {
                // An echo the client did not recognise: its tail is sent whole.
                Some(mut echoed) => {
                    echoed.extend(tail);
                    Taken {
                        context_tail: echoed,
                        tail: Vec::new(),
                    }
                }
                None => Taken {
                    context_tail: tail.clone(),
                    tail,
                },
            }))
        }
    }
}

/// Applies a delta; returns how many messages took new places, and the tail of an echo the
/// client did not recognise as one (its messages carried the session's own entries).
fn apply(
    s: &mut Session,
    mirror: &mut Mirror,
    delta: Delta,
    is_heartbeat: bool,
) -> Result<Synced<Applied>> {
    let Delta {
        base,
        base_hash,
        mut append,
        hashes,
    } = delta;
    let count = mirror.count();
    let agrees =
        base <= count && (base == 0 || (base_hash.is_some() && mirror.hash_at(base) == base_hash));
    if !agrees {
        tracing::info!(
            session = s.id(),
            base,
            count,
            "a client's view disagrees with what ctxhost holds; it is asked to send again"
        );
        return Ok(Err(OutOfSync {
            count,
            hash: mirror.end_hash(),
        }));
    }
    // The cost of the messages the delta carries (the session keeps its context's ids).
    let echoed = append.iter().rposition(|m| s.context_holds_id(&m.id));
    if let Some(last) = echoed {
        // The session's own messages came back as the client's: an echo of a window. Nothing
        // is mirrored; what follows it is this call's context only.
        tracing::info!(
            session = s.id(),
            "a delta carries the session's own messages: taken as an echo, nothing mirrored"
        );
        let tail: Vec<Message> = append
            .split_off(last + 1)
            .into_iter()
            .filter(|m| !is_own_entry(s, m))
            .collect();
        return Ok(Ok(Applied {
            placed: 0,
            echo: Some(tail),
        }));
    }
    // From the base on, what the client holds where ctxhost holds the same keeps its place.
    let same = append
        .iter()
        .zip(mirror.places.get(base..).unwrap_or_default())
        .take_while(|(m, p)| fingerprint(m) == p.fp)
        .count();
    for (p, h) in mirror.places[base..base + same].iter_mut().zip(&hashes) {
        p.hash = Some(*h);
    }
    let rest = append.split_off(same);
    let rest_hashes = hashes.get(same..).unwrap_or_default();
    if base + same < count {
        tracing::debug!(
            session = s.id(),
            from = base + same,
            count,
            "the client's view was cut or rewritten from here"
        );
    }
    mirror.cut(base + same);
    if rest.is_empty() {
        mirror.trim_detached();
        return Ok(Ok(Applied {
            placed: 0,
            echo: None,
        }));
    }
    let n = rest.len();
    let rebase = rest[0].role() == Role::CompactionSummary;
    let placed = mirror.place_new(s, rest, rebase)?;
    for p in Mirror::places_for(&placed.stored, Some(rest_hashes)) {
        mirror.push(p);
    }
    if rebase {
        // The client's summary now stands for everything before it, as on a reopen.
        s.adopt_summaries();
    }
    s.ingest_stored(&placed.to_ingest, is_heartbeat)?;
    Ok(Ok(Applied {
        placed: n,
        echo: None,
    }))
}

/// Whether the mirror ends with messages of these fingerprints.
fn ends_with(mirror: &Mirror, prints: &[u64]) -> bool {
    let places = &mirror.places;
    places.len() >= prints.len()
        && places[places.len() - prints.len()..]
            .iter()
            .zip(prints)
            .all(|(p, f)| p.fp == *f)
}

/// Whether `m` is one of the session's own context entries (by id; the session's index of
/// its context's ids, so the cost of one message, not of the context).
fn is_own_entry(s: &mut Session, m: &Message) -> bool {
    s.context_holds_id(&m.id)
}

/// Mirrors a full client view into the store; returns the messages that follow an echoed
/// window (empty for a plain view).
fn full_view(s: &mut Session, mirror: &mut Mirror, messages: Vec<Message>) -> Result<Vec<Message>> {
    if let Some(last) = messages.iter().rposition(|m| s.context_holds_id(&m.id)) {
        let tail: Vec<Message> = messages
            .into_iter()
            .skip(last + 1)
            .filter(|m| !is_own_entry(s, m))
            .collect();
        return Ok(tail);
    }
    let prints: Vec<u64> = messages.iter().map(fingerprint).collect();
    let seen = mirror.count();
    let agree = prints
        .iter()
        .zip(&mirror.places)
        .take_while(|(a, p)| **a == p.fp)
        .count();
    let differs = agree != seen.min(prints.len());
    if differs
        && messages
            .first()
            .is_some_and(|m| m.role() == Role::CompactionSummary)
    {
        // The client compacted its own transcript: adopt its view after what we hold.
        tracing::info!(
            session = s.id(),
            "the client's transcript was compacted; mirroring its new view"
        );
        let placed = mirror.place_new(s, messages, true)?;
        mirror.replace(Mirror::places_for(&placed.stored, None));
        // The client's summary now stands for everything before it, as on a reopen.
        s.adopt_summaries();
        s.ingest_stored(&placed.to_ingest, false)?;
        return Ok(Vec::new());
    }
    let held: Vec<u64> = mirror.places.iter().map(|p| p.fp).collect();
    if let Some(new) = differs.then(|| gaps(&held, &prints)).flatten() {
        // Everything mirrored is in the view, in order, with messages between that never
        // arrived (a call carrying them was given up while later ones got through): those
        // are new, stored once (after what is stored; the transcript only appends).
        tracing::info!(
            session = s.id(),
            new = new.iter().filter(|n| **n).count(),
            "the client's view holds messages the mirror lacks between mirrored ones"
        );
        let fresh: Vec<Message> = messages
            .into_iter()
            .zip(&new)
            .filter_map(|(m, n)| n.then_some(m))
            .collect();
        let placed = mirror.place_new(s, fresh, false)?;
        let mut old = std::mem::take(&mut mirror.places).into_iter();
        let mut added = Mirror::places_for(&placed.stored, None).into_iter();
        let places = new
            .iter()
            .filter_map(|n| if *n { added.next() } else { old.next() })
            .collect();
        mirror.replace(places);
        s.ingest_stored(&placed.to_ingest, false)?;
        return Ok(Vec::new());
    }
    // The view repeats, shortens or extends what was mirrored — or the client rewrote
    // history (pruning, an edit): either way keep the longest view seen, and append only
    // what lies beyond it.
    if differs {
        tracing::debug!(
            session = s.id(),
            agree,
            seen,
            "the client's view differs from the mirror; appending only what lies beyond it"
        );
    }
    if prints.len() > seen {
        let fresh: Vec<Message> = messages.into_iter().skip(seen).collect();
        let placed = mirror.place_new(s, fresh, false)?;
        for p in Mirror::places_for(&placed.stored, None) {
            mirror.push(p);
        }
        s.ingest_stored(&placed.to_ingest, false)?;
    }
    Ok(Vec::new())
}

/// Which messages of `view` are not in `mirror` when `mirror` is a subsequence of `view`
/// (matched in order, each to its earliest match); `None` when it is not.
fn gaps(mirror: &[u64], view: &[u64]) -> Option<Vec<bool>> {
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

/// An assembled window as a delta connection answers it: each message the engine kept as the
/// client holds it is a reference (its place in the client's view, or `count + i` for the
/// `i`th message the call's context had after the view), runs of consecutive places as
/// `[from, to)`; a message ctxhost made or changed (a summary, an engine-written message, a
/// trimmed one) or one the client's view no longer holds is sent whole.
pub(super) fn window(mirror: &Mirror, messages: &[Arc<Message>], tail: &[Message]) -> Vec<Value> {
    let count = mirror.count();
    let mut out: Vec<Value> = Vec::with_capacity(8);
    let mut run: Option<(usize, usize)> = None;
    let flush = |out: &mut Vec<Value>, run: &mut Option<(usize, usize)>| {
        if let Some((a, b)) = run.take() {
            out.push(if b == a + 1 { json!(a) } else { json!([a, b]) });
        }
    };
    // A window keeps the client's order: the place after the last one found is tried first
    // (the very message stored there), before the index.
    let mut next: Option<usize> = None;
    for m in messages {
        let guess = next.filter(|&p| {
            mirror
                .places
                .get(p)
                .and_then(|pl| pl.stored.as_ref())
                .is_some_and(|st| Arc::ptr_eq(st, m))
        });
        let place = guess.or_else(|| {
            mirror.place_of(m).filter(|&p| {
                mirror.places[p]
                    .stored
                    .as_ref()
                    .is_some_and(|st| Arc::ptr_eq(st, m) || **st == **m)
            })
        });
        next = place.map(|p| p + 1);
        let place = place.or_else(|| tail.iter().position(|t| *t == **m).map(|i| count + i));
        match place {
            Some(p) => match &mut run {
                Some((_, b)) if *b == p => *b += 1,
                _ => {
                    flush(&mut out, &mut run);
                    run = Some((p, p + 1));
                }
            },
            None => {
                flush(&mut out, &mut run);
                out.push(serde_json::to_value(&**m).unwrap_or(Value::Null));
            }
        }
    }
    flush(&mut out, &mut run);
    out
}
