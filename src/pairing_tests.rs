use super::*;
use serde_json::json;

fn msg(v: serde_json::Value) -> Arc<Message> {
    Arc::new(serde_json::from_value(v).expect("message"))
}

fn user(id: &str) -> Arc<Message> {
    msg(json!({"id": id, "role":"user","content":"q"}))
}

fn call(id: &str, calls: &[&str]) -> Arc<Message> {
    let blocks: Vec<_> = calls
        .iter()
        .map(|c| json!({"type":"toolCall","id":c,"name":"read","arguments":{}}))
        .collect();
    msg(json!({"id": id, "role":"assistant","content": blocks}))
}

fn result(id: &str, call: &str) -> Arc<Message> {
    msg(json!({"id": id, "role":"toolResult","toolCallId":call,"content":"ok"}))
}

fn ids(r: &Repaired) -> Vec<&str> {
    r.messages.iter().map(|m| m.id.as_str()).collect()
}

#[test]
fn well_paired_context_is_returned_untouched() {
    let msgs = vec![
        user("u"),
        call("a", &["c1", "c2"]),
        result("r2", "c2"),
        result("r1", "c1"),
    ];
    let r = repair(msgs.clone());
    assert!(r.repairs.is_empty());
    assert!(r.messages.iter().zip(&msgs).all(|(a, b)| Arc::ptr_eq(a, b)));
}

#[test]
fn orphan_result_is_dropped() {
    let r = repair(vec![user("u"), result("r", "gone")]);
    assert_eq!(ids(&r), ["u"]);
    assert_eq!(
        r.repairs,
        [Repair::DroppedOrphanResult {
            tool_call_id: "gone".into()
        }]
    );
}

#[test]
fn orphan_call_is_removed_and_empty_message_dropped() {
    let mixed = msg(json!({"id":"a","role":"assistant","content":[
        {"type":"text","text":"let me look"},
        {"type":"toolCall","id":"c1","name":"read","arguments":{}},
        {"type":"toolCall","id":"c2","name":"read","arguments":{}}]}));
    let r = repair(vec![
        user("u"),
        mixed,
        result("r1", "c1"),
        call("b", &["c3"]),
    ]);
    assert_eq!(ids(&r), ["u", "a", "r1"]);
    let calls: Vec<_> = r.messages[1].tool_calls().map(|c| c.id.clone()).collect();
    assert_eq!(calls, ["c1"]);
    assert_eq!(r.messages[1].text(), "let me look");
    assert_eq!(r.repairs.len(), 2);
    assert!(is_well_paired(&r.messages));
}

#[test]
fn displaced_and_duplicate_results_are_fixed() {
    let r = repair(vec![
        call("a", &["c1"]),
        user("u"),
        result("r1", "c1"),
        result("r1b", "c1"),
    ]);
    assert_eq!(ids(&r), ["a", "r1", "u"]);
    assert_eq!(
        r.repairs,
        [
            Repair::DroppedDuplicateResult {
                tool_call_id: "c1".into()
            },
            Repair::MovedResult {
                tool_call_id: "c1".into()
            }
        ]
    );
}

#[test]
fn result_before_its_call_is_an_orphan() {
    let r = repair(vec![result("r1", "c1"), call("a", &["c1"])]);
    assert!(r.messages.is_empty());
    assert!(is_well_paired(&r.messages));
}
