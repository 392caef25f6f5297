//! What `doctor` finds of the OpenClaw bridge (`bridges/openclaw`): OpenClaw's own config, the
//! plugin's entry and state directory, the engine it names, and the session a served call
//! committed last.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use ctxhost::tools::check::check_engine;

/// What `doctor` finds of the OpenClaw bridge (`bridges/openclaw`) in OpenClaw's config.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Bridge {
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
    pub(super) check: Option<String>,
    /// Where the plugin keeps ctxhost's sessions (as `bridges/openclaw` decides it).
    state_dir: Option<String>,
    /// The `ctxhost serve` processes running there.
    running: Vec<ctxhost::tools::status::LiveStatus>,
    /// A problem reading the config.
    pub(super) error: Option<String>,
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
pub(super) fn openclaw_bridge(config: &ctxhost::config::Config) -> Bridge {
    let path = openclaw_config_path();
    let mut b = Bridge {
        config: path.display().to_string(),
        last_call: ctxhost::serve::state::default_state_dir().and_then(|d| last_call(&d)),
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

/// `125` → `2 min ago`.
fn ago(seconds: u64) -> String {
    match seconds {
        0..=59 => format!("{seconds} s ago"),
        60..=3599 => format!("{} min ago", seconds / 60),
        3600..=86_399 => format!("{} h ago", seconds / 3600),
        _ => format!("{} days ago", seconds / 86_400),
    }
}

pub(super) fn render_bridge(out: &mut dyn Write, b: &Bridge) -> std::io::Result<()> {
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
