//! [`Instance`]: the one [`Engine`] implementation of script engines, over a [`Transport`] —
//! the VM on a worker thread of this process ([`crate::engine::script`]) or the VM in a child
//! process ([`crate::engine::isolation`]). What each lifecycle method sends, what it makes of the
//! script's result, and how a result it cannot use is reported (the engine id, the script's
//! file and the function's line) is written here once; a transport only carries a call there
//! and the script's result back.
//!
//! [`Factory`] is the one [`EngineFactory`] implementation: a validated file and the
//! [`Connect`] that starts a transport to a fresh instance of it. An isolation child serves a
//! transport itself ([`ConnectAny`]): the parent's instance sends it each call and gets the
//! script's result back, so results are typed and checked in the parent alone.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value as Json, json};

use super::script::result::{optional, result_of, typed};
use super::script::{Expect, Feed, Reply, Returned};
use super::{Engine, EngineFactory, InstanceContext, SpawnRollback};
use crate::contract::{
    AfterTurnParams, AssembleParams, AssembleResult, BootstrapParams, BootstrapResult,
    CommitTurnParams, CommitTurnResult, CompactParams, CompactResult, EngineInfo,
    IngestBatchParams, IngestBatchResult, IngestParams, IngestResult, MaintainParams,
    MaintainResult, Method, SubagentEndedParams, SubagentSpawnParams,
};
use crate::engine::api::HostCall;
use crate::error::{EngineError, EngineErrorKind, ScriptLocation};

/// Carries one instance's calls to its VM and the script's results back.
pub trait Transport: Send + 'static {
    /// What the script's language calls a map of fields (`table`, `map`), in result errors.
    fn noun(&self) -> &str;
    /// Calls `method` with its params (`feed`: what goes under `p.message(s)`) and hands back
    /// the script's result as `expect` asks for it, or what is wrong with it; `Ok(None)` when
    /// the script does not define `method`; `Err` for a call that failed (thrown, stopped, gone).
    fn invoke(
        &mut self,
        call: &HostCall,
        info: &EngineInfo,
        method: Method,
        params: Json,
        feed: Feed,
        expect: Expect,
    ) -> Result<Option<Reply>, EngineError>;
    /// Calls and forgets the rollback function behind `handle`.
    fn rollback(&mut self, call: &HostCall, handle: u64) -> Result<(), EngineError>;
    /// The per-session state as JSON.
    fn save_state(&mut self) -> Result<Json, EngineError>;
    /// Replaces the per-session state with saved JSON.
    fn restore_state(&mut self, state: Json) -> Result<(), EngineError>;
    /// The script file and, when the transport knows it, the line of `method`'s function.
    fn location(&self, method: Method) -> Option<ScriptLocation>;
    /// Whether the VM is gone for good (nothing is left to dispose).
    fn gone(&self) -> bool {
        false
    }
}

/// A validated engine file: starts a transport to a fresh instance of it.
pub trait Connect: Send + Sync + std::fmt::Debug + 'static {
    /// The transport its instances run over.
    type Transport: Transport;
    /// A fresh instance: its `info`, the methods it defines and the transport to it.
    fn connect(&self, cx: &InstanceContext) -> Result<Connected<Self::Transport>, EngineError>;
}

/// A fresh instance as a [`Connect`] started it: its `info`, the methods it defines and the
/// transport to it.
pub(crate) type Connected<T> = (EngineInfo, Vec<Method>, T);

/// One script engine instance serving one session, over transport `T`.
#[derive(Debug)]
pub struct Instance<T: Transport> {
    info: EngineInfo,
    defined: Vec<Method>,
    transport: T,
    disposed: bool,
}

impl<T: Transport> Instance<T> {
    /// An instance of an engine that says it is `info` and defines `defined`.
    pub(crate) fn new(info: EngineInfo, defined: Vec<Method>, transport: T) -> Self {
        Instance {
            info,
            defined,
            transport,
            disposed: false,
        }
    }

    /// The transport, for what only one kind has (a cancel flag, a process id).
    pub(crate) fn transport(&self) -> &T {
        &self.transport
    }

    /// One lifecycle call: the params passed as JSON, the script called over the transport,
    /// its result converted by `convert`; a result it refuses is an invalid result located at
    /// the method's function.
    fn lifecycle<P: Serialize, R>(
        &mut self,
        call: &HostCall,
        method: Method,
        params: &P,
        feed: Feed,
        expect: Expect,
        convert: impl FnOnce(Returned, &str) -> Result<R, String>,
    ) -> Result<Option<R>, EngineError> {
        if !self.defined.contains(&method) {
            return Ok(None);
        }
        let params = serde_json::to_value(params).map_err(|e| {
            EngineError::new(
                method,
                &self.info.id,
                EngineErrorKind::Runtime,
                format!("host could not pass the params: {e}"),
            )
        })?;
        let Some(returned) = self
            .transport
            .invoke(call, &self.info, method, params, feed, expect)?
        else {
            return Ok(None);
        };
        let noun = self.transport.noun();
        returned
            .and_then(|r| convert(r, noun))
            .map(Some)
            .map_err(|m| {
                EngineError::new(method, &self.info.id, EngineErrorKind::InvalidResult, m)
                    .at(self.transport.location(method))
            })
    }

    /// Calls a pipeline hook (`collect`, `prune`, ...) with `p` = `fields` + the session context
    /// as `p.messages`; its result as JSON, `None` when the file does not define it.
    pub fn hook(
        &mut self,
        call: &HostCall,
        method: Method,
        fields: &Map<String, Json>,
    ) -> Result<Option<Json>, EngineError> {
        self.lifecycle(
            call,
            method,
            fields,
            Feed::Context,
            Expect::Json,
            |r, _| match r {
                Returned::Json(v) => Ok(v),
                _ => Ok(Json::Null),
            },
        )
    }

    fn not_defined(&self, method: Method) -> EngineError {
        EngineError::new(
            method,
            &self.info.id,
            EngineErrorKind::Contract,
            format!("{method} is not defined"),
        )
    }
}

impl<T: Transport> Engine for Instance<T> {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn defines(&self, method: Method) -> bool {
        self.defined.contains(&method)
    }

    fn location(&self, method: Method) -> Option<ScriptLocation> {
        self.transport.location(method)
    }

    fn bootstrap(
        &mut self,
        call: &HostCall,
        params: &BootstrapParams,
    ) -> Result<BootstrapResult, EngineError> {
        self.lifecycle(
            call,
            Method::Bootstrap,
            params,
            Feed::Nothing,
            Expect::Json,
            |r, noun| result_of(r, Method::Bootstrap, noun, json!({"bootstrapped": false})),
        )
        .map(Option::unwrap_or_default)
    }

    fn ingest(
        &mut self,
        call: &HostCall,
        params: &IngestParams,
    ) -> Result<IngestResult, EngineError> {
        let feed = Feed::One(params.message.clone());
        self.lifecycle(
            call,
            Method::Ingest,
            params,
            feed,
            Expect::Json,
            |r, noun| result_of(r, Method::Ingest, noun, json!({"ingested": true})),
        )
        .map(Option::unwrap_or_default)
    }

    fn ingest_batch(
        &mut self,
        call: &HostCall,
        params: &IngestBatchParams,
    ) -> Result<IngestBatchResult, EngineError> {
        let n = params.messages.len() as u64;
        let feed = Feed::List(params.messages.clone());
        self.lifecycle(
            call,
            Method::IngestBatch,
            params,
            feed,
            Expect::Json,
            |r, noun| result_of(r, Method::IngestBatch, noun, json!({"ingestedCount": 0})),
        )
        .map(|r| r.unwrap_or(IngestBatchResult { ingested_count: n }))
    }

    fn assemble(
        &mut self,
        call: &HostCall,
        params: &AssembleParams,
    ) -> Result<AssembleResult, EngineError> {
        self.lifecycle(
            call,
            Method::Assemble,
            params,
            Feed::Context,
            Expect::Assembled,
            |r, _| {
                let Returned::Assembled(fields, messages) = r else {
                    return Err(format!("assemble: unexpected result {r:?}"));
                };
                let context = call.context();
                let mut kept = Vec::with_capacity(messages.len());
                for m in messages {
                    m.resolve_into(context, &mut kept).map_err(|i| {
                        format!(
                            "assemble: the result names context message {i} of {}",
                            context.len()
                        )
                    })?;
                }
                let messages = kept;
                let mut map = fields.into_map();
                map.insert("messages".into(), Json::Array(Vec::new()));
                let mut out: AssembleResult =
                    typed(&map, || json!({"messages": [], "estimatedTokens": 0}))?;
                out.messages = messages;
                Ok(out)
            },
        )?
        .ok_or_else(|| self.not_defined(Method::Assemble))
    }

    fn compact(
        &mut self,
        call: &HostCall,
        params: &CompactParams,
    ) -> Result<CompactResult, EngineError> {
        // `p.messages` is the resident context too (an addition to the contract's params, so an
        // engine that owns compaction can summarize without keeping its own copy).
        self.lifecycle(
            call,
            Method::Compact,
            params,
            Feed::Context,
            Expect::Json,
            |r, noun| {
                result_of(
                    r,
                    Method::Compact,
                    noun,
                    json!({"ok": true, "compacted": false}),
                )
            },
        )?
        .ok_or_else(|| self.not_defined(Method::Compact))
    }

    fn after_turn(&mut self, call: &HostCall, params: &AfterTurnParams) -> Result<(), EngineError> {
        self.lifecycle(
            call,
            Method::AfterTurn,
            params,
            Feed::Context,
            Expect::Nothing,
            |_, _| Ok(()),
        )
        .map(|_| ())
    }

    fn commit_turn(
        &mut self,
        call: &HostCall,
        params: &CommitTurnParams,
    ) -> Result<Option<CommitTurnResult>, EngineError> {
        let feed = Feed::List(params.messages.clone());
        self.lifecycle(
            call,
            Method::CommitTurn,
            params,
            feed,
            Expect::Json,
            |r, noun| optional(r, Method::CommitTurn, noun, json!({"status": "committed"})),
        )
        .map(Option::flatten)
    }

    fn maintain(
        &mut self,
        call: &HostCall,
        params: &MaintainParams,
    ) -> Result<Option<MaintainResult>, EngineError> {
        self.lifecycle(
            call,
            Method::Maintain,
            params,
            Feed::Nothing,
            Expect::Json,
            |r, noun| optional(r, Method::Maintain, noun, json!({"changed": false})),
        )
        .map(Option::flatten)
    }

    fn prepare_subagent_spawn(
        &mut self,
        call: &HostCall,
        params: &SubagentSpawnParams,
    ) -> Result<Option<SpawnRollback>, EngineError> {
        self.lifecycle(
            call,
            Method::PrepareSubagentSpawn,
            params,
            Feed::Nothing,
            Expect::Rollback,
            |r, _| match r {
                Returned::Rollback(h) => Ok(h.map(SpawnRollback)),
                _ => Ok(None),
            },
        )
        .map(Option::flatten)
    }

    fn rollback_subagent_spawn(
        &mut self,
        call: &HostCall,
        handle: SpawnRollback,
    ) -> Result<(), EngineError> {
        self.transport.rollback(call, handle.0)
    }

    fn on_subagent_ended(
        &mut self,
        call: &HostCall,
        params: &SubagentEndedParams,
    ) -> Result<(), EngineError> {
        self.lifecycle(
            call,
            Method::OnSubagentEnded,
            params,
            Feed::Nothing,
            Expect::Nothing,
            |_, _| Ok(()),
        )
        .map(|_| ())
    }

    fn dispose(&mut self, call: &HostCall) -> Result<(), EngineError> {
        if self.disposed || self.transport.gone() {
            return Ok(());
        }
        self.disposed = true;
        self.lifecycle(
            call,
            Method::Dispose,
            &json!({}),
            Feed::Nothing,
            Expect::Nothing,
            |_, _| Ok(()),
        )
        .map(|_| ())
    }

    fn save_state(&mut self) -> Result<Json, EngineError> {
        self.transport.save_state()
    }

    fn restore_state(&mut self, state: Json) -> Result<(), EngineError> {
        self.transport.restore_state(state)
    }
}

/// A validated engine file whose instances run over `C`'s transport.
#[derive(Debug)]
pub struct Factory<C: Connect> {
    path: PathBuf,
    info: EngineInfo,
    warnings: Vec<String>,
    connect: C,
}

impl<C: Connect> Factory<C> {
    /// The factory of the file at `path`, validated as `info` with `warnings`.
    pub(crate) fn new(path: &Path, info: EngineInfo, warnings: Vec<String>, connect: C) -> Self {
        Factory {
            path: path.to_path_buf(),
            info,
            warnings,
            connect,
        }
    }

    /// A fresh instance, typed (for what only one transport has: a cancel flag, a process id).
    pub fn instantiate_typed(
        &self,
        cx: &InstanceContext,
    ) -> Result<Instance<C::Transport>, EngineError> {
        let (info, defined, transport) = self.connect.connect(cx)?;
        Ok(Instance::new(info, defined, transport))
    }
}

impl<C: Connect> EngineFactory for Factory<C> {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn source(&self) -> Option<&Path> {
        Some(&self.path)
    }

    fn warnings(&self) -> &[String] {
        &self.warnings
    }

    fn instantiate(&self, cx: &InstanceContext) -> Result<Box<dyn Engine>, EngineError> {
        Ok(Box::new(self.instantiate_typed(cx)?))
    }
}

/// A loaded file that hands out its instances' transports boxed, so that what serves them (an
/// isolation child) need not know the language.
pub(crate) trait ConnectAny: EngineFactory {
    /// [`Connect::connect`], boxed.
    fn connect_any(
        &self,
        cx: &InstanceContext,
    ) -> Result<Connected<Box<dyn Transport>>, EngineError>;
}

impl<C: Connect> ConnectAny for Factory<C> {
    fn connect_any(
        &self,
        cx: &InstanceContext,
    ) -> Result<Connected<Box<dyn Transport>>, EngineError> {
        let (info, defined, transport) = self.connect.connect(cx)?;
        Ok((info, defined, Box::new(transport)))
    }
}
