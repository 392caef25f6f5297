//! `host.limits.memoryBytes` holds for an engine's whole life, Lua or Rhai: memory it keeps
//! between calls counts. A breach is kind `Memory`, the engine is quarantined and `legacy` answers.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use ctxhost::EngineErrorKind;
use ctxhost::config::{Config, Entry};
use ctxhost::contract::message::Message;
use ctxhost::runtime::{Host, SessionSpec};
use ctxhost::session::{Session, TurnInput};

const CAP: usize = 32 << 20;

/// Runs up to `turns` turns of `source` under a 32 MiB cap; returns the engine's failure.
fn failure_within(file: &str, source: &str, turns: usize) -> Option<ctxhost::EngineError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file);
    std::fs::write(&path, source).unwrap();
    let mut config = Config::default();
    config.host.limits.script.memory_bytes = CAP;
    config.plugins.slots.context_engine = Some("hog".into());
    config.plugins.entries.insert(
        "hog".into(),
        Entry {
            path: Some(path),
            ..Entry::default()
        },
    );
    let host = Host::new(config).unwrap();
    let spec = SessionSpec::new("s", dir.path().join("s.jsonl"));
    let mut s = Session::create(host.session_setup(&spec), &spec.file, "").unwrap();
    for _ in 0..turns {
        let a = s
            .begin_turn(TurnInput {
                user: Message::user("go"),
                is_heartbeat: false,
            })
            .unwrap();
        s.end_turn(vec![Message::assistant("ok")]).unwrap();
        if a.fallback {
            break;
        }
    }
    host.engine_failure()
}

#[test]
fn memory_a_lua_engine_keeps_between_calls_counts_against_its_cap() {
    // 8 MiB more every call, kept in a module-level table: over a 32 MiB cap within a few
    // turns (before, the cap was re-armed above what was kept at every call and this ran on).
    let hoard = r#"local keep = {}
local M = { info = { id = "hog", name = "Hog" } }
function M.ingest(p) return { ingested = true } end
function M.assemble(p)
  -- Each a new string (Luau interns equal strings, so the same text would be kept once).
  keep[#keep + 1] = string.rep("x", 8 * 1024 * 1024) .. #keep
  return { messages = p.messages, estimatedTokens = 0 }
end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#;
    let failure = failure_within("hog.lua", hoard, 12).expect("the hoard hits the cap");
    assert_eq!(failure.kind, EngineErrorKind::Memory, "{failure}");
}

#[test]
fn a_lua_engine_that_frees_what_it_used_runs_on() {
    let churn = r#"local M = { info = { id = "hog", name = "Churn" } }
function M.ingest(p) return { ingested = true } end
function M.assemble(p)
  local tmp = string.rep("x", 8 * 1024 * 1024)
  return { messages = p.messages, estimatedTokens = #tmp - #tmp }
end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#;
    assert_eq!(failure_within("churn.lua", churn, 12), None);
}

#[test]
fn memory_a_rhai_engine_keeps_in_its_state_counts_against_its_cap() {
    // The Rhai twin: 8 MiB more every call, kept in the state `this`.
    let hoard = r#"fn info() { #{ id: "hog", name: "Hog" } }
fn ingest(p) { #{ ingested: true } }
fn assemble(p) {
    if this.keep == () { this.keep = []; }
    let s = "x";
    s.pad(8 * 1024 * 1024, "x");
    this.keep.push(s);
    #{ messages: p.messages, estimatedTokens: 0 }
}
fn compact(p) { host::delegateCompaction(p) }
"#;
    let failure = failure_within("hog.rhai", hoard, 12).expect("the hoard hits the cap");
    assert_eq!(failure.kind, EngineErrorKind::Memory, "{failure}");
}

#[test]
fn memory_a_rhai_engine_keeps_by_assignment_counts_against_its_cap() {
    // Kept by plain assignment (no guarded builtin on the way): measured after the call.
    let hoard = r#"fn info() { #{ id: "hog", name: "Hog" } }
fn ingest(p) { #{ ingested: true } }
fn assemble(p) {
    let n = if this.n == () { 0 } else { this.n };
    let s = "x";
    s.pad(8 * 1024 * 1024, "x");
    this[`k${n}`] = s;
    this.n = n + 1;
    #{ messages: p.messages, estimatedTokens: 0 }
}
fn compact(p) { host::delegateCompaction(p) }
"#;
    let failure = failure_within("hoard.rhai", hoard, 12).expect("the hoard hits the cap");
    assert_eq!(failure.kind, EngineErrorKind::Memory, "{failure}");
}

#[test]
fn a_rhai_engine_that_frees_what_it_used_runs_on() {
    let churn = r#"fn info() { #{ id: "hog", name: "Churn" } }
fn ingest(p) { #{ ingested: true } }
fn assemble(p) {
    let tmp = "x";
    tmp.pad(8 * 1024 * 1024, "x");
    #{ messages: p.messages, estimatedTokens: tmp.len() - tmp.len() }
}
fn compact(p) { host::delegateCompaction(p) }
"#;
    assert_eq!(failure_within("churn.rhai", churn, 12), None);
}
