//! The `ctxhost` binary from the outside: output shapes, exit codes, errors.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::bin::{ctxhost, json_lines};
use crate::common;

use common::{fixture_arg as fixture, transcript_arg as transcript};

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

const TURN_KEYS: [&str; 12] = [
    "turn",
    "engine",
    "fallback",
    "quarantined",
    "sessionMessages",
    "assembledMessages",
    "assembledTokens",
    "tokenBudget",
    "estimatedTokens",
    "compactions",
    "pairingRepairs",
    "modelCalls",
];

#[test]
fn replay_json_has_one_line_per_turn_then_a_summary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = ctxhost(&[
        "replay",
        &transcript("pimono-large-session.jsonl"),
        "--window",
        "8000",
        "--json",
        "--out",
        &dir.path().display().to_string(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out);
    let (summary, turns) = lines.split_last().expect("lines");
    assert_eq!(turns.len(), 88);
    for (i, t) in turns.iter().enumerate() {
        for key in TURN_KEYS {
            assert!(t.get(key).is_some(), "turn {i} lacks {key}: {t}");
        }
        assert_eq!(t["turn"], i as u64 + 1);
        assert_eq!(t["engine"], "legacy");
        let assembled = t["assembledTokens"].as_u64().expect("assembledTokens");
        let budget = t["tokenBudget"].as_u64().expect("tokenBudget");
        assert!(assembled <= budget, "turn {i}: {assembled} > {budget}");
    }
    let s = &summary["summary"];
    assert_eq!(s["turns"], 88);
    assert!(s["compactions"].as_u64().expect("compactions") > 0);
    assert_eq!(s["fallbacks"], 0);
    assert_eq!(s["quarantine"], Value::Null);
    assert!(s["maxAssembledTokens"].as_u64().expect("max") <= 6_000);
    assert!(s["wallMs"].is_u64());
    let sum: u64 = turns
        .iter()
        .map(|t| t["compactions"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(s["compactions"].as_u64(), Some(sum));
}

#[test]
fn replay_prints_a_table_and_a_closing_summary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = ctxhost(&[
        "replay",
        &transcript("sweagent-marshmallow-code__marshmallow-1867.traj"),
        "--window",
        "8000",
        "--out",
        &dir.path().display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let header = text.lines().next().expect("header");
    for col in [
        "turn",
        "session",
        "assembled",
        "tokens / budget",
        "compactions",
        "engine",
    ] {
        assert!(header.contains(col), "{header}");
    }
    assert!(text.contains("1 turns in 1 session(s)"), "{text}");
    assert!(text.contains("(SWE-agent .traj)"), "{text}");
    // The replayed session's transcript is where the summary says.
    assert!(
        text.contains(&format!("session transcripts: {}", dir.path().display())),
        "{text}"
    );
    let written: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
}

#[test]
fn a_failing_engine_falls_back_and_the_summary_names_the_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = ctxhost(&[
        "replay",
        &transcript("pimono-large-session.jsonl"),
        "--window",
        "8000",
        "--json",
        "--engine",
        &fixture("hostile/assemble_throws.lua"),
        "--out",
        &dir.path().display().to_string(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a quarantine is a problem worth an exit code"
    );
    let lines = json_lines(&out);
    let (summary, turns) = lines.split_last().expect("lines");
    assert_eq!(turns.len(), 88, "every turn completes");
    assert_eq!(turns[0]["engine"], "assemble-throws");
    assert_eq!(turns[0]["fallback"], false);
    assert_eq!(turns[2]["fallback"], true);
    assert_eq!(turns[2]["engine"], "legacy");
    assert_eq!(turns[2]["quarantined"], true);
    let q = &summary["summary"]["quarantine"];
    assert_eq!(q["engine"], "assemble-throws");
    assert_eq!(q["operation"], "assemble");
    let error = q["error"].as_str().expect("error");
    assert!(error.contains("assemble_throws.lua:7"), "{error}");
    assert!(error.contains("boom on call 3"), "{error}");
}

#[test]
fn strict_policy_returns_the_engine_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = ctxhost(&[
        "replay",
        &transcript("pimono-large-session.jsonl"),
        "--strict",
        "--engine",
        &fixture("hostile/assemble_throws.lua"),
        "--out",
        &dir.path().display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("assemble failed in engine \"assemble-throws\""),
        "{err}"
    );
}

#[test]
fn a_missing_transcript_is_an_error_naming_it() {
    let out = ctxhost(&["replay", "/nonexistent/session.jsonl"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/session.jsonl"));
}

#[test]
fn malformed_lines_are_skipped_and_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = std::fs::read_to_string(transcript("pimono-large-session.jsonl")).expect("read");
    let mut lines: Vec<&str> = src.lines().collect();
    lines.insert(5, "{\"type\":\"message\",\"message\":{\"role\":");
    let file: PathBuf = dir.path().join("torn.jsonl");
    std::fs::write(&file, lines.join("\n")).expect("write");
    let out = ctxhost(&[
        "replay",
        &file.display().to_string(),
        "--json",
        "--out",
        &dir.path().join("out").display().to_string(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out);
    assert_eq!(lines.last().expect("summary")["summary"]["skippedLines"], 1);
}

#[test]
fn check_passes_a_sound_engine_and_fails_a_broken_one() {
    let ok = ctxhost(&["check", &fixture("hostile/sound.lua")]);
    let text = String::from_utf8_lossy(&ok.stdout);
    assert_eq!(ok.status.code(), Some(0), "{text}");
    assert!(text.contains("compact on an over-budget session"), "{text}");
    assert!(text.trim_end().ends_with("sound"), "{text}");

    let bad = ctxhost(&["check", &fixture("hostile/assemble_throws.lua")]);
    let text = String::from_utf8_lossy(&bad.stdout);
    assert_eq!(bad.status.code(), Some(1), "{text}");
    assert!(text.contains("FAIL"), "{text}");
    assert!(text.contains("assemble_throws.lua:7"), "{text}");
    assert!(text.trim_end().ends_with("NOT sound"), "{text}");
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn doctor_reports_legacy_by_default() {
    let o = ctxhost(&["doctor"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let text = stdout(&o);
    assert!(text.contains("config:     built-in defaults"), "{text}");
    assert!(text.contains("engine:     legacy (default"), "{text}");
    assert!(text.contains("window:     32000 tokens"), "{text}");
}

#[test]
fn install_list_disable_uninstall_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("config.json5");
    let cfg_s = cfg.display().to_string();
    let engine = common::repo_root().join("scripts/delegating.lua");

    let o = ctxhost(&[
        "engines",
        "install",
        &engine.display().to_string(),
        "--config",
        &cfg_s,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(dir.path().join("engines/delegating.lua").is_file());
    let list = stdout(&ctxhost(&["engines", "list", "--config", &cfg_s]));
    assert!(list.starts_with("* delegating"), "{list}");
    let doctor = ctxhost(&["doctor", "--config", &cfg_s]);
    assert_eq!(doctor.status.code(), Some(0));
    assert!(
        stdout(&doctor).contains("engine:     delegating (configured"),
        "{}",
        stdout(&doctor)
    );

    // An unsound engine is refused with the reason, and nothing changes.
    let before = std::fs::read_to_string(&cfg).expect("config");
    let o = ctxhost(&[
        "engines",
        "install",
        &fixture("hostile/assemble_throws.lua"),
        "--config",
        &cfg_s,
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("assemble_throws.lua:7"),
        "{}",
        stdout(&o)
    );
    assert_eq!(std::fs::read_to_string(&cfg).expect("config"), before);

    // Disabling the engine in the slot resets the slot to legacy.
    assert_eq!(
        ctxhost(&["engines", "disable", "delegating", "--config", &cfg_s])
            .status
            .code(),
        Some(0)
    );
    let doctor = stdout(&ctxhost(&["doctor", "--config", &cfg_s]));
    assert!(doctor.contains("engine:     legacy (default"), "{doctor}");
    assert_eq!(
        ctxhost(&["engines", "enable", "delegating", "--config", &cfg_s])
            .status
            .code(),
        Some(0)
    );

    // Uninstalling removes the entry and the installed file.
    assert_eq!(
        ctxhost(&["engines", "uninstall", "delegating", "--config", &cfg_s])
            .status
            .code(),
        Some(0)
    );
    assert!(!dir.path().join("engines/delegating.lua").exists());
    assert!(
        stdout(&ctxhost(&["engines", "list", "--config", &cfg_s])).contains("no engines installed")
    );
    assert_eq!(
        ctxhost(&["engines", "uninstall", "delegating", "--config", &cfg_s])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn uninstalling_the_engine_in_the_slot_resets_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("config.json5");
    let cfg_s = cfg.display().to_string();
    let engine = common::repo_root().join("scripts/recent_turns.lua");
    ctxhost(&[
        "engines",
        "install",
        &engine.display().to_string(),
        "--config",
        &cfg_s,
    ]);
    ctxhost(&["engines", "uninstall", "recent-turns", "--config", &cfg_s]);
    let text = std::fs::read_to_string(&cfg).expect("config");
    let v: Value = json5_value(&text);
    assert_eq!(v["plugins"]["slots"]["contextEngine"], "legacy");
    assert!(dir.path().join("config.json5.bak").exists());
}

fn json5_value(text: &str) -> Value {
    serde_json::from_str(text).expect("the rewritten config is JSON")
}

#[test]
fn doctor_fails_when_the_slot_names_a_missing_or_disabled_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("c.json5");
    std::fs::write(&cfg, "{ plugins: { slots: { contextEngine: 'gone' } } }").expect("write");
    let o = ctxhost(&["doctor", "--config", &cfg.display().to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("fallback: the slot names \"gone\" but there is no such entry"));
    std::fs::write(
        &cfg,
        "{ plugins: { slots: { contextEngine: 'x' }, entries: { x: { enabled: false, path: 'x.lua' } } } }",
    )
    .expect("write");
    let o = ctxhost(&["doctor", "--config", &cfg.display().to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("fallback: the entry \"x\" is disabled"));
}

#[test]
fn config_errors_name_file_line_column_and_the_closest_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("bad.json5");
    std::fs::write(&cfg, "{\n  host: {\n    windw: 8000,\n  },\n}\n").expect("write");
    let o = ctxhost(&["replay", "--config", &cfg.display().to_string()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.json5:3:"), "{err}");
    assert!(
        err.contains("unknown key `windw` (did you mean `window`?)"),
        "{err}"
    );
}

#[test]
fn the_config_environment_variable_is_honoured() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("env.json5");
    std::fs::write(&cfg, "{ host: { window: 12345 } }").expect("write");
    let o = Command::new(env!("CARGO_BIN_EXE_ctxhost"))
        .args(["doctor"])
        .env("CTXHOST_CONFIG", &cfg)
        .output()
        .expect("run");
    let text = stdout(&o);
    assert!(text.contains("($CTXHOST_CONFIG)"), "{text}");
    assert!(text.contains("window:     12345 tokens"), "{text}");
}

/// `replay` without `--out` leaves nothing behind; `--keep` keeps the folder and names it.
#[test]
fn replay_removes_its_temporary_folder_unless_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["replay"];
        args.extend_from_slice(extra);
        Command::new(env!("CARGO_BIN_EXE_ctxhost"))
            .args(&args)
            .env("CTXHOST_LOG", "off")
            .env_remove("CTXHOST_CONFIG")
            .env("XDG_CONFIG_HOME", "/nonexistent/ctxhost-test-config")
            .env("TMPDIR", tmp.path())
            .output()
            .expect("run ctxhost")
    };
    let litter = || std::fs::read_dir(tmp.path()).unwrap().count();

    let o = run(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(
        !stdout(&o).contains("session transcripts:"),
        "{}",
        stdout(&o)
    );
    assert_eq!(litter(), 0, "nothing left in TMPDIR");

    let o = run(&["--keep"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert_eq!(litter(), 1, "--keep keeps the folder");
    let kept = std::fs::read_dir(tmp.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert!(
        stdout(&o).contains(&format!("session transcripts: {}", kept.display())),
        "{}",
        stdout(&o)
    );
}

/// `engines` commands edit the user's JSON5 in place: comments, layout and unrelated keys stay;
/// `use` fills the slot; installing over an entry says what it replaces.
#[test]
fn engine_commands_keep_the_users_comments_and_layout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("config.json5");
    let cfg_s = cfg.display().to_string();
    let original = r#"// my ctxhost config
{
  // which engine runs
  plugins: {
    slots: { contextEngine: 'legacy' }, // for now
  },
  host: {
    window: 16000, /* my model's window */
    tokenizer: "estimate",
  },
}
"#;
    std::fs::write(&cfg, original).unwrap();
    let engine = common::repo_root().join("scripts/delegating.lua");
    let engine = engine.display().to_string();
    let o = ctxhost(&[
        "engines",
        "install",
        &engine,
        "--no-activate",
        "--config",
        &cfg_s,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let text = std::fs::read_to_string(&cfg).unwrap();
    for kept in [
        "// my ctxhost config",
        "// which engine runs",
        "// for now",
        "window: 16000, /* my model's window */",
        "tokenizer: \"estimate\",",
    ] {
        assert!(text.contains(kept), "lost {kept:?}:\n{text}");
    }
    assert!(text.contains("delegating"), "{text}");

    let o = ctxhost(&["engines", "use", "delegating", "--config", &cfg_s]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let doctor = stdout(&ctxhost(&["doctor", "--config", &cfg_s]));
    assert!(
        doctor.contains("engine:     delegating (configured"),
        "{doctor}"
    );
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains("// for now"), "{text}");

    let o = ctxhost(&["engines", "install", &engine, "--config", &cfg_s]);
    assert!(
        stdout(&o).contains("replacing the installed delegating"),
        "{}",
        stdout(&o)
    );
}

/// The edges a user hits: a negative or tiny window, an empty file, a nested `new` path, logs
/// in a pipe, and `check`'s warnings.
#[test]
fn edges_get_plain_answers() {
    let o = ctxhost(&["replay", "--window", "-5"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("must be a positive number of tokens"), "{err}");
    assert!(!err.contains("-- -5"), "{err}");

    let o = ctxhost(&["replay", "--window", "100"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("the smallest window is 256"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let o = ctxhost(&["replay", &empty.display().to_string()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("the file is empty"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    let nested = dir.path().join("sub/dir/policy");
    let o = ctxhost(&["new", &nested.display().to_string(), "--lang", "lua"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(dir.path().join("sub/dir/policy.lua").is_file());

    // Each warning once, and no colour codes in a pipe.
    let o = Command::new(env!("CARGO_BIN_EXE_ctxhost"))
        .args(["check", &fixture("lua/typo_afterturn.lua")])
        .env_remove("CTXHOST_LOG")
        .env_remove("CTXHOST_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/ctxhost-test-config")
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        all.matches("unknown member `afterturn`").count(),
        1,
        "{all}"
    );
    assert!(!all.contains('\u{1b}'), "no ANSI escapes in a pipe: {all}");
}
