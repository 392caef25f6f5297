//! Engine time is bounded per turn as well as per call: an engine that stays under every call's
//! deadline yet makes each turn slow is reported, quarantined under `onExceed: "quarantine"`,
//! and failed by `check`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::Path;

use ctxhost::EngineErrorKind;
use ctxhost::config::{Config, Entry, SlowEnginePolicy};
use ctxhost::contract::limits::Isolation;
use ctxhost::contract::message::Message;
use ctxhost::runtime::{Host, SessionSpec};
use ctxhost::session::{Session, TurnInput};

// Slow but within the budget (`fit`), so `check` fails it for its time alone.
const SLOW_LUA: &str = r#"local fit = require("fit")
local M = { info = { id = "slow", name = "Slow" } }
local function spin() local t = os.clock(); while os.clock() - t < 0.06 do end end
function M.ingest(p) spin(); return { ingested = true } end
function M.assemble(p)
  spin()
  local kept, tokens = fit.newest_first(p.messages, p.tokenBudget)
  return { messages = kept, estimatedTokens = tokens }
end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#;

const SLOW_RHAI: &str = r#"import "fit" as fit;
fn info() { #{ id: "slow", name: "Slow" } }
fn spin() { let t = timestamp(); while t.elapsed < 0.06 {} }
fn ingest(p) { spin(); #{ ingested: true } }
fn assemble(p) {
    spin();
    let r = fit::newest_first(p.messages, p.tokenBudget);
    #{ messages: r.kept, estimatedTokens: r.tokens }
}
fn compact(p) { host::delegateCompaction(p) }
"#;

fn host(path: &Path, policy: SlowEnginePolicy) -> Host {
    let mut config = Config::default();
    config.host.turn_budget.engine_ms = 100;
    config.host.turn_budget.on_exceed = policy;
    config.host.turn_budget.strikes = 2;
    config.plugins.slots.context_engine = Some("slow".into());
    config.plugins.entries.insert(
        "slow".into(),
        Entry {
            path: Some(path.to_path_buf()),
            ..Entry::default()
        },
    );
    Host::new(config).unwrap()
}

fn turn(s: &mut Session) -> ctxhost::session::TurnStats {
    s.begin_turn(TurnInput {
        user: Message::user("go"),
        is_heartbeat: false,
    })
    .unwrap();
    s.end_turn(vec![Message::assistant("ok")]).unwrap()
}

fn slow_engine_is_quarantined_after_its_strikes(file: &str, source: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file);
    std::fs::write(&path, source).unwrap();

    // Report only: every turn is marked slow, the engine keeps serving.
    let h = host(&path, SlowEnginePolicy::Report);
    let spec = SessionSpec::new("r", dir.path().join("r.jsonl"));
    let mut s = Session::create(h.session_setup(&spec), &spec.file, "").unwrap();
    for _ in 0..3 {
        let stats = turn(&mut s);
        assert!(stats.slow, "{stats:?}");
        assert!(stats.engine_ms > 100.0, "{stats:?}");
    }
    assert!(h.engine_failure().is_none());
    let times = s.call_times().summary();
    assert!(
        times.iter().any(|t| t.method == "assemble" && t.calls == 3),
        "{times:?}"
    );

    // Quarantine: after two slow turns in a row the engine is out, legacy answers.
    let h = host(&path, SlowEnginePolicy::Quarantine);
    let spec = SessionSpec::new("q", dir.path().join("q.jsonl"));
    let mut s = Session::create(h.session_setup(&spec), &spec.file, "").unwrap();
    turn(&mut s);
    assert!(h.engine_failure().is_none(), "one strike");
    turn(&mut s);
    let failure = h.engine_failure().expect("quarantined");
    assert_eq!(failure.kind, EngineErrorKind::Limit);
    assert!(
        failure.to_string().contains("turn budget of 100 ms"),
        "{failure}"
    );
    let a = s
        .begin_turn(TurnInput {
            user: Message::user("go"),
            is_heartbeat: false,
        })
        .unwrap();
    assert!(a.fallback);
    assert_eq!(a.engine, "legacy");

    // `check` judges the same engine against the same budget.
    let mut config = Config::default();
    config.host.turn_budget.engine_ms = 100;
    let report = ctxhost::tools::check::check_engine(&path, &config);
    assert!(!report.sound, "{:#?}", report.steps);
    let step = report.steps.last().unwrap();
    assert_eq!(step.step, "engine time per turn", "{step:?}");
    assert!(report.slowest_turn_ms > 100.0);
}

#[test]
fn a_slow_lua_engine_is_reported_then_quarantined_and_check_fails_it() {
    slow_engine_is_quarantined_after_its_strikes("slow.lua", SLOW_LUA);
}

#[test]
fn a_slow_rhai_engine_is_reported_then_quarantined_and_check_fails_it() {
    slow_engine_is_quarantined_after_its_strikes("slow.rhai", SLOW_RHAI);
}

/// Output an engine controls is bounded: a 30 MB error message is cut where it is kept and
/// reported, and megabytes of compaction `details` never reach the session file.
#[test]
fn huge_error_text_and_compaction_details_are_capped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loud.lua");
    std::fs::write(
        &path,
        r#"local M = { info = { id = "loud", name = "Loud", ownsCompaction = true } }
function M.ingest(p) return { ingested = true } end
function M.assemble(p)
  if p.state.fail then error(("x"):rep(30000000)) end
  return { messages = p.messages, estimatedTokens = 0 }
end
function M.compact(p)
  p.state.fail = true
  local first = p.messages[#p.messages]
  return { ok = true, compacted = true, result = { summary = "s", tokensBefore = 1,
    firstKeptEntryId = first.id, details = { blob = ("d"):rep(2000000) } } }
end
return M
"#,
    )
    .unwrap();
    let mut config = Config::default();
    config.plugins.slots.context_engine = Some("loud".into());
    config.plugins.entries.insert(
        "loud".into(),
        Entry {
            path: Some(path.clone()),
            ..Entry::default()
        },
    );
    // Building the 30 MB error takes time on a loaded machine; this test is about its size.
    config.host.limits.script.deadline_ms = 10_000;
    let h = Host::new(config).unwrap();
    let spec = SessionSpec::new("s", dir.path().join("s.jsonl"));
    let mut s = Session::create(h.session_setup(&spec), &spec.file, "").unwrap();
    turn(&mut s);
    s.compact_now(None).unwrap();
    let size = std::fs::metadata(&spec.file).unwrap().len();
    assert!(size < 100_000, "session file is {size} bytes");
    let text = std::fs::read_to_string(&spec.file).unwrap();
    assert!(text.contains("over the 65536-byte cap"), "{text}");

    let a = s
        .begin_turn(TurnInput {
            user: Message::user("go"),
            is_heartbeat: false,
        })
        .unwrap();
    assert!(a.fallback, "the throwing assemble fell back");
    let failure = h.engine_failure().expect("quarantined");
    assert!(
        failure.message.len() < 5_000,
        "{} bytes",
        failure.message.len()
    );
    assert!(
        failure.message.contains("more bytes cut)"),
        "{}",
        failure.message.chars().take(200).collect::<String>()
    );
}

/// A config of one engine file under the given `host` section (JSON5), parsed as a user's is.
fn config_for(path: &Path, host: &str) -> Config {
    let text = format!(
        "{{ plugins: {{ slots: {{ contextEngine: \"big\" }}, entries: {{ big: {{ path: {:?} }} }} }}, host: {host} }}",
        path.display().to_string()
    );
    Config::parse(&text, "test config").unwrap()
}

/// The state cap counts the state as written: control characters are escaped to six bytes
/// each, so 300 KB of them is 1.8 MB on disk, over a 1 MiB cap, and never reaches the disk (nor
/// crosses from a child process to its parent). In both isolation modes.
fn state_counts_as_written(file: &str, source: &str) {
    for mode in [Isolation::Thread, Isolation::Process] {
        state_counts_as_written_in(file, source, mode);
    }
}

fn state_counts_as_written_in(file: &str, source: &str, mode: Isolation) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file);
    std::fs::write(&path, source).unwrap();
    let h = crate::modes::host_in(
        config_for(
            &path,
            "{ limits: { results: { maxResultBytes: 1048576 } } }",
        ),
        mode,
    );
    let spec = SessionSpec::new("s", dir.path().join("s.jsonl"));
    let mut s = Session::create(h.session_setup(&spec), &spec.file, "").unwrap();
    turn(&mut s);
    let failure = h.engine_failure().expect("quarantined");
    assert_eq!(failure.kind, EngineErrorKind::Limit, "{mode:?}: {failure}");
    assert!(
        failure.to_string().contains("as written"),
        "{mode:?}: {failure}"
    );
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let entry = entry.unwrap();
        let len = entry.metadata().unwrap().len();
        assert!(
            len < 1 << 20,
            "{mode:?}: {} is {len} bytes",
            entry.path().display()
        );
    }
}

#[test]
fn engine_state_is_capped_as_written_lua() {
    state_counts_as_written(
        "big.lua",
        r#"local M = { info = { id = "big", name = "Big" } }
function M.ingest(p) p.state.s = ("\1"):rep(300000); return { ingested = true } end
function M.assemble(p) return { messages = p.messages, estimatedTokens = 0 } end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#,
    );
}

#[test]
fn engine_state_is_capped_as_written_rhai() {
    state_counts_as_written(
        "big.rhai",
        r#"fn info() { #{ id: "big", name: "Big" } }
fn ingest(p) { let s = ""; s.pad(300000, "\x01"); this.s = s; #{ ingested: true } }
fn assemble(p) { #{ messages: p.messages, estimatedTokens: 0 } }
fn compact(p) { host::delegateCompaction(p) }
"#,
    );
}

/// A summary bigger than the whole token budget could never be sent: it is an invalid result
/// (the engine quarantined, `legacy` compacts), not one more megabyte on disk per compaction.
/// In both isolation modes.
fn oversized_summary_is_refused(file: &str, source: &str) {
    for mode in [Isolation::Thread, Isolation::Process] {
        oversized_summary_is_refused_in(file, source, mode);
    }
}

fn oversized_summary_is_refused_in(file: &str, source: &str, mode: Isolation) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file);
    std::fs::write(&path, source).unwrap();
    // A long deadline: building a megabyte of summary is not what is tested.
    let host = "{ window: 8000, limits: { deadlineMs: 10000 } }";
    let h = crate::modes::host_in(config_for(&path, host), mode);
    let spec = SessionSpec::new("s", dir.path().join("s.jsonl"));
    let mut s = Session::create(h.session_setup(&spec), &spec.file, "").unwrap();
    turn(&mut s);
    s.compact_now(None).unwrap();
    let failure = h.engine_failure().expect("quarantined");
    assert_eq!(
        failure.kind,
        EngineErrorKind::InvalidResult,
        "{mode:?}: {failure}"
    );
    assert!(
        failure.to_string().contains("over the whole token budget"),
        "{mode:?}: {failure}"
    );
    let size = std::fs::metadata(&spec.file).unwrap().len();
    assert!(size < 100_000, "{mode:?}: session file is {size} bytes");
}

#[test]
fn a_summary_over_the_whole_budget_is_refused_lua() {
    oversized_summary_is_refused(
        "big.lua",
        r#"local M = { info = { id = "big", name = "Big", ownsCompaction = true } }
function M.ingest(p) return { ingested = true } end
function M.assemble(p) return { messages = p.messages, estimatedTokens = 0 } end
function M.compact(p)
  local first = p.messages[#p.messages]
  return { ok = true, compacted = true, result = { summary = ("word "):rep(200000),
    tokensBefore = 1, firstKeptEntryId = first.id } }
end
return M
"#,
    );
}

#[test]
fn a_summary_over_the_whole_budget_is_refused_rhai() {
    oversized_summary_is_refused(
        "big.rhai",
        r#"fn info() { #{ id: "big", name: "Big", ownsCompaction: true } }
fn ingest(p) { #{ ingested: true } }
fn assemble(p) { #{ messages: p.messages, estimatedTokens: 0 } }
fn compact(p) {
    let first = p.messages[p.messages.len() - 1];
    let s = ""; for i in 0..200000 { s += "word "; }
    #{ ok: true, compacted: true, result: #{ summary: s, tokensBefore: 1, firstKeptEntryId: first.id } }
}
"#,
    );
}
