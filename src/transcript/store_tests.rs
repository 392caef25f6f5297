use super::*;
use crate::contract::message::{
    AssistantMessage, ContentBlock, Role, ToolCallBlock, ToolResultMessage,
};
use serde_json::json;

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn msg(v: Value) -> Message {
    serde_json::from_value(v).unwrap()
}

fn lines_of(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn sample() -> Vec<Message> {
    vec![
        msg(
            json!({"role":"user","content":[{"type":"text","text":"hi","cache":true}],
                   "timestamp":1,"weird":{"nested":[1,2]}}),
        ),
        msg(json!({"role":"assistant","content":[
                       {"type":"thinking","thinking":"hmm","signature":"sig"},
                       {"type":"toolCall","id":"call_1","name":"read","arguments":{"path":"a"},"x":1},
                       {"type":"fancy","payload":7}],
                   "stopReason":"toolUse","model":"m","usage":{"input":3}})),
        msg(
            json!({"role":"toolResult","toolCallId":"call_1","toolName":"read",
                   "content":[{"type":"text","text":"ok"}],"isError":false,"details":{"d":1}}),
        ),
        msg(
            json!({"role":"custom","customType":"note","content":"n","excludeFromContext":true,"k":"v"}),
        ),
    ]
}

#[test]
fn create_append_reopen_round_trip_keeps_unknown_fields() {
    let dir = tmp();
    let path = dir.path().join("s.jsonl");
    let mut store = TranscriptStore::create(&path, "sess-1", "/work").unwrap();
    let stored = store.append(sample()).unwrap();
    assert_eq!(store.len(), 4);

    let (reopened, read, problems) = TranscriptStore::open(&path).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(reopened.session_id(), "sess-1");
    assert_eq!(reopened.len(), 4);
    assert!(!reopened.is_read_only());
    assert_eq!(read, stored);
    for (r, s) in read.iter().zip(sample()) {
        assert_eq!(r.body, s.body);
    }
    // Unknown fields survive in the raw JSON too.
    let raw = lines_of(&path);
    assert_eq!(raw[0]["type"], "session");
    assert_eq!(raw[0]["version"], 3);
    assert_eq!(raw[0]["cwd"], "/work");
    assert_eq!(raw[0]["id"], "sess-1");
    let ts = raw[0]["timestamp"].as_str().unwrap();
    assert!(
        ts.ends_with('Z') && crate::transcript::parse_iso_ms(ts).is_some(),
        "{ts}"
    );
    assert!(raw[1]["timestamp"].as_str().is_some_and(|t| t.len() == 24));
    assert_eq!(raw[1]["message"]["weird"], json!({"nested":[1,2]}));
    assert_eq!(raw[1]["message"]["content"][0]["cache"], true);
    assert_eq!(
        raw[2]["message"]["content"][2],
        json!({"type":"fancy","payload":7})
    );
    assert!(raw[1]["message"].get("id").is_none());
    match &read[1].body {
        MessageBody::Assistant(AssistantMessage { content, .. }) => match &content[1] {
            ContentBlock::ToolCall(call) => {
                let ToolCallBlock { id, extra, .. } = &**call;
                assert_eq!(id, "call_1");
                assert_eq!(extra["x"], 1);
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    match &read[2].body {
        MessageBody::ToolResult(ToolResultMessage { extra, .. }) => {
            assert_eq!(extra["details"], json!({"d":1}));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn ids_are_unique_increasing_and_chained() {
    let dir = tmp();
    let path = dir.path().join("s.jsonl");
    let mut store = TranscriptStore::create(&path, "s", "/").unwrap();
    let a = store.append(sample()).unwrap();
    let b = store.append(vec![Message::user("again")]).unwrap();
    drop(store);
    let (mut store, _, _) = TranscriptStore::open(&path).unwrap();
    let c = store
        .append(vec![Message::user("x"), Message::user("y")])
        .unwrap();
    let ids: Vec<&str> = a
        .iter()
        .chain(&b)
        .chain(&c)
        .map(|m| m.id.as_str())
        .collect();
    assert_eq!(ids[0], "00000001");
    for w in ids.windows(2) {
        assert!(w[0] < w[1], "{ids:?}");
        assert_eq!(w[0].len(), 8);
        assert!(
            w[0].bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
    }
    let raw = lines_of(&path);
    assert_eq!(raw[1]["parentId"], Value::Null);
    for i in 2..raw.len() {
        assert_eq!(raw[i]["parentId"], raw[i - 1]["id"], "line {}", i + 1);
    }
    // Ids continue after the highest id seen, including entries that carry no message.
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    writeln!(
        f,
        r#"{{"type":"model_change","id":"000000ff","parentId":"{}","provider":"p"}}"#,
        ids[ids.len() - 1]
    )
    .unwrap();
    drop(f);
    let (mut store, read, problems) = TranscriptStore::open(&path).unwrap();
    assert!(problems.is_empty());
    assert_eq!(read.len(), 7, "model_change is skipped");
    let d = store.append(vec![Message::user("z")]).unwrap();
    assert_eq!(d[0].id, "00000100");
    let raw = lines_of(&path);
    assert_eq!(raw[raw.len() - 1]["parentId"], "000000ff");
    assert_eq!(
        raw[raw.len() - 2]["type"],
        "model_change",
        "left in the file"
    );
}

#[test]
fn torn_lines_are_reported_and_the_rest_kept() {
    let dir = tmp();
    let path = dir.path().join("s.jsonl");
    let mut store = TranscriptStore::create(&path, "s", "/").unwrap();
    store
        .append(vec![Message::user("one"), Message::user("two")])
        .unwrap();
    drop(store);
    // A torn line in the middle (line 4), then a good entry, then a torn tail (line 6).
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(b"{\"type\":\"message\",\"id\":\"00000003\",\"message\":{\"role\":\"us\n")
        .unwrap();
    f.write_all(br#"{"type":"message","id":"00000004","parentId":"00000002","timestamp":"t","message":{"role":"user","content":"four"}}"#).unwrap();
    f.write_all(b"\n{\"type\":\"message\",\"id\":\"0000")
        .unwrap();
    drop(f);

    let (_, read, problems) = TranscriptStore::open(&path).unwrap();
    let texts: Vec<String> = read.iter().map(|m| m.text()).collect();
    assert_eq!(texts, ["one", "two", "four"]);
    assert_eq!(problems.iter().map(|p| p.line).collect::<Vec<_>>(), [4, 6]);
    assert!(problems[1].message.contains("torn"), "{problems:?}");
}

#[test]
fn append_after_torn_tail_starts_a_new_line() {
    let dir = tmp();
    let path = dir.path().join("s.jsonl");
    let mut store = TranscriptStore::create(&path, "s", "/").unwrap();
    store.append(vec![Message::user("one")]).unwrap();
    drop(store);
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(b"{\"type\":\"message\",\"id\":\"00000002\",\"mess")
        .unwrap();
    drop(f);
    let before = std::fs::read(&path).unwrap();

    let (mut store, read, problems) = TranscriptStore::open(&path).unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].line, 3);
    let added = store.append(vec![Message::user("after")]).unwrap();
    assert_eq!(added[0].id, "00000002", "a torn entry's id is not seen");

    let after = std::fs::read(&path).unwrap();
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "garbage left untouched"
    );
    assert_eq!(after[before.len()], b'\n');
    let (_, read, problems) = TranscriptStore::open(&path).unwrap();
    assert_eq!(
        read.iter().map(|m| m.text()).collect::<Vec<_>>(),
        ["one", "after"]
    );
    assert_eq!(problems.iter().map(|p| p.line).collect::<Vec<_>>(), [3]);
    // The new entry chains to the last good entry, not the torn one.
    let raw = std::fs::read_to_string(&path).unwrap();
    let last: Value = serde_json::from_str(raw.lines().last().unwrap()).unwrap();
    assert_eq!(last["parentId"], "00000001");
}

#[test]
fn compaction_and_branch_summaries_round_trip() {
    let dir = tmp();
    let path = dir.path().join("s.jsonl");
    let mut store = TranscriptStore::create(&path, "s", "/").unwrap();
    let first = store
        .append(vec![Message::user("old"), Message::user("kept")])
        .unwrap();
    let compaction = msg(
        json!({"role":"compactionSummary","summary":"S","tokensBefore":1000,
        "tokensAfter":120,"firstKeptEntryId":first[1].id,"details":{"readFiles":["a"]}}),
    );
    let branch = msg(
        json!({"role":"branchSummary","summary":"B","fromId":"00000001",
        "timestamp":"2025-01-01T00:00:00.000Z"}),
    );
    let stored = store
        .append(vec![compaction.clone(), branch.clone()])
        .unwrap();
    // The store records the entry timestamp of a summary that had none.
    let MessageBody::CompactionSummary(c) = &stored[0].body else {
        panic!()
    };
    assert!(c.extra["timestamp"].is_string());

    let raw = lines_of(&path);
    assert_eq!(raw[3]["type"], "compaction");
    assert_eq!(raw[3]["id"], stored[0].id);
    assert_eq!(raw[3]["summary"], "S");
    assert_eq!(raw[3]["firstKeptEntryId"], "00000002");
    assert_eq!(raw[3]["tokensBefore"], 1000);
    assert_eq!(raw[3]["tokensAfter"], 120);
    assert_eq!(raw[3]["details"], json!({"readFiles":["a"]}));
    assert!(raw[3].get("role").is_none() && raw[3].get("message").is_none());
    assert_eq!(raw[4]["type"], "branch_summary");
    assert_eq!(raw[4]["fromId"], "00000001");
    assert_eq!(raw[4]["timestamp"], "2025-01-01T00:00:00.000Z");

    let (_, read, problems) = TranscriptStore::open(&path).unwrap();
    assert!(problems.is_empty());
    assert_eq!(read[2], stored[0]);
    assert_eq!(read[3], stored[1]);
    assert_eq!(read[2].role(), Role::CompactionSummary);
    assert_eq!(read[3].body, branch.body);
}

#[test]
fn appends_never_change_earlier_bytes() {
    let dir = tmp();
    let path = dir.path().join("s.jsonl");
    let mut store = TranscriptStore::create(&path, "s", "/").unwrap();
    let mut prev = std::fs::read(&path).unwrap();
    for round in 0..5 {
        store
            .append(vec![
                Message::user(format!("u{round}")),
                Message::assistant("a"),
            ])
            .unwrap();
        let now = std::fs::read(&path).unwrap();
        assert!(now.len() > prev.len());
        assert_eq!(&now[..prev.len()], &prev[..], "round {round}");
        assert!(now.ends_with(b"\n"));
        prev = now;
    }
    assert_eq!(store.len(), 10);
}

#[test]
fn create_refuses_to_overwrite() {
    let dir = tmp();
    let path = dir.path().join("s.jsonl");
    std::fs::write(&path, "precious").unwrap();
    let err = TranscriptStore::create(&path, "s", "/").unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
}

#[test]
fn missing_header_is_an_error() {
    let dir = tmp();
    let path = dir.path().join("s.jsonl");
    std::fs::write(&path, "{\"type\":\"message\"}\n").unwrap();
    let err = TranscriptStore::open(&path).unwrap_err();
    assert!(matches!(err, Error::Transcript { line: 1, .. }), "{err}");
}

#[test]
fn pi_v1_files_open_read_only_with_line_index_ids() {
    let dir = tmp();
    let path = dir.path().join("v1.jsonl");
    let content = [
        r#"{"type":"session","id":"u","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x"}"#,
        r#"{"type":"message","timestamp":"t","message":{"role":"user","content":[{"type":"text","text":"a"}],"timestamp":1}}"#,
        r#"{"type":"model_change","timestamp":"t","provider":"p","modelId":"m"}"#,
        r#"{"type":"message","timestamp":"t","message":{"role":"bashExecution","command":"ls","output":"x\n","exitCode":0,"cancelled":false,"truncated":false}}"#,
        r#"{"type":"compaction","timestamp":"t","summary":"sum","firstKeptEntryIndex":3,"tokensBefore":5}"#,
    ]
    .join("\n")
        + "\n";
    std::fs::write(&path, &content).unwrap();
    let (mut store, read, problems) = TranscriptStore::open(&path).unwrap();
    assert!(problems.is_empty());
    assert!(store.is_read_only());
    assert_eq!(store.version(), 1);
    let ids: Vec<&str> = read.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["00000001", "00000003", "00000004"]);
    let MessageBody::Custom(bash) = &read[1].body else {
        panic!("{:?}", read[1])
    };
    assert_eq!(bash.custom_type, "bashExecution");
    assert_eq!(read[1].text(), "$ ls\nx\n");
    assert_eq!(bash.extra["exitCode"], 0);
    let MessageBody::CompactionSummary(c) = &read[2].body else {
        panic!()
    };
    assert_eq!(c.first_kept_entry_id.as_deref(), Some("00000003"));
    assert_eq!(c.tokens_before, 5);
    assert!(matches!(
        store.append(vec![Message::user("no")]),
        Err(Error::Transcript { .. })
    ));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), content);
}

#[test]
fn a_file_torn_at_its_creation_opens_repaired_and_takes_appends() {
    for torn in [&b""[..], &br#"{"type":"session","vers"#[..]] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("torn.jsonl");
        std::fs::write(&path, torn).unwrap();
        assert!(
            TranscriptStore::open(&path).is_err(),
            "plain open refuses it"
        );
        let (mut store, read, problems) =
            TranscriptStore::open_repairing(&path, "s-torn", "/w").unwrap();
        assert!(read.is_empty() && problems.is_empty());
        assert_eq!(store.session_id(), "s-torn");
        store
            .append(vec![Message::user("after the crash")])
            .unwrap();
        drop(store);
        let (_, read, problems) = TranscriptStore::open(&path).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].text(), "after the crash");
    }
}

#[test]
fn a_file_with_a_complete_line_is_never_rewritten_by_repair() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.jsonl");
    let text = "{\"type\":\"message\",\"message\":{\"role\":\"user\",\"content\":\"x\"}}\n";
    std::fs::write(&path, text).unwrap();
    assert!(TranscriptStore::open_repairing(&path, "s", "/").is_err());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
}
