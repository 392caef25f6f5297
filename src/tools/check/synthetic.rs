//! The synthetic session `check` drives: a conversation several times the window that starts
//! from a previous summary, pins decisions, and runs tool loops whose results range from a
//! few hundred tokens to more than the whole budget, so an engine that never handles "the
//! last turns do not fit" fails here rather than in a real replay. It opens with a request
//! whose first model step runs several tools at once, their results together larger than the
//! window: compaction has nothing older to cut there (summarizing the one short request frees
//! nothing), so an engine that returns the recent turns whatever their size fails on that
//! call, as it fails on a real session's first turn. Then the compactions an engine must
//! survive: on an over-budget session, in the middle of a turn, and a single turn larger than
//! the budget.

use serde_json::json;

use crate::contract::message::{CompactionSummaryMessage, Extra, Message, MessageBody};
use crate::contract::{ContextMode, Method, SubagentEndReason};
use crate::session::{Session, TurnInput};
use crate::tools::replay::{RecordedTurn, TurnFault, drive_turn};

use super::{CheckReport, judge_call};

/// The session is driven until its transcript holds this many windows of tokens.
const WINDOWS_OF_HISTORY: u64 = 4;
/// At most this many turns (the session normally reaches its size well before).
const MAX_TURNS: usize = 16;

/// Drives the session; false (with the failing step recorded) at the first failure.
pub(super) fn drive(session: &mut Session, report: &mut CheckReport) -> bool {
    if let Err(e) = session.record(vec![previous_summary()]) {
        return report.failed("record a previous summary".into(), e.to_string());
    }
    let target = WINDOWS_OF_HISTORY * super::CHECK_WINDOW;
    let mut turn = 1;
    let (user, replies) = parallel_turn(turn);
    let mut written: u64 = replies.iter().chain([&user]).map(size).sum();
    let mut largest = match run_turn(
        session,
        turn,
        user,
        replies,
        report,
        Some((PARALLEL_TURN, PARALLEL_FIX)),
    ) {
        Ok(peak) => peak,
        Err(()) => return false,
    };
    while turn < MAX_TURNS && (turn < 6 || written < target) {
        turn += 1;
        let (user, replies) = conversation_turn(turn);
        written += replies.iter().chain([&user]).map(size).sum::<u64>();
        match run_turn(session, turn, user, replies, report, None) {
            Ok(peak) => largest = largest.max(peak),
            Err(()) => return false,
        }
    }
    report.pass(
        "a conversation several times the budget",
        format!(
            "{turn} turns, about {written} tokens written ({:.1}× the window of {}), largest model call {largest} of {} tokens",
            written as f64 / super::CHECK_WINDOW as f64,
            super::CHECK_WINDOW,
            session.token_budget()
        ),
    );
    if !compact_over_budget(session, &mut turn, report)
        || !compact_mid_turn(session, turn + 1, report)
        || !long_turn(session, turn + 2, report)
    {
        return false;
    }
    subagents_and_close(session, report)
}

/// What the opening turn exercises, named in its report.
const PARALLEL_TURN: &str = "the first model step's tool results together exceed the window";
/// What an engine that fails the opening turn must do, added to its failure.
const PARALLEL_FIX: &str = "compaction has nothing older to cut, so the engine must fit them itself (trim or drop results) instead of returning the recent turns whatever their size";

/// What a turn exercises (`what`) and what an engine failing it must do (`fix`), for the
/// turns that test one case.
type Case = (&'static str, &'static str);

/// One turn: `begin_turn`, a `continue_turn` per model step, `end_turn`, each model call
/// judged. Returns the largest call's tokens; on failure the step (naming turn and call) is
/// recorded, with the `case` the turn tests after the error.
fn run_turn(
    session: &mut Session,
    turn: usize,
    user: Message,
    replies: Vec<Message>,
    report: &mut CheckReport,
    case: Option<Case>,
) -> Result<u64, ()> {
    // Only a call over the budget is what the case is about (a script error stays as it is).
    let explained = |error: String| match case {
        Some((what, fix)) if error.contains("budget") => format!("{error} ({what}; {fix})"),
        _ => error,
    };
    let step = format!("turn {turn}");
    let mut largest = 0;
    let driven = drive_turn(session, RecordedTurn::new(user, replies), |_, _, a| {
        judge_call(a)?;
        largest = largest.max(a.assembled_tokens);
        Ok(())
    });
    let call = match driven {
        Ok(d) => {
            report.slowest_turn_ms = report.slowest_turn_ms.max(d.stats.engine_ms);
            d.calls
        }
        Err(TurnFault::Call { call, error }) => {
            report.failed(
                format!("{step}, model call {call}"),
                explained(error.to_string()),
            );
            return Err(());
        }
        Err(TurnFault::Rejected { call, reason }) => {
            report.failed(format!("{step}, model call {call}"), explained(reason));
            return Err(());
        }
        Err(TurnFault::Compact(e)) => {
            report.failed(format!("{step}, /compact"), e.to_string());
            return Err(());
        }
        Err(TurnFault::End { error, .. }) => {
            report.failed(
                format!("{step}, after the last model call"),
                error.to_string(),
            );
            return Err(());
        }
    };
    report.pass(
        &step,
        format!(
            "{call} model call{}, largest {largest} / {} tokens; context {} tokens{}",
            if call == 1 { "" } else { "s" },
            session.token_budget(),
            session.context_tokens(),
            case.map(|(what, _)| format!(" ({what})"))
                .unwrap_or_default()
        ),
    );
    Ok(largest)
}

/// `/compact` on a session whose context is over the budget (turns are added until it is).
fn compact_over_budget(session: &mut Session, turn: &mut usize, report: &mut CheckReport) -> bool {
    let budget = session.token_budget();
    let mut extra = 0;
    while session.context_tokens() <= budget && extra < 6 {
        extra += 1;
        *turn += 1;
        let (user, replies) = conversation_turn(*turn);
        if run_turn(session, *turn, user, replies, report, None).is_err() {
            return false;
        }
    }
    let before = session.context_tokens();
    let step = format!("compact on an over-budget session ({before} > {budget} tokens)");
    match session.compact_now(None) {
        Ok(r) => {
            let after = session.context_tokens();
            if !session.active_owns_compaction() && before > budget && after >= before {
                return report.failed(
                    step,
                    format!(
                        "a non-owning engine's compact freed no tokens ({}); return host.delegateCompaction(p)",
                        r.reason.unwrap_or_else(|| "no reason given".into())
                    ),
                );
            }
            report.pass(
                &step,
                format!(
                    "compacted {}, context {before} → {after} tokens",
                    r.compacted
                ),
            );
        }
        Err(e) => return report.failed(step, e.to_string()),
    }
    let (user, replies) = (
        Message::user("Continue."),
        vec![Message::assistant("Done.")],
    );
    *turn += 1;
    run_turn(session, *turn, user, replies, report, None).is_ok()
}

/// `/compact` while the model owes an answer to tool results: the request and the open tool
/// calls must survive it (issue 10: a summary without `firstKeptEntryId` dropped them).
fn compact_mid_turn(session: &mut Session, turn: usize, report: &mut CheckReport) -> bool {
    let step = format!(
        "turn {turn}: compact in the middle of a tool loop keeps the request and the open tool calls"
    );
    let request = Message::user("Run the linter on src/ and fix what it reports.");
    let outcome = session
        .begin_turn(TurnInput {
            user: request,
            is_heartbeat: false,
        })
        .map_err(|e| format!("model call 1: {e}"))
        .and_then(|a| judge_call(&a).map_err(|e| format!("model call 1: {e}")))
        .and_then(|()| {
            let call = tool_step(turn, 1, "bash", 60);
            session
                .continue_turn(call)
                .map_err(|e| format!("model call 2: {e}"))
        })
        .and_then(|a| judge_call(&a).map_err(|e| format!("model call 2: {e}")))
        .and_then(|()| {
            session
                .compact_now(None)
                .map_err(|e| format!("compact after model call 2: {e}"))
        })
        .and_then(|_| {
            session
                .continue_turn(tool_step(turn, 2, "read", 20))
                .map_err(|e| format!("model call 3: {e}"))
        })
        .and_then(|a| {
            judge_call(&a).map_err(|e| format!("model call 3: {e}"))?;
            let open = format!("call_check_{turn}_2");
            if a.messages
                .iter()
                .any(|m| m.tool_calls().any(|c| c.id == open))
            {
                Ok(())
            } else {
                Err(format!(
                    "model call 3: the open tool call {open} is not in the context"
                ))
            }
        })
        .and_then(|()| {
            session
                .end_turn(vec![Message::assistant("The linter is clean.")])
                .map_err(|e| format!("after the last model call: {e}"))
        });
    match outcome {
        Ok(stats) => {
            report.slowest_turn_ms = report.slowest_turn_ms.max(stats.engine_ms);
            report.pass(&step, "3 model calls".into());
            true
        }
        Err(e) => report.failed(step, e),
    }
}

/// One request whose tool loop alone outgrows the budget: every model call of it must still
/// carry the request, the newest summary and some history, and fit the budget.
fn long_turn(session: &mut Session, turn: usize, report: &mut CheckReport) -> bool {
    let budget = session.token_budget();
    let step =
        format!("turn {turn}: a turn larger than the budget keeps its request and the summary");
    let mut call = 1;
    let mut outcome = session.begin_turn(TurnInput {
        user: Message::user("Run the whole test suite and fix every failure you find."),
        is_heartbeat: false,
    });
    loop {
        let a = match outcome {
            Ok(a) => a,
            Err(e) => return report.failed(step, format!("model call {call}: {e}")),
        };
        if let Err(e) = judge_call(&a) {
            return report.failed(step, format!("model call {call}: {e}"));
        }
        if session.context_tokens() > budget * 2 || call >= 16 {
            break;
        }
        call += 1;
        outcome = session.continue_turn(tool_step(turn, call, "read", 40));
    }
    match session.end_turn(vec![Message::assistant("All tests pass.")]) {
        Ok(stats) => report.slowest_turn_ms = report.slowest_turn_ms.max(stats.engine_ms),
        Err(e) => return report.failed(step, format!("after the last model call: {e}")),
    }
    report.pass(&step, format!("{call} model calls, each with the request"));
    true
}

fn subagents_and_close(session: &mut Session, report: &mut CheckReport) -> bool {
    if session.defines(Method::PrepareSubagentSpawn) {
        let step = "prepareSubagentSpawn, then rollback of a failed spawn".to_owned();
        let r = session
            .prepare_subagent_spawn("check:child", ContextMode::Isolated, Some(60_000))
            .and_then(|h| match h {
                Some(h) => session.subagent_spawn_failed(h).map(|()| "rolled back"),
                None => Ok("no rollback handle"),
            });
        match r {
            Ok(d) => report.pass(&step, d.into()),
            Err(e) => return report.failed(step, e.to_string()),
        }
    }
    if session.defines(Method::OnSubagentEnded) {
        let step = "onSubagentEnded".to_owned();
        match session.subagent_ended("check:child", SubagentEndReason::Completed) {
            Ok(()) => report.pass(&step, String::new()),
            Err(e) => return report.failed(step, e.to_string()),
        }
    }
    match session.close() {
        Ok(()) => report.pass("save state and dispose", String::new()),
        Err(e) => return report.failed("save state and dispose".into(), e.to_string()),
    }
    true
}

/// A rough size, to know when the conversation is several windows long (4 bytes a token).
fn size(m: &Message) -> u64 {
    (serde_json::to_string(m).map_or(0, |s| s.len()) / 4) as u64
}

/// The summary a previous compaction left (the session starts from it).
fn previous_summary() -> Message {
    Message::new(MessageBody::CompactionSummary(CompactionSummaryMessage {
        summary: "## Goal\nPort the parser to the new tokenizer.\n## Decisions\n- Keep the \
                  public API of src/parser.rs stable (callers in three crates).\n## Done\n- \
                  Moved lexing into src/lexer.rs (commit 5be3c1a).\n## Next\n- Fix the failing \
                  tests in tests/parse.rs."
            .into(),
        tokens_before: 12_000,
        tokens_after: None,
        first_kept_entry_id: None,
        extra: Extra::new(),
    }))
}

/// Turn `n` of the conversation: a request (every third one pins a decision), then a tool loop
/// of one to three calls whose results grow with `n` (every fourth turn reads a file larger
/// than the whole budget), then the answer.
fn conversation_turn(n: usize) -> (Message, Vec<Message>) {
    let text = if n.is_multiple_of(3) {
        format!(
            "DECISION: module_{n} keeps its error type. Please look at src/module_{n}.rs and fix issue #{n}."
        )
    } else {
        format!("Please look at src/module_{n}.rs and fix issue #{n}.")
    };
    let mut replies = Vec::new();
    let calls = 1 + n % 3;
    for k in 1..=calls {
        let lines = match (n % 4, k) {
            (0, 1) => 600, // larger than the whole budget
            _ => 20 + 15 * k,
        };
        replies.extend(tool_step(n, k, "read", lines));
    }
    replies.push(Message::assistant(format!(
        "Fixed issue #{n} in src/module_{n}.rs (commit 3f9a2c{n}d)."
    )));
    (Message::user(text), replies)
}

/// Tools the opening turn's first model step runs at once, and lines in each result: each
/// result is well under the budget, together they are more than the window.
const PARALLEL_READS: usize = 5;
const PARALLEL_LINES: usize = 50;

/// The opening turn (pimono's first turn, scaled to the check's window): a short request, one
/// model step that reads [`PARALLEL_READS`] files at once, then the answer.
fn parallel_turn(n: usize) -> (Message, Vec<Message>) {
    let id = |k: usize| format!("call_check_{n}_{k}");
    let path = |k: usize| format!("src/module_{n}_{k}.rs");
    let calls: Vec<serde_json::Value> = (1..=PARALLEL_READS)
        .map(|k| json!({"type":"toolCall","id":id(k),"name":"read","arguments":{"path":path(k)}}))
        .collect();
    let mut content = vec![
        json!({"type":"text","text":format!("I'll read the {PARALLEL_READS} modules at once.")}),
    ];
    content.extend(calls);
    let mut replies = vec![json!({"role":"assistant","content":content,"stopReason":"toolUse"})];
    for k in 1..=PARALLEL_READS {
        let listing: String = (0..PARALLEL_LINES)
            .map(|i| {
                format!(
                    "{}:{i}: fn handler_{k}_{i}() -> Result<(), Error> {{ todo }}\n",
                    path(k)
                )
            })
            .collect();
        replies.push(
            json!({"role":"toolResult","toolCallId":id(k),"toolName":"read",
            "content":[{"type":"text","text":listing}],"isError":false}),
        );
    }
    replies.push(json!({"role":"assistant","content":[{"type":"text",
        "text":format!("The {PARALLEL_READS} modules share one error type; {} defines it.", path(1))}]}));
    let replies = replies
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect();
    let request = format!(
        "Read {} to {} and tell me how errors flow.",
        path(1),
        path(PARALLEL_READS)
    );
    (Message::user(request), replies)
}

/// A model step: an assistant tool call and its result of `lines` lines with identifiers.
fn tool_step(turn: usize, k: usize, tool: &str, lines: usize) -> Vec<Message> {
    let id = format!("call_check_{turn}_{k}");
    let listing: String = (0..lines)
        .map(|i| {
            format!("src/module_{turn}.rs:{i}: fn handler_{i}() -> Result<(), Error> {{ todo }}\n")
        })
        .collect();
    let msgs = [
        json!({"role":"assistant","content":[
            {"type":"text","text":format!("I'll {tool} src/module_{turn}.rs.")},
            {"type":"toolCall","id":id,"name":tool,"arguments":{"path":format!("src/module_{turn}.rs")}}],
            "stopReason":"toolUse"}),
        json!({"role":"toolResult","toolCallId":id,"toolName":tool,
            "content":[{"type":"text","text":listing}],"isError":false}),
    ];
    msgs.into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect()
}
