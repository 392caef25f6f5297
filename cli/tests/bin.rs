//! The `ctxhost` binary as the command tests run it: no config of the user's, no OpenClaw
//! config, no log output mixed into what they read.

#![allow(clippy::expect_used)] // test code: a panic is the failure report

use std::process::{Command, Output};

use serde_json::Value;

/// Runs `ctxhost ARGS` to completion.
pub fn ctxhost(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ctxhost"))
        .args(args)
        .env("CTXHOST_LOG", "off")
        .env_remove("CTXHOST_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/ctxhost-test-config")
        .env("OPENCLAW_CONFIG_PATH", "/nonexistent/openclaw.json")
        .output()
        .expect("run ctxhost")
}

/// Each stdout line parsed as JSON (`--json` output).
pub fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect()
}
