//! Replaying a recorded conversation turn by turn through a context engine: the recorded user
//! messages drive turns, the recorded assistant and tool messages play the model, and each turn
//! reports what the model would have seen.
//!
//! A file with several conversations (τ-bench) replays them as concurrent sessions of one host;
//! reports still come out in session order. Sessions are kept in transcript files (`replay`)
//! or in a session backend, SQLite or Postgres (`replay_in`): the reports do not depend on it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tokio::sync::mpsc;

use crate::error::{EngineError, Error, Result};
use crate::runtime::Host;
use crate::session::{CallTimes, MethodTimes};
use crate::store::Backend;
use crate::transcript::{Import, ImportedSession};

mod drive;
mod guarantees;
mod session;
mod view;

pub use drive::{
    DrivenTurn, RecordedTurn, RecordedTurns, TurnFault, drive, drive_turn, model_steps,
    recorded_turns, split_turns,
};
pub use guarantees::{CallGuarantees, GuaranteeCounts};
pub use session::{SessionTimes, replay_session, replay_session_in};
pub use view::{ContextMessage, ContextTracker, ContextView, GoneMessage, Origin, first_line};

/// One turn as the model would have seen it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnReport {
    /// The conversation's name (one file may hold several).
    pub session: String,
    /// 1-based turn number within the session.
    pub turn: u64,
    /// The engine that assembled the context.
    pub engine: String,
    /// Whether `legacy` answered in place of the configured engine this turn.
    pub fallback: bool,
    /// Whether the configured engine is quarantined after this turn.
    pub quarantined: bool,
    /// Messages in the session's transcript after the turn (summaries included).
    pub session_messages: usize,
    /// Messages in the session's context at the turn's largest assembly.
    pub context_messages: usize,
    /// Model calls in the turn (one per recorded assistant message; tool loops re-assemble).
    pub model_calls: u32,
    /// Messages the model saw at the turn's largest assembly.
    pub assembled_messages: usize,
    /// Tokens of the turn's largest assembly (messages plus `systemPromptAddition`), measured
    /// by the host.
    pub assembled_tokens: u64,
    /// The budget the engine was given.
    pub token_budget: u64,
    /// What the engine said `assembledTokens` would be.
    pub estimated_tokens: f64,
    /// Compactions this turn.
    pub compactions: u32,
    /// Pairing repairs this turn.
    pub pairing_repairs: usize,
    /// Whether the user ran `/compact` this turn.
    pub manual_compact: bool,
    /// Time the engine's lifecycle calls took this turn, in ms.
    pub engine_ms: f64,
    /// Whether that exceeded `host.turnBudget.engineMs`.
    pub slow: bool,
    /// Each model call of the turn (an agentic turn has dozens: one per recorded assistant
    /// message, each seeing a fresh assembly).
    pub calls: Vec<CallReport>,
    /// The turn's model calls that broke a guarantee or needed the host to repair one (empty
    /// when every call carried what a model needs as the engine assembled it).
    pub guarantees: Vec<CallGuarantees>,
}

/// One model call: what `assemble` gave the model at that point of the turn.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallReport {
    /// 1-based model call number within the turn.
    pub call: u32,
    /// The engine that assembled the context.
    pub engine: String,
    /// Whether `legacy` answered in place of the configured engine.
    pub fallback: bool,
    /// Messages in the session's context at this call.
    pub context_messages: usize,
    /// Messages the model saw.
    pub assembled_messages: usize,
    /// Tokens of the assembly (messages plus `systemPromptAddition`), measured by the host.
    pub assembled_tokens: u64,
    /// The budget the engine was given.
    pub token_budget: u64,
    /// What the engine said `assembledTokens` would be.
    pub estimated_tokens: f64,
    /// Compactions of the turn that happened before this call's assembly (since the call
    /// before).
    pub compactions: u32,
    /// Pairing repairs of this assembly.
    pub pairing_repairs: usize,
    /// The context itself, message by message, when [`ReplayOptions::contexts`] asked for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextView>,
    /// What the `pipeline` engine's hooks did in this call (contributions by source and
    /// placement, blocks dropped for the budget, what each `prune` hook removed or changed,
    /// which hook summarized what, quarantined hooks), recorded with the context.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<serde_json::Value>,
}

/// The first failure of a quarantined engine, for the summary.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QuarantineReport {
    /// The engine id.
    pub engine: String,
    /// The lifecycle method or load step that failed.
    pub operation: String,
    /// The full error, with file:line when known.
    pub error: String,
}

impl From<EngineError> for QuarantineReport {
    fn from(e: EngineError) -> Self {
        QuarantineReport {
            engine: e.engine.clone(),
            operation: e.op.to_string(),
            error: e.to_string(),
        }
    }
}

/// The replay as a whole.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplaySummary {
    /// The replayed file.
    pub transcript: PathBuf,
    /// Its detected format.
    pub format: String,
    /// Conversations replayed.
    pub sessions: usize,
    /// Turns replayed.
    pub turns: u64,
    /// Compactions across all turns.
    pub compactions: u64,
    /// Turns answered (at least partly) by `legacy` in place of the configured engine.
    pub fallbacks: u64,
    /// The largest assembled context, in tokens.
    pub max_assembled_tokens: u64,
    /// Turns whose assembled context exceeded its budget (always 0 unless something is wrong).
    pub over_budget_turns: u64,
    /// `null`, or the configured engine's first failure.
    pub quarantine: Option<QuarantineReport>,
    /// Lines of the source that could not be read (skipped).
    pub skipped_lines: usize,
    /// Where the replayed sessions' transcripts were written.
    pub session_files: Vec<PathBuf>,
    /// Wall-clock time of the replay in milliseconds.
    pub wall_ms: u64,
    /// Turns whose engine time exceeded `host.turnBudget.engineMs`.
    pub slow_turns: u64,
    /// Where the engine's time went, per lifecycle method, over all sessions.
    pub engine_times: Vec<MethodTimes>,
    /// Where scripts spent time inside `host.*` functions (`host.summarize`, `host.tokens`,
    /// ...), per function, over all sessions; part of the engine's time above.
    pub host_times: Vec<MethodTimes>,
    /// Model calls that broke a guarantee, by kind, and calls the host repaired.
    pub guarantees: GuaranteeCounts,
}

/// How to replay.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Directory for the replayed sessions' transcript files (created if missing).
    pub out_dir: PathBuf,
    /// How many conversations run at once.
    pub concurrency: usize,
    /// Whether each model call's report carries its context message by message
    /// ([`CallReport::context`]); costs memory and time proportional to the contexts.
    pub contexts: bool,
}

/// Replays every conversation of an import; `on_turn` sees each turn in session order.
pub async fn replay(
    host: Arc<Host>,
    source: &Path,
    import: Import,
    opts: &ReplayOptions,
    on_turn: impl FnMut(&TurnReport),
) -> Result<ReplaySummary> {
    std::fs::create_dir_all(&opts.out_dir)
        .map_err(|e| Error::io("create replay directory", &opts.out_dir, e))?;
    replay_kept(host, None, source, import, opts, on_turn).await
}

/// [`replay`] with the sessions kept in `backend` (named as `replay` names their files;
/// `opts.out_dir` is not used, and `session_files` stays empty). A session the backend already
/// holds messages of is an error: a replay starts every conversation afresh.
pub async fn replay_in(
    host: Arc<Host>,
    backend: Arc<dyn Backend>,
    source: &Path,
    import: Import,
    opts: &ReplayOptions,
    on_turn: impl FnMut(&TurnReport),
) -> Result<ReplaySummary> {
    replay_kept(host, Some(backend), source, import, opts, on_turn).await
}

async fn replay_kept(
    host: Arc<Host>,
    backend: Option<Arc<dyn Backend>>,
    source: &Path,
    import: Import,
    opts: &ReplayOptions,
    mut on_turn: impl FnMut(&TurnReport),
) -> Result<ReplaySummary> {
    let started = Instant::now();
    let names = unique_names(&import.sessions);
    let mut summary = ReplaySummary {
        transcript: source.to_path_buf(),
        format: import.format.name().to_owned(),
        sessions: import.sessions.len(),
        turns: 0,
        compactions: 0,
        fallbacks: 0,
        max_assembled_tokens: 0,
        over_budget_turns: 0,
        quarantine: None,
        skipped_lines: import.problems.len(),
        session_files: Vec::new(),
        wall_ms: 0,
        slow_turns: 0,
        engine_times: Vec::new(),
        host_times: Vec::new(),
        guarantees: GuaranteeCounts::default(),
    };

    // Each conversation runs as a task; reports flow back tagged with the session's index and
    // are released in order.
    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, Option<TurnReport>)>();
    let permits = Arc::new(tokio::sync::Semaphore::new(opts.concurrency.max(1)));
    let mut tasks = Vec::new();
    for (index, (session, name)) in import.sessions.into_iter().zip(names).enumerate() {
        let file = opts.out_dir.join(format!("{name}.jsonl"));
        if backend.is_none() {
            summary.session_files.push(file.clone());
        }
        let (host, tx, permits) = (Arc::clone(&host), tx.clone(), Arc::clone(&permits));
        let (contexts, backend) = (opts.contexts, backend.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = permits.acquire_owned().await;
            let on_turn = |report| {
                let _ = tx.send((index, Some(report)));
            };
            let r = match backend {
                None => replay_session(&host, name, file, session, contexts, on_turn).await,
                Some(b) => replay_session_in(&host, b, name, session, contexts, on_turn).await,
            };
            let _ = tx.send((index, None));
            r
        }));
    }
    drop(tx);

    let mut pending: BTreeMap<usize, Vec<TurnReport>> = BTreeMap::new();
    let mut done = vec![false; tasks.len()];
    let mut next = 0;
    while let Some((index, report)) = rx.recv().await {
        match report {
            Some(r) => pending.entry(index).or_default().push(r),
            None => done[index] = true,
        }
        // Release everything of the lowest unfinished session, and all finished before it.
        while next < done.len() {
            for r in pending.remove(&next).unwrap_or_default() {
                account(&mut summary, &r);
                on_turn(&r);
            }
            if !done[next] {
                break;
            }
            next += 1;
        }
    }
    let (mut times, mut host_times) = (CallTimes::default(), CallTimes::default());
    for task in tasks {
        let session_times = task.await.map_err(|e| Error::Task {
            task: "replay",
            message: e.to_string(),
        })??;
        times.merge(&session_times.engine);
        host_times.merge(&session_times.host);
    }
    summary.engine_times = times.summary();
    summary.host_times = host_times.summary();
    summary.quarantine = host.engine_failure().map(QuarantineReport::from);
    summary.wall_ms = started.elapsed().as_millis() as u64;
    Ok(summary)
}

fn account(summary: &mut ReplaySummary, r: &TurnReport) {
    summary.turns += 1;
    summary.compactions += u64::from(r.compactions);
    summary.fallbacks += u64::from(r.fallback);
    summary.max_assembled_tokens = summary.max_assembled_tokens.max(r.assembled_tokens);
    summary.over_budget_turns += u64::from(r.assembled_tokens > r.token_budget);
    summary.slow_turns += u64::from(r.slow);
    for c in &r.guarantees {
        summary.guarantees.add(c);
    }
}

/// File-name-safe, unique names for a file's conversations.
fn unique_names(sessions: &[ImportedSession]) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    sessions
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let base: String = s
                .name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let base = if base.is_empty() {
                format!("session-{}", i + 1)
            } else {
                base
            };
            let mut name = base.clone();
            let mut n = 2;
            while !seen.insert(name.clone()) {
                name = format!("{base}-{n}");
                n += 1;
            }
            name
        })
        .collect()
}
