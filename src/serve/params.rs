//! Reading OpenClaw's params (taken out of the request, not copied) and turning library
//! errors into JSON-RPC errors.

use serde_json::{Value, json};

use crate::contract::client;
use crate::contract::message::Message;
use crate::error::{Error, Result};
use crate::session::CallExtras;

use super::Hosted;
use super::protocol::{RpcError, code};
use super::views::{self, Synced};

/// What the client passed with `call` for the engine: its host params as they are.
pub(super) fn client_call(call: &client::ClientCall) -> CallExtras {
    let (_, _, host) = call.session();
    CallExtras {
        method: call.method(),
        host_params: host.to_map(),
        available_tools: None,
        compaction: None,
    }
}

/// The messages of a list (moved out of the params, not copied); a message ctxhost cannot
/// read is left out and reported.
pub(super) fn messages(list: Vec<client::WireMessage>, key: &str) -> Vec<Message> {
    list.into_iter()
        .enumerate()
        .filter_map(
            |(i, v)| match serde_json::from_value::<Message>(Value::Object(v)) {
                Ok(m) => Some(m),
                Err(e) => {
                    tracing::warn!("{key}[{i}] is not a message ctxhost can read, left out: {e}");
                    None
                }
            },
        )
        .collect()
}

pub(super) fn one_message(m: client::WireMessage) -> std::result::Result<Message, RpcError> {
    serde_json::from_value(Value::Object(m))
        .map_err(|e| RpcError::new(code::INVALID_PARAMS, format!("message: {e}")))
}

pub(super) fn parse<T: serde::de::DeserializeOwned>(p: Value) -> std::result::Result<T, RpcError> {
    let p = if p.is_null() { json!({}) } else { p };
    serde_json::from_value(p).map_err(|e| RpcError::new(code::INVALID_PARAMS, e.to_string()))
}

pub(super) fn internal(e: impl std::fmt::Display) -> RpcError {
    RpcError::new(code::INTERNAL_ERROR, e.to_string())
}

/// A library error as the client sees it: an engine error only reaches here under
/// `failurePolicy: "strict"`, a failed host requirement or a cancellation.
pub(super) fn from_error(e: Error) -> RpcError {
    match e {
        Error::Engine(e) if e.kind == crate::error::EngineErrorKind::Cancelled => {
            RpcError::new(code::REQUEST_CANCELLED, e.to_string())
        }
        Error::Engine(e) => RpcError::new(code::ENGINE_ERROR, e.to_string()),
        e @ Error::SessionMoved { .. } => RpcError::new(code::SESSION_MOVED, e.to_string()),
        other => internal(other),
    }
}

pub(super) fn flatten<T>(r: Result<Result<T>>) -> std::result::Result<T, RpcError> {
    r.and_then(|r| r).map_err(from_error)
}

pub(super) fn to_value<T: serde::Serialize>(
    r: Result<Result<T>>,
) -> std::result::Result<Value, RpcError> {
    flatten(r).and_then(|v| serde_json::to_value(v).map_err(internal))
}

/// A delta view's answer, or the out-of-sync error with what ctxhost holds.
pub(super) fn synced<T>(
    r: std::result::Result<Synced<T>, RpcError>,
) -> std::result::Result<T, RpcError> {
    match r? {
        Ok(v) => Ok(v),
        Err(out) => Err(RpcError {
            code: code::VIEW_OUT_OF_SYNC,
            message: format!(
                "the view's base disagrees with what ctxhost holds ({} messages); nothing was done: send the messages again from there, or all of them",
                out.count
            ),
            data: Some(json!({
                "count": out.count,
                "hash": out.hash.map(|h| format!("{h:016x}")),
            })),
        }),
    }
}

/// A delta view's params, checked: only on a connection that asked for delta views; the
/// base hash there for a base over 0; one hash (1 to 16 hex digits) per message; every
/// message readable (a message left out would move every place after it).
pub(super) fn delta_of(
    hosted: &Hosted,
    method: &str,
    v: client::ViewDelta,
) -> std::result::Result<views::Delta, RpcError> {
    if !hosted.capabilities.delta_views {
        return Err(invalid(
            method,
            "view",
            "a delta view needs `capabilities.deltaViews` at initialize",
        ));
    }
    let base = usize::try_from(v.base).map_err(|_| invalid(method, "view.base", "too large"))?;
    let base_hash = match v.base_hash.as_deref() {
        Some(h) => Some(
            super::mirror::parse_hash(h)
                .ok_or_else(|| invalid(method, "view.baseHash", "expected 1 to 16 hex digits"))?,
        ),
        None if base > 0 => {
            return Err(invalid(
                method,
                "view.baseHash",
                "required for a base over 0",
            ));
        }
        None => None,
    };
    if v.hashes.len() != v.append.len() {
        return Err(invalid(
            method,
            "view.hashes",
            &format!(
                "one hash per appended message: {} for {}",
                v.hashes.len(),
                v.append.len()
            ),
        ));
    }
    let hashes = v
        .hashes
        .iter()
        .enumerate()
        .map(|(i, h)| {
            super::mirror::parse_hash(h).ok_or_else(|| {
                invalid(
                    method,
                    &format!("view.hashes[{i}]"),
                    "expected 1 to 16 hex digits",
                )
            })
        })
        .collect::<std::result::Result<Vec<u64>, RpcError>>()?;
    let append = readable(v.append, method, "view.append")?;
    Ok(views::Delta {
        base,
        base_hash,
        append,
        hashes,
    })
}

/// Every message of `list`, or the first one ctxhost cannot read, named.
pub(super) fn readable(
    list: Vec<client::WireMessage>,
    method: &str,
    key: &str,
) -> std::result::Result<Vec<crate::contract::message::Message>, RpcError> {
    list.into_iter()
        .enumerate()
        .map(|(i, m)| {
            serde_json::from_value(Value::Object(m))
                .map_err(|e| invalid(method, &format!("{key}[{i}]"), &e.to_string()))
        })
        .collect()
}

/// An invalid-params error naming `param`, as a decoded call's are.
fn invalid(method: &str, param: &str, message: &str) -> RpcError {
    RpcError {
        code: code::INVALID_PARAMS,
        message: format!("{method} params: `{param}`: {message}"),
        data: Some(json!({ "param": param })),
    }
}
