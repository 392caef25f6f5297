//! What users see, pinned: the `replay` table, `check` and `doctor` as they print. A change in
//! visible output shows up in review as a snapshot diff (`cli/tests/snapshots/*.snap`; accept
//! one with `INSTA_UPDATE=always cargo test -p ctxhost-cli` or `cargo insta review`).
//! Durations, temporary paths and the checkout's own path are masked.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::process::Command;

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
