//! `ctxhost check`: is an engine file sound? Load and validate it, then drive every lifecycle
//! method it defines through a real session (strict policy, so nothing is hidden by fallback):
//! a synthetic conversation several times the window, with tool loops, results larger than
//! the budget, pinned decisions and a previous summary (`synthetic`), or a real transcript
//! (`transcript`, `--transcript FILE`). Every model call is held to the budget and to what a
//! model needs to continue ([`crate::services::guarantee`]), and every failure names its turn and call.

mod hook;
mod synthetic;
mod transcript;

pub use hook::check_pipeline;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::{Config, Entry};
use crate::config::{FailurePolicy, SlowEnginePolicy};
use crate::contract::Method;
use crate::engine::legacy::LEGACY_ID;
use crate::runtime::{Host, SessionSpec};
use crate::services::guarantee::Violation;
use crate::session::{Assembly, MethodTimes, Session};

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
    /// For a pipeline hook file: the hook as the check left it (what it defines, its calls
    /// per hook function, its failures); absent for an engine file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hooks: Option<Vec<crate::engine::pipeline::HookReport>>,
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
    check_engine_with(path, base, None)
}

/// Checks an engine file, over the conversations of a real `transcript` when one is given
/// (any format `replay` reads) instead of the synthetic session.
pub fn check_engine_with(path: &Path, base: &Config, transcript: Option<&Path>) -> CheckReport {
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
        hooks: None,
    };
    if id == LEGACY_ID {
        return report.fail(
            "load and validate",
            format!(
                "the id \"{LEGACY_ID}\" is reserved for the built-in engine; rename the file and give the engine its own info.id"
            ),
        );
    }
    if crate::engine::pipeline::is_hook_file(path, &base.host.limits) {
        return hook::check(path, base, transcript, report);
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
    drive_host(&host, transcript, report, |session| {
        Method::ALL
            .into_iter()
            .filter(|m| session.defines(*m))
            .map(|m| m.as_str().to_owned())
            .collect()
    })
}

/// Drives a session of `host`'s engine (strict policy) through the synthetic conversation or
/// `transcript`, and judges the time per turn; `defines` names what the engine defines once its
/// session exists. `report.sound` is set from the steps.
fn drive_host(
    host: &Host,
    transcript: Option<&Path>,
    mut report: CheckReport,
    defines: impl FnOnce(&Session) -> Vec<String>,
) -> CheckReport {
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
    report.defines = defines(&session);
    let sound = match transcript {
        Some(t) => transcript::drive(&mut session, t, &mut report),
        None => synthetic::drive(&mut session, &mut report),
    };
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
    drop(session);
    let _ = std::fs::remove_dir_all(&dir);
    report.sound = sound && report.steps.iter().all(|s| s.ok);
    report
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

/// Whether a model call carries what a model needs (contract §1, [`crate::services::guarantee`]): the
/// current request and the newest summary when one exists, within the budget. The error names
/// what is missing (as the session judged the call).
fn judge_call(a: &Assembly) -> Result<(), String> {
    let v: Vec<&str> = a
        .violations
        .iter()
        .copied()
        // A call without history is reported by replay and the quality example, not failed
        // here: the host adds history whenever the room an assembly leaves can hold some.
        .filter(|v| *v != Violation::NoHistory)
        .map(Violation::describe)
        .collect();
    if !v.is_empty() {
        return Err(format!(
            "the model call went out without what a model needs to continue: {}",
            v.join(", ")
        ));
    }
    if a.assembled_tokens > a.token_budget {
        return Err(format!(
            "assembled {} tokens over a budget of {}",
            a.assembled_tokens, a.token_budget
        ));
    }
    Ok(())
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
