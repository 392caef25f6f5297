//! One conversation replayed: its session opened (a new transcript file, or an empty session of
//! a backend), each recorded turn driven through it and reported, the session closed.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use super::{CallGuarantees, CallReport, ContextTracker, TurnReport, drive_turn, recorded_turns};
use super::{RecordedTurn, TurnFault};
use crate::error::{Error, Result};
use crate::runtime::{Host, SessionHandle, SessionSpec};
use crate::services::tokens::TokenCache;
use crate::session::{Assembly, CallTimes, Session};
use crate::store::Backend;
use crate::transcript::ImportedSession;

/// Where one session's engine spent its time.
#[derive(Clone, Debug, Default)]
pub struct SessionTimes {
    /// Per lifecycle method.
    pub engine: CallTimes,
    /// Per `host.*` function scripts called.
    pub host: CallTimes,
}

/// Replays one conversation into a new session file (each model call's context described when
/// `contexts`); returns where its engine's time went.
pub async fn replay_session(
    host: &Host,
    name: String,
    file: PathBuf,
    source: ImportedSession,
    contexts: bool,
    on_turn: impl FnMut(TurnReport),
) -> Result<SessionTimes> {
    if file.exists() {
        std::fs::remove_file(&file)
            .map_err(|e| Error::io("replace replay transcript", &file, e))?;
        let _ = std::fs::remove_file(crate::session::state_path(&file));
    }
    let mut spec = SessionSpec::new(name.clone(), file);
    spec.system_prompt = source.system_prompt.clone();
    let session = host.create_session(spec).await?;
    replay_opened(host, name, session, source, contexts, on_turn).await
}

/// [`replay_session`] into the session `name` of `backend`, which must hold no messages of it.
pub async fn replay_session_in(
    host: &Host,
    backend: Arc<dyn Backend>,
    name: String,
    source: ImportedSession,
    contexts: bool,
    on_turn: impl FnMut(TurnReport),
) -> Result<SessionTimes> {
    let kind = backend.kind();
    let mut spec = SessionSpec::new(name.clone(), "");
    spec.system_prompt = source.system_prompt.clone();
    let session = host.open_in(backend, spec).await?;
    let held = session.with(|s| s.transcript_len()).await?;
    if held > 0 {
        return Err(Error::Store {
            backend: kind,
            op: "replay into",
            session: Some(name),
            message: format!(
                "it already holds {held} messages; a replay starts afresh (use an empty store)"
            ),
        });
    }
    replay_opened(host, name, session, source, contexts, on_turn).await
}

/// Replays `source` into the opened, empty `session`, then closes it.
async fn replay_opened(
    host: &Host,
    name: String,
    session: SessionHandle,
    source: ImportedSession,
    contexts: bool,
    mut on_turn: impl FnMut(TurnReport),
) -> Result<SessionTimes> {
    let (preamble, turns) = recorded_turns(source.messages);
    session.record(preamble).await?;
    let mut tracker = if contexts {
        let counter = crate::services::tokens::counter(host.config().host.tokenizer)?;
        Some(ContextTracker::new(TokenCache::new(counter)))
    } else {
        None
    };
    for (n, recorded) in turns.enumerate() {
        let turn = Turn {
            name: name.clone(),
            number: n as u64 + 1,
        };
        let (report, kept) = replay_turn(host, &session, turn, recorded, tracker).await?;
        tracker = kept;
        on_turn(report);
    }
    let times = session
        .with(|s| SessionTimes {
            engine: s.call_times(),
            host: s.host_times(),
        })
        .await?;
    session.close().await?;
    Ok(times)
}

/// Which turn of which session.
#[derive(Clone)]
struct Turn {
    name: String,
    number: u64,
}

/// One model call's report and how it fared against the guarantees (as the session judged
/// it), with the session as it was at that call (and the call's context described when
/// `tracker` is given).
fn call_report(
    s: &Session,
    turn: &Turn,
    call: u32,
    a: &Assembly,
    compactions_before: &mut u32,
    tracker: &mut Option<ContextTracker>,
) -> (CallReport, CallGuarantees) {
    let judged = CallGuarantees {
        call,
        violations: a.violations.clone(),
        put_back: a.put_back.clone(),
    };
    judged.log(&turn.name, turn.number);
    let compactions = s.stats().compactions;
    let report = CallReport {
        call,
        engine: a.engine.clone(),
        fallback: a.fallback,
        context_messages: s.context().len(),
        assembled_messages: a.messages.len(),
        assembled_tokens: a.assembled_tokens,
        token_budget: a.token_budget,
        estimated_tokens: a.estimated_tokens,
        compactions: compactions.saturating_sub(*compactions_before),
        pairing_repairs: a.pairing_repairs,
        context: tracker.as_mut().map(|t| t.observe(s.context(), a)),
        pipeline: tracker
            .as_ref()
            .and_then(|_| a.projection.as_ref()?.get("pipeline").cloned()),
    };
    *compactions_before = compactions;
    (report, judged)
}

/// Drives one recorded turn on the session (the whole turn in one call on the blocking pool)
/// and reports it; hands the context tracker back.
async fn replay_turn(
    host: &Host,
    session: &SessionHandle,
    turn: Turn,
    recorded: RecordedTurn,
    mut tracker: Option<ContextTracker>,
) -> Result<(TurnReport, Option<ContextTracker>)> {
    let (driven, calls, guarantees, tracker, session_messages, turn) = session
        .with(move |s| {
            let (mut calls, mut guarantees) = (Vec::new(), Vec::new());
            let mut seen_compactions = 0;
            let driven = drive_turn(s, recorded, |s, n, a| {
                let (report, judged) =
                    call_report(s, &turn, n, a, &mut seen_compactions, &mut tracker);
                calls.push(report);
                guarantees.extend(judged.notable().then_some(judged));
                Ok::<(), Infallible>(())
            });
            let len = s.transcript_len();
            (driven, calls, guarantees, tracker, len, turn)
        })
        .await?;
    let driven = driven.map_err(TurnFault::into_error)?;
    // The turn's largest assembly (the later of equals).
    let mut largest_at = 0;
    for (i, c) in calls.iter().enumerate() {
        if c.assembled_tokens >= calls[largest_at].assembled_tokens {
            largest_at = i;
        }
    }
    let largest = &calls[largest_at];
    let stats = &driven.stats;
    let report = TurnReport {
        session: turn.name,
        turn: turn.number,
        engine: largest.engine.clone(),
        fallback: calls.iter().any(|c| c.fallback) || stats.fallback,
        quarantined: host.engine_failure().is_some(),
        session_messages,
        context_messages: largest.context_messages,
        model_calls: calls.len() as u32,
        assembled_messages: largest.assembled_messages,
        assembled_tokens: largest.assembled_tokens,
        token_budget: largest.token_budget,
        estimated_tokens: largest.estimated_tokens,
        compactions: stats.compactions + driven.manual_compactions,
        pairing_repairs: calls.iter().map(|c| c.pairing_repairs).sum(),
        manual_compact: driven.manual_compact,
        engine_ms: stats.engine_ms,
        slow: stats.slow,
        calls,
        guarantees,
    };
    Ok((report, tracker))
}
