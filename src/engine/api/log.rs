//! `host.log.debug/info/warn(msg)` (and the languages' `print`): script text in the host's log,
//! tagged with the engine and session, cut to [`LOG_CAP`] and limited to
//! [`LOG_LINES_PER_SECOND`] per engine and [`LOG_BYTES_PER_CALL`] per lifecycle call, so a
//! script cannot flood the log: the lines over a limit are dropped and counted, and the count is
//! logged with the engine's next line (or when the call ends).

use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::HostCall;
use super::table::{Args, Ctx};
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

/// The most bytes of script text one log line keeps (4 KiB, as for error messages); the rest is
/// cut on a character boundary, and the line says how many bytes were cut.
pub(crate) const LOG_CAP: usize = 4 << 10;

/// The most bytes of log text one lifecycle call may write (64 KiB, about 16 full lines); the
/// call's later lines are dropped and counted, and the count is logged when the call ends.
pub(crate) const LOG_BYTES_PER_CALL: usize = 64 << 10;

pub(crate) use crate::error::{cut_text as cut_log_text, cut_text_beyond as cut_log_text_beyond};

/// Room a cut line keeps under [`LOG_CAP`] for its note (`… (N more bytes cut)`), so the line,
/// note included, is within the cap and cutting it again changes nothing.
pub(crate) const LOG_NOTE_ROOM: usize = 64;

/// A script's log line as the log keeps it: whole up to [`LOG_CAP`], else cut to
/// `LOG_CAP - LOG_NOTE_ROOM` bytes with a note of how many were cut. The result is within the
/// cap, so a line cut where the script runs (an engine's child process, before it is sent to
/// the parent) reaches the log exactly as it would in process.
pub(crate) fn cut_log_line(text: String) -> String {
    if text.len() <= LOG_CAP {
        return text;
    }
    cut_log_text(text, LOG_CAP - LOG_NOTE_ROOM)
}

/// What one lifecycle call has logged so far, against [`LOG_BYTES_PER_CALL`].
#[derive(Debug, Default)]
pub(crate) struct CallLog {
    bytes: AtomicUsize,
    dropped: AtomicU64,
}

impl CallLog {
    /// Whether a line of `len` bytes still fits this call's budget; a line that does not is
    /// counted as dropped.
    pub(crate) fn admit(&self, len: usize) -> bool {
        let before = self.bytes.fetch_add(len, Ordering::Relaxed);
        if before.saturating_add(len) <= LOG_BYTES_PER_CALL {
            return true;
        }
        self.bytes.fetch_sub(len, Ordering::Relaxed);
        self.dropped.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Starts a new call's budget; returns how many lines the previous call had dropped.
    pub(crate) fn reset(&self) -> u64 {
        self.bytes.store(0, Ordering::Relaxed);
        self.dropped.swap(0, Ordering::Relaxed)
    }
}

/// Logs, once a call has ended, how many of its lines were over its byte budget.
pub(crate) fn report_dropped(engine: &str, session: Option<&str>, dropped: u64) {
    if dropped == 0 {
        return;
    }
    let noun = if dropped == 1 { "line" } else { "lines" };
    match session {
        Some(session) => tracing::warn!(
            engine,
            session,
            "dropped {dropped} log {noun} of one call (over {LOG_BYTES_PER_CALL} bytes per call)"
        ),
        None => tracing::warn!(
            engine,
            "dropped {dropped} log {noun} of one call (over {LOG_BYTES_PER_CALL} bytes per call)"
        ),
    }
}

/// Lines one engine may log per second; the rest of that second's lines are suppressed.
pub(crate) const LOG_LINES_PER_SECOND: u32 = 100;

/// One engine's log budget: a one-second window and the lines suppressed so far.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LogGate {
    window: Instant,
    lines: u32,
    suppressed: u64,
}

/// Whether a line may be logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Log it; first say that this many earlier lines were suppressed (when not 0).
    Pass {
        /// Lines dropped since the engine's last logged line.
        suppressed: u64,
    },
    /// Over the limit: drop it (it is counted).
    Drop,
}

impl LogGate {
    /// A gate whose first window starts at `now`.
    pub(crate) fn new(now: Instant) -> Self {
        LogGate {
            window: now,
            lines: 0,
            suppressed: 0,
        }
    }

    /// Judges one line at `now`.
    pub(crate) fn admit(&mut self, now: Instant) -> Admission {
        if now.duration_since(self.window) >= Duration::from_secs(1) {
            self.window = now;
            self.lines = 0;
        }
        if self.lines >= LOG_LINES_PER_SECOND {
            self.suppressed += 1;
            return Admission::Drop;
        }
        self.lines += 1;
        Admission::Pass {
            suppressed: std::mem::take(&mut self.suppressed),
        }
    }
}

/// The gates of every engine that logged in this process, by engine id.
fn gates() -> &'static Mutex<HashMap<String, LogGate>> {
    static GATES: OnceLock<Mutex<HashMap<String, LogGate>>> = OnceLock::new();
    GATES.get_or_init(Default::default)
}

/// Logs a script's line at `level`, tagged with the engine and, inside a call, the session;
/// the text is cut to [`LOG_CAP`] by [`cut_log_line`], and past [`LOG_LINES_PER_SECOND`] lines
/// the engine's lines are dropped and counted.
pub(crate) fn log(engine: &str, session: Option<&str>, level: LogLevel, text: String) {
    log_within(engine, session, level, text, None);
}

/// [`log`], with the line also counted against a call's byte budget when `call` is given.
pub(crate) fn log_within(
    engine: &str,
    session: Option<&str>,
    level: LogLevel,
    text: String,
    call: Option<&CallLog>,
) {
    let text = cut_log_line(text);
    if call.is_some_and(|c| !c.admit(text.len())) {
        return;
    }
    let admission = {
        let mut gates = gates().lock();
        let now = Instant::now();
        gates
            .entry(engine.to_owned())
            .or_insert_with(|| LogGate::new(now))
            .admit(now)
    };
    match admission {
        Admission::Drop => return,
        Admission::Pass { suppressed: 0 } => {}
        Admission::Pass { suppressed } => tracing::warn!(
            engine,
            "suppressed {suppressed} log lines of this engine (over {LOG_LINES_PER_SECOND} per second)"
        ),
    }
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
fn write(cx: &Ctx<'_>, level: LogLevel, [text, ..]: Args) -> Result<HostOut, HostError> {
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
