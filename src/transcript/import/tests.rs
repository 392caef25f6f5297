use super::*;
use crate::contract::message::{Content, MessageBody, Role};
use serde_json::json;

fn run(format: Format, text: &str) -> Import {
    assert_eq!(detect_format(text.as_bytes()), Some(format), "detection");
    import_bytes(Path::new("/x/sample.jsonl"), text.as_bytes(), format).unwrap()
}

fn jsonl(lines: &[Value]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

fn roles(s: &ImportedSession) -> Vec<Role> {
    s.messages.iter().map(Message::role).collect()
}

fn as_json(m: &Message) -> Value {
    serde_json::to_value(m).unwrap()
}

#[test]
fn claude_merges_responses_and_splits_tool_results() {
    let asst = |id: &str, block: Value, stop: Value| {
        json!({"type":"assistant","uuid":"u","sessionId":"s","timestamp":"1970-01-01T00:00:01.000Z",
               "message":{"id":id,"role":"assistant","model":"m","content":[block],"stop_reason":stop}})
    };
    let text = jsonl(&[
        json!({"type":"file-history-snapshot","messageId":"m","snapshot":{}}),
        json!({"type":"user","uuid":"u0","sessionId":"s","message":{"role":"user","content":"hi"}}),
        asst(
            "msg_1",
            json!({"type":"thinking","thinking":"t","signature":"sig"}),
            Value::Null,
        ),
        asst(
            "msg_1",
            json!({"type":"tool_use","id":"toolu_a","name":"Bash","input":{"command":"ls"}}),
            Value::Null,
        ),
        json!({"type":"user","uuid":"u1","sessionId":"s","toolUseResult":{"stdout":"x"},
               "message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_a",
                   "content":[{"type":"text","text":"x"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAA"}}],
                   "is_error":true}]}}),
        // The same response continues after the result: still one assistant message.
        asst(
            "msg_1",
            json!({"type":"tool_use","id":"toolu_b","name":"Read","input":{}}),
            json!("tool_use"),
        ),
        json!({"type":"user","uuid":"u2","sessionId":"s","message":{"role":"user","content":[
               {"type":"tool_result","tool_use_id":"toolu_b","content":"file"},{"type":"text","text":"and also"}]}}),
        json!({"type":"assistant","uuid":"side","sessionId":"s","isSidechain":true,
               "message":{"id":"msg_side","role":"assistant","content":[{"type":"text","text":"side"}]}}),
        json!({"type":"progress","uuid":"p","sessionId":"s","data":{}}),
        json!({"type":"user","uuid":"u3","sessionId":"s","isMeta":true,"message":{"role":"user","content":"caveat"}}),
        json!({"type":"system","uuid":"c","sessionId":"s","subtype":"compact_boundary","compactMetadata":{}}),
        json!({"type":"user","uuid":"u4","sessionId":"s","isCompactSummary":true,"message":{"role":"user","content":"This session is being continued"}}),
        asst(
            "msg_2",
            json!({"type":"text","text":"done"}),
            json!("end_turn"),
        ),
    ]) + "{\"type\":\"user\",\"message\n";
    let imp = run(Format::ClaudeCode, &text);
    assert_eq!(imp.dropped_compactions, 1);
    assert_eq!(imp.problems.len(), 1);
    assert_eq!(imp.problems[0].line, 14);
    let s = &imp.sessions[0];
    assert_eq!(s.name, "sample");
    use Role::*;
    assert_eq!(
        roles(s),
        [
            User, Assistant, ToolResult, ToolResult, User, Custom, Assistant
        ]
    );
    let a = as_json(&s.messages[1]);
    assert_eq!(
        a["content"][0],
        json!({"type":"thinking","thinking":"t","signature":"sig"})
    );
    assert_eq!(
        a["content"][1],
        json!({"type":"toolCall","id":"toolu_a","name":"Bash","arguments":{"command":"ls"}})
    );
    assert_eq!(a["content"][2]["id"], "toolu_b");
    assert_eq!(a["stopReason"], "toolUse");
    assert_eq!(a["responseId"], "msg_1");
    assert_eq!(a["timestamp"], 1000);
    let r = as_json(&s.messages[2]);
    assert_eq!(r["toolCallId"], "toolu_a");
    assert_eq!(r["toolName"], "Bash");
    assert_eq!(r["isError"], true);
    assert_eq!(r["details"], json!({"stdout":"x"}));
    assert_eq!(
        r["content"][1],
        json!({"type":"image","data":"AAA","mimeType":"image/png"})
    );
    let r2 = as_json(&s.messages[3]);
    assert_eq!(r2["content"], json!([{"type":"text","text":"file"}]));
    assert_eq!(s.messages[4].text(), "and also");
    let MessageBody::Custom(meta) = &s.messages[5].body else {
        panic!()
    };
    assert_eq!(meta.custom_type, "meta");
    assert_eq!(as_json(&s.messages[6])["stopReason"], "stop");
}

#[test]
fn codex_groups_items_into_assistant_turns() {
    let item = |p: Value| json!({"timestamp":"1970-01-01T00:00:00.000Z","type":"response_item","payload":p});
    let text = jsonl(&[
        json!({"type":"session_meta","payload":{"id":"x","instructions":"be brief"}}),
        item(
            json!({"type":"message","role":"developer","content":[{"type":"input_text","text":"<permissions>"}]}),
        ),
        item(
            json!({"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>\n<cwd>/</cwd>"}]}),
        ),
        item(
            json!({"type":"message","role":"user","content":[{"type":"input_text","text":"<user_instructions>be nice</user_instructions>"}]}),
        ),
        item(
            json!({"type":"message","role":"user","content":[{"type":"input_text","text":"fix it"}]}),
        ),
        json!({"type":"event_msg","payload":{"type":"user_message","message":"fix it"}}),
        json!({"type":"turn_context","payload":{"model":"m"}}),
        item(
            json!({"type":"reasoning","summary":[{"type":"summary_text","text":"A"},{"type":"summary_text","text":"B"}],"content":null,"encrypted_content":"enc"}),
        ),
        item(
            json!({"type":"function_call","name":"shell","arguments":"{\"command\":[\"ls\"]}","call_id":"c1"}),
        ),
        item(
            json!({"type":"custom_tool_call","name":"apply_patch","input":"*** Begin Patch","call_id":"c2"}),
        ),
        item(
            json!({"type":"function_call_output","call_id":"c1","output":"{\"output\":\"a\\nb\",\"metadata\":{\"exit_code\":1}}"}),
        ),
        item(json!({"type":"custom_tool_call_output","call_id":"c2","output":"plain text"})),
        item(json!({"type":"ghost_snapshot","ghost_commit":{}})),
        json!({"type":"compacted","payload":{"message":"summary"}}),
        item(
            json!({"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}),
        ),
    ]);
    let imp = run(Format::CodexRollout, &text);
    assert!(imp.problems.is_empty(), "{:?}", imp.problems);
    assert_eq!(imp.dropped_compactions, 1);
    let s = &imp.sessions[0];
    assert_eq!(s.system_prompt.as_deref(), Some("be brief"));
    use Role::*;
    assert_eq!(
        roles(s),
        [
            Custom, Custom, Custom, User, Assistant, ToolResult, ToolResult, Assistant
        ]
    );
    let types: Vec<String> = s.messages[..3]
        .iter()
        .map(|m| as_json(m)["customType"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        types,
        ["developer", "environmentContext", "userInstructions"]
    );
    let a = as_json(&s.messages[4]);
    assert_eq!(a["content"][0]["type"], "thinking");
    assert_eq!(a["content"][0]["thinking"], "A\n\nB");
    assert_eq!(a["content"][0]["encrypted_content"], "enc");
    assert_eq!(a["content"][1]["arguments"], json!({"command":["ls"]}));
    assert_eq!(
        a["content"][2]["arguments"],
        json!({"raw":"*** Begin Patch"})
    );
    assert_eq!(a["stopReason"], "toolUse");
    let r1 = as_json(&s.messages[5]);
    assert_eq!(r1["content"], json!([{"type":"text","text":"a\nb"}]));
    assert_eq!(r1["metadata"], json!({"exit_code":1}));
    assert_eq!(r1["toolName"], "shell");
    let r2 = as_json(&s.messages[6]);
    assert_eq!(r2["content"][0]["text"], "plain text");
    assert_eq!(r2["toolName"], "apply_patch");
    assert_eq!(s.messages[7].text(), "done");
}

#[test]
fn chat_arrays_map_tool_calls_and_results() {
    let tau = json!([
        {"task_id": 7, "trial": 2, "reward": 1.0, "traj": [
            {"role":"system","content":"policy"},
            {"role":"user","content":"hi"},
            {"role":"assistant","content":"let me look","tool_calls":[
                {"id":"call_1","type":"function","function":{"name":"get","arguments":"{\"a\":1}"}},
                {"id":"call_2","type":"function","function":{"name":"bad","arguments":"{not json"}}]},
            {"role":"tool","tool_call_id":"call_1","name":"get","content":"r1"},
            {"role":"tool","tool_call_id":"call_2","name":"bad","content":"r2"},
            {"role":"assistant","content":null,"tool_calls":[
                {"id":"call_3","type":"function","function":{"name":"get","arguments":"{}"}}]},
            {"role":"tool","tool_call_id":"call_3","name":"get","content":"r3"},
            {"role":"assistant","content":"bye"}
        ]},
        {"task_id": 8, "trial": 0, "traj": [{"role":"user","content":"x"}, {"content":"no role"}]}
    ])
    .to_string();
    let imp = run(Format::ChatCompletions, &tau);
    assert_eq!(imp.sessions.len(), 2);
    assert_eq!(imp.problems.len(), 1, "{:?}", imp.problems);
    let s = &imp.sessions[0];
    assert_eq!(s.name, "task-7-trial-2");
    assert_eq!(s.system_prompt.as_deref(), Some("policy"));
    let a = as_json(&s.messages[1]);
    assert_eq!(a["content"][0], json!({"type":"text","text":"let me look"}));
    assert_eq!(
        a["content"][1],
        json!({"type":"toolCall","id":"call_1","name":"get","arguments":{"a":1}})
    );
    assert_eq!(a["content"][2]["arguments"], json!({"raw":"{not json"}));
    let a2 = as_json(&s.messages[4]);
    assert_eq!(
        a2["content"].as_array().unwrap().len(),
        1,
        "null content adds no text block"
    );
    let r = as_json(&s.messages[2]);
    assert_eq!(r["toolCallId"], "call_1");
    assert_eq!(r["toolName"], "get");
    assert_eq!(r["content"], json!([{"type":"text","text":"r1"}]));
    assert_eq!(imp.sessions[1].name, "task-8-trial-0");

    let plain =
        json!([{"role":"user","content":"q"},{"role":"assistant","content":"a"}]).to_string();
    let imp = run(Format::ChatCompletions, &plain);
    assert_eq!(imp.sessions.len(), 1);
    assert_eq!(imp.sessions[0].name, "sample");
    assert_eq!(roles(&imp.sessions[0]), [Role::User, Role::Assistant]);
}

#[test]
fn swe_agent_gives_one_result_per_listed_call_id() {
    let traj = json!({
        "trajectory": [{"messages": []}],
        "history": [
            {"role":"system","content":"SETTING","agent":"main"},
            {"role":"user","content":[{"type":"text","text":"issue"}],"agent":"main"},
            {"role":"assistant","content":"two at once","thought":"t","action":"ls","agent":"main","tool_calls":[
                {"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}},
                {"id":"c2","type":"function","function":{"name":"bash","arguments":"{\"command\":\"pwd\"}"}}]},
            {"role":"tool","content":"out","agent":"main","message_type":"observation","tool_call_ids":["c1","c2"]}
        ]
    })
    .to_string();
    let imp = run(Format::SweAgent, &traj);
    let s = &imp.sessions[0];
    assert_eq!(s.system_prompt.as_deref(), Some("SETTING"));
    use Role::*;
    assert_eq!(roles(s), [User, Assistant, ToolResult, ToolResult]);
    let a = as_json(&s.messages[1]);
    assert_eq!(a["thought"], "t");
    assert_eq!(a["content"][0]["text"], "two at once");
    let (r1, r2) = (as_json(&s.messages[2]), as_json(&s.messages[3]));
    assert_eq!(
        (r1["toolCallId"].as_str(), r2["toolCallId"].as_str()),
        (Some("c1"), Some("c2"))
    );
    assert_eq!(r1["content"][0]["text"], "out");
    assert_eq!(r2["content"][0]["text"], "(output reported with c1)");
    assert_eq!(r1["toolName"], "bash");
    assert_eq!(r1["message_type"], "observation");
}

#[test]
fn pi_drops_compactions_and_follows_the_active_branch() {
    let e = |id: &str, parent: Value, m: Value| json!({"type":"message","id":id,"parentId":parent,"timestamp":"t","message":m});
    let user = |t: &str| json!({"role":"user","content":t});
    let text = jsonl(&[
        json!({"type":"session","version":3,"id":"s","timestamp":"t","cwd":"/"}),
        e("00000001", Value::Null, user("root")),
        e("00000002", json!("00000001"), user("abandoned")),
        json!({"type":"compaction","id":"00000003","parentId":"00000001","summary":"S","firstKeptEntryId":"00000001","tokensBefore":5}),
        json!({"type":"branch_summary","id":"00000004","parentId":"00000003","fromId":"00000002","summary":"B"}),
        json!({"type":"custom","id":"00000005","parentId":"00000004","customType":"state","data":{}}),
        e(
            "00000006",
            json!("00000005"),
            json!({"role":"bashExecution","command":"ls","output":"a","exitCode":0}),
        ),
        json!({"type":"custom_message","id":"00000007","parentId":"00000006","customType":"hook","content":"h","display":true}),
        e("00000008", json!("00000007"), json!({"role":"nonsense"})),
    ]);
    let imp = run(Format::PiSession, &text);
    assert_eq!(imp.dropped_compactions, 1);
    assert_eq!(imp.problems.len(), 1);
    assert_eq!(imp.problems[0].line, 9);
    let s = &imp.sessions[0];
    let texts: Vec<String> = s.messages.iter().map(Message::text).collect();
    assert_eq!(
        texts,
        ["root", "B", "$ ls\na", "h"],
        "the abandoned branch is left out"
    );
    let MessageBody::Custom(c) = &s.messages[3].body else {
        panic!()
    };
    assert_eq!(
        (c.custom_type.as_str(), &c.extra["display"]),
        ("hook", &json!(true))
    );
    assert!(
        matches!(s.messages[2].body, MessageBody::Custom(ref b) if b.content == Content::Text("$ ls\na".into()))
    );
}

#[test]
fn unknown_content_is_refused_naming_the_formats() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.json");
    std::fs::write(&path, "{\"rows\": [1, 2, 3]}").unwrap();
    let err = import(&path).unwrap_err();
    let Error::Transcript {
        path: p, message, ..
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!(p, &path);
    assert!(
        message.contains("Claude Code JSONL") && message.contains("SWE-agent .traj"),
        "{message}"
    );
    // A forced JSON format on bad JSON is an error with a line number.
    let err = import_as(&path, Format::SweAgent).unwrap_err();
    assert!(err.to_string().contains("history"), "{err}");
}

#[test]
fn an_imported_assistant_message_keeps_no_room_for_more_blocks() {
    // The shared τ-bench file: every assistant message keeps exactly its blocks (a replay holds
    // every message to the end; pushing tool calls after the text leaves room for more).
    let shared = match std::env::var_os("CTXHOST_SHARED") {
        Some(p) => std::path::PathBuf::from(p),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"),
    };
    let path = shared.join("data/transcripts/taubench-gpt-4o-airline.json");
    let imp = import(&path).unwrap();
    let mut with_calls = 0;
    for s in &imp.sessions {
        for m in &s.messages {
            if let MessageBody::Assistant(a) = &m.body {
                assert_eq!(a.content.capacity(), a.content.len(), "{}", s.name);
                with_calls += usize::from(
                    a.content
                        .iter()
                        .any(|b| matches!(b, crate::contract::message::ContentBlock::ToolCall(_))),
                );
            }
        }
    }
    assert!(with_calls > 0, "no assistant message called a tool");
}

#[test]
fn a_chat_array_read_from_its_file_imports_as_its_bytes_do() {
    // `import` reads a Chat Completions array from the file as it parses it; what it makes, and
    // every error, is what detecting and importing the file's bytes gives.
    let dir = tempfile::tempdir().unwrap();
    let chat = json!([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "list files"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{\"p\":1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.rs"},
        {"role": "narrator", "content": "?"},
        {"role": "assistant", "content": [{"type": "text", "text": "a.rs", "x": 1}]}
    ]);
    let tau = json!([
        {"task_id": 7, "trial": 1, "traj": [{"role": "user", "content": "hi"}]},
        {"task_id": 8, "traj": 3},
        {"task_id": 9, "trial": 0, "traj": [{"role": "user", "content": "yo"}]}
    ]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("chat", chat.to_string().into_bytes()),
        ("pretty", format!("\u{feff}\n  {chat:#}\n").into_bytes()),
        ("tau", tau.to_string().into_bytes()),
        ("empty", b"[]".to_vec()),
        ("numbers", b"[1, 2]".to_vec()),
        (
            "cut",
            b"[{\"role\": \"user\", \"content\": \"hi\"}, {\"ro".to_vec(),
        ),
        (
            "trailing",
            b"[{\"role\": \"user\", \"content\": \"hi\"}] x".to_vec(),
        ),
        (
            "bad_utf8",
            b"[{\"role\": \"user\", \"content\": \"h\xffi\"}]".to_vec(),
        ),
    ];
    for (name, bytes) in cases {
        let path = dir.path().join(format!("{name}.json"));
        std::fs::write(&path, &bytes).unwrap();
        let from_bytes = match detect_format(&bytes) {
            Some(f) => import_bytes(&path, &bytes, f).map_err(|e| e.to_string()),
            None => Err("not detected".to_owned()),
        };
        let from_file = import(&path).map_err(|e| e.to_string());
        match (&from_bytes, &from_file) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{name}"),
            (Err(_), Err(e))
                if from_bytes.as_ref().err().map(String::as_str) == Some("not detected") =>
            {
                assert!(
                    e.contains("not a recognised transcript format"),
                    "{name}: {e}"
                )
            }
            _ => assert_eq!(from_bytes, from_file, "{name}"),
        }
    }
}
