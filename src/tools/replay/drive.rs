//! The one loop that feeds a recorded conversation through a session turn by turn, for
//! `replay`, `check`, `compare` and the tests: the recorded user messages drive turns (a
//! `/compact [instructions]` one runs the engine's compaction first), and the recorded
//! replies play the model, one model call per assistant message.
//!
//! It runs on a [`Session`] on this thread; a [`crate::runtime::SessionHandle`] drives a turn
//! with `handle.with(move |s| drive_turn(s, turn, ..))`.

use std::collections::VecDeque;
use std::convert::Infallible;

use crate::contract::message::{Message, Role};
use crate::error::{Error, Result};
use crate::session::{Assembly, Session, TurnInput, TurnStats};

/// One recorded turn, cut into what drives a session.
#[derive(Clone, Debug)]
pub struct RecordedTurn {
    /// The user message that starts it (`begin_turn`).
    pub user: Message,
    /// Each model step before the last: an assistant message with the tool results after it
    /// (one `continue_turn` each).
    pub steps: Vec<Vec<Message>>,
    /// The last model step (`end_turn`).
    pub last: Vec<Message>,
}

impl RecordedTurn {
    /// The turn of `user` and the `replies` recorded after it.
    pub fn new(user: Message, replies: Vec<Message>) -> Self {
        let mut steps = model_steps(replies);
        let last = steps.pop().unwrap_or_default();
        RecordedTurn { user, steps, last }
    }

    /// `Some` with the instructions (`None` when it gives none) when the user message is a
    /// `/compact [instructions]`.
    pub fn manual_compact(&self) -> Option<Option<String>> {
        let text = self.user.text();
        let rest = text.trim_start().strip_prefix("/compact")?.trim();
        Some((!rest.is_empty()).then(|| rest.to_owned()))
    }
}

/// How a driven turn went.
#[derive(Clone, Debug)]
pub struct DrivenTurn {
    /// Model calls made.
    pub calls: u32,
    /// Whether the user ran `/compact` before the turn.
    pub manual_compact: bool,
    /// Compactions that `/compact` made (0 or 1).
    pub manual_compactions: u32,
    /// What `end_turn` reported.
    pub stats: TurnStats,
}

/// Where a driven turn stopped.
#[derive(Debug)]
pub enum TurnFault<E> {
    /// The user's `/compact` failed.
    Compact(Error),
    /// The assembly for model call `call` failed (`begin_turn` or `continue_turn`).
    Call {
        /// 1-based model call within the turn.
        call: u32,
        /// The session's error.
        error: Error,
    },
    /// The caller's `on_call` rejected model call `call`.
    Rejected {
        /// 1-based model call within the turn.
        call: u32,
        /// Why.
        reason: E,
    },
    /// `end_turn` failed after `calls` model calls.
    End {
        /// Model calls made before it.
        calls: u32,
        /// The session's error.
        error: Error,
    },
}

impl TurnFault<Infallible> {
    /// The session's error (nothing rejects a call).
    pub fn into_error(self) -> Error {
        match self {
            TurnFault::Compact(error)
            | TurnFault::Call { error, .. }
            | TurnFault::End { error, .. } => error,
            TurnFault::Rejected { reason, .. } => match reason {},
        }
    }
}

/// Drives one recorded turn: `/compact` when the user asked for it, `begin_turn`, one
/// `continue_turn` per model step but the last, `end_turn` with the last. `on_call` sees each
/// model call (1-based) with the session as it was at that call, and may stop the turn.
pub fn drive_turn<E>(
    session: &mut Session,
    turn: RecordedTurn,
    mut on_call: impl FnMut(&Session, u32, &Assembly) -> std::result::Result<(), E>,
) -> std::result::Result<DrivenTurn, TurnFault<E>> {
    let manual = turn.manual_compact();
    let manual_compact = manual.is_some();
    let mut manual_compactions = 0;
    if let Some(instructions) = manual {
        let r = session
            .compact_now(instructions)
            .map_err(TurnFault::Compact)?;
        manual_compactions = u32::from(r.compacted);
    }
    let mut outcome = session.begin_turn(TurnInput {
        user: turn.user,
        is_heartbeat: false,
    });
    let mut steps = turn.steps.into_iter();
    let mut call = 1;
    loop {
        let a = outcome.map_err(|error| TurnFault::Call { call, error })?;
        on_call(session, call, &a).map_err(|reason| TurnFault::Rejected { call, reason })?;
        let Some(step) = steps.next() else { break };
        call += 1;
        outcome = session.continue_turn(step);
    }
    let stats = session
        .end_turn(turn.last)
        .map_err(|error| TurnFault::End { calls: call, error })?;
    Ok(DrivenTurn {
        calls: call,
        manual_compact,
        manual_compactions,
        stats,
    })
}

/// Replays a conversation into a [`Session`] on this thread (no host, no tasks): the
/// preamble is recorded, then each turn is driven by [`drive_turn`]. `on_call` sees every
/// model call's assembly with the session as it was at that call.
pub fn drive(
    session: &mut Session,
    messages: Vec<Message>,
    mut on_call: impl FnMut(&Session, &Assembly),
) -> Result<()> {
    let (preamble, turns) = recorded_turns(messages);
    session.record(preamble)?;
    for turn in turns {
        drive_turn(session, turn, |s, _, a| {
            on_call(s, a);
            Ok(())
        })
        .map_err(TurnFault::into_error)?;
    }
    Ok(())
}

/// Splits a turn's recorded replies into model steps: each assistant message with the tool
/// results (and other messages) that follow it, up to the next assistant message.
pub fn model_steps(replies: Vec<Message>) -> Vec<Vec<Message>> {
    let mut steps: Vec<Vec<Message>> = Vec::new();
    for m in replies {
        match steps.last_mut() {
            Some(step) if m.role() != Role::Assistant => step.push(m),
            _ => steps.push(vec![m]),
        }
    }
    steps
}

/// Splits a conversation into the messages before the first user message and its turns (a
/// user message and everything up to the next one).
pub fn split_turns(messages: Vec<Message>) -> (Vec<Message>, Vec<RecordedTurn>) {
    let (preamble, turns) = recorded_turns(messages);
    (preamble, turns.collect())
}

/// [`split_turns`] with the turns cut one at a time, as they are taken: a replay of a long
/// conversation holds its messages once (the recorded ones not yet driven, and the session's),
/// not a second list of every turn beside them.
pub fn recorded_turns(messages: Vec<Message>) -> (Vec<Message>, RecordedTurns) {
    let mut pending = VecDeque::from(messages);
    let first_user = pending
        .iter()
        .position(|m| m.role() == Role::User)
        .unwrap_or(pending.len());
    let preamble = pending.drain(..first_user).collect();
    (preamble, RecordedTurns { pending })
}

/// The turns of a conversation not yet taken (see [`recorded_turns`]).
#[derive(Debug)]
pub struct RecordedTurns {
    /// The messages of those turns, each turn starting with its user message.
    pending: VecDeque<Message>,
}

impl Iterator for RecordedTurns {
    type Item = RecordedTurn;

    fn next(&mut self) -> Option<RecordedTurn> {
        let user = self.pending.pop_front()?;
        let end = self
            .pending
            .iter()
            .position(|m| m.role() == Role::User)
            .unwrap_or(self.pending.len());
        let replies = self.pending.drain(..end).collect();
        // The room of the messages taken is given back as it halves (copying each pending
        // message about once more in all), so it does not stay with the session to the end.
        if self.pending.len() < self.pending.capacity() / 2 {
            self.pending.shrink_to_fit();
        }
        Some(RecordedTurn::new(user, replies))
    }
}

#[cfg(test)]
#[path = "drive_tests.rs"]
mod tests;
