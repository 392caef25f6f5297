//! Host calls an isolated engine's child sends to the parent run under the call's deadline, as
//! in process: an engine whose `compact` loops over `host.delegateCompaction` (each one the
//! host's own compaction, run by the parent for a child) is stopped at its deadline, at the
//! script's next step (not killed at deadline + grace), quarantined, and `legacy` compacts. Only the waits of such work (a model, the client's
//! compaction) are outside the deadline. In Lua and Rhai, in thread and process isolation.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use ctxhost::EngineErrorKind;
use ctxhost::config::{Config, Entry};
use ctxhost::contract::limits::Isolation;
use ctxhost::contract::message::Message;
use ctxhost::runtime::SessionSpec;
use ctxhost::session::{Session, TurnInput};

use crate::common::engine::Lang;

const LUA: &str = r#"local M = { info = { id = "delegator", name = "Delegator", ownsCompaction = true } }
function M.ingest(p) return { ingested = true } end
function M.assemble(p) return { messages = p.messages, estimatedTokens = 0 } end
function M.compact(p)
  local n = 0
  while true do host.delegateCompaction(p); n = n + 1 end
end
return M
"#;

const RHAI: &str = r#"fn info() { #{ id: "delegator", name: "Delegator", ownsCompaction: true } }
fn ingest(p) { #{ ingested: true } }
fn assemble(p) { #{ messages: p.messages, estimatedTokens: 0 } }
fn compact(p) {
    let n = 0;
    loop { host::delegateCompaction(p); n += 1; }
}
"#;

fn a_loop_of_delegated_compactions_is_stopped(lang: Lang, mode: Isolation) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("delegator.{lang}"));
    std::fs::write(&path, if lang == Lang::Lua { LUA } else { RHAI }).unwrap();
    let mut config = Config::default();
    config.host.limits.script.deadline_ms = 200;
    config.host.limits.script.grace_ms = 500;
    config.plugins.slots.context_engine = Some("delegator".into());
    config.plugins.entries.insert(
        "delegator".into(),
        Entry {
            path: Some(path),
            ..Entry::default()
        },
    );
    let host = crate::modes::host_in(config, mode);
    let spec = SessionSpec::new("s", dir.path().join("s.jsonl"));
    let mut s = Session::create(host.session_setup(&spec), &spec.file, "").unwrap();
    for i in 0..3 {
        s.begin_turn(TurnInput {
            user: Message::user(format!("question {i} {}", "word ".repeat(200))),
            is_heartbeat: false,
        })
        .unwrap();
        s.end_turn(vec![Message::assistant(format!("answer {i}"))])
            .unwrap();
    }
    let r = s.compact_now(None).expect("legacy compacts");
    assert!(r.ok, "{lang} {mode:?}: {r:?}");
    let failure = host.engine_failure().expect("quarantined");
    assert_eq!(
        (failure.op.as_str(), failure.kind),
        ("compact", EngineErrorKind::Deadline),
        "{lang} {mode:?}: {failure}"
    );
    // Stopped by its own deadline at the script's next step (in the child too: the host work
    // done for it counted there), not killed by the parent at deadline + grace.
    assert!(
        !failure.message.contains("killed"),
        "{lang} {mode:?}: {failure}"
    );
}

each_language_and_mode! {
    a_loop_of_delegated_compactions_is_stopped_at_the_deadline => a_loop_of_delegated_compactions_is_stopped;
}
