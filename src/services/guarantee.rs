//! What every model call carries, whatever engine assembled it: the current user request, the
//! newest compaction summary when one exists, and some history when the session had any.
//!
//! An engine decides what the model sees, but a model cannot continue a conversation whose
//! request it never saw, or whose summary was dropped to make room for older messages. The
//! session checks every assembly after pairing repair ([`enforce`]): a missing request or
//! summary is put back and the context re-fitted to the budget (history is cut first, but
//! never to nothing, see `fit::fit_to_budget`), and a call left with no history at all gets
//! the newest earlier messages that fit in the room it leaves, so a script cannot break these
//! guarantees. What a call still lacks after that is judged there too and reported on the
//! assembly (`Assembly::violations`); [`violations`] is the same check, for tests and benchmarks.

use std::collections::HashSet;
use std::sync::Arc;

use serde::Serialize;

use crate::contract::message::{Message, Role};
use crate::services::fit::fit_to_budget;
use crate::services::tokens::TokenCache;

/// One way a model call falls short of what a model needs to continue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Violation {
    /// The current user request (the session's newest user message) is not in the call.
    MissingRequest,
    /// The session holds a compaction summary, and the call carries neither it nor a
    /// `systemPromptAddition` (where engines that render their own summaries put them).
    MissingSummary,
    /// The session had history before the current request, and the call carries none of it:
    /// no earlier message, no summary, no `systemPromptAddition`.
    NoHistory,
}

impl Violation {
    /// A short phrase for reports.
    pub fn describe(self) -> &'static str {
        match self {
            Violation::MissingRequest => "the current user request is missing",
            Violation::MissingSummary => "the newest summary is missing",
            Violation::NoHistory => "neither summary nor earlier messages",
        }
    }
}

/// The newest compaction summary of `context`.
pub fn newest_summary(context: &[Arc<Message>]) -> Option<&Arc<Message>> {
    newest_summary_at(context).map(|i| &context[i])
}

/// Where [`newest_summary`] is in `context`: the place a session keeps and a transcript's
/// context is derived from.
pub fn newest_summary_at(context: &[Arc<Message>]) -> Option<usize> {
    context
        .iter()
        .rposition(|m| m.role() == Role::CompactionSummary)
}

/// How the call `sent` (with `addition` for the system prompt) falls short, judged against the
/// session `context` it was assembled from and the turn's `request` (the user message that
/// started it; a compaction inside a long tool loop may have summarized it out of `context`).
/// Empty when it carries what a model needs.
pub fn violations(
    context: &[Arc<Message>],
    request: Option<&Arc<Message>>,
    sent: &[Arc<Message>],
    addition: Option<&str>,
) -> Vec<Violation> {
    let call = Call {
        context,
        summary: newest_summary(context),
        request,
        addition,
    };
    check(&call, sent)
}

/// What a model call is judged against, which the check and its repairs all read: the context
/// it was assembled from, that context's newest summary (the session keeps it, so a check does
/// not walk the whole history on every model call), the turn's request and the engine's
/// `systemPromptAddition`.
#[derive(Clone, Copy)]
struct Call<'a> {
    context: &'a [Arc<Message>],
    summary: Option<&'a Arc<Message>>,
    request: Option<&'a Arc<Message>>,
    addition: Option<&'a str>,
}

/// How `sent` falls short of what `call` needs ([`violations`]).
fn check(call: &Call<'_>, sent: &[Arc<Message>]) -> Vec<Violation> {
    let Call {
        context,
        summary,
        request,
        addition,
    } = *call;
    let mut out = Vec::new();
    // At most two look-ups: a walk of the call, no set built per call.
    let sends = |id: &str| sent.iter().any(|m| m.id == id);
    let has_addition = addition.is_some_and(|a| !a.trim().is_empty());
    if let Some(r) = request
        && !sends(&r.id)
    {
        out.push(Violation::MissingRequest);
    }
    if let Some(s) = summary
        && !sends(&s.id)
        && !has_addition
    {
        out.push(Violation::MissingSummary);
    }
    // History: what came before the request. The request and what follows it are the turn;
    // a summary, an addition or an engine's own message (an id the session does not hold)
    // carries history.
    // From the end: the request is near it (ids are unique, so it is the same place).
    let at = request.and_then(|r| context.iter().rposition(|m| m.id == r.id));
    let earlier = &context[..at.unwrap_or(context.len())];
    let turn: HashSet<&str> = context[earlier.len()..]
        .iter()
        .map(|m| m.id.as_str())
        .chain(request.map(|r| r.id.as_str()))
        .collect();
    if !earlier.is_empty() && !has_addition {
        let carried = sent.iter().any(|m| {
            matches!(m.role(), Role::CompactionSummary | Role::BranchSummary)
                || !turn.contains(m.id.as_str())
        });
        if !carried {
            out.push(Violation::NoHistory);
        }
    }
    out
}

/// An assembly after [`enforce`]: what the model is sent, what the host put back, and what the
/// call still lacks as sent, judged once here so reports need not judge it again.
#[derive(Clone, Debug)]
pub struct Enforced {
    /// The messages the model is sent.
    pub messages: Vec<Arc<Message>>,
    /// What the engine's assembly lacked and the host put back.
    pub put_back: Vec<Violation>,
    /// What the call still lacks as sent (expected: never a request or a summary; history
    /// only when the turn leaves no room for any).
    pub lacking: Vec<Violation>,
}

/// `sent` with a missing request or summary put back (the summary first, the request after
/// the history it follows and before the rest of its turn), re-fitted to `budget` (less the
/// addition's tokens) when that made it too large; then, if the call carries no history
/// while the session had some, the newest earlier messages that fit in the room left under
/// the budget (nothing the engine chose is cut for them). Returns the messages, the
/// violations that were repaired and those left; an assembly that needs nothing is returned
/// unchanged. `summary` is `context`'s newest compaction summary ([`newest_summary`]; the
/// session keeps it rather than look for it on every call).
pub fn enforce(
    context: &[Arc<Message>],
    summary: Option<&Arc<Message>>,
    request: Option<&Arc<Message>>,
    sent: Vec<Arc<Message>>,
    addition: Option<&str>,
    budget: u64,
    tokens: &TokenCache,
) -> Enforced {
    let call = Call {
        context,
        summary,
        request,
        addition,
    };
    let found = check(&call, &sent);
    if found.is_empty() {
        return Enforced {
            messages: sent,
            put_back: Vec::new(),
            lacking: Vec::new(),
        };
    }
    let (messages, put_back) = repair(&call, sent, &found, budget, tokens);
    let lacking = check(&call, &messages);
    Enforced {
        messages,
        put_back,
        lacking,
    }
}

/// [`enforce`]'s repair of `sent`, which lacks what `found` lists.
fn repair(
    call: &Call<'_>,
    sent: Vec<Arc<Message>>,
    found: &[Violation],
    budget: u64,
    tokens: &TokenCache,
) -> (Vec<Arc<Message>>, Vec<Violation>) {
    let Call {
        context,
        summary,
        request,
        addition,
    } = *call;
    let mut repaired: Vec<Violation> = found
        .iter()
        .copied()
        .filter(|v| *v != Violation::NoHistory)
        .collect();
    if repaired.is_empty() {
        if found.contains(&Violation::NoHistory) {
            return add_history(call, sent, budget, tokens);
        }
        return (sent, repaired);
    }
    let before_tokens = tokens.messages(&sent);
    let mut out = sent;
    if repaired.contains(&Violation::MissingRequest)
        && let Some(r) = request
    {
        // Before the first kept message that follows it in the session, else last.
        let later: HashSet<&str> = match context.iter().position(|m| m.id == r.id) {
            Some(at) => context[at + 1..].iter().map(|m| m.id.as_str()).collect(),
            None => context
                .iter()
                .filter(|m| m.role() != Role::CompactionSummary)
                .map(|m| m.id.as_str())
                .collect(),
        };
        let at = out
            .iter()
            .position(|m| later.contains(m.id.as_str()))
            .unwrap_or(out.len());
        out.insert(at, Arc::clone(r));
    }
    if repaired.contains(&Violation::MissingSummary)
        && let Some(s) = summary
    {
        out.insert(0, Arc::clone(s));
    }
    let addition_tokens = addition.map_or(0, |a| tokens.text(a));
    let room = budget.saturating_sub(addition_tokens);
    let now = tokens.messages(&out);
    if now > room && now > before_tokens {
        out = fit_to_budget(&out, room.max(1), tokens).0;
    }
    let out = crate::services::pairing::repair(out).messages;
    if check(call, &out).contains(&Violation::NoHistory) {
        let (out, history) = add_history(call, out, budget, tokens);
        repaired.extend(history);
        return (out, repaired);
    }
    (out, repaired)
}

/// `sent` with the newest history put in front of the request: whole groups newest first that
/// fit in the room it leaves under `budget` (tool results cut to an eighth of the budget, an
/// aborted call without results passed over), else the newest group cut evenly to the room
/// (when at least 32 tokens are left). When that finds nothing (the turn fills the budget, or
/// the newest groups are tool calls whose arguments cannot be cut), the newest earlier piece
/// that fits an eighth of the budget (`fit::newest_history`: a group, or the newest earlier
/// user message cut to head and tail) is sent, and the assembly is refitted around it with
/// `fit_to_budget` (the request kept, the turn cut from its oldest results inward). Returns
/// `[NoHistory]` when history was added; the assembly unchanged when none could be.
fn add_history(
    call: &Call<'_>,
    sent: Vec<Arc<Message>>,
    budget: u64,
    tokens: &TokenCache,
) -> (Vec<Arc<Message>>, Vec<Violation>) {
    let Call {
        context,
        request,
        addition,
        ..
    } = *call;
    let limit = budget.saturating_sub(addition.map_or(0, |a| tokens.text(a)));
    let mut room = limit.saturating_sub(tokens.messages(&sent));
    // From the end: the request is near it (ids are unique, so it is the same place).
    let at = request.and_then(|r| context.iter().rposition(|m| m.id == r.id));
    let earlier = &context[..at.unwrap_or(context.len())];
    let cap = (budget / 8).max(64);
    let mut picked_rev: Vec<Vec<Arc<Message>>> = Vec::new();
    // Newest first; a group that cannot fit even cut (tool-call arguments larger than the
    // room) is passed over while nothing is taken yet, a few dozen groups at most.
    for range in crate::services::fit::groups(earlier)
        .into_iter()
        .rev()
        .take(64)
    {
        let group = crate::services::pairing::repair(crate::services::fit::trim_group(
            &earlier[range],
            cap,
            tokens,
        ))
        .messages;
        if group.is_empty() {
            continue;
        }
        let size = tokens.messages(&group);
        if size <= room {
            room -= size;
            picked_rev.push(group);
            continue;
        }
        if !picked_rev.is_empty() || room < 32 {
            break;
        }
        let cut = crate::services::fit::cut_evenly(&group, room, tokens);
        let size = tokens.messages(&cut);
        if !cut.is_empty() && size <= room {
            picked_rev.push(cut);
            break;
        }
    }
    let mut out = sent;
    if picked_rev.is_empty() {
        // The turn leaves no room: make some (history is cut before the summary is, but a
        // turn is cut before the conversation it continues disappears altogether).
        let target = (budget / 8).max(32).min(limit / 2);
        let piece = crate::services::fit::newest_history(earlier, target, cap, tokens);
        if piece.is_empty() {
            return (out, Vec::new());
        }
        let size = tokens.messages(&piece);
        let refit =
            crate::services::pairing::repair(fit_to_budget(&out, limit - size, tokens).0).messages;
        let kept_request = request.is_none_or(|r| refit.iter().any(|m| m.id == r.id));
        if tokens.messages(&refit) + size > limit || !kept_request {
            return (out, Vec::new());
        }
        out = refit;
        picked_rev.push(piece);
    }
    let history: Vec<Arc<Message>> = picked_rev.into_iter().rev().flatten().collect();
    let at = request
        .and_then(|r| out.iter().position(|m| m.id == r.id))
        .unwrap_or(0);
    out.splice(at..at, history);
    (
        crate::services::pairing::repair(out).messages,
        vec![Violation::NoHistory],
    )
}
