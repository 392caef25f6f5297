//! What every model call carries, whatever the engine (contract §1): the current request, the
//! newest summary when one exists, within the budget and well paired. Real transcripts are
//! replayed through `legacy` and the example engines (`hostile` replays a forgetful engine that
//! leaves both out on purpose); `check` holds that engine sound because the host puts them back.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common;
use crate::sessions;

use std::path::{Path, PathBuf};

use ctxhost::config::Config;
use ctxhost::contract::message::Role;
use ctxhost::runtime::SessionSpec;
use ctxhost::services::guarantee::{Violation, violations};
use ctxhost::session::Session;
use ctxhost::testing::pairing::is_well_paired;
use ctxhost::tools::check::check_engine;
use ctxhost::tools::replay::drive;

use crate::common::engine::Lang;

pub(crate) fn engine_path(rel: &str) -> PathBuf {
    common::repo_root().join(rel)
}

/// Every model call of `transcript` at `window` through `engine` (`None`: legacy); a call that
/// fell back to `legacy` is a problem too.
pub(crate) struct Calls {
    pub(crate) calls: usize,
    pub(crate) with_summary: usize,
    pub(crate) put_back: usize,
    pub(crate) problems: Vec<String>,
    /// Calls that went out with no history although the session had some.
    pub(crate) no_history: usize,
}

pub(crate) fn replay(transcript: &str, window: u64, engine: Option<&Path>) -> Calls {
    let host = common::replay::host(window, engine);
    let path = common::shared_dir()
        .join("data/transcripts")
        .join(transcript);
    let imported = ctxhost::transcript::import(&path).expect("import");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut out = Calls {
        calls: 0,
        with_summary: 0,
        put_back: 0,
        problems: Vec::new(),
        no_history: 0,
    };
    for (n, source) in imported.sessions.into_iter().take(3).enumerate() {
        let file = dir.path().join(format!("s{n}.jsonl"));
        let mut spec = SessionSpec::new(format!("s{n}"), &file);
        spec.system_prompt = source.system_prompt.clone();
        let mut session = Session::create(host.session_setup(&spec), &file, "").expect("session");
        let mut last_repairs = 0;
        drive(&mut session, source.messages, |s, a| {
            out.calls += 1;
            let found = violations(
                s.context(),
                s.current_request(),
                &a.messages,
                a.system_prompt_addition.as_deref(),
            );
            let call = out.calls;
            out.no_history += usize::from(found.contains(&Violation::NoHistory));
            for v in found.iter().filter(|v| **v != Violation::NoHistory) {
                out.problems.push(format!("call {call}: {}", v.describe()));
            }
            if a.assembled_tokens > a.token_budget {
                out.problems.push(format!(
                    "call {call}: {} tokens over {}",
                    a.assembled_tokens, a.token_budget
                ));
            }
            if a.fallback {
                out.problems
                    .push(format!("call {call}: fell back to legacy"));
            }
            if !is_well_paired(&a.messages) {
                out.problems
                    .push(format!("call {call}: broken tool pairing"));
            }
            let summarized = s
                .context()
                .iter()
                .any(|m| m.role() == Role::CompactionSummary);
            out.with_summary += usize::from(summarized);
            // Turn stats restart at each turn: count the increments.
            let repairs = s.stats().guarantee_repairs;
            out.put_back += repairs - last_repairs.min(repairs);
            last_repairs = repairs;
        })
        .expect("replay");
        session.close().expect("close");
    }
    out
}

pub(crate) const CODEX: &str =
    "codexsessionview-rollout-2025-11-17T15-30-28-019a93b9-f380-7600-98ff-940e6b99603c.jsonl";
const PIMONO: &str = "pimono-before-compaction.jsonl";

#[test]
fn legacy_calls_carry_the_request_and_the_summary_on_single_turn_agentic_sessions() {
    for window in [3_000, 8_000] {
        let c = replay(CODEX, window, None);
        assert!(c.problems.is_empty(), "@{window}: {:?}", c.problems);
        assert!(c.with_summary > 0, "@{window}: the session compacted");
    }
}

#[test]
fn legacy_calls_carry_the_request_and_the_summary_on_a_long_coding_session() {
    let c = replay(PIMONO, 3_000, None);
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    assert!(c.calls > 400 && c.with_summary > 300, "{} calls", c.calls);
}

#[test]
fn example_engines_calls_carry_the_request_and_the_summary() {
    for engine in [
        "scripts/hierarchical.lua",
        "scripts/recent_turns.rhai",
        "scripts/tool_pruner.lua",
        "scripts/pinned_facts.rhai",
    ] {
        let c = replay(CODEX, 3_000, Some(&engine_path(engine)));
        assert!(c.problems.is_empty(), "{engine}: {:?}", c.problems);
    }
}

#[test]
fn check_runs_a_turn_larger_than_the_budget_and_finds_the_forgetful_engine_sound() {
    let report = check_engine(
        &engine_path("tests/fixtures/lua/forgetful.lua"),
        &Config::default(),
    );
    assert!(report.sound, "{:#?}", report.steps);
    assert!(
        report
            .steps
            .iter()
            .any(|s| s.step.contains("turn larger than the budget") && s.ok),
        "{:#?}",
        report.steps
    );
}

/// Issue 12: `recent_turns` (which never summarizes) used to send 619 calls without any
/// history over the shared transcripts at 3,000 tokens, most in this session's long tool loops
/// (over a hundred here; the last 8 after an aborted tool call or a huge `write`, see
/// `a_turn_that_fills_the_budget_still_carries_history_after_an_aborted_or_uncuttable_call`).
#[test]
fn recent_turns_calls_always_carry_history_in_long_tool_loops() {
    for engine in ["scripts/recent_turns.lua", "scripts/recent_turns.rhai"] {
        let c = replay(PIMONO, 3_000, Some(&engine_path(engine)));
        assert!(c.problems.is_empty(), "{engine}: {:?}", c.problems);
        assert!(c.calls > 400, "{engine}: {} calls", c.calls);
        assert_eq!(c.no_history, 0, "{engine}: calls without history");
    }
}

/// Issue 14 item 3: `check` drives a session several times the window, with tool results
/// larger than the budget, and names each turn and its model calls.
#[test]
fn check_drives_a_session_several_times_the_window() {
    let recent = check_engine(&engine_path("scripts/recent_turns.lua"), &Config::default());
    assert!(recent.sound, "{:#?}", recent.steps);
    let long = recent
        .steps
        .iter()
        .find(|s| s.step == "a conversation several times the budget")
        .expect("the long conversation");
    assert!(long.detail.contains("× the window"), "{long:?}");
    assert!(
        recent
            .steps
            .iter()
            .any(|s| s.step.starts_with("turn ") && s.detail.contains("model calls, largest")),
        "{:#?}",
        recent.steps
    );
}

/// `check --transcript`: every model call of a real conversation is judged, and a failure
/// names the conversation, the turn and the call.
#[test]
fn check_over_a_real_transcript_judges_every_model_call() {
    let transcript = common::shared_dir().join("data/transcripts").join(PIMONO);
    // This test is about the guarantees, not speed: a loaded machine must not make a turn
    // "slow" against the default 1,000 ms turn budget (that policy is tested in `budgets`).
    let mut config = Config::default();
    config.host.turn_budget.engine_ms = 60_000;
    let report = ctxhost::tools::check::check_engine_with(
        &engine_path("scripts/recent_turns.rhai"),
        &config,
        Some(&transcript),
    );
    assert!(report.sound, "{:#?}", report.steps);
    assert!(
        report
            .steps
            .iter()
            .any(|s| s.step.starts_with("every model call of conversation") && s.ok),
        "{:#?}",
        report.steps
    );
    let path = engine_path("tests/fixtures/lua/drops_conversation.lua");
    let report =
        ctxhost::tools::check::check_engine_with(&path, &Config::default(), Some(&transcript));
    assert!(!report.sound);
    let failed = report.steps.iter().find(|s| !s.ok).expect("a failed step");
    assert!(
        failed.step.starts_with("conversation ")
            && failed.step.contains(", turn ")
            && failed.step.contains(", model call "),
        "{failed:?}"
    );
}

/// Issue 10 item 6: `check` compacts in the middle of a tool loop, so an engine whose summary
/// drops the request and the open tool calls is not sound.
#[test]
fn check_fails_an_engine_whose_compaction_drops_the_conversation() {
    for engine in [
        "tests/fixtures/lua/drops_conversation.lua",
        "tests/fixtures/rhai/drops_conversation.rhai",
    ] {
        let report = check_engine(&engine_path(engine), &Config::default());
        assert!(!report.sound, "{engine}: {:#?}", report.steps);
        let failed = report.steps.iter().find(|s| !s.ok).expect("a failed step");
        assert!(
            failed.detail.contains("drops the open tool calls")
                || failed.detail.contains("drops the pending user request"),
            "{engine}: {failed:?}"
        );
    }
}

/// An engine that keeps the last six user turns whatever their size and delegates compaction:
/// `check --transcript` caught it on pimono's first turn, the synthetic session did not
/// (issue 24 item 5). The same engine in both languages, written by the test.
const LAST_SIX_LUA: &str = r#"-- Keeps the last six user turns whatever their size.
local M = { info = { id = "last-six", name = "Last six turns", ownsCompaction = false } }
function M.ingest(p) return { ingested = true } end
function M.assemble(p)
  local users, from = 0, 1
  for i = #p.messages, 1, -1 do
    if p.messages[i].role == "user" then
      users += 1
      if users == 6 then from = i break end
    end
  end
  local out = {}
  for i = from, #p.messages do out[#out + 1] = p.messages[i] end
  return { messages = out, estimatedTokens = 1 }
end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#;

const LAST_SIX_RHAI: &str = r#"// Keeps the last six user turns whatever their size.
fn info() {
    #{ id: "last-six", name: "Last six turns", ownsCompaction: false }
}

fn ingest(p) {
    #{ ingested: true }
}

fn assemble(p) {
    let users = 0;
    let start = 0;
    let i = p.messages.len() - 1;
    while i >= 0 {
        if p.messages[i].role == "user" {
            users += 1;
            if users == 6 {
                start = i;
                break;
            }
        }
        i -= 1;
    }
    let out = [];
    for j in start..p.messages.len() {
        out.push(p.messages[j]);
    }
    #{ messages: out, estimatedTokens: 1 }
}

fn compact(p) {
    host::delegateCompaction(p)
}
"#;

/// Issue 24 item 5: `check` without a transcript fails the last-six engine on the model call
/// whose recent messages exceed the window (a first model step of several tool results at
/// once, with nothing older for compaction to cut), naming the turn and the call.
fn check_fails_an_engine_that_keeps_recent_turns_whatever_their_size(lang: Lang) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(format!("last_six.{lang}"));
    let source = match lang {
        Lang::Lua => LAST_SIX_LUA,
        Lang::Rhai => LAST_SIX_RHAI,
    };
    std::fs::write(&path, source).expect("write the engine");
    let report = check_engine(&path, &Config::default());
    assert!(!report.sound, "{lang}: {:#?}", report.steps);
    assert!(
        report
            .steps
            .iter()
            .any(|s| s.step == "load and validate" && s.ok),
        "{lang}: {:#?}",
        report.steps
    );
    let failed: Vec<_> = report.steps.iter().filter(|s| !s.ok).collect();
    assert_eq!(failed.len(), 1, "{lang}: {:#?}", report.steps);
    assert_eq!(
        failed[0].step, "turn 1, model call 2",
        "{lang}: {:#?}",
        failed[0]
    );
    assert!(
        failed[0]
            .detail
            .contains("exceeds the budget of 3000 after 1 compactions"),
        "{lang}: {:#?}",
        failed[0]
    );
}

both_languages! {
    check_fails_an_engine_that_keeps_recent_turns_whatever_their_size => check_fails_an_engine_that_keeps_recent_turns_whatever_their_size;
}

/// Issue 12: `replay` reports, per model call and in its summary, what an engine's assembly
/// lacked and the host put back (here a forgetful engine leaves out the request and the
/// summary), and what a call still lacked as sent (expected: nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_reports_each_call_a_forgetful_engine_needed_repaired() {
    let engine = engine_path("tests/fixtures/lua/forgetful.lua");
    let host = common::replay::host(3_000, Some(&engine));
    let path = common::shared_dir().join("data/transcripts").join(CODEX);
    let imported = ctxhost::transcript::import(&path).expect("import");
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = ctxhost::tools::replay::ReplayOptions {
        out_dir: dir.path().to_path_buf(),
        concurrency: 1,
        contexts: false,
    };
    let mut turns = Vec::new();
    let summary =
        ctxhost::tools::replay::replay(host, &path, imported, &opts, |t| turns.push(t.clone()))
            .await
            .expect("replay");
    let g = &summary.guarantees;
    assert!(g.put_back > 0, "{g:?}");
    assert_eq!((g.missing_request, g.missing_summary), (0, 0), "{g:?}");
    let calls: Vec<_> = turns.iter().flat_map(|t| t.guarantees.iter()).collect();
    assert_eq!(calls.len() as u64, g.put_back + g.no_history, "{g:?}");
    assert!(
        calls
            .iter()
            .any(|c| c.put_back.contains(&Violation::MissingRequest))
    );
    let json = serde_json::to_value(&turns[0]).expect("json");
    assert!(
        json.get("guarantees").is_some_and(|v| v.is_array()),
        "{json}"
    );
}

/// Issue 14 item 7: a single message larger than the budget (5 MB here) is cut to fit, head
/// and tail kept and the cut marked with the tokens removed, and the history before it is not
/// silently dropped: the call still carries a summary or earlier messages.
#[test]
fn an_oversized_single_message_is_cut_and_the_history_survives() {
    let host = common::replay::host(8_000, None);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("s.jsonl");
    let spec = SessionSpec::new("s", &file);
    let mut session = Session::create(host.session_setup(&spec), &file, "").expect("session");
    let mut messages = Vec::new();
    for n in 0..6 {
        messages.push(ctxhost::contract::message::Message::user(format!(
            "Step {n}: look at src/mod_{n}.rs"
        )));
        messages.push(ctxhost::contract::message::Message::assistant(format!(
            "Done with src/mod_{n}.rs."
        )));
    }
    let huge = format!(
        "HEAD-MARK {} TAIL-MARK",
        "lorem ipsum dolor sit amet ".repeat(200_000)
    );
    messages.push(ctxhost::contract::message::Message::user(huge));
    messages.push(ctxhost::contract::message::Message::assistant("Read it."));
    let mut last = None;
    drive(&mut session, messages, |s, a| {
        let found = violations(
            s.context(),
            s.current_request(),
            &a.messages,
            a.system_prompt_addition.as_deref(),
        );
        last = Some((a.clone(), found));
    })
    .expect("replay");
    let (a, found) = last.expect("a call");
    assert!(found.is_empty(), "{found:?}");
    assert!(a.assembled_tokens <= a.token_budget);
    assert!(a.messages.len() >= 2, "{} messages", a.messages.len());
    let request = a
        .messages
        .iter()
        .map(|m| m.text())
        .find(|t| t.contains("HEAD-MARK"))
        .expect("the request, cut");
    assert!(request.contains("TAIL-MARK"), "the tail is kept");
    assert!(
        request.contains(" tokens ("),
        "the cut says the tokens removed"
    );
    assert!(a.assembled_tokens > 1_000, "{} tokens", a.assembled_tokens);
}

/// A message from its JSON form, as a transcript holds it.
fn message(j: serde_json::Value) -> ctxhost::contract::message::Message {
    serde_json::from_value(j).expect("message")
}

/// An assistant message calling `tool` once with `args`; `stop` as the transcript recorded it.
fn call(
    id: &str,
    call_id: &str,
    tool: &str,
    args: serde_json::Value,
    stop: &str,
) -> serde_json::Value {
    serde_json::json!({"id": id, "role": "assistant", "stopReason": stop,
        "content": [{"type": "toolCall", "id": call_id, "name": tool, "arguments": args}]})
}

fn tool_result(id: &str, call_id: &str, text: String) -> serde_json::Value {
    serde_json::json!({"id": id, "role": "toolResult", "toolCallId": call_id, "toolName": "read",
        "content": [{"type": "text", "text": text}], "isError": false})
}

/// The last 16 calls `recent_turns` sent without any history over the shared transcripts (16
/// at 3,000 tokens, 7 at 8,000), reduced from `pimono-before-compaction` and
/// `pimono-large-session`: a request whose tool loop fills the budget, right after (a) an
/// aborted tool call without results (pairing leaves nothing of it, so the history the host
/// added vanished again) or (b) a `write` whose arguments alone are larger than an eighth of
/// the budget (no cut makes it fit, and the turn left under 32 tokens). The host now passes
/// over what cannot be sent and, when the turn leaves no room, refits the turn around the
/// newest earlier piece that fits: every call carries some history, within budget, paired, the
/// request kept.
#[test]
fn a_turn_that_fills_the_budget_still_carries_history_after_an_aborted_or_uncuttable_call() {
    let big = |n: usize| format!("line {n}: {}\n", "let value = compute(x, y);  ".repeat(12));
    let loop_of = |from: usize| -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        for k in 0..12 {
            let c = format!("call_loop_{k}");
            out.push(call(
                &format!("l{from}_{k}"),
                &c,
                "read",
                serde_json::json!({"path": format!("src/part_{k}.rs"), "offset": k * 100}),
                "toolUse",
            ));
            out.push(tool_result(
                &format!("lr{from}_{k}"),
                &c,
                (0..30).map(big).collect(),
            ));
        }
        out.push(sessions::assistant(
            &format!("done{from}"),
            "All parts read.",
        ));
        out
    };
    let aborted = {
        // Four files read at once (each result larger than an eighth of the budget), then
        // three more reads the user aborted: the aborted message has calls and no results.
        let reads = |id: &str, stop: &str, n: usize| {
            let blocks: Vec<serde_json::Value> = (0..n)
                .map(|k| {
                    serde_json::json!({"type": "toolCall", "id": format!("{id}_{k}"),
                    "name": "read", "arguments": {"path": format!("src/theme_{k}.ts")}})
                })
                .collect();
            serde_json::json!({"id": id, "role": "assistant", "stopReason": stop, "content": blocks})
        };
        let mut m = vec![
            sessions::user("u1", "please read the theme files"),
            reads("a1", "toolUse", 4),
        ];
        for k in 0..4 {
            m.push(tool_result(
                &format!("r1_{k}"),
                &format!("a1_{k}"),
                (0..20).map(big).collect(),
            ));
        }
        m.push(reads("a2", "aborted", 3));
        m.push(sessions::user(
            "u2",
            "why do you go 100 lines at a time, read them whole",
        ));
        m.extend(loop_of(2));
        m
    };
    let uncuttable = {
        let mut m = vec![
            sessions::user("u1", "write the new module into src/new_module.ts"),
            call(
                "w1",
                "c1",
                "write",
                serde_json::json!({"path": "src/new_module.ts", "content": (0..40).map(big).collect::<String>()}),
                "toolUse",
            ),
            tool_result("wr1", "c1", "Successfully wrote 14000 bytes".into()),
            sessions::user(
                "u2",
                "after you are done and committed, remove the old remaining files",
            ),
        ];
        m.extend(loop_of(2));
        m
    };
    for (case, raw) in [("aborted call", aborted), ("uncuttable call", uncuttable)] {
        for engine in ["scripts/recent_turns.lua", "scripts/recent_turns.rhai"] {
            let host = common::replay::host(3_000, Some(&engine_path(engine)));
            let dir = tempfile::tempdir().expect("tempdir");
            let file = dir.path().join("s.jsonl");
            let spec = SessionSpec::new("s", &file);
            let mut session =
                Session::create(host.session_setup(&spec), &file, "").expect("session");
            let messages = raw.iter().cloned().map(message).collect();
            let (mut calls, mut host_made_room) = (0, 0);
            drive(&mut session, messages, |s, a| {
                calls += 1;
                let found = violations(
                    s.context(),
                    s.current_request(),
                    &a.messages,
                    a.system_prompt_addition.as_deref(),
                );
                assert!(
                    found.is_empty(),
                    "{case}, {engine}, call {calls}: {found:?}"
                );
                assert!(
                    a.assembled_tokens <= a.token_budget,
                    "{case}, {engine}, call {calls}"
                );
                assert!(
                    is_well_paired(&a.messages),
                    "{case}, {engine}, call {calls}"
                );
                host_made_room += usize::from(a.put_back.contains(&Violation::NoHistory));
            })
            .expect("replay");
            assert!(calls > 12, "{case}, {engine}: {calls} calls");
            assert!(
                host_made_room > 0,
                "{case}, {engine}: the engine's own assembly always had history, so this case tests nothing"
            );
            session.close().expect("close");
        }
    }
}
