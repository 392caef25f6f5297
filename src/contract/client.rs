//! The lifecycle params as a client sends them over `ctxhost serve` (OpenClaw's names, camelCase):
//! the messages the client holds, its host params, and each method's own fields. Every field
//! is typed, required or optional alike, so a wrong type is refused by name
//! ([`ClientCall::decode`]) instead of read as absent. Unknown fields are ignored (OpenClaw adds
//! fields between releases).

use serde::de::{Deserializer, Error as _};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::params::{CompactionTarget, ContextMode, MaintainReason, SubagentEndReason};
use crate::contract::Method;

/// A client's message as it travels: an object (read into a message by the session; one
/// it cannot read is left out and reported).
pub type WireMessage = Map<String, Value>;

/// What a wrong param is: its path in the params and what serde expected there.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{method} params: `{param}`: {message}")]
pub struct ParamError {
    /// The method being decoded.
    pub method: String,
    /// Where in the params (`tokenBudget`, `messages[3]`, `.` for the params themselves).
    pub param: String,
    /// What was wrong, with the type expected.
    pub message: String,
}

/// A count (a budget, a message count, a ttl): any non-negative JSON number, floored
/// (a JavaScript client computes budgets in floating point).
fn count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let n = Option::<f64>::deserialize(d)?;
    match n {
        None => Ok(None),
        Some(n) => crate::contract::to_count(n.floor())
            .map(Some)
            .map_err(|_| D::Error::custom(format!("expected a non-negative number, got {n}"))),
    }
}

macro_rules! client_params {
    ($(#[$doc:meta] $name:ident { $($(#[$fdoc:meta])* $field:ident : $ty:ty $(= $with:literal)?),* $(,)? })*) => {$(
        #[$doc]
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            /// The conversation.
            #[serde(default)]
            pub session_id: Option<String>,
            /// The key OpenClaw routes the conversation by.
            #[serde(default)]
            pub session_key: Option<String>,
            /// Host param, passed to an engine that accepts it as the client sent it.
            #[serde(default)]
            pub runtime_context: Option<Map<String, Value>>,
            /// Host param, passed to an engine that accepts it as the client sent it.
            #[serde(default)]
            pub session_target: Option<Map<String, Value>>,
            $($(#[$fdoc])* #[serde(default $(, deserialize_with = $with)?)] pub $field: $ty,)*
        }
    )*};
}

client_params! {
    /// `bootstrap`.
    Bootstrap { }
    /// `ingest`.
    Ingest {
        /// The message (required, unless `view` carries it).
        message: Option<WireMessage>,
        /// Whether this is a heartbeat turn.
        is_heartbeat: Option<bool>,
        /// The message as a delta of the client's view (a delta connection).
        view: Option<ViewDelta>,
    }
    /// `ingestBatch`.
    IngestBatch {
        /// The turn's new messages.
        messages: Vec<WireMessage>,
        /// Whether this is a heartbeat turn.
        is_heartbeat: Option<bool>,
        /// The messages as a delta of the client's view (a delta connection).
        view: Option<ViewDelta>,
    }
    /// `assemble`.
    Assemble {
        /// The client's view of the history.
        messages: Vec<WireMessage>,
        /// What changed in the client's view (a delta connection, instead of `messages`).
        view: Option<ViewDelta>,
        /// Messages after the client's view for this call's context only (a delta
        /// connection: the pending messages after a window the client echoes back).
        tail: Option<Vec<WireMessage>>,
        /// The budget for the window (the session's own when absent or 0).
        token_budget: Option<u64> = "count",
        /// The current turn's prompt.
        prompt: Option<String>,
        /// The model the client will call.
        model: Option<String>,
        /// Tool names available this turn (a JavaScript `Set` travels as an array).
        available_tools: Option<Vec<String>>,
    }
    /// `compact`.
    Compact {
        /// The budget to get under.
        token_budget: Option<u64> = "count",
        /// Compact even when under the threshold.
        force: Option<bool>,
        /// The context's tokens as the client measured them.
        current_token_count: Option<u64> = "count",
        /// Why compaction runs (`budget` when absent).
        compaction_target: Option<CompactionTarget>,
        /// User instructions from `/compact <text>`.
        custom_instructions: Option<String>,
    }
    /// `afterTurn`.
    AfterTurn {
        /// The client's snapshot of the history after the turn.
        messages: Vec<WireMessage>,
        /// What changed in the client's view (a delta connection, instead of `messages`).
        view: Option<ViewDelta>,
        /// Messages before this turn's prompt.
        pre_prompt_message_count: Option<u64> = "count",
        /// The turn's budget.
        token_budget: Option<u64> = "count",
        /// Whether this is a heartbeat turn.
        is_heartbeat: Option<bool>,
    }
    /// `commitTurn`.
    CommitTurn {
        /// Identifies the turn (required).
        advancement_key: Option<String>,
        /// The turn, user message to final reply.
        messages: Vec<WireMessage>,
    }
    /// `maintain`.
    Maintain {
        /// Why (`turn` when absent).
        reason: Option<MaintainReason>,
    }
    /// `prepareSubagentSpawn`.
    SubagentSpawn {
        /// The parent's key.
        parent_session_key: Option<String>,
        /// The parent's conversation, when the client names it.
        parent_session_id: Option<String>,
        /// The child's conversation, when the client names it.
        child_session_id: Option<String>,
        /// The child's key (required).
        child_session_key: Option<String>,
        /// How the child sees context (`isolated` when absent).
        context_mode: Option<ContextMode>,
        /// How long the child may live.
        ttl_ms: Option<u64> = "count",
    }
    /// `onSubagentEnded`.
    SubagentEnded {
        /// The child's key (required).
        child_session_key: Option<String>,
        /// Why it ended (`completed` when absent).
        reason: Option<SubagentEndReason>,
    }
    /// `rollbackSubagentSpawn` (ctxhost's own: a spawn `prepareSubagentSpawn` prepared failed).
    Rollback {
        /// The parent's key.
        parent_session_key: Option<String>,
        /// The parent's conversation, when the client names it.
        parent_session_id: Option<String>,
        /// The id `prepareSubagentSpawn` answered (required).
        rollback_id: Option<u64> = "count",
    }
    /// `dispose`.
    Dispose { }
}

/// What changed in a client's view of its transcript since what it believes ctxhost holds
/// (a delta connection, protocol version 2: `docs/openclaw.md`, "The wire").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ViewDelta {
    /// How many of its messages the client believes ctxhost holds.
    #[serde(deserialize_with = "required_count")]
    pub base: u64,
    /// The client's rolling hash of those (hex; absent for a base of 0).
    #[serde(default)]
    pub base_hash: Option<String>,
    /// The client's messages from `base` on.
    #[serde(default)]
    pub append: Vec<WireMessage>,
    /// The client's rolling hash after each message of `append` (hex).
    #[serde(default)]
    pub hashes: Vec<String>,
}

/// A required count ([`count`]'s rules).
fn required_count<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    count(d)?.ok_or_else(|| D::Error::custom("expected a non-negative number, got null"))
}

/// One lifecycle call from a client, its params decoded.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientCall {
    /// `bootstrap`.
    Bootstrap(Bootstrap),
    /// `ingest`.
    Ingest(Ingest),
    /// `ingestBatch`.
    IngestBatch(IngestBatch),
    /// `assemble`.
    Assemble(Assemble),
    /// `compact`.
    Compact(Compact),
    /// `afterTurn`.
    AfterTurn(AfterTurn),
    /// `commitTurn`.
    CommitTurn(CommitTurn),
    /// `maintain`.
    Maintain(Maintain),
    /// `prepareSubagentSpawn`.
    PrepareSubagentSpawn(SubagentSpawn),
    /// `onSubagentEnded`.
    OnSubagentEnded(SubagentEnded),
    /// `rollbackSubagentSpawn`.
    RollbackSubagentSpawn(Rollback),
    /// `dispose`.
    Dispose(Dispose),
}

/// The client's name of `rollbackSubagentSpawn`, the one call that is not a contract method.
pub const ROLLBACK_SUBAGENT_SPAWN: &str = "rollbackSubagentSpawn";

fn decode<T: serde::de::DeserializeOwned>(method: &str, params: Value) -> Result<T, ParamError> {
    let params = match params {
        Value::Null => Value::Object(Map::new()),
        Value::Object(o) => Value::Object(o),
        other => {
            return Err(ParamError {
                method: method.to_owned(),
                param: ".".into(),
                message: format!(
                    "params must be an object of named params, got {}",
                    kind_of(&other)
                ),
            });
        }
    };
    serde_path_to_error::deserialize(params).map_err(|e| ParamError {
        method: method.to_owned(),
        param: e.path().to_string(),
        message: e.into_inner().to_string(),
    })
}

/// A JSON value's kind, as an error names it.
pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn required<T>(method: &str, param: &str, v: &Option<T>) -> Result<(), ParamError> {
    match v {
        Some(_) => Ok(()),
        None => Err(ParamError {
            method: method.to_owned(),
            param: param.to_owned(),
            message: "required, missing".into(),
        }),
    }
}

impl ClientCall {
    /// Decodes `params` for the client method `name`; `None` when `name` is no lifecycle
    /// call.
    pub fn decode(name: &str, params: Value) -> Option<Result<ClientCall, ParamError>> {
        let method = if name == ROLLBACK_SUBAGENT_SPAWN {
            None
        } else {
            Some(Method::from_name(name)?)
        };
        let n = name;
        Some(match method {
            None => decode::<Rollback>(n, params).and_then(|p| {
                required(n, "rollbackId", &p.rollback_id)?;
                Ok(ClientCall::RollbackSubagentSpawn(p))
            }),
            Some(Method::Bootstrap) => decode(n, params).map(ClientCall::Bootstrap),
            Some(Method::Ingest) => decode::<Ingest>(n, params).and_then(|p| {
                if p.view.is_none() {
                    required(n, "message", &p.message)?;
                }
                Ok(ClientCall::Ingest(p))
            }),
            Some(Method::IngestBatch) => decode(n, params).map(ClientCall::IngestBatch),
            Some(Method::Assemble) => decode(n, params).map(ClientCall::Assemble),
            Some(Method::Compact) => decode(n, params).map(ClientCall::Compact),
            Some(Method::AfterTurn) => decode(n, params).map(ClientCall::AfterTurn),
            Some(Method::CommitTurn) => decode::<CommitTurn>(n, params).and_then(|p| {
                required(n, "advancementKey", &p.advancement_key)?;
                Ok(ClientCall::CommitTurn(p))
            }),
            Some(Method::Maintain) => decode(n, params).map(ClientCall::Maintain),
            Some(Method::PrepareSubagentSpawn) => {
                decode::<SubagentSpawn>(n, params).and_then(|p| {
                    required(n, "childSessionKey", &p.child_session_key)?;
                    Ok(ClientCall::PrepareSubagentSpawn(p))
                })
            }
            Some(Method::OnSubagentEnded) => decode::<SubagentEnded>(n, params).and_then(|p| {
                required(n, "childSessionKey", &p.child_session_key)?;
                Ok(ClientCall::OnSubagentEnded(p))
            }),
            Some(Method::Dispose) => decode(n, params).map(ClientCall::Dispose),
            // Pipeline hooks are no client's calls (`Method::from_name` never names them).
            Some(
                Method::Collect
                | Method::Project
                | Method::Prune
                | Method::CompactionPlan
                | Method::BeforeCompaction
                | Method::AfterCompaction
                | Method::AfterAppend,
            ) => return None,
        })
    }

    /// The contract method whose engine `p` carries the client's host params
    /// (`rollbackSubagentSpawn` runs the rollback `prepareSubagentSpawn` returned).
    pub fn method(&self) -> Method {
        match self {
            ClientCall::Bootstrap(_) => Method::Bootstrap,
            ClientCall::Ingest(_) => Method::Ingest,
            ClientCall::IngestBatch(_) => Method::IngestBatch,
            ClientCall::Assemble(_) => Method::Assemble,
            ClientCall::Compact(_) => Method::Compact,
            ClientCall::AfterTurn(_) => Method::AfterTurn,
            ClientCall::CommitTurn(_) => Method::CommitTurn,
            ClientCall::Maintain(_) => Method::Maintain,
            ClientCall::PrepareSubagentSpawn(_) | ClientCall::RollbackSubagentSpawn(_) => {
                Method::PrepareSubagentSpawn
            }
            ClientCall::OnSubagentEnded(_) => Method::OnSubagentEnded,
            ClientCall::Dispose(_) => Method::Dispose,
        }
    }

    /// The session fields and host params every call carries.
    pub fn session(&self) -> (&Option<String>, &Option<String>, HostParams<'_>) {
        macro_rules! common {
            ($p:expr) => {
                (
                    &$p.session_id,
                    &$p.session_key,
                    HostParams {
                        runtime_context: $p.runtime_context.as_ref(),
                        session_target: $p.session_target.as_ref(),
                    },
                )
            };
        }
        match self {
            ClientCall::Bootstrap(p) => common!(p),
            ClientCall::Ingest(p) => common!(p),
            ClientCall::IngestBatch(p) => common!(p),
            ClientCall::Assemble(p) => common!(p),
            ClientCall::Compact(p) => common!(p),
            ClientCall::AfterTurn(p) => common!(p),
            ClientCall::CommitTurn(p) => common!(p),
            ClientCall::Maintain(p) => common!(p),
            ClientCall::PrepareSubagentSpawn(p) => common!(p),
            ClientCall::OnSubagentEnded(p) => common!(p),
            ClientCall::RollbackSubagentSpawn(p) => common!(p),
            ClientCall::Dispose(p) => common!(p),
        }
    }
}

/// The host params a client passed that an engine receives as they are (contract §3,
/// `acceptedHostParams`).
#[derive(Clone, Copy, Debug, Default)]
pub struct HostParams<'a> {
    /// `runtimeContext`.
    pub runtime_context: Option<&'a Map<String, Value>>,
    /// `sessionTarget`.
    pub session_target: Option<&'a Map<String, Value>>,
}

impl HostParams<'_> {
    /// As the engine's `p` gets them.
    pub fn to_map(self) -> Map<String, Value> {
        let mut m = Map::new();
        if let Some(v) = self.runtime_context {
            m.insert("runtimeContext".into(), Value::Object(v.clone()));
        }
        if let Some(v) = self.session_target {
            m.insert("sessionTarget".into(), Value::Object(v.clone()));
        }
        m
    }
}
