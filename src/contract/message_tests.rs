use super::*;
use serde_json::json;

fn round_trip(v: Value) -> Value {
    let m: Message = serde_json::from_value(v).expect("parse");
    serde_json::to_value(&m).expect("serialize")
}

#[test]
fn unknown_fields_survive_a_round_trip_on_every_role() {
    let cases = [
        json!({"id":"a","role":"user","content":[{"type":"text","text":"hi","cache":true}],"timestamp":5,"zz":{"k":1}}),
        json!({"id":"b","role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},
               {"type":"toolCall","id":"c1","name":"read","arguments":{"path":"/a"},"partialJson":"x"}],
               "model":"m","provider":"p","usage":{"input":1},"stopReason":"toolUse","api":"x"}),
        json!({"id":"c","role":"toolResult","toolCallId":"c1","toolName":"read","content":[{"type":"text","text":"ok"}],
               "isError":false,"details":{"diff":"d"}}),
        json!({"id":"d","role":"compactionSummary","summary":"s","tokensBefore":10,"tokensAfter":3,
               "firstKeptEntryId":"b","details":{"readFiles":[]}}),
        json!({"id":"e","role":"branchSummary","summary":"s","fromId":"a","x":1}),
        json!({"id":"f","role":"custom","customType":"bashExecution","content":"ls","excludeFromContext":true,"exitCode":0}),
    ];
    for case in cases {
        assert_eq!(round_trip(case.clone()), case);
    }
}

#[test]
fn unknown_block_types_are_kept_verbatim() {
    let v = json!({"id":"a","role":"user","content":[{"type":"audio","data":"zz","format":"wav"}]});
    assert_eq!(round_trip(v.clone()), v);
}

#[test]
fn malformed_known_block_is_an_error() {
    let v = json!({"role":"assistant","content":[{"type":"toolCall","name":"x"}]});
    assert!(serde_json::from_value::<Message>(v).is_err());
}

#[test]
fn unknown_role_is_an_error() {
    let v = json!({"role":"system","content":"x"});
    assert!(serde_json::from_value::<Message>(v).is_err());
}

#[test]
fn compaction_summary_reads_as_user_text_for_the_model() {
    let m: Message = serde_json::from_value(
        json!({"role":"compactionSummary","summary":"GOAL","tokensBefore":1}),
    )
    .unwrap();
    let text = m.model_text_for_summary().unwrap();
    assert!(text.starts_with(COMPACTION_SUMMARY_PREFIX));
    assert!(text.contains("<summary>\nGOAL\n</summary>"));
}

#[test]
fn tool_calls_and_results_are_found() {
    let m: Message = serde_json::from_value(json!({"role":"assistant","content":[
        {"type":"text","text":"x"},{"type":"toolCall","id":"1","name":"a","arguments":{}},
        {"type":"toolCall","id":"2","name":"b","arguments":{}}]}))
    .unwrap();
    let ids: Vec<_> = m.tool_calls().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["1", "2"]);
    let r: Message = serde_json::from_value(
        json!({"role":"toolResult","toolCallId":"2","content":"plain string"}),
    )
    .unwrap();
    assert_eq!(r.tool_call_id(), Some("2"));
    assert_eq!(r.text(), "plain string");
}

/// The text `v` parses to and writes back as, byte for byte (`Value`'s equality ignores key
/// order; this does not).
fn text_round_trip(text: &str) -> String {
    let m: Message = serde_json::from_str(text).expect("parse");
    serde_json::to_string(&m).expect("serialize")
}

#[test]
fn unknown_fields_keep_their_order_on_every_role_and_block() {
    let cases = [
        r#"{"id":"a","role":"user","content":[{"type":"text","text":"hi","zeta":1,"alpha":2,"mid":3}],"timestamp":5,"zz":{"k":1},"aa":0}"#,
        r#"{"id":"b","role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s","a":1},{"type":"toolCall","id":"c1","name":"read","arguments":{"z":1,"a":2},"partialJson":"x","b":[1]},{"type":"image","data":"d","mimeType":"image/png","z":0,"a":1}],"stopReason":"toolUse","usage":{"input":1},"model":"m","api":"x"}"#,
        r#"{"id":"c","role":"toolResult","toolCallId":"c1","toolName":"read","content":"ok","isError":false,"zz":1,"details":{"diff":"d"}}"#,
        r#"{"id":"d","role":"compactionSummary","summary":"s","tokensBefore":10,"tokensAfter":3,"firstKeptEntryId":"b","timestamp":"t","details":{"readFiles":[]}}"#,
        r#"{"id":"e","role":"branchSummary","summary":"s","fromId":"a","y":2,"x":1}"#,
        r#"{"id":"f","role":"custom","customType":"bashExecution","content":"ls","excludeFromContext":true,"exitCode":0,"command":"ls"}"#,
        r#"{"id":"g","role":"user","content":[{"type":"audio","zeta":"zz","alpha":"wav"},{}]}"#,
    ];
    for case in cases {
        assert_eq!(text_round_trip(case), case);
    }
}

#[test]
fn messages_and_blocks_without_unknown_fields_write_none() {
    let cases = [
        r#"{"id":"a","role":"user","content":[{"type":"text","text":"hi"}]}"#,
        r#"{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"read","arguments":{}}],"stopReason":"toolUse"}"#,
        r#"{"id":"c","role":"toolResult","toolCallId":"c1","toolName":"read","content":"ok","isError":false}"#,
    ];
    for case in cases {
        assert_eq!(text_round_trip(case), case);
    }
    let m: Message = serde_json::from_str(cases[0]).expect("parse");
    let MessageBody::User(u) = &m.body else {
        panic!("{m:?}")
    };
    assert!(u.extra.is_empty());
    assert_eq!(u.extra, Extra::from(Map::new()));
}

#[test]
fn an_empty_extra_takes_a_field_written_through_it() {
    let mut m = Message::user("hi");
    let MessageBody::User(u) = &mut m.body else {
        panic!("{m:?}")
    };
    assert_eq!(u.extra.get("timestamp"), None);
    u.extra.insert("timestamp".into(), json!(7));
    u.extra.insert("a".into(), json!(1));
    assert_eq!(
        serde_json::to_string(&m).expect("serialize"),
        r#"{"role":"user","content":"hi","timestamp":7,"a":1}"#
    );
    let back: Message =
        serde_json::from_str(&serde_json::to_string(&m).expect("serialize")).expect("parse");
    assert_eq!(back, m);
    assert_ne!(back, Message::user("hi"));
}

#[test]
fn messages_and_blocks_stay_small() {
    // A replay holds every message of a transcript (200,000 and more): an unused field map is
    // a pointer, not a 72-byte map, and a text block does not take a tool call's size.
    assert_eq!(std::mem::size_of::<Extra>(), 8);
    assert!(
        std::mem::size_of::<ContentBlock>() <= 64,
        "{}",
        std::mem::size_of::<ContentBlock>()
    );
    assert!(
        std::mem::size_of::<Message>() <= 120,
        "{}",
        std::mem::size_of::<Message>()
    );
}
