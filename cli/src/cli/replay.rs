//! `ctxhost replay`: a per-turn table for people, JSON lines for programs.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::Outcome;
use crate::cli::args::{HostArgs, ReplayArgs};
use crate::report::{self, ReportMeta, group};
use ctxhost::config::Config;
use ctxhost::config::FailurePolicy;
use ctxhost::contract::message::Role;
use ctxhost::runtime::Host;
use ctxhost::tools::replay::{ReplayOptions, ReplaySummary, TurnReport, replay};
use ctxhost::transcript::{Durability, Import, import};

/// The demo session shipped with ctxhost (in the repository's `examples/`, beside `cli/`).
pub fn demo_transcript() -> PathBuf {
    let cli = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    cli.parent()
        .unwrap_or(cli)
        .join("examples/demo-session.jsonl")
}

pub(crate) fn run(args: ReplayArgs, out: &mut dyn Write) -> anyhow::Result<Outcome> {
    let mut config = build_config(&args)?;
    if args.out.is_none() {
        // A replay into a temporary directory: syncing each append to disk buys nothing.
        config.host.durability = Durability::None;
    }
    let transcript = args.transcript.clone().unwrap_or_else(demo_transcript);
    let imported = import(&transcript)?;
    for w in &imported.warnings {
        tracing::warn!("{}:{}: {}", transcript.display(), w.line, w.message);
    }
    for p in &imported.problems {
        tracing::warn!(
            "{}:{}: skipped: {}",
            transcript.display(),
            p.line,
            p.message
        );
    }
    // Without --out the sessions go to a temporary directory, removed when this returns
    // (whatever way it returns) unless --keep.
    let scratch = match &args.out {
        Some(_) => None,
        None => Some(
            tempfile::Builder::new()
                .prefix("ctxhost-replay-")
                .tempdir()
                .context("create a temporary directory for the replayed sessions")?,
        ),
    };
    let out_dir = match (&args.out, &scratch) {
        (Some(d), _) => d.clone(),
        (None, Some(t)) => t.path().to_path_buf(),
        (None, None) => std::env::temp_dir(),
    };
    let keep_files = args.out.is_some() || args.keep;
    let _scratch = match scratch {
        Some(t) if args.keep => {
            let _ = t.keep();
            None
        }
        other => other,
    };
    let (window, tokenizer) = (config.host.window, config.host.tokenizer);
    let host = Arc::new(Host::new(config)?);
    let concurrency = std::thread::available_parallelism().map_or(2, |n| n.get());
    // Each session running at once makes one blocking call at a time (`SessionHandle::with`),
    // so that many blocking threads. More only spread a long replay's allocations over more
    // thread heaps, and a thread that idles out leaves its pages behind: a 200,000-message
    // replay ran on up to 11 threads and peaked at 292 MB, with one blocking thread at 266 MB.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(concurrency.min(imported.sessions.len()).max(1))
        .build()
        .context("start the async runtime")?;
    let opts = ReplayOptions {
        out_dir,
        concurrency,
        // The report shows every call's context; --show and --contexts print some or all.
        contexts: args.contexts || args.show.is_some() || args.report.is_some(),
    };
    let mut table = Table::new(args.json, imported.sessions.len() > 1, keep_files);
    table.full = args.full;
    let (show, all_contexts) = (args.show, args.contexts);
    // `--show` alone prints only its turns; `--table` (or `--json`) keeps every row.
    let only_shown = show.is_some() && !args.table && !args.json;
    let mut notes = Notes::default();
    let mut write_error = None;
    let mut progress = Progress::new(&imported, args.json);
    let mut reported: Vec<TurnReport> = Vec::new();
    let meta = ReportMeta {
        engine: host.engine_id(),
        window,
        tokenizer: tokenizer.to_string(),
    };
    let summary = runtime.block_on(replay(
        Arc::clone(&host),
        &transcript,
        imported,
        &opts,
        |turn| {
            let shown = all_contexts || show.is_some_and(|r| r.contains(turn.turn));
            notes.add(turn);
            // Rows and the bar share the terminal: lift the bar while a row is written.
            if write_error.is_none()
                && (shown || !only_shown)
                && let Err(e) = progress.suspend(|| table.turn(out, turn, shown))
            {
                write_error = Some(e);
            }
            progress.turn(turn);
            if args.report.is_some() {
                reported.push(turn.clone());
            }
        },
    ));
    progress.finish();
    let summary = summary?;
    if let Some(e) = write_error {
        return Err(e).context("write replay output");
    }
    if let Some(path) = &args.report {
        let html = report::render(&meta, &summary, &reported);
        std::fs::write(path, html)
            .with_context(|| format!("write the report {}", path.display()))?;
    }
    table.summary(out, &summary)?;
    if !args.json {
        let owns = match host.engine() {
            Some(Ok(f)) => Some(f.info().owns_compaction()),
            _ => None,
        };
        notes.write(out, owns)?;
    }
    if let Some(path) = &args.report
        && !args.json
    {
        writeln!(out, "report: {}", path.display())?;
    }
    Ok(
        if summary.quarantine.is_some() || summary.over_budget_turns > 0 {
            Outcome::Problems
        } else {
            Outcome::Ok
        },
    )
}

/// The progress bar for a person watching a replay on a terminal: turns done of all turns, and
/// which session is running. Absent (every call a no-op) when stdout or stderr is not a terminal
/// or the output is `--json`, so piped output carries no control characters.
struct Progress {
    bar: Option<ProgressBar>,
    sessions: usize,
    seen: usize,
    current: String,
}

impl Progress {
    fn new(imported: &Import, json: bool) -> Self {
        let wanted = !json && std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
        let bar = wanted.then(|| {
            let total: usize = imported
                .sessions
                .iter()
                .map(|s| s.messages.iter().filter(|m| m.role() == Role::User).count())
                .sum();
            let style = ProgressStyle::with_template(
                "{spinner:.cyan} replaying [{bar:36.cyan/blue}] {pos}/{len} turns ({percent}%) {msg}",
            )
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            let bar =
                ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
            bar.set_style(style);
            bar
        });
        Progress {
            bar,
            sessions: imported.sessions.len(),
            seen: 0,
            current: String::new(),
        }
    }

    fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }

    fn turn(&mut self, t: &TurnReport) {
        let Some(bar) = &self.bar else { return };
        if self.sessions > 1 && t.session != self.current {
            self.seen += 1;
            self.current.clone_from(&t.session);
            bar.set_message(format!(
                "· session {}/{} {}",
                self.seen, self.sessions, t.session
            ));
        }
        bar.inc(1);
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

fn build_config(args: &ReplayArgs) -> anyhow::Result<Config> {
    let mut config = host_config(&args.host, args.engine.as_deref())?;
    if args.strict {
        config.host.failure_policy = FailurePolicy::Strict;
        if let Some(engine) = &args.engine {
            adopt_engine_id(&mut config, engine);
        }
    }
    Ok(config)
}

/// With `--engine FILE` there is no configured id to hold the engine's `info.id` to: the entry
/// (named after the file) takes the engine's own id, so `--strict` checks the engine, not its
/// file name. An engine that does not load keeps the file's id; the load error is reported
/// when the host loads it.
fn adopt_engine_id(config: &mut Config, engine: &Path) {
    let from_file = ctxhost::config::engine_id_from_path(engine);
    let opts = ctxhost::engine::LoadOptions {
        configured_id: None,
        limits: config.host.limits.script.clone(),
        ..Default::default()
    };
    let Ok(factory) = ctxhost::engine::load(engine, &opts, &config.host.limits.rhai) else {
        return;
    };
    let own = factory.info().id.clone();
    if own.is_empty() || own == from_file || own == ctxhost::contract::LEGACY_ID {
        return;
    }
    if let Some(entry) = config.plugins.entries.remove(&from_file) {
        config.plugins.entries.insert(own.clone(), entry);
        config.plugins.slots.context_engine = Some(own);
    }
}

/// The config `replay` and `watch` run with: the discovered (or `--config`) file, with `engine`
/// (when given) in the context-engine slot, and `--window` / `--tokenizer` applied.
pub(crate) fn host_config(args: &HostArgs, engine: Option<&Path>) -> anyhow::Result<Config> {
    let mut config = Config::with_engine_file(args.config.as_deref(), engine)?;
    if let Some(w) = args.window {
        config.host.window = w;
    }
    if let Some(t) = args.tokenizer {
        config.host.tokenizer = t;
    }
    if let Some(i) = args.isolation {
        config.host.isolation = i;
    }
    Ok(config)
}

struct Table {
    json: bool,
    /// `--full`: engine text in `--show` is never cut.
    full: bool,
    multi: bool,
    header_done: bool,
    /// Whether the sessions' transcripts outlive the command (so their folder is worth naming).
    kept_files: bool,
}

impl Table {
    fn new(json: bool, multi: bool, kept_files: bool) -> Self {
        Table {
            json,
            full: false,
            multi,
            header_done: false,
            kept_files,
        }
    }

    /// One turn: a JSON line, or a table row and a row per model call when there are several
    /// (and, when `shown`, each call's context).
    fn turn(&mut self, out: &mut dyn Write, t: &TurnReport, shown: bool) -> anyhow::Result<()> {
        if self.json {
            if shown {
                serde_json::to_writer(&mut *out, t)?;
            } else {
                let mut bare = t.clone();
                for c in &mut bare.calls {
                    c.context = None;
                }
                serde_json::to_writer(&mut *out, &bare)?;
            }
            writeln!(out)?;
            return Ok(());
        }
        if !self.header_done {
            self.header_done = true;
            if self.multi {
                write!(out, "{:<28} ", "session")?;
            }
            writeln!(
                out,
                "{:>5} {:>8} {:>9} {:>22} {:>11} {:<}",
                "turn", "session", "assembled", "tokens / budget", "compactions", "engine"
            )?;
        }
        if self.multi {
            write!(out, "{:<28} ", clip(&t.session, 28))?;
        }
        let mut engine = t.engine.clone();
        if t.fallback {
            engine.push_str(" (fallback)");
        }
        if t.manual_compact {
            engine.push_str(" /compact");
        }
        writeln!(
            out,
            "{:>5} {:>8} {:>9} {:>22} {:>11} {}",
            t.turn,
            t.session_messages,
            t.assembled_messages,
            format!("{} / {}", group(t.assembled_tokens), group(t.token_budget)),
            t.compactions,
            engine
        )?;
        if t.calls.len() > 1 {
            for c in &t.calls {
                if self.multi {
                    write!(out, "{:<28} ", "")?;
                }
                let row = format!(
                    "{:>5} {:>8} {:>9} {:>22} {:>11} {}",
                    format!("·{}", c.call),
                    "",
                    c.assembled_messages,
                    format!("{} / {}", group(c.assembled_tokens), group(c.token_budget)),
                    c.compactions,
                    if c.fallback { "(fallback)" } else { "" }
                );
                writeln!(out, "{}", row.trim_end())?;
            }
        }
        if shown {
            super::show::write_turn(out, t, self.full)?;
        }
        Ok(())
    }

    fn summary(&self, out: &mut dyn Write, s: &ReplaySummary) -> anyhow::Result<()> {
        if self.json {
            serde_json::to_writer(&mut *out, &serde_json::json!({ "summary": s }))?;
            writeln!(out)?;
            return Ok(());
        }
        writeln!(out)?;
        writeln!(
            out,
            "{} turns in {} session(s) of {} ({}): {} compactions, {} fallbacks, max {} assembled tokens, {} over budget, {} ms",
            s.turns,
            s.sessions,
            s.transcript.display(),
            s.format,
            s.compactions,
            s.fallbacks,
            group(s.max_assembled_tokens),
            s.over_budget_turns,
            s.wall_ms
        )?;
        match &s.quarantine {
            None => {}
            Some(q) => writeln!(out, "quarantined: {}", q.error)?,
        }
        if s.skipped_lines > 0 {
            writeln!(out, "skipped {} unreadable source lines", s.skipped_lines)?;
        }
        if s.slow_turns > 0 {
            writeln!(
                out,
                "{} turns took more engine time than host.turnBudget.engineMs",
                s.slow_turns
            )?;
        }
        write_times(out, "", s)?;
        if let Some(dir) = s.session_files.first().and_then(|f| f.parent())
            && self.kept_files
        {
            writeln!(out, "session transcripts: {}", dir.display())?;
        }
        Ok(())
    }
}

/// Where the engine's time went: per lifecycle method, then per `host.*` function its scripts
/// called (time that is part of the methods'), each line prefixed with `indent`.
pub(crate) fn write_times(
    out: &mut dyn Write,
    indent: &str,
    s: &ReplaySummary,
) -> anyhow::Result<()> {
    let sections = [
        ("engine time per method:", &s.engine_times),
        ("of which in host functions:", &s.host_times),
    ];
    for (title, times) in sections {
        if times.is_empty() {
            continue;
        }
        writeln!(out, "{indent}{title}")?;
        for t in times {
            writeln!(
                out,
                "{indent}  {:<20} {:>6} calls  p50 {:.3} ms  p95 {:.3} ms  max {:.3} ms  total {:.1} ms",
                t.method, t.calls, t.p50_ms, t.p95_ms, t.max_ms, t.total_ms
            )?;
        }
    }
    Ok(())
}

/// What the text summary adds for an author, counted over every turn's model calls: what the
/// host put back into the engine's assemblies, the engine's token estimates that were off by
/// more than a quarter, and whose the compactions were.
#[derive(Default)]
struct Notes {
    /// Calls whose assembly lacked each guarantee the host restored, by reason.
    put_back: std::collections::BTreeMap<&'static str, u64>,
    /// Calls with an `estimatedTokens` beyond ±25% of the host's count.
    estimates_off: u64,
    /// The call furthest off: (turn, call, estimated, measured).
    worst: Option<(u64, u32, f64, u64)>,
    /// Compactions in turns the configured engine answered, and in turns `legacy` did.
    compactions_engine: u64,
    compactions_fallback: u64,
}

impl Notes {
    fn add(&mut self, t: &TurnReport) {
        for g in &t.guarantees {
            for v in &g.put_back {
                let what = match v {
                    ctxhost::services::guarantee::Violation::MissingRequest => {
                        "the current user request"
                    }
                    ctxhost::services::guarantee::Violation::MissingSummary => "the newest summary",
                    ctxhost::services::guarantee::Violation::NoHistory => "earlier history",
                };
                *self.put_back.entry(what).or_default() += 1;
            }
        }
        for c in &t.calls {
            if c.estimated_tokens <= 0.0 || c.assembled_tokens == 0 {
                continue;
            }
            let measured = c.assembled_tokens as f64;
            let off = (c.estimated_tokens - measured).abs() / measured;
            if off > 0.25 {
                self.estimates_off += 1;
                let worse = self
                    .worst
                    .is_none_or(|(_, _, e, m)| off > (e - m as f64).abs() / m as f64);
                if worse {
                    self.worst = Some((t.turn, c.call, c.estimated_tokens, c.assembled_tokens));
                }
            }
        }
        if t.fallback {
            self.compactions_fallback += u64::from(t.compactions);
        } else {
            self.compactions_engine += u64::from(t.compactions);
        }
    }

    /// `owns`: whether the configured engine owns compaction (`None`: it did not load).
    fn write(&self, out: &mut dyn Write, owns: Option<bool>) -> anyhow::Result<()> {
        if !self.put_back.is_empty() {
            let reasons: Vec<String> = self
                .put_back
                .iter()
                .map(|(what, n)| format!("{what} in {}", calls(*n)))
                .collect();
            writeln!(
                out,
                "the host put back what the engine's assemblies left out: {}",
                reasons.join("; ")
            )?;
        }
        if let Some((turn, call, est, measured)) = self.worst {
            writeln!(
                out,
                "{} with an estimatedTokens off by more than 25% of the host's count (worst: turn {turn} call {call}, {} estimated, {} measured)",
                calls(self.estimates_off),
                group(est.round() as u64),
                group(measured)
            )?;
        }
        if self.compactions_engine > 0 {
            let whose = match owns {
                Some(true) => "the engine's own (it owns compaction)",
                Some(false) => {
                    "the host's (the engine does not own compaction, so the host compacts for it)"
                }
                None => "the host's built-in compaction",
            };
            writeln!(
                out,
                "{}: {whose}",
                plural(self.compactions_engine, "compaction", "compactions")
            )?;
        }
        if self.compactions_fallback > 0 {
            writeln!(
                out,
                "{} in fallback turns: legacy's",
                plural(self.compactions_fallback, "compaction", "compactions")
            )?;
        }
        Ok(())
    }
}

/// `n` with the noun in the right number: "1 turn", "2 turns".
pub(crate) fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn calls(n: u64) -> String {
    plural(n, "model call", "model calls")
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut c: String = s.chars().take(n - 1).collect();
        c.push('…');
        c
    }
}
