//! What parent and child say to each other: one JSON object per line, [`ToChild`] on the
//! child's stdin and [`FromChild`] on its stdout. Serde types only; both ends live in this
//! crate, so the protocol is versioned with it.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};

use crate::contract::limits::HostLimits;
use crate::contract::message::Message;
use crate::contract::{EngineInfo, Method};
use crate::engine::api::{HostError, HostOut, HostValue, Kept};
use crate::engine::script::Expect;
use crate::error::{EngineError, EngineErrorKind, Op, ScriptLocation};
use crate::services::tokens::Tokenizer;

/// A request from the parent.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub(crate) enum ToChild {
    /// Load and validate an engine file (the first request a child gets).
    #[serde(rename_all = "camelCase")]
    Load {
        /// The engine file.
        path: PathBuf,
        /// The configured entry id.
        configured_id: Option<String>,
        /// An id mismatch is an error.
        strict: bool,
        /// The entry config.
        config: Json,
        /// `host.limits`.
        limits: HostLimits,
        /// `ctx.agentDir` at load.
        agent_dir: String,
        /// `ctx.workspaceDir` at load.
        workspace_dir: String,
        /// The tokenizer `host.tokens` counts with.
        tokenizer: Tokenizer,
        /// The file is a pipeline hook (validated as one).
        #[serde(default)]
        hook: bool,
    },
    /// Make the instance this child serves (after `Load`).
    #[serde(rename_all = "camelCase")]
    Instantiate {
        /// The entry config.
        config: Json,
        /// `ctx.agentDir`.
        agent_dir: String,
        /// `ctx.workspaceDir`.
        workspace_dir: String,
        /// The session.
        session_id: String,
    },
    /// One lifecycle call.
    #[serde(rename_all = "camelCase")]
    Call {
        /// The method.
        method: Method,
        /// Its params, as the contract's type serializes them.
        params: Json,
        /// Which messages go under `p.message` / `p.messages`.
        feed: FeedWire,
        /// What the parent wants back.
        expect: Expect,
        /// What the call's `HostCall` holds.
        call: CallWire,
    },
    /// `rollbackSubagentSpawn` with a handle `prepareSubagentSpawn` returned.
    Rollback {
        /// The handle.
        handle: u64,
        /// What the call's `HostCall` holds.
        call: CallWire,
    },
    /// The instance's state, for saving.
    SaveState,
    /// Restore saved state.
    RestoreState {
        /// The state.
        state: Json,
    },
    /// The answer to the child's [`FromChild::Host`] request.
    HostReply {
        /// What the `host` function returned.
        reply: Result<HostOutWire, HostErrorWire>,
        /// How much of the parent's time serving it was a wait outside the process (a model,
        /// the client's compaction), in microseconds: only that moves the call's deadline in
        /// the child; the parent's host work counts against it, as in process.
        #[serde(default)]
        waited_us: u64,
    },
    /// Stop the running call (kind `Cancelled`); read even while a call runs.
    Cancel,
}

/// A [`Feed`](crate::engine::script::Feed) on the wire: the messages themselves travel in the
/// params (`message`, `messages`) or are the context the child holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum FeedWire {
    /// Nothing.
    Nothing,
    /// `p.message`: the params' `message`.
    One,
    /// `p.messages`: the params' `messages`.
    List,
    /// `p.messages`: the session context.
    Context,
}

/// The parts of a [`HostCall`](crate::engine::api::HostCall) a child needs; the context as a change
/// to what it already holds.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CallWire {
    /// The engine id.
    pub engine_id: String,
    /// The session id.
    pub session_id: String,
    /// The turn's token budget.
    pub token_budget: u64,
    /// The entry config, when it changed since the last call (first call: always).
    pub config: Option<Json>,
    /// Keep this many leading context messages the child holds...
    pub keep: usize,
    /// ...and append these.
    pub add: Vec<Arc<Message>>,
    /// The host params a client passed for this method.
    pub client: Option<Map<String, Json>>,
    /// `host.summarize` goes to the parent (its summarizer asks a model).
    pub forward_summarize: bool,
}

/// A reply (or a request) from the child.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "camelCase")]
pub(crate) enum FromChild {
    /// The file loaded and validated.
    Loaded {
        /// Its `info`.
        info: EngineInfo,
        /// Load warnings.
        warnings: Vec<String>,
    },
    /// The instance is ready.
    Instantiated {
        /// Its `info`.
        info: EngineInfo,
        /// The methods it defines.
        defined: Vec<Method>,
        /// What its language calls a map of fields, for result errors.
        noun: String,
        /// The line of each defined method's function.
        lines: Vec<(Method, u32)>,
    },
    /// A call's result as the script returned it (converted to JSON, not yet typed), or
    /// nothing (`null`); a rollback handle.
    Done {
        /// The result.
        value: Json,
    },
    /// An `assemble` result: its other fields, and its messages.
    Assembled {
        /// The result's fields but `messages`.
        value: Json,
        /// Its messages.
        messages: Vec<MessageRef>,
    },
    /// The script's result could not be converted (the message names the field at fault).
    Refused {
        /// What is wrong with it.
        message: String,
    },
    /// The script does not define the method.
    Undefined,
    /// The call failed.
    Failed {
        /// Why.
        error: ErrorWire,
    },
    /// A `host` function the parent runs, asked during a call.
    Host {
        /// Its path in the API table.
        path: Vec<String>,
        /// As the script spelled it.
        name: String,
        /// Its arguments.
        args: Vec<Json>,
    },
}

pub(crate) use crate::engine::script::MessageRef;

/// An [`EngineError`] on the wire (the parent names the operation itself).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ErrorWire {
    /// The engine.
    pub engine: String,
    /// The kind.
    pub kind: EngineErrorKind,
    /// The message.
    pub message: String,
    /// The script location.
    pub location: Option<ScriptLocation>,
}

impl From<EngineError> for ErrorWire {
    fn from(e: EngineError) -> Self {
        ErrorWire {
            engine: e.engine,
            kind: e.kind,
            message: e.message,
            location: e.location,
        }
    }
}

impl ErrorWire {
    /// The error, for operation `op`.
    pub(crate) fn into_error(self, op: Op) -> EngineError {
        EngineError::new(op, self.engine, self.kind, self.message).at(self.location)
    }
}

/// A [`HostError`] on the wire.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostErrorWire {
    /// The message the script sees.
    pub message: String,
    /// The host's fault, not the script's.
    pub host_fault: bool,
}

impl From<HostError> for HostErrorWire {
    fn from(e: HostError) -> Self {
        HostErrorWire {
            message: e.message().to_owned(),
            host_fault: e.is_host_fault(),
        }
    }
}

impl From<HostErrorWire> for HostError {
    fn from(e: HostErrorWire) -> Self {
        if e.host_fault {
            HostError::host(e.message)
        } else {
            HostError::script(e.message)
        }
    }
}

/// A [`HostOut`] on the wire.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum HostOutWire {
    /// Nothing.
    Nil,
    /// A count.
    Count(u64),
    /// A number.
    Number(f64),
    /// Data.
    Data(Json),
    /// Messages: `Ok(i)` the i-th (0-based) item of the first argument, `Err(m)` a new one.
    Messages(Vec<Result<usize, Arc<Message>>>),
    /// Several values.
    Many(Vec<HostOutWire>),
    /// Named values (`host.fit`'s `kept` and `tokens`); names the host does not know come back
    /// as `value`.
    Record(Vec<(String, HostOutWire)>),
}

impl From<HostOut> for HostOutWire {
    fn from(out: HostOut) -> Self {
        match out {
            HostOut::Nil => HostOutWire::Nil,
            HostOut::Count(n) => HostOutWire::Count(n),
            HostOut::Number(x) => HostOutWire::Number(x),
            HostOut::Data(j) => HostOutWire::Data(j),
            HostOut::Messages(kept) => HostOutWire::Messages(
                kept.into_iter()
                    .map(|k| match k {
                        Kept::Given(i) => Ok(i),
                        Kept::New(m) => Err(m),
                    })
                    .collect(),
            ),
            HostOut::Many(all) => HostOutWire::Many(all.into_iter().map(Into::into).collect()),
            HostOut::Record(fields) => HostOutWire::Record(
                fields
                    .into_iter()
                    .map(|(name, out)| (name.to_owned(), out.into()))
                    .collect(),
            ),
        }
    }
}

impl From<HostOutWire> for HostOut {
    fn from(out: HostOutWire) -> Self {
        match out {
            HostOutWire::Nil => HostOut::Nil,
            HostOutWire::Count(n) => HostOut::Count(n),
            HostOutWire::Number(x) => HostOut::Number(x),
            HostOutWire::Data(j) => HostOut::Data(j),
            HostOutWire::Messages(kept) => HostOut::Messages(
                kept.into_iter()
                    .map(|k| match k {
                        Ok(i) => Kept::Given(i),
                        Err(m) => Kept::New(m),
                    })
                    .collect(),
            ),
            HostOutWire::Many(all) => HostOut::Many(all.into_iter().map(Into::into).collect()),
            HostOutWire::Record(fields) => HostOut::Record(
                fields
                    .into_iter()
                    .map(|(name, out)| (record_name(&name), out.into()))
                    .collect(),
            ),
        }
    }
}

/// A record field's name as the host API spells it (the names are the host's own, so a name
/// from the wire is one of them).
fn record_name(name: &str) -> &'static str {
    match name {
        "kept" => "kept",
        "tokens" => "tokens",
        _ => "value",
    }
}

/// A script's argument as JSON for the parent; `None` for a value with no plain form.
pub(crate) fn arg_to_json(v: HostValue) -> Option<Json> {
    v.into_json()
}

/// An argument the child sent, as the value an adapter would have made of it.
pub(crate) fn arg_from_json(j: Json) -> HostValue {
    match j {
        Json::Null => HostValue::Nil,
        Json::String(s) => HostValue::Text(s),
        Json::Array(items) => HostValue::List(items.into_iter().map(arg_from_json).collect()),
        Json::Object(m) => HostValue::Map(Box::new(m)),
        other => HostValue::Data(Box::new(other)),
    }
}
