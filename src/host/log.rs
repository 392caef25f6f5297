//! `host.log.debug/info/warn(msg)` (and the languages' `print`): script text in the host's log,
//! tagged with the engine and session, cut to [`LOG_CAP`] so a script cannot flood the log.

use super::HostCall;
use super::api::{Args, Ctx};
use super::value::{HostError, HostOut, HostValue};

/// `host.log` levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    /// `host.log.debug`
    Debug,
    /// `host.log.info`
    Info,
    /// `host.log.warn`
    Warn,
}

/// The most bytes of script text one log line keeps; the rest is cut (on a character boundary).
pub const LOG_CAP: usize = 64 << 10;

pub use crate::error::cut_text as cut_log_text;

/// Logs a script's line at `level`, tagged with the engine and, inside a call, the session;
/// the text is cut to [`LOG_CAP`] by [`cut_log_text`].
pub fn log(engine: &str, session: Option<&str>, level: LogLevel, text: String) {
    let text = cut_log_text(text, LOG_CAP);
    match (level, session) {
        (LogLevel::Debug, Some(session)) => tracing::debug!(engine, session, "{text}"),
        (LogLevel::Info, Some(session)) => tracing::info!(engine, session, "{text}"),
        (LogLevel::Warn, Some(session)) => tracing::warn!(engine, session, "{text}"),
        (LogLevel::Debug, None) => tracing::debug!(engine, "{text}"),
        (LogLevel::Info, None) => tracing::info!(engine, "{text}"),
        (LogLevel::Warn, None) => tracing::warn!(engine, "{text}"),
    }
}

impl HostCall {
    /// Logs script text at `level`, tagged with this call's engine and session.
    pub fn log(&self, level: LogLevel, text: String) {
        log(&self.engine_id, Some(&self.session_id), level, text);
    }
}

/// `host.log.<level>(msg)`: inside a call or not (a file's top level logs too).
fn write(cx: &Ctx<'_>, level: LogLevel, [text, _]: Args) -> Result<HostOut, HostError> {
    let text = match text {
        HostValue::Text(s) => s,
        HostValue::Nil => String::new(),
        other => other.describe(),
    };
    cx.scope().log(level, text);
    Ok(HostOut::Nil)
}

/// `host.log.debug(msg)`.
pub(super) fn debug(cx: &Ctx<'_>, argv: Args) -> Result<HostOut, HostError> {
    write(cx, LogLevel::Debug, argv)
}

/// `host.log.info(msg)`; Lua's `print` too.
pub(super) fn info(cx: &Ctx<'_>, argv: Args) -> Result<HostOut, HostError> {
    write(cx, LogLevel::Info, argv)
}

/// `host.log.warn(msg)`.
pub(super) fn warn(cx: &Ctx<'_>, argv: Args) -> Result<HostOut, HostError> {
    write(cx, LogLevel::Warn, argv)
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;
