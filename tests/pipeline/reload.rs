//! Reloading one hook (what `watch` does on a save of a hook file) swaps that hook alone: its
//! instance restarts with its state carried over, the other hooks keep their instances (and
//! what only a live VM holds), and the engine's generation does not move.

use serde_json::json;

use ctxhost::contract::message::Message;
use ctxhost::runtime::{Host, SessionHandle, SessionSpec};
use ctxhost::session::TurnInput;

use super::{fixture, pipeline};
use crate::common;

async fn turn(s: &SessionHandle, n: u32) -> String {
    let a = s
        .begin_turn(TurnInput {
            user: Message::user(format!("turn {n}")),
            is_heartbeat: false,
        })
        .await
        .expect("turn");
    s.end_turn(vec![Message::assistant("ok")])
        .await
        .expect("end");
    a.system_prompt_addition.unwrap_or_default()
}

#[test]
fn reloading_one_hook_leaves_the_other_hooks_instances_and_state_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let counter = std::fs::read_to_string(fixture("counter.lua")).expect("fixture");
    let (a, b) = (dir.path().join("a.lua"), dir.path().join("b.lua"));
    std::fs::write(&a, &counter).expect("write");
    std::fs::write(&b, &counter).expect("write");
    let config = pipeline(
        16_000,
        &[
            ("a", a.clone(), json!({"label": "a"})),
            ("b", b.clone(), json!({"label": "b"})),
        ],
    );
    common::block_on(async {
        let host = Host::start(config).await.expect("host");
        let s = host
            .create_session(SessionSpec::new("r", dir.path().join("r.jsonl")))
            .await
            .expect("session");
        turn(&s, 1).await;
        let second = turn(&s, 2).await;
        assert!(second.contains("a v1 state=2 vm=2"), "{second}");
        assert!(second.contains("b v1 state=2 vm=2"), "{second}");

        std::fs::write(&a, counter.replace(" v1 ", " v2 ")).expect("edit");
        assert_eq!(host.reload_hook("a").expect("reload"), 1);
        let third = turn(&s, 3).await;
        // a: the new version, a fresh VM, the state carried over.
        assert!(third.contains("a v2 state=3 vm=1"), "{third}");
        // b: the very same VM (its local count went on) and state.
        assert!(third.contains("b v1 state=3 vm=3"), "{third}");
        assert_eq!(
            host.engine_cell().number(),
            0,
            "the engine was not reloaded"
        );

        // A version that does not load is refused; the running one keeps serving.
        std::fs::write(&a, "this is not lua (").expect("break");
        let err = host.reload_hook("a").expect_err("a broken file");
        assert!(err.to_string().contains("a.lua"), "{err}");
        let fourth = turn(&s, 4).await;
        assert!(fourth.contains("a v2 state=4 vm=2"), "{fourth}");
        assert!(fourth.contains("b v1 state=4 vm=4"), "{fourth}");
        assert!(host.reload_hook("nope").is_err());
        s.close().await.expect("close");
    });
}
