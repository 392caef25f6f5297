//! Imports every shared transcript and checks it against the counts in `SOURCES.md`; checks that
//! an import appended to a new store reads back identically.

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use ctxhost::contract::message::{Message, MessageBody, Role};
use ctxhost::transcript::TranscriptStore;
use ctxhost::transcript::import::{Format, Import, import};

/// What one imported session holds.
#[derive(Debug, Default)]
struct Stats {
    roles: BTreeMap<&'static str, usize>,
    custom_types: BTreeMap<String, usize>,
    tool_calls: usize,
    tool_results: usize,
    /// Results whose `toolCallId` names no earlier call.
    orphan_results: Vec<String>,
    /// Calls that no later result answers.
    unanswered_calls: Vec<String>,
}

impl Stats {
    fn role(&self, r: Role) -> usize {
        self.roles.get(r.as_str()).copied().unwrap_or(0)
    }
}

fn stats(messages: &[Message]) -> Stats {
    let mut s = Stats::default();
    let mut seen_calls = HashSet::new();
    let mut answered = HashSet::new();
    for m in messages {
        *s.roles.entry(m.role().as_str()).or_default() += 1;
        if let MessageBody::Custom(c) = &m.body {
            *s.custom_types.entry(c.custom_type.clone()).or_default() += 1;
        }
        for c in m.tool_calls() {
            s.tool_calls += 1;
            seen_calls.insert(c.id.clone());
        }
        if let Some(id) = m.tool_call_id() {
            s.tool_results += 1;
            answered.insert(id.to_owned());
            if !seen_calls.contains(id) {
                s.orphan_results.push(id.to_owned());
            }
        }
    }
    let mut unanswered: Vec<String> = seen_calls
        .into_iter()
        .filter(|id| !answered.contains(id))
        .collect();
    unanswered.sort();
    s.unanswered_calls = unanswered;
    s
}

fn shared(prefix: &str) -> PathBuf {
    let files = common::shared_transcripts();
    let found: Vec<&PathBuf> = files
        .iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "exactly one shared transcript named {prefix}*"
    );
    found[0].clone()
}

fn import_one(prefix: &str, format: Format) -> (Import, Stats) {
    let path = shared(prefix);
    let imp = import(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(imp.format, format, "{}", path.display());
    assert!(imp.problems.is_empty(), "{prefix}: {:?}", imp.problems);
    assert_eq!(imp.sessions.len(), 1, "{prefix}");
    let s = stats(&imp.sessions[0].messages);
    eprintln!(
        "{prefix}: {s:?} dropped_compactions={}",
        imp.dropped_compactions
    );
    (imp, s)
}

#[test]
fn every_shared_transcript_imports_without_problems() {
    let files = common::shared_transcripts();
    assert_eq!(files.len(), 7, "SOURCES.md lists seven transcripts");
    for path in files {
        let imp = import(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            imp.problems.is_empty(),
            "{}: {:?}",
            path.display(),
            imp.problems
        );
        assert!(!imp.sessions.is_empty());
        for s in &imp.sessions {
            assert!(!s.messages.is_empty(), "{}: {}", path.display(), s.name);
            assert!(
                s.messages.iter().all(|m| m.id.is_empty()),
                "imports carry no ids"
            );
        }
    }
}

#[test]
fn pimono_before_compaction() {
    let (imp, s) = import_one("pimono-before-compaction", Format::PiSession);
    assert_eq!(s.role(Role::User), 55);
    assert_eq!(s.role(Role::Assistant), 484);
    assert_eq!(s.role(Role::ToolResult), 448);
    assert_eq!(s.custom_types.get("bashExecution"), Some(&3));
    assert_eq!(s.role(Role::Custom), 3);
    assert_eq!(
        s.role(Role::CompactionSummary),
        0,
        "the source's compactions are dropped"
    );
    assert_eq!(imp.dropped_compactions, 2);
    assert_eq!((s.tool_calls, s.tool_results), (454, 448));
    assert!(s.orphan_results.is_empty(), "{:?}", s.orphan_results);
    assert_eq!(s.unanswered_calls.len(), 6, "{:?}", s.unanswered_calls);
    let bash = imp.sessions[0]
        .messages
        .iter()
        .find(|m| matches!(&m.body, MessageBody::Custom(c) if c.custom_type == "bashExecution"))
        .map(Message::text)
        .unwrap_or_default();
    assert!(bash.starts_with("$ ls\nAGENTS.md\n"), "{bash}");
}

#[test]
fn pimono_large_session() {
    let (imp, s) = import_one("pimono-large-session", Format::PiSession);
    assert_eq!(s.role(Role::User), 88);
    assert_eq!(s.role(Role::Assistant), 453);
    assert_eq!(s.role(Role::ToolResult), 373);
    assert_eq!(imp.sessions[0].messages.len(), 914);
    assert_eq!(imp.dropped_compactions, 0);
    assert_eq!((s.tool_calls, s.tool_results), (391, 373));
    assert!(s.orphan_results.is_empty(), "{:?}", s.orphan_results);
    assert_eq!(s.unanswered_calls.len(), 18);
    // The aborted turns that leave those calls unanswered keep their stop reason.
    let aborted = imp.sessions[0]
        .messages
        .iter()
        .filter(|m| matches!(&m.body, MessageBody::Assistant(a) if a.stop_reason.as_deref() == Some("aborted")))
        .count();
    assert!(aborted > 0);
}

#[test]
fn claude_code_session_share() {
    let (imp, s) = import_one("sessionshare-general-tool-calls", Format::ClaudeCode);
    assert_eq!((s.tool_calls, s.tool_results), (110, 109));
    assert!(s.orphan_results.is_empty(), "{:?}", s.orphan_results);
    assert_eq!(s.unanswered_calls, ["toolu_016AxdxfjYf6j77zeLDN8qwe"]);
    // 266 assistant lines come from 56 distinct API responses.
    let responses: HashSet<&str> = imp.sessions[0]
        .messages
        .iter()
        .filter_map(|m| match &m.body {
            MessageBody::Assistant(a) => a.extra.get("responseId").and_then(|v| v.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(responses.len(), 56);
    assert!(
        s.role(Role::Assistant) < 266,
        "lines of one response are merged"
    );
    assert_eq!(s.custom_types.get("meta"), Some(&4), "isMeta user lines");
    assert_eq!(imp.dropped_compactions, 0);
    // Every tool call is in an assistant message before its result, thinking kept its signature.
    let first = imp.sessions[0]
        .messages
        .iter()
        .find_map(|m| match &m.body {
            MessageBody::Assistant(a) => Some(a),
            _ => None,
        })
        .map(|a| serde_json::to_value(&a.content).unwrap_or_default())
        .unwrap_or_default();
    assert_eq!(first[0]["type"], "thinking");
    assert!(first[0]["signature"].is_string());
    assert_eq!(first[2]["type"], "toolCall");
    assert!(first[2]["arguments"].is_object());
}

#[test]
fn claude_code_fasthooks_with_compaction() {
    let (imp, s) = import_one("fasthooks-sample_main_transcript", Format::ClaudeCode);
    assert_eq!((s.tool_calls, s.tool_results), (10, 10));
    assert!(s.orphan_results.is_empty());
    assert!(s.unanswered_calls.is_empty());
    assert_eq!(
        imp.dropped_compactions, 1,
        "one compact_boundary with its summary"
    );
    assert_eq!(s.custom_types.get("meta"), Some(&1));
    let texts: Vec<String> = imp.sessions[0].messages.iter().map(Message::text).collect();
    assert!(
        !texts
            .iter()
            .any(|t| t.contains("This session is being continued")),
        "the compact summary is dropped"
    );
    // 19 user lines: 10 carry tool results, 1 is the dropped summary, 1 is meta.
    assert_eq!(s.role(Role::User), 19 - 10 - 1 - 1);
}

#[test]
fn codex_rollout() {
    let (imp, s) = import_one("codexsessionview-rollout", Format::CodexRollout);
    assert_eq!((s.tool_calls, s.tool_results), (39, 39));
    assert!(s.orphan_results.is_empty(), "{:?}", s.orphan_results);
    assert!(s.unanswered_calls.is_empty());
    assert_eq!(
        s.role(Role::User),
        1,
        "the environment context is not a user turn"
    );
    assert_eq!(s.custom_types.get("environmentContext"), Some(&1));
    assert_eq!(
        imp.sessions[0].system_prompt, None,
        "instructions are null in this file"
    );
    // Every tool result's text is the unwrapped output, with the exit code kept.
    let first_result = imp.sessions[0].messages.iter().find_map(|m| match &m.body {
        MessageBody::ToolResult(r) => Some(r),
        _ => None,
    });
    let r = first_result.unwrap_or_else(|| panic!("no tool result"));
    assert!(
        r.content
            .joined_text()
            .starts_with("LM Studio configuration.md\n")
    );
    assert_eq!(r.extra["metadata"]["exit_code"], 0);
    assert_eq!(r.tool_name, "shell");
    let thinking = imp.sessions[0]
        .messages
        .iter()
        .filter_map(|m| match &m.body {
            MessageBody::Assistant(a) => Some(a.content.len()),
            _ => None,
        })
        .sum::<usize>();
    assert_eq!(thinking, 38 + 39, "38 reasoning items and 39 calls");
}

#[test]
fn taubench_chat_completions() {
    let path = shared("taubench-gpt-4o-airline");
    let imp = import(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(imp.format, Format::ChatCompletions);
    assert!(imp.problems.is_empty(), "{:?}", imp.problems);
    assert_eq!(imp.sessions.len(), 200);
    assert_eq!(imp.sessions[0].name, "task-0-trial-0");
    let names: HashSet<&str> = imp.sessions.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names.len(), 200, "names are unique");
    let mut total = 0;
    let (mut calls, mut results) = (0, 0);
    for s in &imp.sessions {
        assert!(s.system_prompt.as_deref().is_some_and(|p| !p.is_empty()));
        let st = stats(&s.messages);
        assert!(
            st.orphan_results.is_empty(),
            "{}: {:?}",
            s.name,
            st.orphan_results
        );
        assert!(st.unanswered_calls.is_empty(), "{}", s.name);
        total += s.messages.len() + 1; // + the system message
        calls += st.tool_calls;
        results += st.tool_results;
        assert!(s.messages.iter().all(|m| m.role() != Role::Custom));
    }
    assert_eq!(total, 5308);
    assert_eq!((calls, results), (1164, 1164));
}

#[test]
fn sweagent_trajectory() {
    let (imp, s) = import_one("sweagent-marshmallow", Format::SweAgent);
    let session = &imp.sessions[0];
    assert!(
        session
            .system_prompt
            .as_deref()
            .is_some_and(|p| p.starts_with("SETTING:"))
    );
    assert_eq!(s.role(Role::User), 1);
    assert_eq!(s.role(Role::Assistant), 13);
    assert_eq!(s.role(Role::ToolResult), 13);
    assert_eq!((s.tool_calls, s.tool_results), (13, 13));
    assert!(s.orphan_results.is_empty());
    // Each result directly follows the assistant message whose call it answers (ids repeat).
    for pair in session.messages.windows(2) {
        if let Some(id) = pair[1].tool_call_id() {
            assert!(pair[0].tool_calls().any(|c| c.id == id));
        }
    }
}

#[test]
fn import_then_store_then_reopen_is_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for path in common::shared_transcripts() {
        let path = path.as_path();
        let imp = import(path).unwrap_or_else(|e| panic!("{e}"));
        for (i, session) in imp.sessions.iter().enumerate().take(3) {
            let file = dir.join(format!("{}-{i}.jsonl", session.name));
            let mut store = TranscriptStore::create(&file, &session.name, "/tmp").unwrap();
            let stored: Vec<Arc<Message>> = store.append(session.messages.clone()).unwrap();
            assert_eq!(stored.len(), session.messages.len());
            let (reopened, read, problems) = TranscriptStore::open(&file).unwrap();
            assert!(problems.is_empty(), "{problems:?}");
            assert_eq!(reopened.len(), session.messages.len());
            assert_eq!(read, stored, "{}", path.display());
            for (r, m) in read.iter().zip(&session.messages) {
                assert_eq!(r.body, m.body, "{}", path.display());
            }
            // Our own store is itself importable, as a pi session, to the same messages.
            let again = import(&file).unwrap();
            assert_eq!(again.format, Format::PiSession);
            assert_eq!(again.sessions[0].messages, session.messages);
        }
    }
}

#[test]
fn malformed_lines_are_reported_and_the_rest_imported() {
    let dir = tempfile::tempdir().unwrap();
    let src = std::fs::read_to_string(shared("fasthooks-sample_main_transcript")).unwrap();
    let mut lines: Vec<&str> = src.lines().collect();
    lines.insert(3, "{\"type\":\"user\",\"message\":{\"role\":");
    let broken = dir.path().join("broken.jsonl");
    std::fs::write(&broken, lines.join("\n")).unwrap();
    let whole = import(&shared("fasthooks-sample_main_transcript")).unwrap();
    let imp = import(&broken).unwrap();
    assert_eq!(imp.problems.len(), 1);
    assert_eq!(imp.problems[0].line, 4);
    assert_eq!(imp.sessions[0].messages, whole.sessions[0].messages);
}

#[test]
fn unknown_formats_are_refused_with_the_formats_tried() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.jsonl");
    std::fs::write(&path, "{\"hello\":\"world\"}\n").unwrap();
    let err = import(&path).unwrap_err().to_string();
    assert!(err.contains("notes.jsonl"), "{err}");
    for f in Format::ALL {
        assert!(err.contains(f.name()), "{err}");
    }
}
