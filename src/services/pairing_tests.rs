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

#[test]
fn a_message_with_many_calls_is_checked_by_id_whatever_the_order_of_its_results() {
    let names: Vec<String> = (0..40).map(|n| format!("c{n}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut msgs = vec![user("u"), call("a", &refs)];
    // Results in reverse call order: still well paired.
    for id in refs.iter().rev() {
        msgs.push(result(&format!("r-{id}"), id));
    }
    assert!(is_well_paired(&msgs));
    // A result for a call that was already answered is not.
    let mut twice = msgs.clone();
    twice.insert(3, result("again", "c39"));
    assert!(!is_well_paired(&twice));
    let r = repair(twice);
    assert_eq!(
        r.repairs.first(),
        Some(&Repair::DroppedDuplicateResult {
            tool_call_id: "c39".into()
        })
    );
    // The results now stand in call order behind their call.
    let placed: Vec<&str> = r.messages[2..]
        .iter()
        .filter_map(|m| m.tool_call_id())
        .collect();
    assert_eq!(placed, refs);
    assert!(is_well_paired(&r.messages));
    assert_eq!(r.messages.len(), 2 + 40);
}

#[test]
fn tens_of_thousands_of_orphan_calls_are_all_dropped_in_call_order() {
    let names: Vec<String> = (0..28_000).map(|n| format!("call-{n}")).collect();
    let mut refs: Vec<&str> = names.iter().map(String::as_str).collect();
    refs.push("kept");
    let msgs = vec![user("u"), call("a", &refs), result("r", "kept")];
    let r = repair(msgs);
    assert_eq!(ids(&r), vec!["u", "a", "r"]);
    assert_eq!(r.messages[1].tool_calls().count(), 1);
    let dropped: Vec<&str> = r
        .repairs
        .iter()
        .map(|rep| match rep {
            Repair::DroppedOrphanCall { tool_call_id } => tool_call_id.as_str(),
            other => panic!("unexpected repair {other:?}"),
        })
        .collect();
    assert_eq!(dropped, refs[..28_000].to_vec());
}
