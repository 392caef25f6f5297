//! What survives a crash and what a save changes: the commit record and the engine state as
//! one write; hot reload through the engine file's watcher.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::Duration;

use serde_json::{Value, json};

use super::*;

#[tokio::test]
async fn the_commit_record_and_the_engine_state_are_one_write() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let engine = write_engine(dir.path(), "window.lua", &window_engine("v1", 2, true));
    let commit = json!({"sessionId": "s-1", "sessionKey": "agent:main:main",
                        "advancementKey": "turn-1", "messages": [user("q"), assistant("a")]});
    let dispose = json!({"sessionId": "s-1", "sessionKey": "agent:main:main"});
    let mut c = Client::start(&state);
    c.init(&engine).await;
    c.ok("assemble", assemble_params(&history(1), 1000)).await;
    let session = std::fs::read_dir(state.join("sessions"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    // `dispose` brings the state file up to the last commit (a commit writes the journal
    // only; the state file catches up there, or when the session closes).
    c.ok("dispose", dispose.clone()).await;
    let before = snapshot(&session);
    assert_eq!(
        c.ok("commitTurn", commit.clone()).await["status"],
        "committed"
    );
    let committed = snapshot(&session);
    c.ok("dispose", dispose).await;
    let after = snapshot(&session);
    c.close().await;
    let changed_by = |snapshot: &std::collections::BTreeMap<String, Vec<u8>>| -> Vec<String> {
        snapshot
            .iter()
            .filter(|(name, bytes)| before.get(*name) != Some(bytes))
            .map(|(name, _)| name.clone())
            .collect()
    };
    // The commit itself writes one file: one record in the journal (one synced file).
    let by_the_commit = changed_by(&committed);
    assert_eq!(by_the_commit.len(), 1, "{by_the_commit:?}");
    assert!(
        by_the_commit[0].starts_with("transcript.jsonl.commit-"),
        "{by_the_commit:?}"
    );
    let changed = changed_by(&after);
    let changed: Vec<&String> = changed.iter().collect();
    // The commit is one record in the journal (one synced file) and the state file readers
    // see, replaced whole.
    assert_eq!(changed.len(), 2, "{changed:?}");
    assert!(
        changed[0].starts_with("transcript.jsonl.commit-"),
        "{changed:?}"
    );
    assert_eq!(changed[1], "transcript.jsonl.state.json", "{changed:?}");
    let saved: Value = serde_json::from_slice(&after["transcript.jsonl.state.json"]).unwrap();
    assert_eq!(saved["client"]["committed"], json!(["turn-1"]));
    assert_eq!(saved["state"]["commits"], 1);

    // A crash before that commit leaves the old files: the turn is neither recorded nor in the
    // state, and committing it again commits it once.
    for name in &changed {
        std::fs::write(session.join(name), &before[*name]).unwrap();
    }
    let file = session.join("transcript.jsonl.state.json");
    let mut c = Client::start(&state);
    c.init(&engine).await;
    assert_eq!(
        c.ok("commitTurn", commit.clone()).await["status"],
        "committed"
    );
    assert_eq!(c.ok("commitTurn", commit).await["status"], "duplicate");
    c.close().await;
    let saved: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(saved["state"]["commits"], 1);
}

/// Every file of a directory, by name.
fn snapshot(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_save_of_the_same_length_with_its_time_set_back_is_picked_up_by_the_watcher() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, engine) = Client::on(dir.path(), &window_engine("v1", 2, true)).await;
    let r = c.ok("assemble", assemble_params(&history(2), 10_000)).await;
    assert_eq!(r["systemPromptAddition"], "v1 n=1 kept 2 of 4");
    let modified = std::fs::metadata(&engine).unwrap().modified().unwrap();
    // A tick of the file system's clock later, as an editor restoring the time would.
    tokio::time::sleep(Duration::from_millis(50)).await;
    std::fs::write(&engine, window_engine("v2", 2, true)).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&engine)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    c.reloaded().await.unwrap();
    let r = c.ok("assemble", assemble_params(&history(2), 10_000)).await;
    assert_eq!(r["systemPromptAddition"], "v2 n=2 kept 2 of 4");
    c.close().await;
}

#[tokio::test]
async fn a_save_is_reloaded_by_the_watcher_with_no_call_and_the_same_text_again_is_no_new_version()
{
    let dir = tempfile::tempdir().unwrap();
    let (mut c, engine) = Client::on(dir.path(), &window_engine("v1", 2, true)).await;
    // No call looks at the file: the watcher reloads it on its own.
    let v2 = c
        .save(&engine, &window_engine("v2", 2, true))
        .await
        .unwrap();
    let again = c
        .save(&engine, &window_engine("v2", 2, true))
        .await
        .unwrap();
    assert_eq!(again, v2, "the same text written again is no new version");
    let r = c.ok("assemble", assemble_params(&history(2), 10_000)).await;
    assert_eq!(r["systemPromptAddition"], "v2 n=1 kept 2 of 4");
    c.close().await;
}

/// The text of every message entry of a transcript file, in order.
pub(super) fn stored_texts(transcript: &Path) -> Vec<String> {
    std::fs::read_to_string(transcript)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "message")
        .map(|e| match &e["message"]["content"] {
            Value::String(s) => s.clone(),
            Value::Array(b) => b[0]["text"].as_str().unwrap_or_default().to_owned(),
            _ => String::new(),
        })
        .collect()
}

#[tokio::test]
async fn messages_a_crash_stored_before_the_state_write_are_mirrored_once_after_a_restart() {
    crash_before_the_commit(false).await;
}

/// The same crash in a state directory an earlier ctxhost wrote (its state file has no commit
/// mark and there is no journal): the messages stored after the saved mirror are matched
/// against the next view instead.
#[tokio::test]
async fn messages_a_crash_stored_before_an_earlier_ctxhosts_state_write_are_mirrored_once() {
    crash_before_the_commit(true).await;
}

async fn crash_before_the_commit(earlier_ctxhost: bool) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let engine = write_engine(dir.path(), "window.lua", &window_engine("v1", 1000, true));
    let mut c = Client::start(&state);
    c.init(&engine).await;
    c.ok("assemble", assemble_params(&history(1), 10_000)).await;
    let session = std::fs::read_dir(state.join("sessions"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let state_file = session.join("transcript.jsonl.state.json");
    // The state file brought up to the last commit (a commit writes the journal only).
    c.ok(
        "dispose",
        json!({"sessionId": "s-1", "sessionKey": "agent:main:main"}),
    )
    .await;
    let mut saved = snapshot(&session);
    saved.remove("transcript.jsonl");
    // The next view stores two more messages; then the process dies before the commit that
    // records them in the mirror: the transcript has them, the state file and the commit
    // journal are the old ones.
    c.ok("assemble", assemble_params(&history(2), 10_000)).await;
    c.close().await;
    for (name, bytes) in &saved {
        std::fs::write(session.join(name), bytes).unwrap();
    }
    if earlier_ctxhost {
        let mut old: Value = serde_json::from_slice(&saved["transcript.jsonl.state.json"]).unwrap();
        let mark = old.as_object_mut().unwrap().remove("commit").unwrap();
        // An earlier ctxhost wrote how many messages its mirror accounts for.
        old["stored"] = mark["entries"].clone();
        std::fs::write(&state_file, serde_json::to_vec(&old).unwrap()).unwrap();
        for name in saved.keys().filter(|n| n.contains(".commit-")) {
            std::fs::remove_file(session.join(name)).unwrap();
        }
    }
    let transcript = session.join("transcript.jsonl");
    assert_eq!(
        stored_texts(&transcript).len(),
        4,
        "the crash kept the append"
    );

    // The client's next process: bootstrap and maintain first (as OpenClaw does), then a view
    // holding the crashed call's messages and a new turn.
    let mut c = Client::start(&state);
    c.init(&engine).await;
    let key = json!({"sessionId": "s-1", "sessionKey": "agent:main:main", "sessionFile": "f"});
    c.ok("bootstrap", key.clone()).await;
    c.ok("maintain", key).await;
    let r = c.ok("assemble", assemble_params(&history(3), 10_000)).await;
    let expected: Vec<String> = (0..3)
        .flat_map(|i| [format!("question {i}"), format!("answer {i}")])
        .collect();
    assert_eq!(texts(&r), expected, "the window holds each message once");
    assert_eq!(r["systemPromptAddition"], "v1 n=2 kept 6 of 6");
    // The same view again, from a process that saved normally: nothing new.
    c.ok("assemble", assemble_params(&history(3), 10_000)).await;
    c.close().await;
    assert_eq!(
        stored_texts(&transcript),
        expected,
        "the transcript holds each message once"
    );
    // The engine's state was saved before the crashed call, so it never saw those messages:
    // they were ingested again (once), with the new ones.
    let saved: Value = serde_json::from_slice(&std::fs::read(&state_file).unwrap()).unwrap();
    assert_eq!(saved["state"]["ingested"], 6, "{saved}");
}

/// The FNV-1a fingerprint an earlier ctxhost kept per mirrored message (role, text and tool
/// call id, each ended by a 0 byte), as 16 hex digits.
fn old_fingerprint(role: &str, text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in [role.as_bytes(), &[0], text.as_bytes(), &[0]].concat() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[tokio::test]
async fn a_mirror_an_earlier_ctxhost_saved_as_fingerprints_is_read_once_and_nothing_is_stored_twice()
 {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let engine = write_engine(dir.path(), "window.lua", &window_engine("v1", 1000, true));
    let two = [user("question 0"), assistant("answer 0")];
    let mut c = Client::start(&state);
    c.init(&engine).await;
    c.ok("assemble", assemble_params(&two, 10_000)).await;
    c.close().await;
    // The state file as an earlier ctxhost wrote it: the mirror as one fingerprint a message.
    let session = std::fs::read_dir(state.join("sessions"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let file = session.join("transcript.jsonl.state.json");
    let mut saved: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert!(saved["client"]["view"].is_object(), "{saved}");
    saved["client"] = json!({
        "mirror": {"fingerprints": [old_fingerprint("user", "question 0"), old_fingerprint("assistant", "answer 0")]},
        "committed": [],
    });
    std::fs::write(&file, serde_json::to_vec_pretty(&saved).unwrap()).unwrap();

    let mut c = Client::start(&state);
    c.init(&engine).await;
    let mut three = two.to_vec();
    three.push(user("question 1"));
    let r = c.ok("assemble", assemble_params(&three, 10_000)).await;
    assert_eq!(texts(&r), ["question 0", "answer 0", "question 1"]);
    c.close().await;
    assert_eq!(
        stored_texts(&session.join("transcript.jsonl")),
        ["question 0", "answer 0", "question 1"],
        "the old mirror's messages are not stored again"
    );
    let saved: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert!(
        saved["client"]["view"].is_object() && saved["client"].get("mirror").is_none(),
        "the next save writes the new form: {saved}"
    );
}

/// `host.store: {kind: "sqlite"}`: a served session lives in the database (no session files),
/// and the next client process continues it, each message stored once.
#[tokio::test]
async fn a_session_kept_in_sqlite_continues_in_the_next_process() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let engine = write_engine(dir.path(), "window.lua", &window_engine("v1", 1000, true));
    let db = dir.path().join("db").join("sessions.db");
    let config = dir.path().join("ctxhost.json5");
    std::fs::write(
        &config,
        format!(
            "{{ host: {{ store: {{ kind: \"sqlite\", path: {:?} }} }} }}",
            db.display().to_string()
        ),
    )
    .unwrap();
    let init = json!({"engine": engine, "config": config});
    let mut c = Client::start(&state);
    c.ok("initialize", init.clone()).await;
    c.ok("assemble", assemble_params(&history(2), 10_000)).await;
    c.close().await;
    assert!(
        db.exists(),
        "the database was created where the config says"
    );
    assert!(!state.join("sessions").exists(), "no session files");

    let mut c = Client::start(&state);
    c.ok("initialize", init).await;
    let r = c.ok("assemble", assemble_params(&history(3), 10_000)).await;
    let expected: Vec<String> = (0..3)
        .flat_map(|i| [format!("question {i}"), format!("answer {i}")])
        .collect();
    assert_eq!(texts(&r), expected);
    assert_eq!(r["systemPromptAddition"], "v1 n=2 kept 6 of 6");
    c.close().await;
    let backend =
        ctxhost::store::sqlite::SqliteBackend::open(&db, ctxhost::transcript::Durability::Entry)
            .unwrap();
    let listed = ctxhost::store::Backend::sessions(&backend).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].messages, 6);
}

/// `host.store: {kind: "postgres"}`: when another process takes a session's lease, this
/// process's next commit is refused; serve drops the session and answers the call with
/// -32003 (nothing of that call stored), and once the lease is free the next call opens the
/// session again and stores the turn once.
#[tokio::test]
#[allow(
    clippy::await_holding_lock,
    reason = "the read guard only keeps the server-restart tests (writers, on other threads) out while this test talks to the server"
)]
async fn a_session_whose_lease_moved_is_dropped_and_the_call_answered_with_an_error() {
    let Some(pg) = crate::pg_server::Scratch::new("serve_lease_moved") else {
        return;
    };
    let _server = crate::pg_server::SERVER.read();
    let dir = tempfile::tempdir().unwrap();
    let engine = write_engine(dir.path(), "window.lua", &window_engine("v1", 1000, true));
    let config = dir.path().join("ctxhost.json5");
    std::fs::write(
        &config,
        format!(
            "{{ host: {{ store: {{ kind: \"postgres\", url: {:?}, schema: {:?} }} }} }}",
            pg.url, pg.schema
        ),
    )
    .unwrap();
    let entries = |pg: &crate::pg_server::Scratch| -> i64 {
        let rows = pg.sql(&format!(
            "SELECT count(*) FROM \"{}\".ctxhost_entries",
            pg.schema
        ));
        rows[0].get(0)
    };
    let mut c = Client::start(&dir.path().join("state"));
    c.ok("initialize", json!({"engine": engine, "config": config}))
        .await;
    c.ok("assemble", assemble_params(&history(1), 10_000)).await;
    assert_eq!(entries(&pg), 2);

    // Another process takes the session over (a newer fencing token, its own owner).
    pg.sql(&format!(
        "UPDATE \"{}\".ctxhost_leases SET owner = 'another process', token = token + 1, \
         expires_at = now() + interval '1 hour'",
        pg.schema
    ));
    let r = c
        .call("assemble", assemble_params(&history(2), 10_000))
        .await;
    assert_eq!(r["error"]["code"], -32003, "{r}");
    assert_eq!(entries(&pg), 2, "nothing of the refused call was stored");

    // The other process lets go: the session opens here again and the turn is stored once.
    pg.sql(&format!("DELETE FROM \"{}\".ctxhost_leases", pg.schema));
    let r = c.ok("assemble", assemble_params(&history(2), 10_000)).await;
    assert_eq!(texts(&r).len(), 4, "{r}");
    assert_eq!(entries(&pg), 4);
    c.close().await;
}
