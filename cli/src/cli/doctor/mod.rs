//! `ctxhost doctor`: which engine is active and why, whether it loads and runs, and the host's
//! settings. Exit 1 when the configured engine cannot run.

mod pipeline;

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::cli::Outcome;
use crate::cli::args::DoctorArgs;
use ctxhost::config::{PIPELINE_ID, discover};
use ctxhost::contract::LEGACY_ID;
use ctxhost::tools::check::{check_engine, check_pipeline};

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

/// What `doctor` finds of the OpenClaw bridge (`bridges/openclaw`) in OpenClaw's config.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Bridge {
    /// The OpenClaw config file looked at.
    config: String,
    /// Whether that file exists.
    found: bool,
    /// Whether `plugins.entries.ctxhost` is there.
    installed: bool,
    /// Whether that entry is enabled.
    enabled: bool,
    /// Whether OpenClaw's context-engine slot names it.
    selected: bool,
    /// The engine file the plugin points at.
    engine: Option<String>,
    /// The session whose state a served call wrote last (`serve` writes it after every call).
    #[serde(skip_serializing_if = "Option::is_none")]
    last_call: Option<LastCall>,
    /// `check`'s verdict on it: "sound", or the first failure.
    check: Option<String>,
    /// Where the plugin keeps ctxhost's sessions (as `bridges/openclaw` decides it).
    state_dir: Option<String>,
    /// The `ctxhost serve` processes running there.
    running: Vec<ctxhost::tools::status::LiveStatus>,
    /// A problem reading the config.
    error: Option<String>,
}

/// The state directory `bridges/openclaw` gives `ctxhost serve`: the plugin's `stateDir`, else
/// `$CTXHOST_STATE_DIR`, else `ctxhost/` under OpenClaw's state directory
/// (`$OPENCLAW_STATE_DIR`, else `~/.openclaw`, `~` being `$OPENCLAW_HOME` when set).
fn bridge_state_dir(entry: &serde_json::Value) -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = entry["config"]["stateDir"].as_str() {
        return Some(PathBuf::from(dir));
    }
    env("CTXHOST_STATE_DIR").or_else(|| {
        env("OPENCLAW_STATE_DIR")
            .or_else(|| {
                env("OPENCLAW_HOME")
                    .or_else(|| env("HOME"))
                    .map(|h| h.join(".openclaw"))
            })
            .map(|d| d.join("ctxhost"))
    })
}

/// The OpenClaw config OpenClaw itself would read: `$OPENCLAW_CONFIG_PATH`, else
/// `$OPENCLAW_STATE_DIR/openclaw.json`, else `~/.openclaw/openclaw.json` (`~` being
/// `$OPENCLAW_HOME` when set).
fn openclaw_config_path() -> PathBuf {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env("OPENCLAW_CONFIG_PATH")
        .or_else(|| env("OPENCLAW_STATE_DIR").map(|d| d.join("openclaw.json")))
        .unwrap_or_else(|| {
            env("OPENCLAW_HOME")
                .or_else(|| env("HOME"))
                .unwrap_or_default()
                .join(".openclaw/openclaw.json")
        })
}

/// Reads OpenClaw's config for the `ctxhost` plugin entry and checks the engine it names.
fn openclaw_bridge(config: &ctxhost::config::Config) -> Bridge {
    let path = openclaw_config_path();
    let mut b = Bridge {
        config: path.display().to_string(),
        ..Bridge::default()
    };
    let Ok(text) = std::fs::read_to_string(&path) else {
        return b;
    };
    b.found = true;
    // OpenClaw writes its config as JSON (`openclaw config set`); a hand-written JSON5 file is
    // reported as unreadable here rather than guessed at.
    let value: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            b.error = Some(format!("cannot read it: {e}"));
            return b;
        }
    };
    let plugins = &value["plugins"];
    let entry = &plugins["entries"]["ctxhost"];
    b.installed = entry.is_object();
    b.enabled = b.installed && entry["enabled"].as_bool().unwrap_or(true);
    b.selected = plugins["slots"]["contextEngine"].as_str() == Some("ctxhost");
    if b.installed
        && let Some(dir) = bridge_state_dir(entry)
    {
        b.running = ctxhost::tools::status::running(&dir);
        b.state_dir = Some(dir.display().to_string());
    }
    if let Some(engine) = entry["config"]["engine"].as_str() {
        b.engine = Some(engine.to_owned());
        let report = check_engine(Path::new(engine), config);
        b.check = Some(match report.steps.iter().find(|s| !s.ok) {
            None => "sound".into(),
            Some(f) => format!("{}: {}", f.step, f.detail),
        });
    }
    b
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
        openclaw: Bridge {
            last_call: ctxhost::serve::state::default_state_dir().and_then(|d| last_call(&d)),
            ..openclaw_bridge(&config)
        },
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

/// The newest session state under a state directory: which session, whose state, how old.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct LastCall {
    /// The session's folder under `sessions/`.
    session: String,
    /// The engine whose state the file holds (the one serving that session).
    engine: String,
    /// Seconds since the file was written.
    seconds_ago: u64,
}

/// The session under `state_dir` whose state was committed last, if any: its
/// `transcript.jsonl.state.json` or, while the session is open (the state file catches up
/// when it closes), its commit journal `transcript.jsonl.commit-0|1`.
fn last_call(state_dir: &Path) -> Option<LastCall> {
    let newest = std::fs::read_dir(state_dir.join("sessions"))
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let dir = e.path();
            let modified = [
                "transcript.jsonl.state.json",
                "transcript.jsonl.commit-0",
                "transcript.jsonl.commit-1",
            ]
            .iter()
            .filter_map(|f| std::fs::metadata(dir.join(f)).ok()?.modified().ok())
            .max()?;
            Some((modified, e.file_name().to_string_lossy().into_owned(), dir))
        })
        .max_by_key(|(m, _, _)| *m)?;
    let (modified, session, dir) = newest;
    let saved = ctxhost::store::jsonl::committed_document(&dir.join("transcript.jsonl"))?;
    Some(LastCall {
        session,
        engine: saved["engine"].as_str().unwrap_or("?").to_owned(),
        seconds_ago: modified.elapsed().map_or(0, |d| d.as_secs()),
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

/// `125` → `2 min ago`.
fn ago(seconds: u64) -> String {
    match seconds {
        0..=59 => format!("{seconds} s ago"),
        60..=3599 => format!("{} min ago", seconds / 60),
        3600..=86_399 => format!("{} h ago", seconds / 3600),
        _ => format!("{} days ago", seconds / 86_400),
    }
}

fn render_bridge(out: &mut dyn Write, b: &Bridge) -> std::io::Result<()> {
    render_bridge_config(out, b)?;
    match &b.last_call {
        Some(l) => writeln!(
            out,
            "  last call: session {} (engine `{}`), state written {}",
            l.session,
            l.engine,
            ago(l.seconds_ago)
        ),
        None => Ok(()),
    }
}

fn render_bridge_config(out: &mut dyn Write, b: &Bridge) -> std::io::Result<()> {
    if !b.found {
        return writeln!(out, "openclaw:   no config at {}", b.config);
    }
    writeln!(out, "openclaw:   {}", b.config)?;
    if let Some(e) = &b.error {
        return writeln!(out, "  error:    {e}");
    }
    if !b.installed {
        return writeln!(
            out,
            "  plugin:   not installed (openclaw plugins install -l bridges/openclaw --force --accept-capabilities)"
        );
    }
    writeln!(
        out,
        "  plugin:   ctxhost {}{}",
        if b.enabled { "enabled" } else { "disabled" },
        if b.selected {
            ", selected as the context engine"
        } else {
            ", not in plugins.slots.contextEngine"
        }
    )?;
    if let Some(dir) = &b.state_dir {
        let serving: Vec<String> = b.running.iter().map(|r| format!("pid {}", r.pid)).collect();
        writeln!(
            out,
            "  state:    {dir}{}",
            if serving.is_empty() {
                " (no ctxhost serve running there)".to_owned()
            } else {
                format!(" (ctxhost serve running: {})", serving.join(", "))
            }
        )?;
    }
    match (&b.engine, &b.check) {
        (Some(e), Some(c)) => {
            writeln!(out, "  engine:   {e}")?;
            writeln!(out, "  check:    {c}")
        }
        _ => writeln!(
            out,
            "  engine:   not set (openclaw config set plugins.entries.ctxhost.config '{{\"engine\": \"...\"}}' --strict-json --replace)"
        ),
    }
}
