//! Running the comparison: each job's transcript replayed through its engine, measured.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde::Serialize;

use crate::config::Config;
use crate::contract::message::Role;
use crate::engine::api::{CallTimes, MethodTimes};
use crate::error::{Error, Result};
use crate::runtime::{Host, SessionSpec};
use crate::services::tokens::TokenCache;
use crate::session::Session;
use crate::transcript::Durability;

use super::calls::{CallEntry, CallLog, CallRecorder};
use super::meter::{Figures, Meter};
use super::prefix::shape;
use super::prices::Prices;

/// One run of the comparison: an engine over one transcript at one window.
#[derive(Clone, Debug)]
pub struct Job {
    /// The engine's label (`legacy`, or the file as given).
    pub engine: String,
    /// The host config with the engine in the slot.
    pub config: Config,
    /// The transcript.
    pub transcript: PathBuf,
    /// The window in tokens.
    pub window: u64,
}

/// One row: an engine over one transcript at one window.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// The engine's label.
    pub engine: String,
    /// The transcript.
    pub transcript: PathBuf,
    /// The window in tokens.
    pub window: u64,
    /// Conversations in the transcript.
    pub conversations: usize,
    /// The figures.
    #[serde(flatten)]
    pub figures: Figures,
    /// Where the engine's time went, per lifecycle method and `host.*` function.
    pub times: Vec<MethodTimes>,
    /// The first quarantine's error, when one happened.
    pub quarantine: Option<String>,
    /// How long this row's replay took, in ms.
    pub wall_ms: u64,
    /// Every model call and the context it sent, when [`CompareOptions::record_calls`] asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_log: Option<CallLog>,
    #[serde(skip)]
    /// The raw times, for totals.
    pub raw_times: CallTimes,
}

/// How to compare.
#[derive(Clone, Debug)]
pub struct CompareOptions {
    /// A call reusing less than this share of the previous call's tokens is a break.
    pub break_share: f64,
    /// The prices applied.
    pub prices: Prices,
    /// Replays at once.
    pub threads: usize,
    /// A scratch directory for the replayed sessions' transcripts.
    pub scratch: PathBuf,
    /// Log every model call and its context in [`Row::call_log`] (for the HTML report).
    pub record_calls: bool,
}

/// Runs every job, `threads` at once; `on_done` sees each row as it finishes (from the worker
/// threads). Rows come back in job order.
pub fn run(
    jobs: Vec<Job>,
    opts: &CompareOptions,
    on_done: &(dyn Fn(&Job, &Result<Row>) + Sync),
) -> Vec<Result<Row>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Row>>>> =
        Mutex::new((0..jobs.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..opts.threads.clamp(1, jobs.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    let dir = opts.scratch.join(format!("job-{i}"));
                    let r = run_job(job, opts, &dir);
                    on_done(job, &r);
                    if let Ok(mut all) = results.lock() {
                        all[i] = Some(r);
                    }
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|| {
                Err(Error::Task {
                    task: "compare",
                    message: "a replay did not finish".into(),
                })
            })
        })
        .collect()
}

/// Replays one job's transcript, every conversation in turn, and measures it.
pub fn run_job(job: &Job, opts: &CompareOptions, dir: &Path) -> Result<Row> {
    let started = Instant::now();
    std::fs::create_dir_all(dir).map_err(|e| Error::io("create compare directory", dir, e))?;
    let mut config = job.config.clone();
    config.host.window = job.window;
    config.host.durability = Durability::None;
    let host = Host::new(config)?;
    let import = crate::transcript::import(&job.transcript)?;
    let counter = crate::services::tokens::counter(host.config().host.tokenizer)?;
    let tokens = TokenCache::new(counter);
    let mut meter = Meter::new(opts.break_share);
    let (mut times, mut quarantine) = (CallTimes::default(), None);
    let mut recorder = opts.record_calls.then(CallRecorder::default);
    let conversations = import.sessions.len();
    for (n, source) in import.sessions.into_iter().enumerate() {
        meter.next_conversation();
        for m in &source.messages {
            if m.role() == Role::Assistant {
                meter.row.output_tokens += tokens.message(&Arc::new(m.clone()));
            }
        }
        let file = dir.join(format!("conversation-{}.jsonl", n + 1));
        let mut spec = SessionSpec::new(format!("compare-{}", n + 1), &file);
        spec.system_prompt = source.system_prompt.clone();
        let mut session = Session::create(host.session_setup(&spec), &file, "")?;
        let (mut turn, mut request_id) = (0u32, None::<String>);
        crate::tools::replay::drive(&mut session, source.messages, |s, a| {
            let compacted = meter.note_summaries(s.context());
            let now = shape(a, &tokens);
            if let Some(request) = s.current_request() {
                meter.rerefs(request, s.context(), &now, s.recall());
                if request_id.as_deref() != Some(request.id.as_str()) {
                    turn += 1;
                    request_id = Some(request.id.clone());
                }
            }
            meter.row.fallbacks += u64::from(a.fallback);
            let context = recorder.as_mut().map(|r| r.context(&now));
            let input: u64 = now.iter().map(|(_, t)| t).sum();
            let (cached, cause) = meter.call(now, &a.engine, compacted, &a.violations);
            if let (Some(r), Some(context)) = (recorder.as_mut(), context) {
                r.push(CallEntry {
                    conversation: u32::try_from(n + 1).unwrap_or(u32::MAX),
                    turn,
                    engine: a.engine.clone(),
                    fallback: a.fallback,
                    input_tokens: input,
                    cached_tokens: cached,
                    input_cost: opts.prices.cost(input - cached, cached, 0),
                    compacted,
                    break_cause: cause.map(str::to_owned),
                    context,
                });
            }
        })?;
        meter.note_summaries(session.context());
        times.merge(&session.call_times());
        times.merge(&session.host_times());
        if let Some(q) = session.quarantine() {
            meter.row.quarantines += 1;
            quarantine.get_or_insert(q.to_string());
        }
        session.close()?;
    }
    let summary = times.summary();
    meter.row.summarizer_calls = summary
        .iter()
        // Scripts' `host.*summarize*` calls; the summarizer rows (every summary written,
        // whoever asked) are times, not this figure.
        .filter(|t| t.method.starts_with("host.") && t.method.contains("summarize"))
        .map(|t| t.calls)
        .sum();
    meter.row.finish(&opts.prices);
    let _ = std::fs::remove_dir_all(dir);
    Ok(Row {
        engine: job.engine.clone(),
        transcript: job.transcript.clone(),
        window: job.window,
        conversations,
        figures: meter.row,
        times: summary,
        quarantine,
        wall_ms: started.elapsed().as_millis() as u64,
        call_log: recorder.map(CallRecorder::finish),
        raw_times: times,
    })
}
