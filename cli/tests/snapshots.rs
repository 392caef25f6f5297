//! What users see, pinned: the `replay` table, `check` and `doctor` as they print, the `--json`
//! of `replay` and `check`, and the frames of a `serve --stdio` session. A change in visible
//! output shows up in review as a snapshot diff (`cli/tests/snapshots/*.snap`; accept one with
//! `INSTA_UPDATE=always cargo test -p ctxhost-cli` or `cargo insta review`). Durations (and
//! what depends on them), temporary paths and the checkout's own path are masked; JSON is
//! pretty-printed a value per line's object so a diff names the field.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::common;

/// Runs the binary with no config and the repository as the working directory.
fn visible(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ctxhost"))
        .args(args)
        .current_dir(common::repo_root())
        .env("CTXHOST_LOG", "off")
        .env_remove("CTXHOST_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/ctxhost-test-config")
        .env("OPENCLAW_CONFIG_PATH", "/nonexistent/openclaw.json")
        // No running `watch` or `serve` of another test shows up in `doctor`.
        .env("CTXHOST_STATE_DIR", "/nonexistent/ctxhost-test-state")
        .output()
        .expect("run ctxhost");
    format!(
        "exit: {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// [`visible`] for `--json` output: each JSON value of stdout parsed, its times masked
/// ([`mask_times`]) and pretty-printed.
fn visible_json(args: &[&str]) -> String {
    let out = visible(args);
    let (head, rest) = out.split_once("--- stdout\n").expect("stdout");
    let (stdout, stderr) = rest.split_once("--- stderr\n").expect("stderr");
    // One JSON value a line (`replay`) or one pretty-printed (`check`).
    let lines: Vec<String> = serde_json::Deserializer::from_str(stdout)
        .into_iter::<Value>()
        .map(|v| {
            let mut v = v.unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stdout}"));
            mask_times(&mut v);
            serde_json::to_string_pretty(&v).expect("json")
        })
        .collect();
    format!(
        "{head}--- stdout\n{}\n--- stderr\n{stderr}",
        lines.join("\n")
    )
}

/// Replaces every duration (a field named `...Ms`) and what a duration decides (`slow`,
/// `slowTurns`) with a placeholder: they change from run to run, the rest must not.
fn mask_times(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, x) in map.iter_mut() {
                if k.ends_with("Ms") || k == "slow" || k == "slowTurns" {
                    *x = Value::String("[timed]".into());
                } else {
                    mask_times(x);
                }
            }
        }
        Value::Array(xs) => xs.iter_mut().for_each(mask_times),
        _ => {}
    }
}

fn settings() -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    let root = std::fs::canonicalize(common::repo_root()).expect("repo root");
    s.add_filter(&regex::escape(&root.display().to_string()), "[REPO]");
    s.add_filter(r"over budget, \d+ ms", "over budget, [N] ms");
    s.add_filter(
        r"p50 [\d.]+ ms  p95 [\d.]+ ms  max [\d.]+ ms  total [\d.]+ ms",
        "[times]",
    );
    s.add_filter(r"slowest turn [\d.]+ ms", "slowest turn [N] ms");
    s.add_filter(r"p95 [\d.]+ ms", "p95 [N] ms");
    s.add_filter(r"/tmp/[A-Za-z0-9._-]+", "[TMP]");
    let shared = std::fs::canonicalize(common::shared_dir()).expect("shared dir");
    s.add_filter(&regex::escape(&shared.display().to_string()), "[SHARED]");
    s.set_snapshot_path("snapshots");
    s.set_prepend_module_to_snapshot(false);
    s
}

#[test]
fn replay_table_of_the_demo_session() {
    settings().bind(|| insta::assert_snapshot!("replay_demo", visible(&["replay"])));
}

#[test]
fn replay_show_of_one_turn_of_the_demo_session() {
    settings().bind(|| {
        insta::assert_snapshot!(
            "replay_demo_show",
            visible(&[
                "replay",
                "--engine",
                "docs/examples/first_policy.lua",
                "--window",
                "8000",
                "--show",
                "9"
            ])
        )
    });
}

#[test]
fn check_of_an_example_engine() {
    settings().bind(|| {
        insta::assert_snapshot!(
            "check_recent_turns",
            visible(&["check", "scripts/recent_turns.lua"])
        )
    });
}

#[test]
fn check_of_an_unsound_engine() {
    let fixture = common::fixture_arg("hostile/assemble_throws.lua");
    settings().bind(|| insta::assert_snapshot!("check_unsound", visible(&["check", &fixture])));
}

#[test]
fn doctor_without_a_config() {
    settings().bind(|| insta::assert_snapshot!("doctor_defaults", visible(&["doctor"])));
}

#[test]
fn doctor_with_the_example_pipeline() {
    settings().bind(|| {
        insta::assert_snapshot!(
            "doctor_pipeline",
            visible(&["doctor", "--config", "scripts/hooks/pipeline.json5"])
        )
    });
}

/// A short real conversation (seven turns) with tool calls, so the JSON stays reviewable; at a
/// 2,000-token window it compacts twice and the host puts back what three calls lacked.
fn short_transcript() -> String {
    common::shared_dir()
        .join("data/transcripts/fasthooks-sample_main_transcript.jsonl")
        .display()
        .to_string()
}

#[test]
fn replay_json_of_a_short_conversation() {
    let transcript = short_transcript();
    settings().bind(|| {
        insta::assert_snapshot!(
            "replay_json",
            visible_json(&[
                "replay",
                &transcript,
                "--engine",
                "scripts/pinned_facts.lua",
                "--window",
                "2000",
                "--json"
            ])
        )
    });
}

#[test]
fn check_json_of_an_example_engine() {
    settings().bind(|| {
        insta::assert_snapshot!(
            "check_json",
            visible_json(&["check", "scripts/recent_turns.lua", "--json"])
        )
    });
}

#[test]
fn check_json_of_an_unsound_engine() {
    let fixture = common::fixture_arg("hostile/assemble_throws.lua");
    settings().bind(|| {
        insta::assert_snapshot!(
            "check_json_unsound",
            visible_json(&["check", &fixture, "--json"])
        )
    });
}

/// A `serve --stdio` session as its client sees it: every request answered in turn (each
/// answer read before the next request is sent), then stdin closed; the frames with their
/// times masked, and the exit status.
fn serve_session(engine: &str, requests: &[Value]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ctxhost"))
        .args(["serve", "--stdio", "--engine", engine, "--state-dir"])
        .arg(dir.path().join("state"))
        .current_dir(common::repo_root())
        .env("CTXHOST_LOG", "off")
        .env_remove("CTXHOST_CONFIG")
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", "/nonexistent/ctxhost-test-config")
        .env("OPENCLAW_CONFIG_PATH", "/nonexistent/openclaw.json")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run ctxhost serve");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut frames = Vec::new();
    for r in requests {
        writeln!(stdin, "{r}").expect("write a request");
        stdin.flush().expect("flush");
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read an answer");
        let mut v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
        mask_times(&mut v);
        frames.push(format!(
            "--> {}\n<-- {}",
            r["method"].as_str().unwrap_or("?"),
            serde_json::to_string_pretty(&v).expect("json")
        ));
    }
    drop(stdin);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).expect("read to the end");
    let status = child.wait().expect("wait");
    format!(
        "exit: {:?}\n{}\n--- after stdin closed\n{rest}",
        status.code(),
        frames.join("\n")
    )
}

#[test]
fn serve_session_frames() {
    let key = "agent:main:main";
    let history = json!([
        {"role": "user", "content": "Please look at src/lib.rs.", "timestamp": 1},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Reading it."},
            {"type": "toolCall", "id": "call_1", "name": "read", "arguments": {"path": "src/lib.rs"}}
        ], "stopReason": "toolUse", "timestamp": 2},
        {"role": "toolResult", "toolCallId": "call_1", "toolName": "read",
         "content": [{"type": "text", "text": "pub fn answer() -> u32 { 42 }"}], "isError": false, "timestamp": 3},
        {"role": "assistant", "content": [{"type": "text", "text": "It returns 42."}], "timestamp": 4},
        {"role": "user", "content": "Make it 43.", "timestamp": 5}
    ]);
    let base = json!({"sessionKey": key, "sessionId": "s"});
    let with = |extra: Value| {
        let mut p = base.clone();
        for (k, v) in extra.as_object().expect("object") {
            p[k] = v.clone();
        }
        p
    };
    let requests = [
        request(
            1,
            "initialize",
            json!({"clientInfo": {"name": "snapshot", "version": "1"}}),
        ),
        request(
            2,
            "assemble",
            with(json!({"messages": history, "tokenBudget": 4000})),
        ),
        request(
            3,
            "commitTurn",
            with(json!({"advancementKey": "k1", "messages": []})),
        ),
        request(
            4,
            "commitTurn",
            with(json!({"advancementKey": "k1", "messages": []})),
        ),
        request(
            5,
            "compact",
            with(
                json!({"tokenBudget": 4000, "force": true, "currentTokenCount": 60,
                "compactionTarget": "threshold"}),
            ),
        ),
        request(6, "info", json!({})),
        request(7, "nope", json!({})),
        request(8, "shutdown", json!({})),
    ];
    let frames = serve_session("scripts/recent_turns.lua", &requests);
    settings().bind(|| insta::assert_snapshot!("serve_session", frames));
}

fn request(id: i64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}
