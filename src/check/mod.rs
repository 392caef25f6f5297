//! `ctxhost check`: is an engine file sound? Load and validate it, then drive every lifecycle
//! method it defines through a real session (strict policy, so nothing is hidden by fallback)
//! on a synthetic conversation that overflows a small window, including a `compact` on an
//! over-budget session.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::json;

use crate::config::{Config, Entry};
use crate::config::{FailurePolicy, SlowEnginePolicy};
use crate::contract::{ContextMode, Method, SubagentEndReason};
use crate::engine::legacy::LEGACY_ID;
use crate::guarantee::{Violation, violations};
use crate::message::Message;
use crate::runtime::{Host, SessionSpec};
use crate::session::{Assembly, MethodTimes, Session, TurnInput};

/// The window the synthetic session runs in: small, so compaction is exercised.
pub const CHECK_WINDOW: u64 = 4_000;

/// The outcome of checking one engine file.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    /// The engine file.
    pub file: PathBuf,
    /// The engine's `info.id` (or the id derived from the file name when it did not load).
    pub engine: String,
    /// Lifecycle methods the engine defines.
    pub defines: Vec<String>,
    /// Load-time warnings (unknown members, id mismatch).
    pub warnings: Vec<String>,
    /// Each step, in order.
    pub steps: Vec<CheckStep>,
    /// True when every step passed.
    pub sound: bool,
    /// Where the engine's time went during the check, per lifecycle method.
    pub engine_times: Vec<MethodTimes>,
    /// The slowest turn's engine time, in ms, against `host.turnBudget.engineMs`.
    pub slowest_turn_ms: f64,
}

/// One step of the check.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckStep {
    /// What was exercised.
    pub step: String,
    /// `ok` or the error.
    pub ok: bool,
    /// Details or the error message (with file:line when the script is at fault).
    pub detail: String,
}

/// Checks an engine file with the given host settings (the engine entry is filled in here).
pub fn check_engine(path: &Path, base: &Config) -> CheckReport {
    let id = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("engine")
        .replace('_', "-");
    let mut report = CheckReport {
        file: path.to_path_buf(),
        engine: id.clone(),
        defines: Vec::new(),
        warnings: Vec::new(),
        steps: Vec::new(),
        sound: false,
        engine_times: Vec::new(),
        slowest_turn_ms: 0.0,
    };
    if id == LEGACY_ID {
        return report.fail(
            "load and validate",
            format!(
                "the id \"{LEGACY_ID}\" is reserved for the built-in engine; rename the file and give the engine its own info.id"
            ),
        );
    }
    // The engine loads under the user's policy (an info.id that differs from the file name is
    // a warning unless the config is strict); the session below runs strict.
    let mut config = base.clone();
    config.host.window = CHECK_WINDOW;
    config.plugins.slots.context_engine = Some(id.clone());
    let mut entry = config.plugins.entries.remove(&id).unwrap_or_default();
    entry.path = Some(std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()));
    config.plugins.entries.insert(
        id.clone(),
        Entry {
            enabled: true,
            ..entry
        },
    );

    let host = match Host::new(config) {
        Ok(h) => h,
        Err(e) => return report.fail("start host", e.to_string()),
    };
    match host.engine() {
        Some(Ok(factory)) => {
            report.engine = factory.info().id.clone();
            report.warnings = factory.warnings().to_vec();
            report.pass(
                "load and validate",
                format!("info.id \"{}\"", factory.info().id),
            );
        }
        Some(Err(e)) => return report.fail("load and validate", e.to_string()),
        None => return report.fail("load and validate", "no engine configured".into()),
    }
    let dir = match tempfile_dir() {
        Ok(d) => d,
        Err(e) => return report.fail("create a scratch directory", e),
    };
    let spec = SessionSpec::new("check", dir.join("check.jsonl"));
    let mut setup = host.session_setup(&spec);
    setup.failure_policy = FailurePolicy::Strict;
    // Slow turns are judged below against the budget, not quarantined mid-check.
    setup.turn_budget.on_exceed = SlowEnginePolicy::Report;
    let turn_budget_ms = setup.turn_budget.engine_ms;
    let mut session = match Session::create(setup, &spec.file, "") {
        Ok(s) => s,
        Err(e) => return report.fail("instantiate", e.to_string()),
    };
    report.defines = Method::ALL
        .into_iter()
        .filter(|m| session.defines(*m))
        .map(|m| m.as_str().to_owned())
        .collect();
    let sound = drive(&mut session, &mut report);
    report.engine_times = session.call_times().summary();
    if sound {
        let slowest = report.slowest_turn_ms;
        let detail = format!(
            "slowest turn {slowest:.1} ms of the {turn_budget_ms} ms budget; {}",
            report
                .engine_times
                .iter()
                .map(|t| format!("{} p95 {:.2} ms", t.method, t.p95_ms))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if slowest <= turn_budget_ms as f64 {
            report.pass("engine time per turn", detail);
        } else {
            report.failed("engine time per turn".into(), detail);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    report.sound = sound && report.steps.iter().all(|s| s.ok);
    report
}

fn drive(session: &mut Session, report: &mut CheckReport) -> bool {
    // Turns until the context is over budget (the replies carry large tool results).
    let budget = session.token_budget();
    let mut turn = 0;
    while turn < 12 && (turn < 3 || session.context_tokens() <= budget) {
        turn += 1;
        let step =
            format!("turn {turn}: bootstrap/ingest/assemble, then ingest/afterTurn/maintain");
        let user = Message::user(format!(
            "Please look at src/module_{turn}.rs and fix issue #{turn}."
        ));
        match session.begin_turn(TurnInput {
            user,
            is_heartbeat: false,
        }) {
            Ok(a) => {
                if let Err(e) = carries(session, &a) {
                    return report.failed(step, e);
                }
                if a.assembled_tokens > a.token_budget {
                    return report.failed(
                        step,
                        format!(
                            "assembled {} tokens over a budget of {}",
                            a.assembled_tokens, a.token_budget
                        ),
                    );
                }
            }
            Err(e) => return report.failed(step, e.to_string()),
        }
        match session.end_turn(replies(turn)) {
            Ok(stats) => report.slowest_turn_ms = report.slowest_turn_ms.max(stats.engine_ms),
            Err(e) => return report.failed(step, e.to_string()),
        }
        report.pass(
            &step,
            format!("context {} tokens", session.context_tokens()),
        );
    }
    let before = session.context_tokens();
    let step = format!("compact on an over-budget session ({before} > {budget} tokens)");
    match session.compact_now(None) {
        Ok(r) => {
            let after = session.context_tokens();
            let owns = session.active_owns_compaction();
            if !owns && after >= before {
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
    let step = "assemble after compaction".to_owned();
    match session.begin_turn(TurnInput {
        user: Message::user("Continue."),
        is_heartbeat: false,
    }) {
        Ok(a) if a.assembled_tokens <= a.token_budget => match carries(session, &a) {
            Ok(()) => report.pass(
                &step,
                format!("{} / {} tokens", a.assembled_tokens, a.token_budget),
            ),
            Err(e) => return report.failed(step, e),
        },
        Ok(a) => {
            return report.failed(
                step,
                format!(
                    "{} tokens over a budget of {}",
                    a.assembled_tokens, a.token_budget
                ),
            );
        }
        Err(e) => return report.failed(step, e.to_string()),
    }
    match session.end_turn(vec![Message::assistant("Done.")]) {
        Ok(stats) => report.slowest_turn_ms = report.slowest_turn_ms.max(stats.engine_ms),
        Err(e) => return report.failed("end turn after compaction".into(), e.to_string()),
    }
    if let Err(e) = long_turn(session, report) {
        return report.failed(LONG_TURN_STEP.to_owned(), e);
    }
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

/// Whether an assembly carries what a model needs (contract §1, [`crate::guarantee`]): the
/// current request and the newest summary when one exists.
fn carries(session: &Session, a: &Assembly) -> Result<(), String> {
    let v: Vec<&str> = violations(
        session.context(),
        session.current_request(),
        &a.messages,
        a.system_prompt_addition.as_deref(),
    )
    .into_iter()
    .filter(|v| *v != Violation::NoHistory)
    .map(Violation::describe)
    .collect();
    if v.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "a model call went out without what a model needs to continue: {}",
            v.join(", ")
        ))
    }
}

const LONG_TURN_STEP: &str = "a turn larger than the budget keeps its request and the summary";

/// One request whose tool loop alone outgrows the budget: every model call of it must still
/// carry the request, the newest summary, and fit the budget.
fn long_turn(session: &mut Session, report: &mut CheckReport) -> Result<(), String> {
    let budget = session.token_budget();
    let check = |session: &Session, a: &Assembly| -> Result<(), String> {
        carries(session, a)?;
        if a.assembled_tokens > a.token_budget {
            return Err(format!(
                "{} tokens over a budget of {}",
                a.assembled_tokens, a.token_budget
            ));
        }
        Ok(())
    };
    let a = session
        .begin_turn(TurnInput {
            user: Message::user("Run the whole test suite and fix every failure you find."),
            is_heartbeat: false,
        })
        .map_err(|e| e.to_string())?;
    check(session, &a)?;
    let mut calls = 1;
    while session.context_tokens() <= budget * 2 && calls < 16 {
        let step: Vec<Message> = replies(100 + calls).into_iter().take(2).collect();
        let a = session.continue_turn(step).map_err(|e| e.to_string())?;
        check(session, &a)?;
        calls += 1;
    }
    session
        .end_turn(vec![Message::assistant("All tests pass.")])
        .map_err(|e| e.to_string())?;
    report.pass(
        LONG_TURN_STEP,
        format!("{calls} model calls, each with the request"),
    );
    Ok(())
}

/// A turn's replies: a tool call, a large tool result with identifiers, and an answer.
fn replies(turn: usize) -> Vec<Message> {
    let id = format!("call_check_{turn}");
    let listing: String = (0..40)
        .map(|i| {
            format!("src/module_{turn}.rs:{i}: fn handler_{i}() -> Result<(), Error> {{ todo }}\n")
        })
        .collect();
    let msgs = [
        json!({"role":"assistant","content":[
            {"type":"text","text":format!("I'll read src/module_{turn}.rs first.")},
            {"type":"toolCall","id":id,"name":"read","arguments":{"path":format!("src/module_{turn}.rs")}}],
            "stopReason":"toolUse"}),
        json!({"role":"toolResult","toolCallId":id,"toolName":"read",
            "content":[{"type":"text","text":listing}],"isError":false}),
        json!({"role":"assistant","content":[{"type":"text","text":
            format!("Fixed issue #{turn} in src/module_{turn}.rs (commit 3f9a2c{turn}d).")}],"stopReason":"stop"}),
    ];
    msgs.into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect()
}

fn tempfile_dir() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!(
        "ctxhost-check-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

impl CheckReport {
    fn pass(&mut self, step: &str, detail: String) {
        self.steps.push(CheckStep {
            step: step.to_owned(),
            ok: true,
            detail,
        });
    }

    fn failed(&mut self, step: String, detail: String) -> bool {
        self.steps.push(CheckStep {
            step,
            ok: false,
            detail,
        });
        false
    }

    fn fail(mut self, step: &str, detail: String) -> CheckReport {
        self.failed(step.to_owned(), detail);
        self.sound = false;
        self
    }
}
