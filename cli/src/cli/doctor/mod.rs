//! `ctxhost doctor`: which engine is active and why, whether it loads and runs, and the host's
//! settings. Exit 1 when the configured engine cannot run.

mod openclaw;
mod pipeline;

use std::io::Write;
use std::path::Path;

use serde::Serialize;

use crate::cli::Outcome;
use crate::cli::args::DoctorArgs;
use ctxhost::config::{PIPELINE_ID, discover};
use ctxhost::contract::LEGACY_ID;
use ctxhost::tools::check::{check_engine, check_pipeline};

use openclaw::{Bridge, openclaw_bridge, render_bridge};
use pipeline::{PipelineHook, pipeline_hooks, render_hooks};

/// The doctor's findings.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Diagnosis {
    version: &'static str,
    config: String,
    active_engine: String,
    why: String,
    configured_engine: Option<String>,
    engine_file: Option<String>,
    engine_version: Option<String>,
    load: Option<String>,
    warnings: Vec<String>,
    quarantine: Option<String>,
    /// With the `pipeline` engine configured: its hooks, in the order they run.
    #[serde(skip_serializing_if = "Option::is_none")]
    hooks: Option<Vec<PipelineHook>>,
    tokenizer: String,
    window: u64,
    token_budget: u64,
    failure_policy: String,
    limits: serde_json::Value,
    /// Engine workers abandoned past deadline + grace whose thread still runs (this process).
    abandoned_workers: usize,
    /// Where engine VMs run: `thread` or `process` (`host.isolation`).
    isolation: String,
    /// The long-running ctxhost processes (`serve`, `watch`) under the state directory, with
    /// their own abandoned-worker counts.
    running: Vec<ctxhost::tools::status::LiveStatus>,
    /// Where sessions are kept (`host.store`) under the default state directory.
    store: StoreReport,
    openclaw: Bridge,
}

/// What `doctor` finds of the session store.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct StoreReport {
    /// `fs-jsonl`, `sqlite` or `postgres`.
    kind: String,
    /// Where it keeps sessions.
    location: Option<String>,
    /// Bytes it occupies, when it can tell.
    size_bytes: Option<u64>,
    /// How many sessions it holds.
    sessions: usize,
    /// The sessions with the most messages (at most 10): id, messages, turns.
    largest: Vec<ctxhost::store::SessionSummary>,
    /// Why it could not be read.
    error: Option<String>,
}

/// Opens the configured store under `state_dir` read-mostly: a SQLite database that does not
/// exist yet is reported, not created.
fn store_report(config: &ctxhost::config::Config, state_dir: Option<&Path>) -> StoreReport {
    use ctxhost::config::StoreSettings;
    let kind = match &config.host.store {
        StoreSettings::Jsonl => "fs-jsonl",
        StoreSettings::Sqlite(_) => "sqlite",
        StoreSettings::Postgres(_) => "postgres",
    };
    let mut r = StoreReport {
        kind: kind.into(),
        ..StoreReport::default()
    };
    let Some(state_dir) = state_dir else {
        r.error = Some("no state directory (set CTXHOST_STATE_DIR or HOME)".into());
        return r;
    };
    if let StoreSettings::Sqlite(s) = &config.host.store {
        let path = ctxhost::store::sqlite_path(config, s, state_dir);
        if !path.exists() {
            r.location = Some(path.display().to_string());
            r.error = Some("no database yet (serve creates it at its first session)".into());
            return r;
        }
    }
    let backend = match ctxhost::store::open_backend(config, state_dir) {
        Ok(b) => b,
        Err(e) => {
            r.error = Some(e.to_string());
            return r;
        }
    };
    r.location = Some(backend.location());
    r.size_bytes = backend.size_bytes();
    match backend.sessions() {
        Ok(mut list) => {
            r.sessions = list.len();
            list.sort_by(|a, b| b.messages.cmp(&a.messages).then(a.id.cmp(&b.id)));
            list.truncate(10);
            r.largest = list;
        }
        Err(e) => r.error = Some(e.to_string()),
    }
    r
}

pub(crate) fn run(args: DoctorArgs, out: &mut dyn Write) -> anyhow::Result<Outcome> {
    let config = discover(args.config.as_deref())?;
    let h = &config.host;
    let reserve = h.compaction.reserve_tokens(h.window);
    let mut d = Diagnosis {
        version: env!("CARGO_PKG_VERSION"),
        config: config.source.to_string(),
        active_engine: LEGACY_ID.into(),
        why: "default: no engine in plugins.slots.contextEngine".into(),
        configured_engine: config.plugins.slots.context_engine.clone(),
        engine_file: None,
        engine_version: None,
        load: None,
        warnings: Vec::new(),
        quarantine: None,
        hooks: None,
        tokenizer: h.tokenizer.to_string(),
        window: h.window,
        token_budget: h.window.saturating_sub(reserve),
        failure_policy: serde_json::to_value(h.failure_policy)?
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        limits: serde_json::to_value(&h.limits)?,
        abandoned_workers: 0,
        isolation: h.isolation.to_string(),
        running: ctxhost::serve::state::default_state_dir()
            .map(|dir| ctxhost::tools::status::running(&dir))
            .unwrap_or_default(),
        store: store_report(
            &config,
            ctxhost::serve::state::default_state_dir().as_deref(),
        ),
        openclaw: openclaw_bridge(&config),
    };
    let bridge_healthy =
        d.openclaw.error.is_none() && d.openclaw.check.as_deref().is_none_or(|c| c == "sound");
    let mut healthy = true;
    match config.plugins.slots.context_engine.as_deref() {
        None => {}
        Some(LEGACY_ID) => d.why = "default: plugins.slots.contextEngine is \"legacy\"".into(),
        // The pipeline needs no entry of its own (an entry with a `path` is an engine file).
        Some(PIPELINE_ID)
            if config
                .plugins
                .entries
                .get(PIPELINE_ID)
                .is_none_or(|e| e.enabled && e.path.is_none()) =>
        {
            let report = check_pipeline(&config);
            d.warnings = report.warnings.clone();
            d.load = Some(match report.steps.first() {
                Some(s) if s.ok => "ok".into(),
                Some(s) => format!("failed: {}", s.detail),
                None => "not run".into(),
            });
            d.hooks = Some(pipeline_hooks(&config, &report));
            let loaded = report.steps.first().is_some_and(|s| s.ok);
            match report.steps.iter().find(|s| !s.ok) {
                None => {
                    d.active_engine = PIPELINE_ID.into();
                    d.why = "configured in plugins.slots.contextEngine (\"pipeline\")".into();
                }
                Some(f) => {
                    d.quarantine = Some(format!("{}: {}", f.step, f.detail));
                    healthy = false;
                    // A failing hook is quarantined alone; the pipeline still answers.
                    if loaded && f.step.starts_with("hook ") {
                        d.active_engine = PIPELINE_ID.into();
                        d.why = "configured in plugins.slots.contextEngine (\"pipeline\"); a hook would be quarantined".into();
                    } else if loaded {
                        d.why = "fallback: \"pipeline\" would be quarantined".into();
                    } else {
                        d.why = "fallback: the pipeline does not load".into();
                    }
                }
            }
        }
        Some(id) => match config.plugins.entries.get(id) {
            None => {
                d.why = format!("fallback: the slot names \"{id}\" but there is no such entry");
                healthy = false;
            }
            Some(e) if !e.enabled => {
                d.why = format!("fallback: the entry \"{id}\" is disabled");
                healthy = false;
            }
            Some(e) => match &e.path {
                None => {
                    d.why = format!("fallback: the entry \"{id}\" has no path");
                    healthy = false;
                }
                Some(p) => {
                    let file = config.resolve(p);
                    d.engine_file = Some(file.display().to_string());
                    let report = check_engine(&file, &config);
                    d.warnings = report.warnings.clone();
                    let failed = report.steps.iter().find(|s| !s.ok);
                    d.load = Some(match report.steps.first() {
                        Some(s) if s.ok => "ok".into(),
                        Some(s) => format!("failed: {}", s.detail),
                        None => "not run".into(),
                    });
                    if let Some(f) = failed {
                        d.quarantine = Some(format!("{}: {}", f.step, f.detail));
                        d.why = format!("fallback: \"{id}\" would be quarantined");
                        healthy = false;
                    } else {
                        d.active_engine = report.engine.clone();
                        d.why = format!("configured in plugins.slots.contextEngine (\"{id}\")");
                    }
                }
            },
        },
    }
    d.abandoned_workers = ctxhost::abandoned_workers();
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &d)?;
        writeln!(out)?;
    } else {
        writeln!(out, "ctxhost {}", d.version)?;
        writeln!(out, "config:     {}", d.config)?;
        writeln!(out, "engine:     {} ({})", d.active_engine, d.why)?;
        if let Some(f) = &d.engine_file {
            writeln!(out, "  file:     {f}")?;
        }
        if let Some(l) = &d.load {
            writeln!(out, "  load:     {l}")?;
        }
        if let Some(hooks) = &d.hooks {
            render_hooks(out, hooks)?;
        }
        for w in &d.warnings {
            writeln!(out, "  warning:  {w}")?;
        }
        match &d.quarantine {
            Some(q) => writeln!(out, "  quarantine: {q}")?,
            None if d.engine_file.is_some() || d.hooks.is_some() => {
                writeln!(out, "  quarantine: none (check passed)")?
            }
            None => {}
        }
        writeln!(out, "tokenizer:  {}", d.tokenizer)?;
        writeln!(
            out,
            "window:     {} tokens ({} reserved for output, {} left for the prompt)",
            d.window, reserve, d.token_budget
        )?;
        writeln!(out, "failures:   {}", d.failure_policy)?;
        writeln!(
            out,
            "limits:     deadline {} ms (+{} ms grace), memory {} MiB per engine, {} operations (Rhai)",
            h.limits.script.deadline_ms,
            h.limits.script.grace_ms,
            h.limits.script.memory_bytes >> 20,
            h.limits.rhai.max_operations
        )?;
        writeln!(
            out,
            "workers:    {} abandoned and still running (new engines refused past {})",
            d.abandoned_workers, h.limits.script.max_abandoned_workers
        )?;
        for r in &d.running {
            writeln!(
                out,
                "  {} (pid {}): {} abandoned and still running",
                r.command, r.pid, r.abandoned_workers
            )?;
        }
        writeln!(
            out,
            "isolation:  {} ({})",
            d.isolation,
            match h.isolation {
                ctxhost::contract::limits::Isolation::Thread =>
                    "engine VMs on worker threads; a call stuck past deadline + grace is abandoned",
                ctxhost::contract::limits::Isolation::Process =>
                    "a child process per engine instance, killed at deadline + grace",
            }
        )?;
        render_store(out, &d.store)?;
        render_bridge(out, &d.openclaw)?;
    }
    Ok(if healthy && bridge_healthy {
        Outcome::Ok
    } else {
        Outcome::Problems
    })
}

fn render_store(out: &mut dyn Write, s: &StoreReport) -> std::io::Result<()> {
    write!(out, "store:      {}", s.kind)?;
    if let Some(l) = &s.location {
        write!(out, " at {l}")?;
    }
    match (&s.error, s.size_bytes) {
        (Some(e), _) => return writeln!(out, " ({e})"),
        (None, Some(bytes)) => writeln!(
            out,
            " ({} sessions, {:.1} MiB)",
            s.sessions,
            bytes as f64 / (1 << 20) as f64
        )?,
        (None, None) => writeln!(out, " ({} sessions)", s.sessions)?,
    }
    for l in &s.largest {
        writeln!(
            out,
            "  {}: {} messages{}",
            l.id,
            l.messages,
            l.meta
                .turns
                .map(|t| format!(", {t} turns"))
                .unwrap_or_default()
        )?;
    }
    Ok(())
}
