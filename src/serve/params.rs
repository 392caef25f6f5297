//! Reading OpenClaw's params (taken out of the request, not copied) and turning library
//! errors into JSON-RPC errors.

use serde_json::{Value, json};

use crate::contract::client;
use crate::contract::message::Message;
use crate::error::{Error, Result};
use crate::session::ClientCall;

use super::protocol::{RpcError, code};

/// What the client passed with `call` for the engine: its host params as they are.
pub(super) fn client_call(call: &client::ClientCall) -> ClientCall {
    let (_, _, host) = call.session();
    ClientCall {
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
