//! Compaction quality over the shared transcripts: can a model continue from what it is sent?
//!
//! Every transcript of `<shared>/data/transcripts` is replayed (recorded user messages drive
//! turns, recorded replies play the model) at windows 3,000 and 8,000 through `legacy` and
//! every example engine of `scripts/` (the Lua twin; the Rhai twin behaves the same). Every
//! model call and every summary is measured:
//!
//! - calls without history (goal 0): the session had history, the call carries none of it;
//! - calls missing the current request (goal 0), calls missing the newest summary (goal 0);
//! - compactions after which the session context was still over budget (the fitting then
//!   trims or stubs; counted only for compactions a model call followed in the same turn);
//! - span identifiers kept by kind: identifiers of the summarized messages (not of a previous
//!   summary) found verbatim in the summary, counted only where the summary budget could hold
//!   them all (the others are counted apart);
//! - section fill: the share of summaries with a non-empty section, per section;
//! - summary tokens per span token, summaries larger than their span, and folds (summaries of
//!   summaries) that grew;
//! - summarizer time;
//! - identifiers a request names again (seen earlier in the session): whether the model call
//!   carries them besides the request, and the line they first appeared in (what recall is for).
//!
//! With `--summarizer llm` every summary is asked of a model instead: the LLM summarizer
//! (`ctxhost::services::llm::LlmSummarizer`) against a forgetful fake model this program starts on
//! 127.0.0.1 (`fake_model.rs`), whose answers drop every identifier and whose corrective retry
//! brings back only every other one, so the figures show what the host's identifier audit
//! keeps. A summary the model could not write (the offline summarizer answered) is counted.
//!
//! Run: `cargo run --release --example quality [-- --engines legacy,hierarchical --windows
//! 3000 --transcripts pimono-before --summarizer llm --detail --lost 20]`. `--detail` adds a
//! row per transcript and a line per call without history (where it is, what it sent, the
//! sizes of its turn and of the newest earlier messages); `--lost N` prints the first N
//! summaries that lost span identifiers where they fit, with what they lost.
//! `CTXHOST_SHARED` overrides the shared dir.

#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ctxhost::config::{Config, Entry};
use ctxhost::contract::message::Message;
use ctxhost::runtime::{Host, SessionSpec};
use ctxhost::services::guarantee::{Violation, violations};
use ctxhost::services::llm::{LlmSettings, LlmSummarizer};
use ctxhost::services::summarize::{BuiltinSummarizer, IdKind, SECTION_HEADINGS, Summarizer};
use ctxhost::session::Session;
use ctxhost::tools::replay::drive;
use ctxhost::transcript::Durability;
use parking_lot::Mutex;

mod detail;
mod fake_model;
mod named_again;
mod recorder;

use recorder::{Recorder, message_text};

const ENGINES: [&str; 7] = [
    "legacy",
    "delegating",
    "hierarchical",
    "pinned_facts",
    "recall",
    "recent_turns",
    "tool_pruner",
];
const WINDOWS: [u64; 2] = [3_000, 8_000];

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let list = |flag: &str| -> Option<Vec<String>> {
        let i = args.iter().position(|a| a == flag)?;
        args.get(i + 1)
            .map(|v| v.split(',').map(str::to_owned).collect())
    };
    let engines = list("--engines").unwrap_or_else(|| ENGINES.map(str::to_owned).to_vec());
    let windows: Vec<u64> = match list("--windows") {
        Some(w) => w.iter().map(|w| w.parse()).collect::<Result<_, _>>()?,
        None => WINDOWS.to_vec(),
    };
    let only = list("--transcripts");
    let detail = args.iter().any(|a| a == "--detail");
    if let Some([n]) = list("--lost").as_deref() {
        detail::print_lost(n.parse()?);
    }
    let llm = match list("--summarizer").as_deref() {
        None => false,
        Some([one]) if one == "offline" => false,
        Some([one]) if one == "llm" => true,
        Some(other) => anyhow::bail!("--summarizer is offline or llm, not {other:?}"),
    };
    let model = if llm {
        Some(fake_model::FakeModel::start()?)
    } else {
        None
    };
    let shared = std::env::var_os("CTXHOST_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"));
    let mut transcripts: Vec<PathBuf> = std::fs::read_dir(shared.join("data/transcripts"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e != "md"))
        .filter(|p| {
            only.as_ref().is_none_or(|o| {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy())
                    .unwrap_or_default();
                o.iter().any(|x| name.contains(x.as_str()))
            })
        })
        .collect();
    transcripts.sort();
    let dir = tempfile::tempdir()?;

    println!(
        "| engine | window | calls | no history | no request | no summary | over budget | compactions leaving the context over budget | summaries | span ids kept (fit) | ids that could not fit | fill | sum/span tok | larger than span | folds grown | summarizer ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut kinds_rows = Vec::new();
    let mut by_model = Vec::new();
    for engine in &engines {
        for &window in &windows {
            let mut total = Stats::default();
            for t in &transcripts {
                let summarizer: Arc<dyn Summarizer> = match &model {
                    None => Arc::new(BuiltinSummarizer::new()),
                    Some(m) => Arc::new(forgetful_llm(&m.url())?),
                };
                let stats = run(t, window, engine, dir.path(), summarizer, detail)?;
                if detail {
                    let name = t
                        .file_name()
                        .map(|n| n.to_string_lossy())
                        .unwrap_or_default();
                    println!("{}", stats.row(&format!("{engine} {name}"), window));
                }
                total.add(&stats);
            }
            println!("{}", total.row(engine, window));
            if llm {
                by_model.push(format!(
                    "{engine} @ {window}: {} of {} summaries written by the model",
                    total.by_model, total.summaries
                ));
            }
            kinds_rows.push((engine.clone(), window, total));
        }
    }
    println!();
    println!(
        "| engine | window | identifiers a request names again | in the model call | with the line they first appeared in |"
    );
    println!("|---|---|---|---|---|");
    for (engine, window, s) in &kinds_rows {
        println!(
            "| {engine} | {window} | {} | {} | {} |",
            s.again.0,
            pct(s.again.1, s.again.0),
            pct(s.again.2, s.again.0)
        );
    }
    if let Some(m) = &model {
        println!();
        for line in &by_model {
            println!("{line}");
        }
        println!(
            "the fake model answered {} requests, {} of them corrective retries",
            m.asked.load(std::sync::atomic::Ordering::Relaxed),
            m.retried.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
    println!();
    let kinds = IdKind::ALL.map(|k| k.name()).join(" | ");
    println!("| engine | window | {kinds} | new / carried |");
    println!("|---|---|{}---|", "---|".repeat(IdKind::ALL.len()));
    for (engine, window, s) in &kinds_rows {
        let cells: Vec<String> = IdKind::ALL
            .iter()
            .map(|k| {
                let (kept, found) = s.kinds.get(k).copied().unwrap_or_default();
                pct(kept, found)
            })
            .collect();
        println!(
            "| {engine} | {window} | {} | {} |",
            cells.join(" | "),
            pct(s.carried_kept, s.carried_found)
        );
    }
    println!();
    println!("| engine | window | {} |", SECTION_HEADINGS.join(" | "));
    println!("|---|---|{}", "---|".repeat(SECTION_HEADINGS.len()));
    for (engine, window, s) in &kinds_rows {
        let cells: Vec<String> = s
            .fill
            .iter()
            .map(|n| pct(*n as u64, s.summaries as u64))
            .collect();
        println!("| {engine} | {window} | {} |", cells.join(" | "));
    }
    Ok(())
}

/// The LLM summarizer against the fake model at `url`, with budgets no replay reaches (a
/// spent budget would let the offline summarizer answer and blur the figures).
fn forgetful_llm(url: &str) -> anyhow::Result<LlmSummarizer> {
    let mut settings = LlmSettings::new(url, "forgetful");
    settings.timeout_ms = 30_000;
    settings.max_calls_per_turn = 100_000;
    settings.max_tokens_per_day = 1 << 50;
    Ok(LlmSummarizer::new(&settings, None)?)
}

fn pct(kept: u64, found: u64) -> String {
    if found == 0 {
        "–".to_owned()
    } else {
        format!(
            "{:.0}% ({kept}/{found})",
            100.0 * kept as f64 / found as f64
        )
    }
}

/// Everything measured over one or more replays.
#[derive(Debug, Default)]
struct Stats {
    calls: u64,
    no_history: u64,
    no_request: u64,
    no_summary: u64,
    over_budget: u64,
    compactions: u64,
    compactions_over: u64,
    summaries: usize,
    ids_kept: u64,
    ids_found: u64,
    unfit_found: u64,
    unfit_kept: u64,
    kinds: BTreeMap<IdKind, (u64, u64)>,
    carried_kept: u64,
    carried_found: u64,
    fill: [usize; SECTION_HEADINGS.len()],
    filled_sections: usize,
    summary_tokens: u64,
    span_tokens: u64,
    larger: u64,
    folds: u64,
    folds_grown: u64,
    time: Duration,
    /// Summaries a model wrote (not the offline summarizer).
    by_model: usize,
    /// Identifiers requests named again / in the call / with their first line in the call.
    again: (u64, u64, u64),
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.calls += o.calls;
        self.no_history += o.no_history;
        self.no_request += o.no_request;
        self.no_summary += o.no_summary;
        self.over_budget += o.over_budget;
        self.compactions += o.compactions;
        self.compactions_over += o.compactions_over;
        self.summaries += o.summaries;
        self.ids_kept += o.ids_kept;
        self.ids_found += o.ids_found;
        self.unfit_found += o.unfit_found;
        self.unfit_kept += o.unfit_kept;
        for (k, (kept, found)) in &o.kinds {
            let e = self.kinds.entry(*k).or_default();
            e.0 += kept;
            e.1 += found;
        }
        self.carried_kept += o.carried_kept;
        self.carried_found += o.carried_found;
        for (a, b) in self.fill.iter_mut().zip(o.fill) {
            *a += b;
        }
        self.filled_sections += o.filled_sections;
        self.summary_tokens += o.summary_tokens;
        self.span_tokens += o.span_tokens;
        self.larger += o.larger;
        self.folds += o.folds;
        self.folds_grown += o.folds_grown;
        self.time += o.time;
        self.by_model += o.by_model;
        self.again.0 += o.again.0;
        self.again.1 += o.again.1;
        self.again.2 += o.again.2;
    }

    fn row(&self, name: &str, window: u64) -> String {
        let fill = if self.summaries == 0 {
            "–".to_owned()
        } else {
            format!(
                "{:.0}%",
                100.0 * self.filled_sections as f64
                    / (self.summaries * SECTION_HEADINGS.len()) as f64
            )
        };
        let ratio = if self.span_tokens == 0 {
            "–".to_owned()
        } else {
            format!(
                "{:.3}",
                self.summary_tokens as f64 / self.span_tokens as f64
            )
        };
        format!(
            "| {name} | {window} | {} | {} | {} | {} | {} | {}/{} | {} | {} | {} | {fill} | {ratio} | {} | {}/{} | {:.0} |",
            self.calls,
            self.no_history,
            self.no_request,
            self.no_summary,
            self.over_budget,
            self.compactions_over,
            self.compactions,
            self.summaries,
            pct(self.ids_kept, self.ids_found),
            if self.unfit_found == 0 {
                "0".to_owned()
            } else {
                format!("{} kept of {}", self.unfit_kept, self.unfit_found)
            },
            self.larger,
            self.folds_grown,
            self.folds,
            self.time.as_secs_f64() * 1000.0
        )
    }
}

/// Replays one transcript through one engine at one window.
fn run(
    transcript: &Path,
    window: u64,
    engine: &str,
    dir: &Path,
    summarizer: Arc<dyn Summarizer>,
    detail: bool,
) -> anyhow::Result<Stats> {
    let mut config = Config::default();
    config.host.window = window;
    if engine != "legacy" {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("scripts/{engine}.lua"));
        let id = engine.replace('_', "-");
        config.plugins.slots.context_engine = Some(id.clone());
        config.plugins.entries.insert(
            id,
            Entry {
                path: Some(path),
                ..Entry::default()
            },
        );
    }
    let host = Host::new(config)?;
    let recorder = Arc::new(Recorder {
        inner: summarizer,
        stats: Mutex::new(Stats::default()),
    });
    let imported = ctxhost::transcript::import(transcript)?;
    let mut calls = Stats::default();
    for (n, source) in imported.sessions.into_iter().enumerate() {
        let file = dir.join(format!("{engine}-{window}-{n}.jsonl"));
        let _ = std::fs::remove_file(&file);
        let mut spec = SessionSpec::new(format!("s{n}"), &file);
        spec.system_prompt = source.system_prompt.clone();
        let mut setup = host.session_setup(&spec);
        setup.summarizer = Arc::clone(&recorder) as Arc<dyn Summarizer>;
        setup.durability = Durability::None;
        let mut session = Session::create(setup, &file, "")?;
        let (mut seen_compactions, mut turn) = (0, String::new());
        let mut again = named_again::NamedAgain::default();
        drive(&mut session, source.messages, |session, a| {
            let lacks = measure(session, session.current_request(), a, &mut calls);
            if detail && lacks.contains(&Violation::NoHistory) {
                println!("{}", detail::no_history(transcript, n, session, a));
            }
            again.observe(session, session.current_request(), a, message_text);
            // Turn stats restart every turn: a rise is a compaction since the last call.
            let request = session.current_request().map(|m| m.id.clone());
            if request.as_deref() != Some(turn.as_str()) {
                turn = request.unwrap_or_default();
                seen_compactions = 0;
            }
            let now = session.stats().compactions;
            if now > seen_compactions {
                calls.compactions += 1;
                calls.compactions_over +=
                    u64::from(session.context_tokens() > session.token_budget());
            }
            seen_compactions = now;
        })?;
        session.close()?;
        let _ = std::fs::remove_file(&file);
        calls.again.0 += again.named;
        calls.again.1 += again.in_call;
        calls.again.2 += again.with_line;
    }
    let mut s = std::mem::take(&mut *recorder.stats.lock());
    s.add(&calls);
    Ok(s)
}

fn measure(
    session: &Session,
    request: Option<&Arc<Message>>,
    a: &ctxhost::session::Assembly,
    s: &mut Stats,
) -> Vec<Violation> {
    s.calls += 1;
    s.over_budget += u64::from(a.assembled_tokens > a.token_budget);
    let found = violations(
        session.context(),
        request,
        &a.messages,
        a.system_prompt_addition.as_deref(),
    );
    for v in &found {
        match v {
            Violation::MissingRequest => s.no_request += 1,
            Violation::MissingSummary => s.no_summary += 1,
            Violation::NoHistory => s.no_history += 1,
        }
    }
    found
}
