//! Replaying a recorded conversation turn by turn through a context engine: the recorded user
//! messages drive turns, the recorded assistant and tool messages play the model, and each turn
//! reports what the model would have seen.
//!
//! A file with several conversations (τ-bench) replays them as concurrent sessions of one host;
//! reports still come out in session order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tokio::sync::mpsc;

use crate::error::{EngineError, Error, Result};
use crate::guarantee::{Violation, violations};
use crate::message::{Message, Role};
use crate::runtime::{Host, SessionHandle, SessionSpec};
use crate::session::{Assembly, CallTimes, MethodTimes, Session, TurnInput};
use crate::transcript::{Import, ImportedSession};

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
    /// The turn's model calls that broke a guarantee or needed the host to repair one (empty
    /// when every call carried what a model needs as the engine assembled it).
    pub guarantees: Vec<CallGuarantees>,
}

/// How one model call fared against what every call must carry ([`crate::guarantee`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallGuarantees {
    /// 1-based model call within the turn.
    pub call: u32,
    /// What the call still lacked as sent to the model (expected: never).
    pub violations: Vec<Violation>,
    /// What the engine's assembly lacked and the host put back.
    pub put_back: Vec<Violation>,
}

/// Model calls that broke or needed a repair of a guarantee, over a replay.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GuaranteeCounts {
    /// Calls sent without the current request.
    pub missing_request: u64,
    /// Calls sent without the newest summary.
    pub missing_summary: u64,
    /// Calls sent with no history although the session had some.
    pub no_history: u64,
    /// Calls whose assembly the host had to repair (request, summary or history put back).
    pub put_back: u64,
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
}

/// Replays every conversation of an import; `on_turn` sees each turn in session order.
pub async fn replay(
    host: Arc<Host>,
    source: &Path,
    import: Import,
    opts: &ReplayOptions,
    mut on_turn: impl FnMut(&TurnReport),
) -> Result<ReplaySummary> {
    let started = Instant::now();
    std::fs::create_dir_all(&opts.out_dir)
        .map_err(|e| Error::io("create replay directory", &opts.out_dir, e))?;
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
        guarantees: GuaranteeCounts::default(),
    };

    // Each conversation runs as a task; reports flow back tagged with the session's index and
    // are released in order.
    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, Option<TurnReport>)>();
    let permits = Arc::new(tokio::sync::Semaphore::new(opts.concurrency.max(1)));
    let mut tasks = Vec::new();
    for (index, (session, name)) in import.sessions.into_iter().zip(names).enumerate() {
        let file = opts.out_dir.join(format!("{name}.jsonl"));
        summary.session_files.push(file.clone());
        let (host, tx, permits) = (Arc::clone(&host), tx.clone(), Arc::clone(&permits));
        tasks.push(tokio::spawn(async move {
            let _permit = permits.acquire_owned().await;
            let r = replay_session(&host, name, file, session, |report| {
                let _ = tx.send((index, Some(report)));
            })
            .await;
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
    let mut times = CallTimes::default();
    for task in tasks {
        let session_times = task.await.map_err(|e| Error::Task {
            task: "replay",
            message: e.to_string(),
        })??;
        times.merge(&session_times);
    }
    summary.engine_times = times.summary();
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
        let g = &mut summary.guarantees;
        for v in &c.violations {
            match v {
                Violation::MissingRequest => g.missing_request += 1,
                Violation::MissingSummary => g.missing_summary += 1,
                Violation::NoHistory => g.no_history += 1,
            }
        }
        g.put_back += u64::from(!c.put_back.is_empty());
    }
}

/// Replays one conversation into a new session file; returns where its engine's time went.
pub async fn replay_session(
    host: &Host,
    name: String,
    file: PathBuf,
    source: ImportedSession,
    mut on_turn: impl FnMut(TurnReport),
) -> Result<CallTimes> {
    if file.exists() {
        std::fs::remove_file(&file)
            .map_err(|e| Error::io("replace replay transcript", &file, e))?;
        let _ = std::fs::remove_file(crate::session::state_path(&file));
    }
    let mut spec = SessionSpec::new(name.clone(), file);
    spec.system_prompt = source.system_prompt.clone();
    let session = host.create_session(spec).await?;
    let (preamble, turns) = split_turns(source.messages);
    session.record(preamble).await?;
    for (n, (user, replies)) in turns.into_iter().enumerate() {
        let report = replay_turn(host, &session, &name, n as u64 + 1, user, replies).await?;
        on_turn(report);
    }
    let times = session.with(|s| s.call_times().clone()).await?;
    session.close().await?;
    Ok(times)
}

async fn replay_turn(
    host: &Host,
    session: &SessionHandle,
    name: &str,
    turn: u64,
    user: Message,
    replies: Vec<Message>,
) -> Result<TurnReport> {
    let manual = manual_compact(&user);
    let mut manual_compactions = 0;
    if let Some(instructions) = manual.clone() {
        let r = session.compact(instructions).await?;
        manual_compactions = u32::from(r.compacted);
    }
    // The recorded replies play the model: one model call per assistant message, each seeing
    // a fresh assembly that includes the tool results before it.
    let mut steps = model_steps(replies);
    let last = steps.pop().unwrap_or_default();
    let mut largest = session
        .begin_turn(TurnInput {
            user,
            is_heartbeat: false,
        })
        .await?;
    let mut context_messages = session.with(|s| s.context().len()).await?;
    let mut model_calls = 1;
    let check = |a: &Assembly, call: u32| {
        let (sent, addition) = (a.messages.clone(), a.system_prompt_addition.clone());
        let put_back = a.put_back.clone();
        session.with(move |s| CallGuarantees {
            call,
            violations: violations(s.context(), s.current_request(), &sent, addition.as_deref()),
            put_back,
        })
    };
    let mut guarantees = Vec::new();
    let mut judge = |c: CallGuarantees| {
        report_violations(name, turn, c.call, &c.violations);
        if !c.violations.is_empty() || !c.put_back.is_empty() {
            guarantees.push(c);
        }
    };
    judge(check(&largest, model_calls).await?);
    let mut fallback = largest.fallback;
    let mut repairs = largest.pairing_repairs;
    for step in steps {
        let a = session.continue_turn(step).await?;
        model_calls += 1;
        judge(check(&a, model_calls).await?);
        fallback |= a.fallback;
        repairs += a.pairing_repairs;
        if a.assembled_tokens >= largest.assembled_tokens {
            context_messages = session.with(|s| s.context().len()).await?;
            largest = a;
        }
    }
    let stats = session.end_turn(last).await?;
    let session_messages = session.with(|s| s.transcript_len()).await?;
    Ok(TurnReport {
        session: name.to_owned(),
        turn,
        engine: largest.engine.clone(),
        fallback: fallback || stats.fallback,
        quarantined: host.engine_failure().is_some(),
        session_messages,
        context_messages,
        model_calls,
        assembled_messages: largest.messages.len(),
        assembled_tokens: largest.assembled_tokens,
        token_budget: largest.token_budget,
        estimated_tokens: largest.estimated_tokens,
        compactions: stats.compactions + manual_compactions,
        pairing_repairs: repairs,
        manual_compact: manual.is_some(),
        engine_ms: stats.engine_ms,
        slow: stats.slow,
        guarantees,
    })
}

/// Replays a conversation into a [`Session`] on this thread (no host, no tasks): the
/// preamble is recorded, each turn runs `/compact` when its text asks for it, then
/// `begin_turn`, one `continue_turn` per recorded model step and `end_turn`. `on_call` sees
/// every model call's assembly with the session as it was at that call.
pub fn drive(
    session: &mut Session,
    messages: Vec<Message>,
    mut on_call: impl FnMut(&Session, &Assembly),
) -> Result<()> {
    let (preamble, turns) = split_turns(messages);
    session.record(preamble)?;
    for (user, replies) in turns {
        if let Some(instructions) = manual_compact(&user) {
            session.compact_now(instructions)?;
        }
        let mut steps = model_steps(replies);
        let last = steps.pop().unwrap_or_default();
        let a = session.begin_turn(TurnInput {
            user,
            is_heartbeat: false,
        })?;
        on_call(session, &a);
        for step in steps {
            let a = session.continue_turn(step)?;
            on_call(session, &a);
        }
        session.end_turn(last)?;
    }
    Ok(())
}

/// Logs a model call that lacks what a model needs to continue (expected: never, since the
/// session puts a missing request or summary back, and history when there is room).
fn report_violations(name: &str, turn: u64, call: u32, found: &[Violation]) {
    for v in found {
        tracing::warn!(session = name, turn, call, violation = ?v, "{}", v.describe());
    }
}

/// A recorded `/compact [instructions]` turn: `Some` with its instructions (`None` when it
/// gives none), or `None` for any other user message.
fn manual_compact(user: &Message) -> Option<Option<String>> {
    let text = user.text();
    let rest = text.trim_start().strip_prefix("/compact")?.trim();
    Some((!rest.is_empty()).then(|| rest.to_owned()))
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

/// Splits a conversation into the messages before the first user message and turns of
/// (user message, everything up to the next user message).
pub fn split_turns(messages: Vec<Message>) -> (Vec<Message>, Vec<(Message, Vec<Message>)>) {
    let mut preamble = Vec::new();
    let mut turns: Vec<(Message, Vec<Message>)> = Vec::new();
    for m in messages {
        if m.role() == Role::User {
            turns.push((m, Vec::new()));
        } else if let Some((_, replies)) = turns.last_mut() {
            replies.push(m);
        } else {
            preamble.push(m);
        }
    }
    (preamble, turns)
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
