//! One error type for the library, located: every engine failure names the operation, the engine
//! id and, where a script is at fault, `file:line`.
//!
//! [`EngineErrorKind::disposition`] is the single place that decides whether a failure
//! quarantines the engine, fails closed, or is the caller's own cancellation.

use std::fmt;
use std::path::PathBuf;

use crate::contract::{Method, Operation};

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A context engine failed; the turn driver falls back to `legacy` unless the policy is strict.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A transcript line or file could not be read as any known format.
    #[error("{path}:{line}: {message}")]
    Transcript {
        /// The transcript file.
        path: PathBuf,
        /// 1-based line (0 when the problem is the whole file).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A configuration value is invalid.
    #[error("config {place}: {message}")]
    Config {
        /// File and key (or line:column) of the bad value.
        place: String,
        /// What is wrong and what was expected.
        message: String,
    },
    /// An exact tokenizer could not be built.
    #[error("tokenizer {name}: {message}")]
    Tokenizer {
        /// The tokenizer's name.
        name: String,
        /// Why it failed.
        message: String,
    },
    /// The built-in summarizer failed.
    #[error("summarize: {0}")]
    Summarize(String),
    /// The host itself failed while serving an engine call (a host bug, a dead worker, a host
    /// service that failed). Never the engine's fault: nothing is quarantined, and the caller
    /// gets the error.
    #[error("host fault during {} for engine \"{}\": {}", .0.op, .0.engine, .0.message)]
    Host(EngineError),
    /// A task the host ran on tokio's blocking pool panicked or was cancelled (a host bug,
    /// reported instead of taking the process down).
    #[error("{task} did not finish: {message}")]
    Task {
        /// What the task was doing (`session call`, `replay`, `engine reload`).
        task: &'static str,
        /// The panic or cancellation.
        message: String,
    },
    /// Something that must run inside a tokio runtime was called outside one.
    #[error("{what} needs a tokio runtime: {message}")]
    NoRuntime {
        /// What was called.
        what: &'static str,
        /// tokio's explanation.
        message: String,
    },
    /// A file operation failed.
    #[error("{op} {path}: {cause}")]
    Io {
        /// What the host was doing (`append to transcript`, `read engine`, ...).
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error (in the message, not repeated as a source).
        cause: std::io::Error,
    },
    /// A session store (a database, or the files of one) refused or failed an operation.
    #[error("{backend} store, {op}{}: {message}", .session.as_ref().map(|s| format!(" of session \"{s}\"")).unwrap_or_default())]
    Store {
        /// `fs-jsonl`, `memory` or `postgres`.
        backend: &'static str,
        /// What the host was doing (`open session`, `commit turn`, `take lease`, ...).
        op: &'static str,
        /// The session, when the operation was on one.
        session: Option<String>,
        /// What went wrong.
        message: String,
    },
    /// Another process serves this session now (its lease moved, or is held): this process
    /// must drop the session and never write it. Nothing of the refused write was stored.
    #[error("{backend} store, {op} of session \"{session}\": the session moved: {message}")]
    SessionMoved {
        /// The backend that keeps leases (`postgres`).
        backend: &'static str,
        /// What the host was doing (`commit turn`, `take lease`, ...).
        op: &'static str,
        /// The session.
        session: String,
        /// Who holds it now, or why this process lost it.
        message: String,
    },
}

impl Error {
    /// An I/O error with its operation and path.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            cause: source,
        }
    }
}

/// Where in a script a failure happened.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScriptLocation {
    /// The script file as it was loaded.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<u32>,
    /// 1-based column, when known (Rhai reports one; Luau does not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<u32>,
}

impl ScriptLocation {
    /// A location at `line` of `file` (no column).
    pub fn new(file: impl Into<String>, line: Option<u32>) -> Self {
        ScriptLocation {
            file: file.into(),
            line,
            column: None,
        }
    }

    /// The same location with a column.
    pub fn with_column(mut self, column: Option<u32>) -> Self {
        self.column = column;
        self
    }
}

impl fmt::Display for ScriptLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(line), Some(col)) => write!(f, "{}:{line}:{col}", self.file),
            (Some(line), None) => write!(f, "{}:{line}", self.file),
            _ => write!(f, "{}", self.file),
        }
    }
}

/// The longest engine error message kept, in bytes (4 KiB); the rest is cut and counted.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 4 << 10;

fn capped(message: String) -> String {
    cut_text(message, MAX_ERROR_MESSAGE_BYTES)
}

/// `text` cut to `cap` bytes on a character boundary, ending with how many bytes were cut: the
/// one cut for every text a script controls (error messages, log lines), so none can flood a
/// log or a report, nor panic the host by cutting inside a character.
pub(crate) fn cut_text(text: String, cap: usize) -> String {
    cut_text_beyond(text, cap, 0)
}

/// [`cut_text`] for a text whose last `beyond` bytes were never gathered (a join that stopped at
/// the cap rather than build a huge string only to cut it): the note counts them too.
pub(crate) fn cut_text_beyond(mut text: String, cap: usize, beyond: usize) -> String {
    if text.len() <= cap && beyond == 0 {
        return text;
    }
    let mut end = cap.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text.len() - end + beyond;
    text.truncate(end);
    text.push_str(&format!("… ({cut} more bytes cut)"));
    text
}

/// What the host was doing when an engine failed: a lifecycle method, or one of the host's own
/// steps around it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// Reading and compiling the engine file.
    Load,
    /// Checking the loaded engine against the contract.
    Validate,
    /// Running the file's factory function.
    Factory,
    /// Starting an engine instance for a session.
    Instantiate,
    /// Swapping in a new version of the engine.
    Reload,
    /// Saving the per-session state.
    SaveState,
    /// Restoring the per-session state.
    RestoreState,
    /// A whole turn, judged against `host.turnBudget`.
    Turn,
    /// Checking `hostRequirements` before an operation.
    Requirements(Operation),
    /// A lifecycle method.
    Method(Method),
}

impl Op {
    /// The name users read (`compact`, `load`, `restoreState`, `agent-run`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Load => "load",
            Op::Validate => "validate",
            Op::Factory => "factory",
            Op::Instantiate => "instantiate",
            Op::Reload => "reload",
            Op::SaveState => "saveState",
            Op::RestoreState => "restoreState",
            Op::Turn => "turn",
            Op::Requirements(Operation::AgentRun) => "agent-run",
            Op::Requirements(Operation::ManualCompact) => "manual-compact",
            Op::Requirements(Operation::SubagentSpawn) => "subagent-spawn",
            Op::Method(m) => m.as_str(),
        }
    }
}

impl From<Method> for Op {
    fn from(m: Method) -> Self {
        Op::Method(m)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for Op {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl serde::Serialize for Op {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A context engine's failure, with everything a user needs to find it.
#[derive(Clone, Debug, PartialEq, thiserror::Error, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineError {
    /// What the host was doing.
    pub op: Op,
    /// The engine id (the configured id when the engine never loaded).
    pub engine: String,
    /// The script location, when one is known.
    pub location: Option<ScriptLocation>,
    /// What kind of failure this is.
    pub kind: EngineErrorKind,
    /// The message, without the location prefix.
    pub message: String,
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed in engine \"{}\"", self.op, self.engine)?;
        if let Some(loc) = &self.location {
            write!(f, " ({loc})")?;
        }
        write!(f, ": {}: {}", self.kind.label(), self.message)
    }
}

impl EngineError {
    /// A new error; add the location with [`EngineError::at`]. A message longer than
    /// [`MAX_ERROR_MESSAGE_BYTES`] (a script controls it: `error(("x"):rep(3e7))`) is cut, so
    /// what is logged and reported stays readable.
    pub fn new(
        op: impl Into<Op>,
        engine: impl Into<String>,
        kind: EngineErrorKind,
        message: impl Into<String>,
    ) -> Self {
        EngineError {
            op: op.into(),
            engine: engine.into(),
            location: None,
            kind,
            message: capped(message.into()),
        }
    }

    /// The same error, located in a script.
    pub fn at(mut self, location: Option<ScriptLocation>) -> Self {
        if location.is_some() {
            self.location = location;
        }
        self
    }

    /// What the host does about it.
    pub fn disposition(&self) -> Disposition {
        self.kind.disposition()
    }
}

/// The kinds of engine failure (contract §8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum EngineErrorKind {
    /// The engine file does not exist or cannot be read.
    MissingFile,
    /// The script does not parse.
    Syntax,
    /// The script loaded but breaks the contract (`info`, required functions, enums).
    Contract,
    /// The factory function threw.
    Factory,
    /// A lifecycle method threw.
    Runtime,
    /// A call overran its wall-clock deadline.
    Deadline,
    /// The engine exceeded its memory cap.
    Memory,
    /// The engine exceeded another limit (operations, call depth, result size).
    Limit,
    /// A lifecycle method returned a value that fails validation.
    InvalidResult,
    /// `hostRequirements` names capabilities this host lacks: fail closed, never quarantined.
    HostRequirement,
    /// The caller cancelled the call: never a quarantine.
    Cancelled,
    /// The host failed while serving the call (a host bug, a dead worker, a failing host
    /// service): returned to the caller, never a quarantine.
    Host,
}

impl EngineErrorKind {
    /// A short human label.
    pub fn label(self) -> &'static str {
        match self {
            EngineErrorKind::MissingFile => "missing file",
            EngineErrorKind::Syntax => "syntax error",
            EngineErrorKind::Contract => "contract violation",
            EngineErrorKind::Factory => "factory error",
            EngineErrorKind::Runtime => "runtime error",
            EngineErrorKind::Deadline => "deadline exceeded",
            EngineErrorKind::Memory => "memory limit exceeded",
            EngineErrorKind::Limit => "limit exceeded",
            EngineErrorKind::InvalidResult => "invalid result",
            EngineErrorKind::HostRequirement => "unmet host requirements",
            EngineErrorKind::Cancelled => "cancelled",
            EngineErrorKind::Host => "host fault",
        }
    }

    /// The one place that decides what a failure means for the engine.
    pub fn disposition(self) -> Disposition {
        match self {
            EngineErrorKind::HostRequirement => Disposition::FailClosed,
            EngineErrorKind::Cancelled => Disposition::Cancelled,
            EngineErrorKind::Host => Disposition::HostFault,
            EngineErrorKind::MissingFile
            | EngineErrorKind::Syntax
            | EngineErrorKind::Contract
            | EngineErrorKind::Factory
            | EngineErrorKind::Runtime
            | EngineErrorKind::Deadline
            | EngineErrorKind::Memory
            | EngineErrorKind::Limit
            | EngineErrorKind::InvalidResult => Disposition::Quarantine,
        }
    }
}

/// What the host does with a failed engine call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Quarantine the engine for the process and re-run the call on `legacy`.
    Quarantine,
    /// Refuse the operation with a message; the engine stays usable.
    FailClosed,
    /// The caller gave up; report it, nothing else.
    Cancelled,
    /// The host failed, not the engine: return the error, quarantine nothing.
    HostFault,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_error_display_names_op_engine_and_place() {
        let e = EngineError::new(
            Method::Compact,
            "recent-turns",
            EngineErrorKind::Runtime,
            "attempt to index nil",
        )
        .at(Some(ScriptLocation::new("recent.lua", Some(12))));
        assert_eq!(
            e.to_string(),
            "compact failed in engine \"recent-turns\" (recent.lua:12): runtime error: attempt to index nil"
        );
    }

    #[test]
    fn only_script_faults_quarantine() {
        assert_eq!(
            EngineErrorKind::Cancelled.disposition(),
            Disposition::Cancelled
        );
        assert_eq!(
            EngineErrorKind::HostRequirement.disposition(),
            Disposition::FailClosed
        );
        assert_eq!(
            EngineErrorKind::Deadline.disposition(),
            Disposition::Quarantine
        );
        assert_eq!(EngineErrorKind::Host.disposition(), Disposition::HostFault);
    }
}
