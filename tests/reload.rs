//! Hot reload through the host: a new version serves the next turn with the session's state
//! carried over; an invalid version leaves the old one serving; a good reload lifts a
//! quarantine.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::Path;

use ctxhost::config::{Config, Entry};
use ctxhost::contract::message::Message;
use ctxhost::runtime::{Host, SessionHandle, SessionSpec};
use ctxhost::session::TurnInput;

/// An engine that counts its assembles in state and names its version in the addition.
fn engine(version: &str, broken_assemble: bool) -> String {
    let fail = if broken_assemble {
        "error(\"broken assemble\")"
    } else {
        ""
    };
    format!(
        r#"local M = {{ info = {{ id = "counter", name = "Counter" }} }}
function M.ingest(p) return {{ ingested = true }} end
function M.assemble(p)
  {fail}
  p.state.n = (p.state.n or 0) + 1
  return {{ messages = p.messages, estimatedTokens = host.tokens(p.messages),
           systemPromptAddition = "{version} n=" .. p.state.n }}
end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#
    )
}

fn host(dir: &Path) -> Host {
    let mut config = Config::default();
    config.plugins.slots.context_engine = Some("counter".into());
    config.plugins.entries.insert(
        "counter".into(),
        Entry {
            path: Some(dir.join("counter.lua")),
            ..Entry::default()
        },
    );
    Host::new(config).expect("host")
}

async fn turn(s: &SessionHandle) -> (String, bool) {
    let a = s
        .begin_turn(TurnInput {
            user: Message::user("go"),
            is_heartbeat: false,
        })
        .await
        .expect("turn");
    s.end_turn(vec![Message::assistant("ok")])
        .await
        .expect("end");
    (a.system_prompt_addition.unwrap_or_default(), a.fallback)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_serves_the_next_turn_and_keeps_state() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("counter.lua"), engine("v1", false)).unwrap();
    let host = host(dir.path());
    let s = host
        .create_session(SessionSpec::new("s", dir.path().join("s.jsonl")))
        .await
        .unwrap();
    assert_eq!(turn(&s).await, ("v1 n=1".into(), false));
    assert_eq!(turn(&s).await, ("v1 n=2".into(), false));

    std::fs::write(dir.path().join("counter.lua"), engine("v2", false)).unwrap();
    assert_eq!(host.reload_engine().expect("reload"), 1);
    assert_eq!(
        turn(&s).await,
        ("v2 n=3".into(), false),
        "state carried over"
    );

    // An invalid version: the error names the file and line, v2 keeps serving.
    std::fs::write(dir.path().join("counter.lua"), "local M = {\n  info = \n").unwrap();
    let err = host.reload_engine().expect_err("syntax error");
    assert!(err.to_string().contains("counter.lua:3"), "{err}");
    assert_eq!(turn(&s).await, ("v2 n=4".into(), false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_reload_lifts_the_quarantine() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("counter.lua"), engine("v1", true)).unwrap();
    let host = host(dir.path());
    let s = host
        .create_session(SessionSpec::new("s", dir.path().join("s.jsonl")))
        .await
        .unwrap();
    let (_, fallback) = turn(&s).await;
    assert!(fallback, "the broken engine fell back to legacy");
    assert!(host.quarantine().contains("counter"));

    std::fs::write(dir.path().join("counter.lua"), engine("v2", false)).unwrap();
    host.reload_engine().expect("reload");
    assert!(!host.quarantine().contains("counter"));
    assert_eq!(turn(&s).await, ("v2 n=1".into(), false));
}
