//! Bad input never aborts the host: every case below is a clean error (or a warned skip)
//! naming the file, and nothing already stored changes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::Path;

use ctxhost::config::Config;
use ctxhost::transcript::{Durability, import};
use serde_json::json;

#[test]
fn a_config_nested_100k_levels_deep_is_refused_not_a_stack_overflow() {
    let deep = format!("{{ a: {}1{} }}", "[".repeat(100_000), "]".repeat(100_000));
    let err = Config::parse(&deep, "deep.json5").expect_err("refused");
    let text = err.to_string();
    assert!(text.contains("deep.json5:1:"), "{text}");
    assert!(text.contains("nested deeper than 64"), "{text}");
    // Brackets inside strings and comments do not count.
    let quoted = format!(
        "{{ // {}\n plugins: {{ slots: {{ contextEngine: \"{}\" }} }} }}",
        "[".repeat(500),
        "{".repeat(500)
    );
    Config::parse(&quoted, "quoted.json5").expect("brackets in strings and comments are text");
}

#[test]
fn a_device_is_refused_as_a_transcript_and_as_a_config() {
    let err = import(Path::new("/dev/zero")).expect_err("refused");
    assert!(err.to_string().contains("/dev/zero"), "{err}");
    assert!(err.to_string().contains("device"), "{err}");
    let err = Config::load(Path::new("/dev/zero")).expect_err("refused");
    assert!(err.to_string().contains("/dev/zero"), "{err}");
}

fn entry(id: &str, parent: Option<&str>, text: &str) -> String {
    json!({"type": "message", "id": id, "parentId": parent, "timestamp": "t",
           "message": {"role": "user", "content": text, "timestamp": 0}})
    .to_string()
}

fn import_lines(lines: &[String]) -> ctxhost::transcript::Import {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let mut text = json!({"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": ""})
        .to_string();
    for l in lines {
        text.push('\n');
        text.push_str(l);
    }
    text.push('\n');
    std::fs::write(&path, text).unwrap();
    import(&path).expect("imported")
}

#[test]
fn duplicate_ids_are_warned_with_how_many_messages_were_skipped() {
    let imported = import_lines(&[
        entry("a", None, "one"),
        entry("b", Some("a"), "two"),
        entry("c", Some("b"), "three"),
        entry("b", Some("a"), "two again"),
        entry("d", Some("b"), "four"),
    ]);
    let problems: Vec<String> = imported.problems.iter().map(|p| p.to_string()).collect();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("duplicate entry id \"b\"")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("entries are not on the active branch")),
        "{problems:?}"
    );
    assert!(!imported.sessions[0].messages.is_empty());
}

#[test]
fn a_parent_cycle_is_warned_and_ends() {
    let imported = import_lines(&[
        entry("a", Some("c"), "one"),
        entry("b", Some("a"), "two"),
        entry("c", Some("b"), "three"),
    ]);
    let problems: Vec<String> = imported.problems.iter().map(|p| p.to_string()).collect();
    assert!(
        problems.iter().any(|p| p.contains("parentId cycle")),
        "{problems:?}"
    );
    assert_eq!(imported.sessions[0].messages.len(), 3);
}

#[test]
fn durability_is_a_config_setting() {
    for (text, want) in [
        ("{}", Durability::Entry),
        ("{ host: { durability: \"turn\" } }", Durability::Turn),
        ("{ host: { durability: \"none\" } }", Durability::None),
    ] {
        assert_eq!(Config::parse(text, "c").unwrap().host.durability, want);
    }
    assert!(Config::parse("{ host: { durability: \"sometimes\" } }", "c").is_err());
}

#[test]
fn invalid_utf8_is_replaced_and_the_message_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let mut bytes =
        json!({"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": ""})
            .to_string()
            .into_bytes();
    bytes.push(b'\n');
    bytes.extend_from_slice(br#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":"caf"#);
    bytes.push(0xE9); // Latin-1 'é', invalid in UTF-8
    bytes.extend_from_slice(b"\",\"timestamp\":0}}\n");
    std::fs::write(&path, bytes).unwrap();
    let imported = import(&path).unwrap();
    assert!(imported.problems.is_empty(), "{:?}", imported.problems);
    assert_eq!(imported.sessions[0].messages.len(), 1);
    assert!(
        imported.sessions[0].messages[0]
            .text()
            .contains("caf\u{FFFD}")
    );
    let w = &imported.warnings[0];
    assert_eq!(w.line, 2);
    assert!(w.message.contains("invalid UTF-8 at byte"), "{w}");
}

/// A kill (or a full disk) between creating a session's transcript and writing its header
/// leaves a zero-byte file: the next open repairs it and the session goes on, rather than every
/// later call failing with "no session header".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_transcript_a_crash_left_empty_opens_repaired() {
    use ctxhost::contract::message::Message;
    use ctxhost::runtime::{Host, SessionSpec};
    use ctxhost::session::TurnInput;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("transcript.jsonl");
    std::fs::write(&file, b"").unwrap();
    let host = Host::new(Config::default()).unwrap();
    let s = host
        .open_session(SessionSpec::new("s-empty", &file))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let a = s
        .begin_turn(TurnInput {
            user: Message::user("still here"),
            is_heartbeat: false,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(a.messages.len(), 1);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with("{\"type\":\"session\""), "{text}");
    assert!(text.contains("still here"), "{text}");
}
