//! Where failures of one VM are reported: [`Site`] turns what an adapter saw ([`Fault`]) into a
//! classified, located [`EngineError`]; a worker that gave no answer becomes one too.

use std::sync::Arc;

use serde_json::Value as Json;

use super::convert::{Budget, ConvError};
use super::language::Boot;
use super::located;
use super::result::info_from_json;
use crate::contract::EngineInfo;
use crate::contract::limits::Limits;
use crate::error::{EngineError, EngineErrorKind, Op, ScriptLocation};
use crate::sandbox::{StopReason, StopSignals, WatchGuard, WorkerError};

/// The most bytes of text an engine's `info` may hold.
pub(crate) const INFO_BYTES: usize = 1 << 20;

/// A script failure as the adapter saw it, before classification.
#[derive(Debug)]
pub(crate) struct Fault {
    /// The kind when no stop signal explains it (a throw: `Runtime`; `Syntax`, `Memory`,
    /// `Limit`, `Factory` as the adapter recognised them).
    pub kind: EngineErrorKind,
    /// The message, without location prefixes.
    pub message: String,
    /// 1-based line, when known.
    pub line: Option<u32>,
    /// 1-based column, when known.
    pub column: Option<u32>,
}

/// Where failures of one VM are reported: file, engine, and the signals that explain stops.
#[derive(Clone, Debug)]
pub(crate) struct Site {
    /// The script file.
    pub file: String,
    /// The engine id (or label before `info` is known).
    pub engine: String,
    /// The interrupt's flags.
    pub signals: Arc<StopSignals>,
    /// Budgets, for messages.
    pub limits: Limits,
}

impl Site {
    /// The site of a VM being booted (its engine is the label until `info` names it).
    pub(crate) fn of(boot: &Boot) -> Site {
        Site {
            file: boot.file.clone(),
            engine: boot.label.clone(),
            signals: boot.signals.clone(),
            limits: boot.limits.clone(),
        }
    }

    /// The byte budget for converting one result, state or `host` argument.
    pub(crate) fn budget(&self) -> Budget {
        Budget::new(self.limits.results.max_result_bytes)
    }

    /// Starts a call under the deadline (disarmed when the guard drops).
    pub(crate) fn start_call(&self) -> WatchGuard {
        self.signals.start_call(self.limits.deadline())
    }

    /// Classifies a failed call: a set cancel flag is `Cancelled`, a passed deadline `Deadline`
    /// (both located where the interrupt stopped), anything else the fault's own kind.
    pub(crate) fn fail(&self, op: Op, fault: Fault) -> EngineError {
        let line = self.signals.line().or(fault.line);
        match self.signals.check() {
            Some(StopReason::Cancelled) => {
                return EngineError::new(
                    op,
                    &self.engine,
                    EngineErrorKind::Cancelled,
                    "call cancelled",
                )
                .at(located(&self.file, line));
            }
            Some(StopReason::Deadline) => {
                return EngineError::new(
                    op,
                    &self.engine,
                    EngineErrorKind::Deadline,
                    format!(
                        "script exceeded its deadline of {} ms and was stopped",
                        self.limits.deadline_ms
                    ),
                )
                .at(located(&self.file, line));
            }
            None => {}
        }
        let message = match fault.kind {
            EngineErrorKind::Memory => format!(
                "engine exceeded its memory cap of {} bytes ({})",
                self.limits.memory_bytes, fault.message
            ),
            _ => fault.message,
        };
        let location = ScriptLocation::new(&self.file, fault.line).with_column(fault.column);
        EngineError::new(op, &self.engine, fault.kind, message).at(Some(location))
    }

    /// A failure the host found in the engine (not one the script threw): `kind` during `op`,
    /// located at `line` of the file.
    pub(crate) fn error(
        &self,
        op: impl Into<Op>,
        kind: EngineErrorKind,
        message: impl Into<String>,
        line: Option<u32>,
    ) -> EngineError {
        EngineError::new(op, &self.engine, kind, message).at(located(&self.file, line))
    }

    /// The engine breaks the contract (its members, its `info`), at `line`.
    pub(crate) fn contract(&self, message: impl Into<String>, line: Option<u32>) -> EngineError {
        self.error(Op::Validate, EngineErrorKind::Contract, message, line)
    }

    /// The engine's `info`, from its script value as `convert` turns it into JSON within a
    /// budget of [`INFO_BYTES`] (`noun`: what the language calls a map).
    pub(crate) fn info(
        &self,
        convert: impl FnOnce(&mut Budget) -> Result<Json, ConvError>,
        noun: &str,
    ) -> Result<EngineInfo, EngineError> {
        let json = convert(&mut Budget::new(INFO_BYTES))
            .map_err(|e| self.contract(e.describe("info"), None))?;
        info_from_json(json, noun).map_err(|m| self.contract(m, None))
    }

    /// Names the engine by its `info` from now on (errors and logs say its id); `false` when
    /// `info` has no id and the label stays.
    pub(crate) fn name_by(&mut self, info: &EngineInfo) -> bool {
        if info.id.is_empty() {
            return false;
        }
        self.engine = info.id.clone();
        true
    }

    /// The host itself could not prepare a call: a host fault, never the script's, so it is
    /// returned to the caller and quarantines nothing.
    pub(crate) fn host(&self, op: Op, e: impl std::fmt::Display) -> EngineError {
        EngineError::new(
            op,
            &self.engine,
            EngineErrorKind::Host,
            format!("host could not pass the params: {e}"),
        )
    }

    /// The state could not be saved (it holds something JSON cannot).
    pub(crate) fn state_error(&self, e: ConvError) -> EngineError {
        // Too big is a limit, as when the session writes the state (both count it as written).
        let (kind, message) = if e.is_over_budget() {
            let cap = self.limits.results.max_result_bytes;
            (
                EngineErrorKind::Limit,
                format!("the engine state is over {cap} bytes as written (escaped JSON)"),
            )
        } else {
            (EngineErrorKind::InvalidResult, e.describe("state"))
        };
        EngineError::new(Op::SaveState, &self.engine, kind, message).at(located(&self.file, None))
    }

    /// Checks saved state before restoring it: `Ok(None)` for an empty state, the object
    /// otherwise; the adapter converts `Err` text with [`Site::restore_error`].
    pub(crate) fn restorable<'a>(&self, state: &'a Json) -> Result<Option<&'a Json>, EngineError> {
        match state {
            Json::Null => Ok(None),
            Json::Object(_) => Ok(Some(state)),
            other => Err(EngineError::new(
                Op::RestoreState,
                &self.engine,
                EngineErrorKind::InvalidResult,
                format!("saved state must be an object, got {other}"),
            )),
        }
    }

    /// The adapter could not turn saved state into a script value.
    pub(crate) fn restore_error(&self, e: impl std::fmt::Display) -> EngineError {
        EngineError::new(
            Op::RestoreState,
            &self.engine,
            EngineErrorKind::Runtime,
            e.to_string(),
        )
    }
}

/// A worker that gave no answer, as an engine error.
pub(crate) fn worker_error(
    e: WorkerError,
    op: Op,
    engine: &str,
    file: &str,
    limits: &Limits,
    cancelled: bool,
) -> EngineError {
    let (kind, msg) = match e {
        WorkerError::TimedOut if cancelled => (
            EngineErrorKind::Cancelled,
            "call cancelled; the VM did not stop and was abandoned".to_string(),
        ),
        WorkerError::TimedOut => (
            EngineErrorKind::Deadline,
            format!(
                "script did not return within its deadline plus grace ({} ms); its VM is abandoned",
                limits.deadline_ms.saturating_add(limits.grace_ms)
            ),
        ),
        WorkerError::Abandoned => (
            EngineErrorKind::Deadline,
            "the VM was abandoned after an earlier call overran its deadline".to_string(),
        ),
        // The worker only dies from a panic in host code: a host fault, not the engine's.
        WorkerError::Gone => (
            EngineErrorKind::Host,
            "the engine's worker thread stopped (a host panic)".to_string(),
        ),
    };
    EngineError::new(op, engine, kind, msg).at(located(file, None))
}
