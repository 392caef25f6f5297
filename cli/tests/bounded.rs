//! Output an engine controls is bounded however much it writes: each log line is cut to the
//! log cap (4 KiB) with the cut counted, a lifecycle call writes at most 64 KiB of log lines
//! (the rest dropped, counted once when the call ends), `print` with many huge arguments
//! never joins them whole, `host.complete` failures count against the same limits, and what an
//! engine's child process writes on its stderr is relayed under a rate and size limit. Through
//! the real binary, in both languages and both isolation modes, with the host's log on.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::process::Command;

use crate::common;

/// The host's log line prefix (time, level, target, engine and session fields) is well under
/// this; the engine's text is at most the 4 KiB cap plus the cut note.
const MAX_LINE: usize = 4096 + 1024;

/// What one call may log (64 KiB) plus the prefixes of its at most 16 full lines and the note.
const MAX_PER_CALL: usize = (64 << 10) + 17 * 1024;

const LUA: &str = r#"
local M = { info = { id = "loud", name = "Loud" } }
local big = ("x"):rep(64 * 1024)
function M.ingest(p) return { ingested = true } end
function M.assemble(p)
  for i = 1, 200 do host.log.warn(big) end
  return { messages = p.messages, estimatedTokens = host.tokens(p.messages) }
end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#;

const RHAI: &str = r#"
fn info() { #{ id: "loud", name: "Loud" } }
fn ingest(p) { #{ ingested: true } }
fn assemble(p) {
    let big = "";
    big.pad(64 * 1024, 'x');
    for i in 0..200 { host::log::warn(big); }
    #{ messages: p.messages, estimatedTokens: host::tokens(p.messages) }
}
fn compact(p) { host::delegateCompaction(p) }
"#;

/// Replays the small Claude Code transcript through `engine` in `mode` (`thread` or `process`)
/// with the host's log at `level` (`print` logs at `info`); returns stderr and the number of
/// `assemble` calls the replay made.
fn replay_logging(file: &str, source: &str, level: &str, mode: &str) -> (String, usize) {
    let dir = tempfile::tempdir().unwrap();
    let engine = dir.path().join(file);
    std::fs::write(&engine, source).unwrap();
    let transcript =
        common::shared_dir().join("data/transcripts/fasthooks-sample_main_transcript.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_ctxhost"))
        .args(["replay", "--json", "--isolation", mode, "--engine"])
        .arg(&engine)
        .arg(&transcript)
        .env("CTXHOST_LOG", level)
        .env("NO_COLOR", "1")
        .env_remove("CTXHOST_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/ctxhost-test-config")
        .env("OPENCLAW_CONFIG_PATH", "/nonexistent/openclaw.json")
        .output()
        .expect("run ctxhost");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{file} {mode}: {:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or_default(),
        stderr
            .split('\n')
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let calls = crate::bin::json_lines(&out)
        .iter()
        .filter(|l| l["turn"].is_u64())
        .map(|l| l["modelCalls"].as_u64().unwrap_or(0) as usize)
        .sum::<usize>();
    (String::from_utf8_lossy(&out.stderr).into_owned(), calls)
}

fn bounded(file: &str, source: &str) {
    for mode in ["thread", "process"] {
        let (stderr, calls) = replay_logging(file, source, "warn", mode);
        assert!(calls > 0, "{mode}: the replay made no assemble call");
        let longest = stderr.lines().map(str::len).max().unwrap_or(0);
        assert!(longest <= MAX_LINE, "{mode}: a log line of {longest} bytes");
        assert!(
            stderr.contains("more bytes cut)"),
            "{mode}: each 64 KiB line says it was cut"
        );
        assert!(
            stderr.contains("log lines of one call (over 65536 bytes per call)"),
            "{mode}: the dropped lines are counted: {}",
            &stderr[..stderr.len().min(2000)]
        );
        // Every engine call (assemble, plus ingest/afterTurn/compact that log nothing) is under
        // its budget: the whole stderr is bounded by the calls, not by the 200 lines each wrote.
        let budget = calls * 4 * MAX_PER_CALL;
        assert!(
            stderr.len() <= budget,
            "{mode}: {} bytes of stderr for {calls} model calls (at most {budget})",
            stderr.len()
        );
    }
}

#[test]
fn a_lua_engine_logging_in_a_loop_is_cut_per_line_and_per_call() {
    bounded("loud.lua", LUA);
}

#[test]
fn a_rhai_engine_logging_in_a_loop_is_cut_per_line_and_per_call() {
    bounded("loud.rhai", RHAI);
}

#[test]
fn print_with_many_huge_arguments_logs_one_cut_line() {
    // 24 arguments of 4 MB: joined whole that would be a 96 MB string (and 907 MB for the
    // 40 MB arguments the attacker used); the line logged is cut at the cap all the same.
    let lua = r#"
local M = { info = { id = "loud", name = "Loud" } }
local big = ("y"):rep(4 * 1024 * 1024)
function M.ingest(p) return { ingested = true } end
function M.assemble(p)
  print(big, big, big, big, big, big, big, big, big, big, big, big,
        big, big, big, big, big, big, big, big, big, big, big, big)
  return { messages = p.messages, estimatedTokens = host.tokens(p.messages) }
end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#;
    for mode in ["thread", "process"] {
        let (stderr, _) = replay_logging("print.lua", lua, "info", mode);
        let line = stderr
            .lines()
            .find(|l| l.contains("yyyy"))
            .expect("the print reached the log");
        assert!(line.len() <= MAX_LINE, "{mode}: {} bytes", line.len());
        // 24 × 4 MiB + 23 tabs, less what was kept: the cap less room for the note.
        let cut = 24 * (4 << 20) + 23 - (4096 - 64);
        assert!(
            line.contains(&format!("… ({cut} more bytes cut)")),
            "{mode}: {}",
            &line[line.len().saturating_sub(200)..]
        );
    }
}

/// An engine that calls a model it does not have 2,000 times a call: each failure is logged
/// (naming no key), and those lines count against the engine's own log limits.
const COMPLETE_LUA: &str = r#"
local M = { info = { id = "asker", name = "Asker" } }
function M.ingest(p) return { ingested = true } end
function M.assemble(p)
  for i = 1, 2000 do host.complete({ prompt = "again " .. i }) end
  return { messages = p.messages, estimatedTokens = host.tokens(p.messages) }
end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#;

const COMPLETE_RHAI: &str = r#"
fn info() { #{ id: "asker", name: "Asker" } }
fn ingest(p) { #{ ingested: true } }
fn assemble(p) {
    for i in 0..2000 { host::complete(#{ prompt: `again ${i}` }); }
    #{ messages: p.messages, estimatedTokens: host::tokens(p.messages) }
}
fn compact(p) { host::delegateCompaction(p) }
"#;

#[test]
fn failed_model_calls_are_logged_within_the_engines_log_limits() {
    for (file, source) in [("asker.lua", COMPLETE_LUA), ("asker.rhai", COMPLETE_RHAI)] {
        for mode in ["thread", "process"] {
            let (stderr, calls) = replay_logging(file, source, "warn", mode);
            assert!(calls > 0, "{file} {mode}: no assemble call");
            assert!(
                stderr.contains("no model is available"),
                "{file} {mode}: the failure is logged: {}",
                &stderr[..stderr.len().min(2000)]
            );
            let budget = calls * 4 * MAX_PER_CALL;
            assert!(
                stderr.len() <= budget,
                "{file} {mode}: {} bytes of stderr for {calls} model calls (at most {budget})",
                stderr.len()
            );
        }
    }
}

/// An engine named with 64 KiB of newlines: the host's warning that the name differs from the
/// file's is one line per newline. In a child process that warning is on the child's stderr,
/// which the parent relays: blank lines skipped, each line cut, the engine's name cut on every
/// relayed line, at most 100 lines and 64 KiB a second. The relay adds at most a few lines to
/// what the same engine writes in process (it had added 13 MB: 200 lines each carrying the
/// whole name).
#[test]
fn a_childs_stderr_is_relayed_within_the_limits_of_an_engines_own_log() {
    let lua = r#"
local M = { info = { id = "nl" .. string.rep("\n", 65536), name = "Newlines" } }
function M.ingest(p) return { ingested = true } end
function M.assemble(p) return { messages = p.messages, estimatedTokens = host.tokens(p.messages) } end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#;
    let rhai = r#"
fn info() { let nl = ""; nl.pad(65536, "\n"); #{ id: "nl" + nl, name: "Newlines" } }
fn ingest(p) { #{ ingested: true } }
fn assemble(p) { #{ messages: p.messages, estimatedTokens: host::tokens(p.messages) } }
fn compact(p) { host::delegateCompaction(p) }
"#;
    for (file, source) in [("nl.lua", lua), ("nl.rhai", rhai)] {
        let (thread, _) = replay_logging(file, source, "warn", "thread");
        let (process, _) = replay_logging(file, source, "warn", "process");
        let relayed: Vec<&str> = process
            .lines()
            .filter(|l| l.contains("ctxhost::engine::isolation::child"))
            .collect();
        assert!(
            !relayed.is_empty(),
            "{file}: the child's warning is relayed"
        );
        assert!(
            relayed.iter().all(|l| l.len() <= MAX_LINE),
            "{file}: a relayed line of {} bytes",
            relayed.iter().map(|l| l.len()).max().unwrap_or(0)
        );
        let extra = process.len().saturating_sub(thread.len());
        assert!(
            extra <= 64 << 10,
            "{file}: the relay added {extra} bytes to the {} the engine writes in process",
            thread.len()
        );
    }
}
