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
