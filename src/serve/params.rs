//! Reading OpenClaw's params (taken out of the request, not copied) and turning library
//! errors into JSON-RPC errors.

use serde_json::{Value, json};

use crate::contract;
use crate::error::{Error, Result};
use crate::message::Message;
use crate::session::ClientCall;

use super::protocol::{RpcError, code};

pub(super) fn session_key(p: &Value) -> Option<String> {
    ["sessionKey", "sessionId", "parentSessionKey"]
        .iter()
        .find_map(|k| text(p, k).filter(|s| !s.is_empty()))
}

/// The host params OpenClaw passes that an engine receives as they are (contract §3,
/// `acceptedHostParams`).
const CLIENT_HOST_PARAMS: [&str; 2] = ["runtimeContext", "sessionTarget"];

/// What the client passed with `method` for the engine: its host params as they are.
pub(super) fn client_call(method: contract::Method, p: &Value) -> ClientCall {
    let host_params = CLIENT_HOST_PARAMS
        .iter()
        .filter_map(|k| p.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect();
    ClientCall {
        method,
        host_params,
        available_tools: None,
        compaction: None,
    }
}

/// `assemble`'s `availableTools` (a JavaScript `Set` travels as an array of names).
pub(super) fn tools(p: &Value) -> Option<Vec<String>> {
    p.get("availableTools").and_then(Value::as_array).map(|a| {
        a.iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    })
}

pub(super) fn text(p: &Value, key: &str) -> Option<String> {
    p.get(key).and_then(Value::as_str).map(str::to_owned)
}

pub(super) fn number(p: &Value, key: &str) -> Option<u64> {
    p.get(key)
        .and_then(Value::as_f64)
        .and_then(|n| contract::to_count(n.floor()).ok())
}

pub(super) fn flag(p: &Value, key: &str) -> bool {
    p.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// The messages under `key` (taken out of the params, not copied); a message ctxhost cannot
/// read is left out and reported.
pub(super) fn messages(p: &mut Value, key: &str) -> Vec<Message> {
    let Some(Value::Array(list)) = p.get_mut(key).map(Value::take) else {
        return Vec::new();
    };
    list.into_iter()
        .enumerate()
        .filter_map(|(i, v)| match serde_json::from_value::<Message>(v) {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!("{key}[{i}] is not a message ctxhost can read, left out: {e}");
                None
            }
        })
        .collect()
}

pub(super) fn one_message(p: &mut Value) -> std::result::Result<Message, RpcError> {
    let v = p.get_mut("message").map(Value::take).unwrap_or(Value::Null);
    serde_json::from_value(v)
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
