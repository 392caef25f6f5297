//! `--isolation process` through the real `ctxhost` binary: the engine runs in children that
//! are this very program started with `__engine-child`, and gives what it gives in process.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::bin::ctxhost;
use crate::common;

use serde_json::Value;

/// `replay --json` with `engine` in `mode`, without the fields that are times.
fn replay(engine: &str, mode: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let engine = common::repo_root().join("scripts").join(engine);
    let out = ctxhost(&[
        "replay",
        &common::transcript_arg("fasthooks-sample_main_transcript.jsonl"),
        "--engine",
        &engine.display().to_string(),
        "--window",
        "8000",
        "--json",
        "--isolation",
        mode,
        "--out",
        &dir.path().display().to_string(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{mode}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if let Some(s) = v.get("summary") {
                // Counts only: times and scratch file names differ run to run.
                let keep = [
                    "turns",
                    "compactions",
                    "fallbacks",
                    "maxAssembledTokens",
                    "quarantine",
                ];
                v = keep.iter().map(|k| (k.to_string(), s[k].clone())).collect();
            } else if let Some(o) = v.as_object_mut() {
                o.retain(|k, _| !k.ends_with("Ms") && k != "slow");
            }
            v
        })
        .collect()
}

#[test]
fn replay_in_child_processes_matches_replay_in_process() {
    for engine in ["hierarchical.lua", "recall.rhai"] {
        let thread = replay(engine, "thread");
        let process = replay(engine, "process");
        assert!(thread.len() > 2, "{engine}: {thread:?}");
        assert_eq!(process, thread, "{engine}");
        let summary = process.last().unwrap();
        assert_eq!(summary["fallbacks"], 0, "{engine}: {summary}");
    }
}

#[test]
fn check_and_doctor_know_the_isolation_mode() {
    let engine = common::repo_root().join("scripts/recent_turns.lua");
    let o = ctxhost(&[
        "check",
        &engine.display().to_string(),
        "--isolation",
        "process",
    ]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(0), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.json5");
    std::fs::write(&config, r#"{ host: { isolation: "process" } }"#).unwrap();
    let o = ctxhost(&["doctor", "--config", &config.display().to_string()]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        text.contains("isolation:  process (a child process per engine instance"),
        "{text}"
    );
    std::fs::write(&config, r#"{ host: { isolation: "fork" } }"#).unwrap();
    let o = ctxhost(&["doctor", "--config", &config.display().to_string()]);
    let text = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{text}");
    assert!(
        text.contains("host.isolation must be \"thread\" or \"process\""),
        "{text}"
    );
}
