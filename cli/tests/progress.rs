//! The replay progress bar, through the real binary: drawn on a terminal, absent when the output
//! is piped or `--json`, so scripts never see its control characters.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common;

use common::transcript_arg as transcript;

use std::path::Path;
use std::process::{Command, Output, Stdio};

fn replay_args(out: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "replay".to_owned(),
        transcript("pimono-large-session.jsonl"),
        "--window".to_owned(),
        "8000".to_owned(),
        "--out".to_owned(),
        out.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

/// Control characters a progress bar draws with: carriage return, escape (CSI), backspace.
fn control_chars(bytes: &[u8]) -> Vec<u8> {
    bytes
        .iter()
        .copied()
        .filter(|b| matches!(b, b'\r' | 0x1b | 0x08))
        .collect()
}

#[test]
fn piped_replay_output_has_no_progress_bar_control_characters() {
    for extra in [&[][..], &["--json"][..]] {
        let dir = tempfile::tempdir().expect("tempdir");
        let out: Output = Command::new(env!("CARGO_BIN_EXE_ctxhost"))
            .args(replay_args(dir.path(), extra))
            .env("CTXHOST_LOG", "off")
            .stdin(Stdio::null())
            .output()
            .expect("run ctxhost");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert_eq!(control_chars(&out.stdout), b"", "stdout {extra:?}");
        assert_eq!(
            control_chars(&out.stderr),
            b"",
            "stderr {extra:?}: {stderr}"
        );
        assert!(!stderr.contains("replaying"), "{extra:?}: {stderr}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("88"),
            "the replay itself ran"
        );
    }
}

/// Runs the binary on a pseudo-terminal (util-linux `script`), so stdout and stderr are ttys.
fn on_a_terminal(dir: &Path, extra: &[&str]) -> String {
    let args: Vec<String> = replay_args(dir, extra)
        .into_iter()
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect();
    let command = format!(
        "stty cols 120 rows 40; exec '{}' {}",
        env!("CARGO_BIN_EXE_ctxhost"),
        args.join(" ")
    );
    let out = Command::new("script")
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .env("CTXHOST_LOG", "off")
        .stdin(Stdio::null())
        .output()
        .expect("run script(1) from util-linux");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}");
    text
}

#[test]
fn a_terminal_gets_a_progress_bar_of_turns_on_stderr_and_json_never_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let screen = on_a_terminal(dir.path(), &[]);
    assert!(screen.contains("replaying ["), "{screen}");
    assert!(
        screen.contains("/88 turns"),
        "turns done of all turns: {screen}"
    );
    assert!(!control_chars(screen.as_bytes()).is_empty());
    // The bar is cleared before the summary, which is still there.
    assert!(screen.contains("88 turns in 1 session(s)"), "{screen}");

    let json = on_a_terminal(dir.path(), &["--json"]);
    assert!(!json.contains("replaying"), "{json}");
    let summary = json.lines().last().expect("summary line");
    assert!(summary.contains("\"summary\""), "{json}");
}
