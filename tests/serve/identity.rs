//! A session is one conversation: OpenClaw's `sessionId`, not the `sessionKey` that routes it
//! and survives a `/new`; and each client message is stored once however a call carrying it is
//! re-sent, whatever point a kill hit.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use serde_json::{Value, json};

use super::*;
use crate::common::engine::Lang;

const KEY: &str = "agent:main:main";

fn ingest(id: &str, message: Value) -> Value {
    json!({"sessionId": id, "sessionKey": KEY, "message": message})
}

fn view(id: &str, messages: &[Value]) -> Value {
    json!({"sessionId": id, "sessionKey": KEY, "messages": messages, "tokenBudget": 100_000,
           "prompt": "next"})
}

fn after_turn(id: &str, messages: &[Value]) -> Value {
    json!({"sessionId": id, "sessionKey": KEY, "sessionFile": "f", "messages": messages,
           "prePromptMessageCount": 0})
}

/// Every file under `dir`, by path, with its bytes.
fn tree(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// The session directories of a state directory.
fn sessions(state: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(state.join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

/// The stored message texts of the one session whose directory name starts with `slug`.
fn stored(state: &Path, slug: &str) -> Vec<String> {
    let dir = sessions(state)
        .into_iter()
        .find(|d| d.file_name().unwrap().to_string_lossy().starts_with(slug))
        .unwrap_or_else(|| panic!("no session {slug} in {:?}", sessions(state)));
    durability::stored_texts(&dir.join("transcript.jsonl"))
}

/// `scripts/recent_turns` in `lang`.
fn recent_turns(lang: Lang) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(format!("recent_turns.{}", lang.ext()))
}

/// A first client process tells conversation `id` a secret (after `bootstrap`, when given)
/// and sees it assembled back; returns the secret message.
async fn tell_a_secret(state: &Path, engine: &Path, id: &str, bootstrap: Option<Value>) -> Value {
    let secret = user("the launch code is 4417");
    let mut c = Client::start(state);
    c.init(engine).await;
    if let Some(b) = bootstrap {
        c.ok("bootstrap", b).await;
    }
    c.ok("ingest", ingest(id, secret.clone())).await;
    let r = c
        .ok("assemble", view(id, std::slice::from_ref(&secret)))
        .await;
    assert_eq!(texts(&r), ["the launch code is 4417"]);
    c.close().await;
    secret
}

async fn a_new_session_id_under_a_known_key_starts_empty(lang: Lang) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let engine = recent_turns(lang);
    let secret = tell_a_secret(&state, &engine, "sid-A", None).await;
    let a_before = tree(&state.join("sessions"));

    // OpenClaw's `/new`: the same key, a new sessionId, in a new process.
    let hello = user("hello, new conversation");
    let mut c = Client::start(&state);
    c.init(&engine).await;
    c.ok("ingest", ingest("sid-B", hello.clone())).await;
    let r = c
        .ok("assemble", view("sid-B", std::slice::from_ref(&hello)))
        .await;
    assert_eq!(texts(&r), ["hello, new conversation"], "B sees only itself");
    c.ok(
        "afterTurn",
        after_turn("sid-B", &[hello.clone(), assistant("hi")]),
    )
    .await;
    // A call naming only the key belongs to the conversation last seen under it.
    c.ok("dispose", json!({"sessionKey": KEY})).await;
    c.close().await;
    let after = tree(&state.join("sessions"));
    for (path, bytes) in &a_before {
        assert_eq!(after.get(path), Some(bytes), "A's {path:?} is untouched");
    }
    assert_eq!(sessions(&state).len(), 2);

    // A itself goes on where it was.
    let mut c = Client::start(&state);
    c.init(&engine).await;
    let r = c
        .ok(
            "assemble",
            view("sid-A", &[secret.clone(), assistant("noted")]),
        )
        .await;
    assert_eq!(texts(&r), ["the launch code is 4417", "noted"]);
    c.close().await;
    assert_eq!(stored(&state, "sid-B"), ["hello, new conversation", "hi"]);
}

both_languages!(async: a_new_session_id_under_a_known_key_starts_empty);

/// OpenClaw's `bootstrap` for `id`, with the session's lifecycle revision when it has one.
fn bootstrap(id: &str, revision: Option<&str>) -> Value {
    let mut target = json!({"agentId": "main", "sessionId": id, "sessionKey": KEY});
    if let Some(r) = revision {
        target["expectedLifecycleRevision"] = json!(r);
    }
    json!({"sessionId": id, "sessionKey": KEY, "sessionFile": KEY, "sessionTarget": target})
}

/// OpenClaw's reset in place of `id` as the next client process of `state` sees it: a
/// `bootstrap` with lifecycle revision `rev-1`, then the first message, `hello`. Asserts the
/// engine was given `hello` alone and returns the client, still open.
async fn first_message_after_a_reset(
    state: &Path,
    engine: &Path,
    id: &str,
    hello: &Value,
) -> Client {
    let mut c = Client::start(state);
    c.init(engine).await;
    c.ok("bootstrap", bootstrap(id, Some("rev-1"))).await;
    let r = c
        .ok("assemble", view(id, std::slice::from_ref(hello)))
        .await;
    assert_eq!(
        texts(&r),
        [hello["content"].as_str().unwrap()],
        "the reset conversation starts empty: {r}"
    );
    c
}

async fn a_reset_in_place_starts_an_empty_conversation_under_the_same_id(lang: Lang) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let engine = recent_turns(lang);
    tell_a_secret(&state, &engine, "sid-R", Some(bootstrap("sid-R", None))).await;
    let before = tree(&state.join("sessions"));

    // OpenClaw 2026.9.6's `sessions.reset` (`/new`): the same id and key, a new lifecycle
    // revision on the next bootstrap, an empty transcript. A new client process.
    let hello = user("hello after the reset");
    let mut c = first_message_after_a_reset(&state, &engine, "sid-R", &hello).await;
    // Calls that leave the revision out (a post-turn maintain, an assemble) stay in it.
    c.ok("bootstrap", bootstrap("sid-R", None)).await;
    let r = c
        .ok("assemble", view("sid-R", &[hello.clone(), assistant("hi")]))
        .await;
    assert_eq!(texts(&r), ["hello after the reset", "hi"]);
    c.close().await;

    // The next process still knows which lifecycle is current.
    let mut c = Client::start(&state);
    c.init(&engine).await;
    c.ok("bootstrap", bootstrap("sid-R", Some("rev-1"))).await;
    let r = c
        .ok("assemble", view("sid-R", &[hello.clone(), assistant("hi")]))
        .await;
    assert_eq!(texts(&r), ["hello after the reset", "hi"]);
    c.close().await;

    let after = tree(&state.join("sessions"));
    for (path, bytes) in &before {
        assert_eq!(
            after.get(path),
            Some(bytes),
            "the old conversation's {path:?} is untouched"
        );
    }
    assert_eq!(
        sessions(&state).len(),
        2,
        "the old conversation is kept beside the new one"
    );
}

both_languages!(async: a_reset_in_place_starts_an_empty_conversation_under_the_same_id);

/// A session created with a lifecycle revision (OpenClaw's Control UI threads) keeps its
/// history when its first bootstrap shows that revision: only a change is a reset.
#[tokio::test]
async fn a_first_lifecycle_revision_is_the_conversations_own() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let engine = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/recent_turns.lua");
    let first = user("first turn");
    let mut c = Client::start(&state);
    c.init(&engine).await;
    c.ok("ingest", ingest("sid-C", first.clone())).await;
    c.ok("assemble", view("sid-C", std::slice::from_ref(&first)))
        .await;
    c.ok("bootstrap", bootstrap("sid-C", Some("rev-0"))).await;
    let r = c
        .ok("assemble", view("sid-C", &[first.clone(), assistant("ok")]))
        .await;
    assert_eq!(texts(&r), ["first turn", "ok"]);
    c.close().await;
    assert_eq!(sessions(&state).len(), 1);
}

/// A conversation's first run has no `bootstrap` (OpenClaw has no session file yet); its
/// `afterTurn` shows the lifecycle, so a reset before the first `bootstrap` is still a reset.
#[tokio::test]
async fn a_reset_after_a_single_turn_starts_an_empty_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let engine = recent_turns(Lang::Lua);
    let secret = user("the launch code is 4417");
    let mut c = Client::start(&state);
    c.init(&engine).await;
    c.ok("ingest", ingest("sid-S", secret.clone())).await;
    c.ok("assemble", view("sid-S", std::slice::from_ref(&secret)))
        .await;
    let mut turn = after_turn("sid-S", &[secret.clone(), assistant("noted")]);
    turn["sessionTarget"] = json!({"agentId": "main", "sessionId": "sid-S", "sessionKey": KEY});
    c.ok("afterTurn", turn).await;
    c.close().await;

    let hello = user("hello after the reset");
    let c = first_message_after_a_reset(&state, &engine, "sid-S", &hello).await;
    c.close().await;
    assert_eq!(sessions(&state).len(), 2, "the first conversation is kept");
}

#[tokio::test]
async fn a_successor_a_compaction_reports_continues_the_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let source = window_engine("v1", 1000, true).replace(
        "firstKeptEntryId = p.messages[n].id,",
        "firstKeptEntryId = p.messages[n].id, sessionTarget = { sessionId = \"sid-A2\" },",
    );
    let (mut c, _) = Client::on(dir.path(), &source).await;
    c.ok("assemble", view("sid-A", &history(3))).await;
    let r = c
        .ok(
            "compact",
            json!({"sessionId": "sid-A", "sessionKey": KEY, "force": true,
                              "tokenBudget": 100_000}),
        )
        .await;
    assert_eq!(r["result"]["sessionTarget"]["sessionId"], "sid-A2", "{r}");
    c.close().await;
    let state = dir.path().join("state");
    let mut c = Client::start(&state);
    c.init(&dir.path().join("window.lua")).await;
    let r = c.ok("assemble", view("sid-A2", &[])).await;
    assert!(
        texts(&r).iter().any(|t| t == "answer 2"),
        "the successor holds the conversation: {r}"
    );
    // The successor's first revision is the conversation's own; a new one is a reset in place.
    c.ok("bootstrap", bootstrap("sid-A2", Some("rev-0"))).await;
    let r = c.ok("assemble", view("sid-A2", &[])).await;
    assert!(texts(&r).iter().any(|t| t == "answer 2"), "{r}");
    c.close().await;
    assert_eq!(sessions(&state).len(), 1, "one conversation, one directory");

    let hello = user("hello after resetting the successor");
    let engine = dir.path().join("window.lua");
    let c = first_message_after_a_reset(&state, &engine, "sid-A2", &hello).await;
    c.close().await;
    assert_eq!(
        sessions(&state).len(),
        2,
        "the compacted conversation is kept"
    );
}

#[tokio::test]
async fn a_retried_ingest_is_stored_once_and_no_acknowledged_message_goes_missing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, engine) = Client::on(dir.path(), &window_engine("v1", 1000, true)).await;
    let (q1, q2, a2, u3) = (user("q1"), user("q2"), assistant("a2"), user("u3"));
    c.ok("ingest", ingest("s", q1.clone())).await;
    c.ok("ingest", ingest("s", q2.clone())).await;
    // Both acknowledged; the process dies (its state is saved with each answer) and the bridge
    // re-sends the last call to a new one.
    c.close().await;
    let mut c = Client::start(&dir.path().join("state"));
    c.init(&engine).await;
    c.ok("ingest", ingest("s", q2.clone())).await;
    let turn = [q1, q2, a2, u3];
    c.ok("afterTurn", after_turn("s", &turn)).await;
    let r = c.ok("assemble", view("s", &turn)).await;
    assert_eq!(texts(&r), ["q1", "q2", "a2", "u3"]);
    c.close().await;
    assert_eq!(
        stored(&dir.path().join("state"), "s-"),
        ["q1", "q2", "a2", "u3"]
    );
}

#[tokio::test]
async fn a_view_given_up_before_the_next_ingest_stores_nothing_twice_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _) = Client::on(dir.path(), &window_engine("v1", 1000, true)).await;
    let (q1, a1, q2, a2) = (user("q1"), assistant("a1"), user("q2"), assistant("a2"));
    c.ok("ingest", ingest("s", q1.clone())).await;
    c.ok("assemble", view("s", std::slice::from_ref(&q1))).await;
    // The afterTurn carrying a1 never arrives (the bridge gave it up after its retry died
    // too); the next turn's ingest does.
    c.ok("ingest", ingest("s", q2.clone())).await;
    let turn = [q1, a1, q2, a2];
    c.ok("afterTurn", after_turn("s", &turn)).await;
    let r = c.ok("assemble", view("s", &turn)).await;
    let mut got = texts(&r);
    got.sort();
    assert_eq!(got, ["a1", "a2", "q1", "q2"], "{r}");
    c.close().await;
    let mut stored = stored(&dir.path().join("state"), "s-");
    stored.sort();
    assert_eq!(stored, ["a1", "a2", "q1", "q2"]);
}

#[tokio::test]
async fn a_kill_before_a_sessions_first_save_stores_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (mut c, engine) = Client::on(dir.path(), &window_engine("v1", 1000, true)).await;
    c.ok("ingest", ingest("s", user("q1"))).await;
    c.close().await;
    // The kill came between the first append and the first state write.
    let session = sessions(&state).pop().unwrap();
    std::fs::remove_file(session.join("transcript.jsonl.state.json")).unwrap();
    let mut c = Client::start(&state);
    c.init(&engine).await;
    c.ok("ingest", ingest("s", user("q1"))).await;
    let r = c
        .ok("assemble", view("s", &[user("q1"), assistant("a1")]))
        .await;
    assert_eq!(texts(&r), ["q1", "a1"]);
    c.close().await;
    assert_eq!(stored(&state, "s-"), ["q1", "a1"]);
}

#[tokio::test]
async fn a_kill_behind_a_summary_stores_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (mut c, engine) = Client::on(dir.path(), &window_engine("v1", 1000, true)).await;
    c.ok("assemble", view("s", &history(2))).await;
    let session = sessions(&state).pop().unwrap();
    let state_file = session.join("transcript.jsonl.state.json");
    let saved = std::fs::read(&state_file).unwrap();
    // A compaction appends its summary, a view appends a turn; the process dies before either
    // state write.
    let r = c
        .ok(
            "compact",
            json!({"sessionId": "s", "sessionKey": KEY, "force": true,
                              "tokenBudget": 100_000}),
        )
        .await;
    assert_eq!(r["compacted"], true, "{r}");
    c.ok("assemble", view("s", &history(3))).await;
    c.close().await;
    std::fs::write(&state_file, &saved).unwrap();
    let mut c = Client::start(&state);
    c.init(&engine).await;
    c.ok("assemble", view("s", &history(4))).await;
    c.close().await;
    let expected: Vec<String> = (0..4)
        .flat_map(|i| [format!("question {i}"), format!("answer {i}")])
        .collect();
    assert_eq!(stored(&state, "s-"), expected);
}

/// FNV-1a, as an earlier ctxhost named session directories.
fn fnv32(s: &str) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h as u32
}

/// A session directory as an earlier ctxhost kept it for `key`, holding `text`.
fn legacy_session(state: &Path, key: &str, text: &str) -> PathBuf {
    let slug: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let dir = state
        .join("sessions")
        .join(format!("{slug}-{:08x}", fnv32(key)));
    std::fs::create_dir_all(&dir).unwrap();
    let mut store =
        ctxhost::TranscriptStore::create(dir.join("transcript.jsonl"), key, "/").unwrap();
    store.append(vec![ctxhost::Message::user(text)]).unwrap();
    dir
}

#[tokio::test]
async fn sessions_kept_under_the_old_names_are_moved_once_or_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // One kept under its sessionId (a client that sent no key), one under a shared key.
    let own = legacy_session(&state, "sid-old", "kept under its own id");
    let shared = legacy_session(&state, KEY, "kept under the shared key");
    let shared_before = tree(&shared);
    let (mut c, _) = Client::on(dir.path(), &window_engine("v1", 1000, true)).await;
    let r = c
        .ok(
            "assemble",
            json!({"sessionId": "sid-old", "messages": [], "tokenBudget": 1000}),
        )
        .await;
    assert_eq!(texts(&r), ["kept under its own id"]);
    let r = c.ok("assemble", view("sid-new", &[user("fresh")])).await;
    assert_eq!(
        texts(&r),
        ["fresh"],
        "a new conversation never reads the key's"
    );
    c.close().await;
    assert!(!own.exists(), "moved to its new name");
    assert_eq!(stored(&state, "sid-old"), ["kept under its own id"]);
    assert_eq!(tree(&shared), shared_before, "left as it was");
}
