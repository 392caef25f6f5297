//! The wire: JSON-RPC 2.0 frames, the error codes ctxhost answers with, and the payloads of
//! the methods that are ctxhost's own (`initialize`, the requests ctxhost sends the client).
//! Lifecycle methods carry OpenClaw's params and results unchanged (camelCase).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::EngineInfo;

/// The protocol version `initialize` reports; bumped on an incompatible change. Version 2
/// adds delta views ([`ClientCapabilities::delta_views`]); a client that does not ask for
/// them is served as by version 1.
pub(crate) const PROTOCOL_VERSION: &str = "2";

/// The fence OpenClaw 2026.8+ requires before it lets a plugin engine run a turn.
pub(crate) const CURRENT_TURN_FENCE: &str = "before-current-turn-entry-v1";

/// The idempotency OpenClaw 2026.8+ requires of `commitTurn`.
pub(crate) const TURN_ADVANCEMENT_IDEMPOTENCY: &str = "atomic-idempotent-v1";

/// Method names, as they travel.
pub(crate) mod method {
    /// Client → ctxhost: start the server on an engine.
    pub(crate) const INITIALIZE: &str = "initialize";
    /// Client → ctxhost: the engine's `info` now (after any reload), as `initialize` gives it.
    pub(crate) const INFO: &str = "info";
    /// Client → ctxhost: close every session and stop.
    pub(crate) const SHUTDOWN: &str = "shutdown";
    /// Client → ctxhost: a spawn `prepareSubagentSpawn` prepared failed; run the engine's
    /// rollback (`{parentSessionKey, rollbackId}`, the id `prepareSubagentSpawn` answered).
    pub(crate) const ROLLBACK_SUBAGENT_SPAWN: &str = "rollbackSubagentSpawn";
    /// Client → ctxhost (notification): stop working on a request.
    pub(crate) const CANCEL: &str = "$/cancelRequest";
    /// ctxhost → client: run the client's built-in compaction for a session.
    pub(crate) const DELEGATE_COMPACTION: &str = "runtime.delegateCompaction";
    /// ctxhost → client: a completion from the client's model.
    pub(crate) const LLM_COMPLETE: &str = "llm.complete";
}

/// JSON-RPC error codes ctxhost uses.
pub(crate) mod code {
    /// The line is not JSON.
    pub(crate) const PARSE_ERROR: i64 = -32700;
    /// The JSON is not a request (or the line is over the size cap).
    pub(crate) const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
    /// The params do not fit the method.
    pub(crate) const INVALID_PARAMS: i64 = -32602;
    /// The host failed (never a script's fault: those are answered by `legacy`).
    pub(crate) const INTERNAL_ERROR: i64 = -32603;
    /// A lifecycle call came before `initialize`.
    pub(crate) const NOT_INITIALIZED: i64 = -32002;
    /// The engine failed under `failurePolicy: "strict"`, or failed closed.
    pub(crate) const ENGINE_ERROR: i64 = -32001;
    /// The client cancelled the request.
    pub(crate) const REQUEST_CANCELLED: i64 = -32800;
    /// A delta view's `base` disagrees with what ctxhost holds: `data` is ctxhost's view
    /// (`{count, hash}`), for the client to send its messages again from there (or all of them).
    /// Nothing of the call was done.
    pub(crate) const VIEW_OUT_OF_SYNC: i64 = -32012;
    /// Another `ctxhost serve` process serves the session now (a shared store's lease moved):
    /// nothing of the call was stored, and this process dropped the session.
    pub(crate) const SESSION_MOVED: i64 = -32003;
}

/// A request id: a number (kept exactly as sent, fractions and all) or a string.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum Id {
    /// A numeric id.
    Number(serde_json::Number),
    /// A string id.
    Text(String),
}

/// A JSON-RPC error object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("JSON-RPC error {code}: {message}")]
pub(crate) struct RpcError {
    /// One of [`code`].
    pub code: i64,
    /// For people.
    pub message: String,
    /// Anything more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with no data.
    pub(crate) fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }
}

/// `initialize` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InitializeParams {
    /// The engine file; default: the one the server was started with.
    #[serde(default)]
    pub engine: Option<String>,
    /// A ctxhost JSON5 config file; default: the one the server was started with.
    #[serde(default)]
    pub config: Option<String>,
    /// Who is asking.
    #[serde(default)]
    pub client_info: Option<ClientInfo>,
    /// What the client can do for ctxhost.
    #[serde(default)]
    pub capabilities: ClientCapabilities,
}

/// The client's name and version.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClientInfo {
    /// E.g. `openclaw-ctxhost-bridge`.
    #[serde(default)]
    pub name: String,
    /// Its version.
    #[serde(default)]
    pub version: String,
}

/// The requests the client answers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClientCapabilities {
    /// The client answers `runtime.delegateCompaction`.
    #[serde(default)]
    pub delegate_compaction: bool,
    /// The client answers `llm.complete`.
    #[serde(default)]
    pub llm_complete: bool,
    /// The client sends delta views (only what changed in its transcript) and takes
    /// `assemble`'s window as references to its own messages.
    #[serde(default)]
    pub delta_views: bool,
}

/// Which form of the client's view a connection speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Views {
    /// The whole history with every call (protocol version 1).
    #[default]
    Full,
    /// Only what changed, checked against a rolling hash; windows as references.
    Delta,
}

/// `initialize` result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InitializeResult {
    /// [`PROTOCOL_VERSION`].
    pub protocol_version: String,
    /// This ctxhost's version.
    pub ctxhost_version: String,
    /// The engine's `info`, with what the host declares on its behalf.
    pub info: EngineInfo,
    /// The form of the client's view this connection speaks (`delta` when the client asked
    /// for [`ClientCapabilities::delta_views`]).
    pub views: Views,
}

/// The `transcriptSemantics` the host declares for every engine it bridges: it fences the
/// current turn (assemble never sees it in `messages`) and commits turns idempotently.
pub(crate) fn declared_semantics() -> Value {
    serde_json::json!({
        "currentTurnFence": CURRENT_TURN_FENCE,
        "turnAdvancementIdempotency": TURN_ADVANCEMENT_IDEMPOTENCY,
    })
}
