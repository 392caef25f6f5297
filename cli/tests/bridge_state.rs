//! Which state directory the OpenClaw bridge gives `ctxhost serve`, as `doctor` shows it: the
//! plugin's `stateDir`, else `CTXHOST_STATE_DIR`, else `ctxhost/` under OpenClaw's own state
//! directory, with the `serve` processes running there.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

const ENGINE: &str = r#"local M = { info = { id = "window", name = "Window" } }
function M.ingest(p) return { ingested = true } end
function M.assemble(p) return { messages = p.messages, estimatedTokens = 0 } end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#;

fn doctor(openclaw_state: &Path, openclaw_config: &Path) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_ctxhost"))
        .args(["doctor"])
        .env("CTXHOST_LOG", "off")
        .env_remove("CTXHOST_CONFIG")
        .env_remove("CTXHOST_STATE_DIR")
        .env("XDG_CONFIG_HOME", "/nonexistent/ctxhost-test-config")
        .env("OPENCLAW_CONFIG_PATH", openclaw_config)
        .env("OPENCLAW_STATE_DIR", openclaw_state)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn doctor_shows_the_bridges_state_directory_and_the_serve_running_there() {
    let dir = tempfile::tempdir().unwrap();
    let engine = dir.path().join("window.lua");
    std::fs::write(&engine, ENGINE).unwrap();
    let openclaw_state = dir.path().join("openclaw-state");
    let config = dir.path().join("openclaw.json");
    let entry = |extra: serde_json::Value| {
        let mut c = json!({"engine": engine});
        if let Some(extra) = extra.as_object() {
            for (k, v) in extra {
                c[k] = v.clone();
            }
        }
        json!({"plugins": {"entries": {"ctxhost": {"enabled": true, "config": c}},
            "slots": {"contextEngine": "ctxhost"}}})
        .to_string()
    };

    // The default: ctxhost/ under OpenClaw's state directory, where the bridge starts serve.
    std::fs::write(&config, entry(json!({}))).unwrap();
    let state = openclaw_state.join("ctxhost");
    let text = doctor(&openclaw_state, &config);
    assert!(
        text.contains(&format!(
            "  state:    {} (no ctxhost serve running there)",
            state.display()
        )),
        "{text}"
    );
    let mut serve = Command::new(env!("CARGO_BIN_EXE_ctxhost"))
        .args(["serve", "--stdio", "--engine"])
        .arg(&engine)
        .arg("--state-dir")
        .arg(&state)
        .env("CTXHOST_LOG", "off")
        .env_remove("CTXHOST_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/ctxhost-test-config")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = serve.id();
    let published = state.join("running").join(format!("{pid}.json"));
    let start = Instant::now();
    while !published.exists() && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = doctor(&openclaw_state, &config);
    drop(serve.stdin.take());
    serve.wait().unwrap();
    assert!(
        text.contains(&format!(
            "  state:    {} (ctxhost serve running: pid {pid})",
            state.display()
        )),
        "{text}"
    );

    // The plugin's own stateDir wins.
    std::fs::write(&config, entry(json!({"stateDir": "/srv/ctxhost-state"}))).unwrap();
    let text = doctor(&openclaw_state, &config);
    assert!(text.contains("  state:    /srv/ctxhost-state ("), "{text}");
}
