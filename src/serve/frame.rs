//! Incoming frames, told apart as JSON-RPC 2.0 says: a request is an object with a `method`
//! and an `id` (a number or a string), a notification one without an `id`, an answer to one of
//! ctxhost's own requests one with `result` or `error`. The `id` is read first, so every error
//! answer to a frame whose id is readable carries it.
//!
//! Lenient where real clients are: a string with a lone surrogate escape (what JavaScript's
//! `JSON.stringify` writes for a string cut inside an emoji) is read with U+FFFD in its place,
//! and a frame nested deeper than the parser's limit (128 levels) has every value below
//! [`CUT_DEPTH`] levels replaced by [`CUT_NOTE`] rather than failing whole. Both repairs run
//! only on a frame that did not parse as sent, and are counted.

use serde_json::{Map, Value};

use super::protocol::{Id, RpcError, code};

/// The deepest level of a frame kept when the frame is nested past the parser's limit: a tool
/// result's `details` then keep about 90 levels of their own, far above what a real tool
/// writes (and within the 128 levels an engine's values may nest).
pub(super) const CUT_DEPTH: usize = 100;

/// What stands in for a value cut at [`CUT_DEPTH`].
pub(super) const CUT_NOTE: &str = "[cut by ctxhost: nested deeper than 100 levels]";

/// What a frame was told to be.
#[derive(Debug)]
pub(super) enum Incoming {
    /// A request: answered once, with its id.
    Request {
        id: Id,
        method: String,
        params: Value,
    },
    /// A notification: never answered.
    Notification { method: String, params: Value },
    /// The client's answer to one of ctxhost's requests.
    Response {
        id: Id,
        answer: Result<Value, RpcError>,
    },
    /// Not a request: answered with this error (and the id, when one could be read).
    Invalid { id: Option<Id>, error: RpcError },
    /// Malformed, but nothing to answer (a notification, an answer): logged.
    Dropped(String),
}

/// What reading a frame repaired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Repairs {
    /// Lone surrogate escapes read as U+FFFD.
    pub(super) surrogates: usize,
    /// Values nested deeper than [`CUT_DEPTH`] replaced by [`CUT_NOTE`].
    pub(super) cut: usize,
}

/// Reads one line as a frame.
pub(super) fn decode(bytes: &[u8]) -> (Incoming, Repairs) {
    let (value, repairs) = match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => (v, Repairs::default()),
        Err(first) => {
            let (fixed, repairs) = repair(bytes);
            if repairs == Repairs::default() {
                return (parse_error(&first), repairs);
            }
            match serde_json::from_slice::<Value>(&fixed) {
                Ok(v) => (v, repairs),
                Err(e) => return (parse_error(&e), repairs),
            }
        }
    };
    (classify(value), repairs)
}

fn parse_error(e: &serde_json::Error) -> Incoming {
    Incoming::Invalid {
        id: None,
        error: RpcError::new(code::PARSE_ERROR, format!("not JSON: {e}")),
    }
}

fn invalid(id: Option<Id>, message: impl Into<String>) -> Incoming {
    Incoming::Invalid {
        id,
        error: RpcError::new(code::INVALID_REQUEST, message),
    }
}

/// An `id` as it was read: absent (a notification), readable, or of a type no id has.
enum IdMember {
    Absent,
    Readable(Id),
    Unreadable(&'static str),
}

fn read_id(o: &mut Map<String, Value>) -> IdMember {
    match o.remove("id") {
        None => IdMember::Absent,
        Some(Value::Number(n)) => IdMember::Readable(Id::Number(n)),
        Some(Value::String(s)) => IdMember::Readable(Id::Text(s)),
        Some(other) => IdMember::Unreadable(crate::contract::client::kind_of(&other)),
    }
}

fn classify(value: Value) -> Incoming {
    let mut o = match value {
        Value::Object(o) => o,
        other => {
            return invalid(
                None,
                format!(
                    "a request is a JSON object with named members (no positional arrays, no batches), got {}",
                    crate::contract::client::kind_of(&other)
                ),
            );
        }
    };
    let id = read_id(&mut o);
    let has_method = o.contains_key("method");
    if !has_method && (o.contains_key("result") || o.contains_key("error")) {
        return match id {
            IdMember::Readable(id) => Incoming::Response {
                answer: answer(&mut o),
                id,
            },
            _ => Incoming::Dropped("an answer without a readable id".into()),
        };
    }
    let readable = match &id {
        IdMember::Readable(id) => Some(id.clone()),
        _ => None,
    };
    let notification = matches!(id, IdMember::Absent) && has_method;
    let refuse = |message: String| match notification {
        true => Incoming::Dropped(format!("a notification {message}")),
        false => invalid(readable.clone(), message),
    };
    if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return refuse("without \"jsonrpc\": \"2.0\"".into());
    }
    let method = match o.remove("method") {
        Some(Value::String(m)) => m,
        Some(other) => {
            return refuse(format!(
                "whose method is {}, not a string",
                crate::contract::client::kind_of(&other)
            ));
        }
        None => return refuse("without a method".into()),
    };
    let params = o.remove("params").unwrap_or(Value::Null);
    match id {
        IdMember::Absent => Incoming::Notification { method, params },
        IdMember::Readable(id) => Incoming::Request { id, method, params },
        IdMember::Unreadable(kind) => invalid(
            None,
            format!("a request's id is a number or a string, got {kind} (in {method})"),
        ),
    }
}

fn answer(o: &mut Map<String, Value>) -> Result<Value, RpcError> {
    match o.remove("error") {
        Some(e) if !e.is_null() => Err(serde_json::from_value::<RpcError>(e.clone())
            .unwrap_or_else(|_| {
                RpcError::new(code::INTERNAL_ERROR, format!("the client answered {e}"))
            })),
        _ => Ok(o.remove("result").unwrap_or(Value::Null)),
    }
}

/// Rewrites a frame that did not parse: lone surrogate escapes become `\ufffd`, and containers
/// opening below [`CUT_DEPTH`] become [`CUT_NOTE`]. Linear in the frame; the text is left as it
/// is everywhere else (a frame that is not JSON stays not JSON).
fn repair(bytes: &[u8]) -> (Vec<u8>, Repairs) {
    let mut out = Vec::with_capacity(bytes.len());
    let mut r = Repairs::default();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'"' => {
                let end = string_end(bytes, i, Some((&mut out, &mut r)));
                i = end;
                continue;
            }
            b'{' | b'[' => {
                depth += 1;
                if depth > CUT_DEPTH {
                    i = container_end(bytes, i);
                    depth -= 1;
                    out.push(b'"');
                    out.extend_from_slice(CUT_NOTE.as_bytes());
                    out.push(b'"');
                    r.cut += 1;
                    continue;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        out.push(b);
        i += 1;
    }
    (out, r)
}

/// Past the string starting at `start` (its opening quote); with `out`, copies it there with
/// lone surrogate escapes replaced.
fn string_end(bytes: &[u8], start: usize, mut out: Option<(&mut Vec<u8>, &mut Repairs)>) -> usize {
    let mut i = start + 1;
    if let Some((o, _)) = out.as_mut() {
        o.push(b'"');
    }
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                if let Some((o, _)) = out.as_mut() {
                    o.push(b'"');
                }
                return i + 1;
            }
            b'\\' if bytes.get(i + 1) == Some(&b'u') => {
                let unit = hex4(bytes, i + 2);
                let (take, lone) = match unit {
                    Some(0xD800..=0xDBFF) if matches!(low_after(bytes, i + 6), Some(true)) => {
                        (12, false)
                    }
                    Some(0xD800..=0xDFFF) => (6, true),
                    Some(_) => (6, false),
                    None => (2, false),
                };
                let take = take.min(bytes.len() - i);
                if let Some((o, r)) = out.as_mut() {
                    if lone {
                        o.extend_from_slice(br"\ufffd");
                        r.surrogates += 1;
                    } else {
                        o.extend_from_slice(&bytes[i..i + take]);
                    }
                }
                i += take;
            }
            b'\\' => {
                let take = 2.min(bytes.len() - i);
                if let Some((o, _)) = out.as_mut() {
                    o.extend_from_slice(&bytes[i..i + take]);
                }
                i += take;
            }
            c => {
                if let Some((o, _)) = out.as_mut() {
                    o.push(c);
                }
                i += 1;
            }
        }
    }
    i
}

/// Whether a low surrogate escape starts at `i`.
fn low_after(bytes: &[u8], i: usize) -> Option<bool> {
    if bytes.get(i) != Some(&b'\\') || bytes.get(i + 1) != Some(&b'u') {
        return Some(false);
    }
    hex4(bytes, i + 2).map(|u| (0xDC00..=0xDFFF).contains(&u))
}

fn hex4(bytes: &[u8], i: usize) -> Option<u32> {
    let digits = bytes.get(i..i + 4)?;
    let text = std::str::from_utf8(digits).ok()?;
    u32::from_str_radix(text, 16).ok()
}

/// Past the container opening at `start`, strings and nesting respected (the end of the input
/// when it never closes).
fn container_end(bytes: &[u8], start: usize) -> usize {
    let mut depth = 0usize;
    let mut i = start;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i = string_end(bytes, i, None);
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
