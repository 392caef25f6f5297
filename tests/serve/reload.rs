//! Hot reload under `serve`: a saved engine is picked up by the watcher (a broken save keeps the
//! old one), a reload lifts a quarantine, and a saved pipeline hook is reloaded alone while the
//! other hooks keep their state.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use super::*;

/// `tests/fixtures/hooks/versioned.lua` at `version`.
fn versioned_hook(version: &str) -> String {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hooks/versioned.lua");
    std::fs::read_to_string(fixture)
        .unwrap()
        .replace("@version@", version)
}

#[tokio::test]
async fn a_saved_engine_is_picked_up_by_the_watcher_and_a_broken_save_keeps_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, engine) = Client::on(dir.path(), &window_engine("v1", 2, true)).await;
    let r = c.ok("assemble", assemble_params(&history(2), 10_000)).await;
    assert_eq!(r["systemPromptAddition"], "v1 n=1 kept 2 of 4");
    c.save(&engine, &window_engine("v2", 3, true))
        .await
        .unwrap();
    let r = c.ok("assemble", assemble_params(&history(2), 10_000)).await;
    assert_eq!(
        r["systemPromptAddition"], "v2 n=2 kept 3 of 4",
        "state carried over"
    );
    c.save(&engine, "return {").await.unwrap_err();
    let r = c.ok("assemble", assemble_params(&history(2), 10_000)).await;
    assert_eq!(
        r["systemPromptAddition"], "v2 n=3 kept 3 of 4",
        "the broken save is refused"
    );
    c.close().await;
}

#[tokio::test]
async fn a_reload_lifts_the_quarantine() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, engine) = Client::on(dir.path(), &broken_engine()).await;
    let r = c.ok("assemble", assemble_params(&history(2), 10_000)).await;
    assert!(
        r.get("systemPromptAddition").is_none(),
        "quarantined: legacy answered"
    );
    c.save(&engine, &window_engine("fixed", 2, true))
        .await
        .unwrap();
    let r = c.ok("assemble", assemble_params(&history(2), 10_000)).await;
    assert_eq!(r["systemPromptAddition"], "fixed n=1 kept 2 of 4");
    c.close().await;
}

#[tokio::test]
async fn a_saved_hook_is_reloaded_alone_and_the_other_hooks_keep_their_state() {
    let dir = tempfile::tempdir().unwrap();
    // `counter` counts its calls in its session state and in a VM local; `other` names its
    // version.
    let counter = dir.path().join("counter.lua");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hooks/counter.lua"),
        &counter,
    )
    .unwrap();
    let other = write_engine(dir.path(), "other.lua", &versioned_hook("v1"));
    let config = dir.path().join("pipeline.json5");
    let json = json!({
        "plugins": {
            "slots": {"contextEngine": "pipeline"},
            "entries": {
                "counter": {"path": counter, "config": {"label": "counter"}},
                "other": {"path": other},
            },
        },
        "host": {"pipeline": {"hooks": ["counter", "other"]}, "watch": {"debounceMs": 30}},
    });
    std::fs::write(&config, json.to_string()).unwrap();
    let mut c = Client::start(&dir.path().join("state"));
    c.ok("initialize", json!({"config": config})).await;
    let addition = |r: &Value| {
        r["systemPromptAddition"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let r = c.ok("assemble", assemble_params(&history(1), 10_000)).await;
    let first = addition(&r);
    assert!(first.contains("counter v1 state=1 vm=1"), "{first}");
    assert!(first.contains("other v1"), "{first}");

    assert_eq!(c.save(&other, &versioned_hook("v2")).await, Ok(1));
    let r = c.ok("assemble", assemble_params(&history(2), 10_000)).await;
    let second = addition(&r);
    // The counter goes on in the same VM with its state; the saved hook's new version shows.
    assert!(second.contains("counter v1 state=2 vm=2"), "{second}");
    assert!(
        second.contains("other v2") && !second.contains("other v1"),
        "{second}"
    );

    let refused = c.save(&other, "return {").await.unwrap_err();
    assert!(refused.contains("other.lua"), "{refused}");
    let r = c.ok("assemble", assemble_params(&history(3), 10_000)).await;
    let third = addition(&r);
    assert!(third.contains("counter v1 state=3 vm=3"), "{third}");
    assert!(
        third.contains("other v2"),
        "the broken save is refused: {third}"
    );
    c.close().await;
}
