use std::sync::Arc;

use serde_json::json;

use super::jsonl::{JsonlBackend, JsonlStore, state_path};
use super::memory::MemoryBackend;
use super::*;
use crate::contract::message::Message;
use crate::transcript::Durability;

fn texts(messages: &[Arc<Message>]) -> Vec<String> {
    messages.iter().map(|m| m.text()).collect()
}

fn commit_turn(store: &mut dyn SessionStore, state: &serde_json::Value) {
    store
        .commit(Commit {
            state: Some(&Arc::new(state.clone())),
            turn_ended: true,
        })
        .unwrap();
}

#[test]
fn a_commit_keeps_entries_state_and_turns_together_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    let mut opened = JsonlStore::create(&file, "s1", "/w", Durability::Entry).unwrap();
    let stored = opened
        .store
        .append(vec![Message::user("one"), Message::assistant("two")])
        .unwrap();
    let state = json!({"engine": "e", "state": {"n": 2}});
    commit_turn(&mut *opened.store, &state);
    assert_eq!(
        opened.store.cursor().entry_id.as_deref(),
        Some(&*stored[1].id)
    );
    drop(opened);

    let again = JsonlStore::open(&file, "s1", Durability::Entry).unwrap();
    assert_eq!(texts(&again.messages), ["one", "two"]);
    assert_eq!(again.state, Some(state));
    assert_eq!(again.store.meta().turns, Some(1));
    assert!(again.store.meta().created_at.is_some());
    let cursor = again.store.cursor();
    assert_eq!((cursor.backend.as_str(), cursor.seq), ("fs-jsonl", 2));
}

#[test]
fn a_turn_that_never_committed_is_set_aside_and_the_session_opens_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    let mut opened = JsonlStore::create(&file, "s1", "", Durability::Entry).unwrap();
    opened.store.append(vec![Message::user("kept")]).unwrap();
    let state = json!({"engine": "e", "state": 1});
    commit_turn(&mut *opened.store, &state);
    // The next turn appends, then the process dies before its commit.
    opened
        .store
        .append(vec![Message::user("lost turn")])
        .unwrap();
    drop(opened);
    // ... and a torn line after it.
    let mut bytes = std::fs::read(&file).unwrap();
    bytes.extend_from_slice(b"{\"type\":\"mess");
    std::fs::write(&file, &bytes).unwrap();

    let mut again = JsonlStore::open(&file, "s1", Durability::Entry).unwrap();
    assert_eq!(texts(&again.messages), ["kept"]);
    assert_eq!(again.state, Some(state));
    let aside = std::fs::read_to_string(dir.path().join("t.jsonl.uncommitted")).unwrap();
    assert!(aside.contains("lost turn"), "{aside}");
    assert!(aside.contains("{\"type\":\"mess"), "{aside}");

    // The session goes on from its last commit, with readable lines only.
    again.store.append(vec![Message::user("retried")]).unwrap();
    again.store.commit(Commit::default()).unwrap();
    drop(again);
    let last = JsonlStore::open(&file, "s1", Durability::Entry).unwrap();
    assert_eq!(texts(&last.messages), ["kept", "retried"]);
}

#[test]
fn a_state_file_an_earlier_ctxhost_wrote_opens_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    let mut t = crate::transcript::TranscriptStore::create(&file, "old", "").unwrap();
    t.append(vec![Message::user("a"), Message::user("b")])
        .unwrap();
    drop(t);
    let old = json!({"engine": "e", "state": {"k": "v"}, "client": {"mirror": {}}, "stored": 2});
    std::fs::write(state_path(&file), serde_json::to_vec(&old).unwrap()).unwrap();

    let opened = JsonlStore::open(&file, "old", Durability::Entry).unwrap();
    assert_eq!(texts(&opened.messages), ["a", "b"]);
    assert_eq!(opened.state, Some(old));
    assert!(!dir.path().join("t.jsonl.uncommitted").exists());
}

#[test]
fn the_memory_store_forgets_what_was_not_committed() {
    let backend = MemoryBackend::new();
    let mut s = backend.open("m", "").unwrap();
    s.store.append(vec![Message::user("one")]).unwrap();
    s.store.commit(Commit::default()).unwrap();
    s.store.append(vec![Message::user("uncommitted")]).unwrap();
    drop(s);
    let again = backend.open("m", "").unwrap();
    assert_eq!(texts(&again.messages), ["one"]);
    assert_eq!(backend.sessions().unwrap()[0].messages, 1);
}

#[test]
fn a_session_imports_with_its_ids_once_and_a_different_one_is_refused() {
    let source = MemoryBackend::new();
    let mut s = source.open("conv", "").unwrap();
    s.store
        .append(vec![Message::user("q"), Message::assistant("a")])
        .unwrap();
    let state = json!({"engine": "e", "state": null});
    s.store
        .commit(Commit {
            state: Some(&Arc::new(state.clone())),
            turn_ended: true,
        })
        .unwrap();
    let meta = s.store.meta();
    drop(s);
    let messages = source.open("conv", "").unwrap().messages;

    let dir = tempfile::tempdir().unwrap();
    let target = JsonlBackend::new(dir.path(), Durability::None);
    assert!(
        target
            .import("conv", &messages, Some(&state), &meta)
            .unwrap()
    );
    assert!(
        !target
            .import("conv", &messages, Some(&state), &meta)
            .unwrap()
    );
    let copied = target.open("conv", "").unwrap();
    assert_eq!(
        messages_digest(&copied.messages),
        messages_digest(&messages)
    );
    assert_eq!(copied.state, Some(state.clone()));
    assert_eq!(copied.store.meta().turns, Some(1));
    drop(copied);

    let other = vec![Arc::new(Message {
        id: "00000001".into(),
        ..Message::user("something else")
    })];
    let err = target.import("conv", &other, None, &meta).unwrap_err();
    assert!(err.to_string().contains("nothing was copied"), "{err}");
    let listed = target.sessions().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].id.as_str(), listed[0].messages), ("conv", 2));
}

#[test]
fn a_session_id_never_names_a_path_outside_the_state_directory() {
    let dir = tempfile::tempdir().unwrap();
    let backend = JsonlBackend::new(dir.path(), Durability::None);
    let session = backend.session_dir("../../etc/passwd");
    assert!(session.starts_with(dir.path().join("sessions")));
    assert_eq!(session.parent().unwrap(), dir.path().join("sessions"));
}

/// Every file of a directory, by name.
fn files(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect()
}

#[test]
fn a_power_loss_after_a_commit_is_repaired_from_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    let mut opened = JsonlStore::create(&file, "s1", "", Durability::Entry).unwrap();
    opened.store.append(vec![Message::user("one")]).unwrap();
    commit_turn(&mut *opened.store, &json!({"engine": "e", "state": 1}));
    let after_first = files(dir.path());
    opened.store.append(vec![Message::user("two")]).unwrap();
    let second = json!({"engine": "e", "state": 2});
    commit_turn(&mut *opened.store, &second);
    drop(opened);

    // A power loss: what was not synced is gone. The transcript's bytes of the second turn
    // and the state file's replacement were never synced; the journal's record was.
    for name in ["t.jsonl", "t.jsonl.state.json"] {
        std::fs::write(dir.path().join(name), &after_first[name]).unwrap();
    }
    let again = JsonlStore::open(&file, "s1", Durability::Entry).unwrap();
    assert_eq!(texts(&again.messages), ["one", "two"]);
    assert_eq!(again.state, Some(second.clone()));
    assert_eq!(again.store.meta().turns, Some(2));
    drop(again);
    // The state file readers see is the journal's again.
    let (state, _) = {
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(state_path(&file)).unwrap()).unwrap();
        (doc["state"].clone(), ())
    };
    assert_eq!(state, json!(2));
}

#[test]
fn a_torn_journal_record_leaves_the_commit_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    let mut opened = JsonlStore::create(&file, "s1", "", Durability::Entry).unwrap();
    opened.store.append(vec![Message::user("one")]).unwrap();
    let first = json!({"engine": "e", "state": 1});
    commit_turn(&mut *opened.store, &first);
    let after_first = files(dir.path());
    opened.store.append(vec![Message::user("two")]).unwrap();
    commit_turn(&mut *opened.store, &json!({"engine": "e", "state": 2}));
    drop(opened);
    let written: Vec<String> = files(dir.path())
        .into_iter()
        .filter(|(name, bytes)| name.contains(".commit-") && after_first.get(name) != Some(bytes))
        .map(|(name, _)| name)
        .collect();
    assert_eq!(written.len(), 1, "one journal slot per commit: {written:?}");

    // The process died while writing the second record: it is torn (cut in its middle; the
    // zeros its slot grew by after it), the state file old.
    let slot = dir.path().join(&written[0]);
    let mut torn = std::fs::read(&slot).unwrap();
    let record = torn.iter().rposition(|b| *b != 0).map_or(0, |end| end + 1);
    torn.truncate(record / 2);
    std::fs::write(&slot, torn).unwrap();
    std::fs::write(state_path(&file), &after_first["t.jsonl.state.json"]).unwrap();

    let again = JsonlStore::open(&file, "s1", Durability::Entry).unwrap();
    assert_eq!(texts(&again.messages), ["one"]);
    assert_eq!(again.state, Some(first));
    let aside = std::fs::read_to_string(dir.path().join("t.jsonl.uncommitted")).unwrap();
    assert!(aside.contains("two"), "{aside}");
}

#[test]
fn a_commit_syncs_the_transcript_only_past_its_unsynced_limit() {
    // Many small turns: each record carries the transcript bytes since the last sync, and
    // those stay bounded (the transcript is synced when they pass the limit).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    let mut opened = JsonlStore::create(&file, "s1", "", Durability::Entry).unwrap();
    let state = json!({"engine": "e", "state": null});
    let mut largest = 0;
    for n in 0..300 {
        opened
            .store
            .append(vec![Message::user(format!("{n}: {}", "x".repeat(1000)))])
            .unwrap();
        commit_turn(&mut *opened.store, &state);
        let slots = files(dir.path())
            .into_iter()
            .filter(|(name, _)| name.contains(".commit-"))
            .map(|(_, b)| b.len())
            .max()
            .unwrap();
        largest = largest.max(slots);
    }
    drop(opened);
    assert!(largest < 80 << 10, "largest record: {largest} bytes");
    let again = JsonlStore::open(&file, "s1", Durability::Entry).unwrap();
    assert_eq!(again.messages.len(), 300);
    assert_eq!(again.store.meta().turns, Some(300));
}

#[test]
fn journal_slots_grow_in_steps_not_with_every_longer_record() {
    // A session's records grow call by call (each carries the transcript bytes since its last
    // sync): a slot that grew with every one would make every commit's sync record a new
    // size. The slots grow seldom; every commit still opens again.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    let mut opened = JsonlStore::create(&file, "s1", "", Durability::Entry).unwrap();
    let mut sizes = std::collections::BTreeSet::new();
    for n in 0..60 {
        opened
            .store
            .append(vec![Message::user(format!("{n}: {}", "x".repeat(200)))])
            .unwrap();
        commit_turn(&mut *opened.store, &json!({"engine": "e", "state": n}));
        for slot in 0..2 {
            let path = dir.path().join(format!("t.jsonl.commit-{slot}"));
            sizes.insert((slot, std::fs::metadata(path).unwrap().len()));
        }
    }
    drop(opened);
    // Each slot: empty before its first record, then one size.
    let grown: Vec<_> = sizes.iter().filter(|(_, len)| *len > 0).collect();
    assert_eq!(grown.len(), 2, "slot sizes seen: {sizes:?}");
    let again = JsonlStore::open(&file, "s1", Durability::Entry).unwrap();
    assert_eq!(again.messages.len(), 60);
    assert_eq!(again.state, Some(json!({"engine": "e", "state": 59})));
}

/// Files of a directory, by name.
type Files = std::collections::BTreeMap<String, Vec<u8>>;

/// Four turns whose first two states are long and last two short: each journal slot ends up
/// holding a short record written over a long one (slots are written in place). Returns the
/// files after the second commit and after the fourth.
fn short_records_over_long_ones(dir: &std::path::Path) -> (Files, Files) {
    let file = dir.join("t.jsonl");
    let mut opened = JsonlStore::create(&file, "s1", "", Durability::Entry).unwrap();
    let long = "x".repeat(6000);
    let mut after_second = Files::new();
    for (n, text) in ["one", "two", "three", "four"].into_iter().enumerate() {
        opened.store.append(vec![Message::user(text)]).unwrap();
        let state = if n < 2 { json!(long) } else { json!(n + 1) };
        commit_turn(&mut *opened.store, &json!({"engine": "e", "state": state}));
        if n == 1 {
            after_second = files(dir);
        }
    }
    drop(opened);
    (after_second, files(dir))
}

#[test]
fn a_journal_record_written_over_a_longer_one_reads_as_itself() {
    // A power loss after the fourth commit: the state file and the transcript as the second
    // commit left them; only the journal (synced) holds the third and fourth. Its records
    // are shorter than what their slots held before: the older record's end that follows
    // each one is not part of it.
    let dir = tempfile::tempdir().unwrap();
    let (after_second, after_fourth) = short_records_over_long_ones(dir.path());
    for slot in ["t.jsonl.commit-0", "t.jsonl.commit-1"] {
        assert!(
            after_fourth[slot].len() > 6000,
            "{slot} keeps the older, longer record's end"
        );
    }
    for name in ["t.jsonl", "t.jsonl.state.json"] {
        std::fs::write(dir.path().join(name), &after_second[name]).unwrap();
    }
    let file = dir.path().join("t.jsonl");
    let again = JsonlStore::open(&file, "s1", Durability::Entry).unwrap();
    assert_eq!(texts(&again.messages), ["one", "two", "three", "four"]);
    assert_eq!(again.state, Some(json!({"engine": "e", "state": 4})));
    assert_eq!(again.store.meta().turns, Some(4));
}

#[test]
fn a_record_torn_over_a_longer_one_leaves_the_commit_before_it() {
    // The process died while the fourth record was written over the second (in place): its
    // first half is new, the rest the second record's. It fails its digest; the third stands.
    let dir = tempfile::tempdir().unwrap();
    let (after_second, after_fourth) = short_records_over_long_ones(dir.path());
    let slot = "t.jsonl.commit-0";
    let (new, old) = (&after_fourth[slot], &after_second[slot]);
    // Torn inside the new record's state (just past its header line).
    let cut = new.iter().position(|b| *b == b'\n').unwrap() + 20;
    assert_ne!(new[cut..cut + 20], old[cut..cut + 20]);
    let mut torn = new[..cut].to_vec();
    torn.extend_from_slice(&old[cut..]);
    std::fs::write(dir.path().join(slot), torn).unwrap();
    std::fs::write(
        dir.path().join("t.jsonl.state.json"),
        &after_second["t.jsonl.state.json"],
    )
    .unwrap();
    let file = dir.path().join("t.jsonl");
    let again = JsonlStore::open(&file, "s1", Durability::Entry).unwrap();
    assert_eq!(texts(&again.messages), ["one", "two", "three"]);
    assert_eq!(again.state, Some(json!({"engine": "e", "state": 3})));
    let aside = std::fs::read_to_string(dir.path().join("t.jsonl.uncommitted")).unwrap();
    assert!(aside.contains("four"), "{aside}");
}
