//! Crash safety: a replaying `ctxhost` SIGKILLed at random points leaves a transcript that is
//! a prefix of the complete run's (its last line possibly cut short: Linux lets SIGKILL end a
//! large write partway, and the store reads such a line as torn) and an engine state that is
//! whole and no newer than the transcript (the state of the last finished turn, or the one
//! before).
//!
//! `CTXHOST_CRASH_RUNS` sets the number of kills (default 200; thousands for a long run),
//! `CTXHOST_CRASH_SEED` replays one sequence of kill times, `CTXHOST_CRASH_TRANSCRIPT` names
//! another shared transcript.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common;
use crate::rng::{Rng, env_u64};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

const ENGINE: &str = "lua/state_counter.lua";

fn replay(out: &Path, transcript: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ctxhost"));
    cmd.args(["replay", transcript, "--window", "1000", "--engine"])
        .arg(common::fixture_arg(ENGINE))
        .arg("--out")
        .arg(out)
        .env("CTXHOST_LOG", "off")
        .env_remove("CTXHOST_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/ctxhost-test-config")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// The session file a replay into `dir` writes (one session per shared transcript used here).
fn session_file(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
}

/// The entries of a session file with their wall-clock stamps removed (two runs differ only
/// there). A last line cut short by the kill (no final newline, not JSON) is left out: the
/// store reads such a line as torn, skips it and starts the next append on a new line. Any
/// other line that does not parse is kept as it is, so it shows up as a mismatch.
fn entries(file: &Path) -> Vec<String> {
    let text = String::from_utf8_lossy(&std::fs::read(file).unwrap_or_default()).into_owned();
    let mut lines: Vec<&str> = text.lines().collect();
    if !text.ends_with('\n')
        && lines
            .last()
            .is_some_and(|l| serde_json::from_str::<Value>(l).is_err())
    {
        lines.pop();
    }
    lines
        .into_iter()
        .map(|line| match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(mut entry)) => {
                entry.remove("timestamp");
                Value::Object(entry).to_string()
            }
            _ => format!("unparsed: {line}"),
        })
        .collect()
}

/// What one killed run left behind, checked against the complete run.
fn check_remains(dir: &Path, complete: &[String], kill: &str) {
    let Some(file) = session_file(dir) else {
        return; // killed before the session file was created
    };
    let got = entries(&file);
    let at = got
        .iter()
        .zip(complete)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len());
    let cut = |s: Option<&String>| s.map(|s| s.chars().take(400).collect::<String>());
    assert!(
        got.len() <= complete.len() && at == got.len(),
        "{kill}: the transcript is not a prefix of the complete run ({} of {} entries; first \
         difference at entry {at}):\n  killed:   {:?}\n  complete: {:?}",
        got.len(),
        complete.len(),
        cut(got.get(at)),
        cut(complete.get(at)),
    );
    let state_file = PathBuf::from(format!("{}.state.json", file.display()));
    let Ok(text) = std::fs::read_to_string(&state_file) else {
        return; // no turn finished yet
    };
    let _: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{kill}: the engine state is not whole JSON: {e}"));
    // The state as the next open reads it: the commit journal's newest record when the state
    // file is behind it (the state file catches up only when a session closes).
    let Some(saved) = ctxhost::testing::committed_document(&file) else {
        return; // no turn finished yet
    };
    // The store writes its commit mark from the session's creation; the engine's state comes
    // with the first committed turn.
    let Some(state) = saved.get("state") else {
        return; // no turn committed yet
    };
    let n = state["n"].as_u64().expect("state.n");
    let pad = state["pad"].as_str().expect("state.pad").len() as u64;
    assert_eq!(pad, 4096 + n, "{kill}: a state mixed from two saves");
    // The state can be no newer than the transcript: the n-th message it ingested is stored,
    // and it is the message the state names.
    let ids: Vec<String> = got
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter(|e| e["type"] == "message")
        .filter_map(|e| e["id"].as_str().map(String::from))
        .collect();
    assert!(
        (n as usize) <= ids.len(),
        "{kill}: the state has ingested {n} messages, the transcript holds {}",
        ids.len()
    );
    if n > 0 {
        assert_eq!(
            state["last"].as_str(),
            Some(ids[n as usize - 1].as_str()),
            "{kill}: the state's last message is not the transcript's {n}th"
        );
    }
}

#[test]
fn a_replay_killed_at_random_points_leaves_a_prefix_and_a_whole_state() {
    let name = std::env::var("CTXHOST_CRASH_TRANSCRIPT")
        .unwrap_or_else(|_| "fasthooks-sample_main_transcript.jsonl".into());
    let transcript = common::transcript_arg(&name);
    let runs = env_u64("CTXHOST_CRASH_RUNS").unwrap_or(200);
    let seed = env_u64("CTXHOST_CRASH_SEED").unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            | 1
    });

    let full = tempfile::tempdir().expect("tempdir");
    let started = Instant::now();
    let status = replay(full.path(), &transcript)
        .status()
        .expect("run ctxhost");
    let whole_run = started.elapsed();
    assert!(status.success(), "the complete run fails: {status}");
    let complete = entries(&session_file(full.path()).expect("session file"));
    assert!(
        complete
            .iter()
            .filter(|e| e.contains("\"compaction\""))
            .count()
            > 1,
        "the run compacts, so kills land in compactions too"
    );

    let mut rng = Rng(seed);
    let span = whole_run.as_micros() as u64;
    let mut finished = 0;
    for i in 0..runs {
        let dir = tempfile::tempdir().expect("tempdir");
        let at = Duration::from_micros(rng.below(span));
        let mut child = replay(dir.path(), &transcript).spawn().expect("spawn");
        std::thread::sleep(at);
        let _ = child.kill(); // SIGKILL; an error means it had already exited
        let status = child.wait().expect("wait");
        if status.success() {
            finished += 1;
        }
        check_remains(
            dir.path(),
            &complete,
            &format!("kill {i} at {at:?} (CTXHOST_CRASH_SEED={seed})"),
        );
    }
    assert!(
        finished < runs,
        "no kill landed before the end of a run (seed {seed}); the test proved nothing"
    );
}
