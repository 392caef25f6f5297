//! How a Luau failure becomes a [`Fault`]: its kind (syntax, host, memory, limit, or the
//! caller's default), its message without tracebacks or a `file:LINE:` prefix, and the line of
//! the engine's file it names.

use super::hints;
use crate::engine::api::HostError;
use crate::engine::script::Fault;
use crate::error::EngineErrorKind;

/// The message of an mlua error without tracebacks, and the whole text (to find lines in).
fn texts(err: &mlua::Error) -> (String, String) {
    match err {
        mlua::Error::CallbackError { traceback, cause } => {
            let (msg, full) = texts(cause);
            (msg, format!("{full}\n{traceback}"))
        }
        mlua::Error::WithContext { context, cause } => {
            let (msg, full) = texts(cause);
            (format!("{context}: {msg}"), full)
        }
        mlua::Error::RuntimeError(s) => (s.clone(), s.clone()),
        mlua::Error::SyntaxError { message, .. } => (message.clone(), message.clone()),
        mlua::Error::MemoryError(s) => (s.clone(), s.clone()),
        other => (other.to_string(), other.to_string()),
    }
}

/// The first `file:LINE` in `text`.
pub(crate) fn find_line(file: &str, text: &str) -> Option<u32> {
    let mut rest = text;
    while let Some(i) = rest.find(file) {
        let after = &rest[i + file.len()..];
        if let Some(num) = after.strip_prefix(':') {
            let digits: String = num.chars().take_while(char::is_ascii_digit).collect();
            if let Ok(n) = digits.parse() {
                return Some(n);
            }
        }
        rest = &rest[i + file.len()..];
    }
    None
}

/// The message's first line with a leading `file:LINE: ` removed.
fn clean_message(file: &str, msg: &str) -> String {
    let first = msg
        .lines()
        .find(|l| !l.trim().is_empty() && !l.starts_with("stack traceback"))
        .unwrap_or(msg)
        .trim();
    let mut s = first;
    if let Some(rest) = s.strip_prefix(file)
        && let Some(rest) = rest.strip_prefix(':')
    {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if let Some(r) = rest[digits..].strip_prefix(": ") {
            s = r;
        }
    }
    s.strip_prefix("runtime error: ").unwrap_or(s).to_string()
}

fn chain_has_memory(err: &mlua::Error) -> bool {
    err.chain().any(|e| {
        matches!(
            e.downcast_ref::<mlua::Error>(),
            Some(mlua::Error::MemoryError(_))
        )
    })
}

/// A Luau failure as a [`Fault`] (`default`: the kind of an ordinary throw).
pub(super) fn fault(file: &str, err: &mlua::Error, default: EngineErrorKind) -> Fault {
    let (msg, full) = texts(err);
    let kind = if matches!(err, mlua::Error::SyntaxError { .. }) {
        EngineErrorKind::Syntax
    } else if err
        .downcast_ref::<HostError>()
        .is_some_and(HostError::is_host_fault)
    {
        EngineErrorKind::Host
    } else if chain_has_memory(err) || msg.contains("not enough memory") {
        EngineErrorKind::Memory
    } else if msg.contains("stack overflow") {
        EngineErrorKind::Limit
    } else {
        default
    };
    Fault {
        kind,
        message: hints::explain(clean_message(file, &msg)),
        line: find_line(file, &full),
        column: None,
    }
}
