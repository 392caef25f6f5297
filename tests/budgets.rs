//! Engine time is bounded per turn as well as per call: an engine that stays under every call's
//! deadline yet makes each turn slow is reported, quarantined under `onExceed: "quarantine"`,
//! and failed by `check`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::Path;

use ctxhost::config::{Config, Entry, SlowEnginePolicy};
use ctxhost::error::EngineErrorKind;
use ctxhost::message::Message;
use ctxhost::runtime::{Host, SessionSpec};
use ctxhost::session::{Session, TurnInput};

const SLOW_LUA: &str = r#"local M = { info = { id = "slow", name = "Slow" } }
local function spin() local t = os.clock(); while os.clock() - t < 0.06 do end end
function M.ingest(p) spin(); return { ingested = true } end
function M.assemble(p) spin(); return { messages = p.messages, estimatedTokens = 0 } end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#;

const SLOW_RHAI: &str = r#"fn info() { #{ id: "slow", name: "Slow" } }
fn spin() { let t = timestamp(); while t.elapsed < 0.06 {} }
fn ingest(p) { spin(); #{ ingested: true } }
fn assemble(p) { spin(); #{ messages: p.messages, estimatedTokens: 0 } }
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
    let report = ctxhost::check::check_engine(&path, &config);
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
