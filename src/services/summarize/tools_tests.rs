//! Tool calls and results: files read or modified, tool failures, and todo tool calls.

use serde_json::json;

use crate::services::summarize::test_support::{call, msg, result, run, section};

#[test]
fn files_are_classified_read_or_modified() {
    let span = [
        call("1", "read", json!({"path":"src/a.rs"})),
        call(
            "2",
            "bash",
            json!({"command":"cat src/b.rs | grep -n 'fn main' src/c.rs && sed -i 's/x/y/' src/z.rs 2>/dev/null"}),
        ),
        call("3", "Grep", json!({"pattern":"foo","path":"src/"})),
        call(
            "4",
            "edit",
            json!({"file_path":"src/a.rs","old_string":"x","new_string":"y"}),
        ),
        call("5", "write", json!({"path":"docs/new.md","content":"hi"})),
        call(
            "6",
            "apply_patch",
            json!({"input":"*** Begin Patch\n*** Update File: src/d.rs\n@@\n-a\n+b\n*** End Patch"}),
        ),
        call(
            "7",
            "str_replace_based_edit_tool",
            json!({"command":"view","path":"/etc/hosts"}),
        ),
        call(
            "8",
            "str_replace_based_edit_tool",
            json!({"command":"str_replace","path":"src/e.rs"}),
        ),
        call("9", "MultiEdit", json!({"file_path":"src/f.rs","edits":[]})),
    ];
    let s = run(&span, None, 100_000);
    assert_eq!(
        s.read_files,
        vec!["src/b.rs", "src/c.rs", "src/", "/etc/hosts"]
    );
    assert_eq!(
        s.modified_files,
        vec![
            "src/a.rs",
            "docs/new.md",
            "src/d.rs",
            "src/e.rs",
            "src/f.rs"
        ]
    );
    let files = section(&s.text, "Files read / modified");
    assert!(files.contains(&"modified: src/a.rs".into()));
    assert!(files.contains(&"read: src/b.rs".into()));
    assert!(
        !files.contains(&"read: src/a.rs".into()),
        "modified wins: {files:?}"
    );
}

#[test]
fn tool_failures_are_listed_with_their_first_line_at_most_eight() {
    let mut span = vec![
        call("x", "bash", json!({"command":"make"})),
        msg(
            json!({"role":"toolResult","toolCallId":"x","content":"\n\nmake: *** No rule to make target\nmore","isError":true}),
        ),
    ];
    for i in 0..9 {
        span.push(call(&format!("r{i}"), "read", json!({"path":"a.rs"})));
        span.push(result(
            &format!("r{i}"),
            "read",
            &format!("ENOENT {i}\nstack"),
            true,
        ));
    }
    span.push(result("ok", "read", "fine", false));
    let failures = section(&run(&span, None, 100_000).text, "Tool failures");
    assert_eq!(failures.len(), 8);
    assert_eq!(failures[0], "read: ENOENT 1");
    assert_eq!(failures[7], "read: ENOENT 8");

    let two = [span[0].clone(), span[1].clone()];
    let failures = section(&run(&two, None, 100_000).text, "Tool failures");
    assert_eq!(
        failures,
        vec!["bash `make`: make: *** No rule to make target"]
    );
}

#[test]
fn todo_tool_calls_give_their_open_items() {
    let span = [
        call(
            "t1",
            "TodoWrite",
            json!({"todos":[{"content":"old","status":"pending"}]}),
        ),
        call(
            "t2",
            "TodoWrite",
            json!({"todos":[
            {"content":"write parser","status":"completed"},
            {"content":"wire CLI","status":"in_progress"},
            {"content":"docs","status":"pending"}]}),
        ),
    ];
    let s = run(&span, None, 100_000);
    assert_eq!(section(&s.text, "Open TODOs"), vec!["wire CLI", "docs"]);
}
