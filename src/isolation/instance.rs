//! [`ProcessEngine`]: one engine instance in a child process, as the turn driver sees it. Each
//! call sends the params and what is new in the context, serves the child's `host` requests
//! from this process's [`HostCall`], and types and validates the result here.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value as Json, json};

use super::factory::{refuse, stopped, unexpected};
use super::process::{ChildProc, HostRequest};
use super::wire::{CallWire, FromChild, HostOutWire, MessageRef, ToChild};
use crate::contract::{
    AfterTurnParams, AssembleParams, AssembleResult, BootstrapParams, BootstrapResult,
    CommitTurnParams, CommitTurnResult, CompactParams, CompactResult, EngineInfo,
    IngestBatchParams, IngestBatchResult, IngestParams, IngestResult, MaintainParams,
    MaintainResult, Method, SubagentEndedParams, SubagentSpawnParams,
};
use crate::engine::{Engine, SpawnRollback};
use crate::error::{EngineError, EngineErrorKind, Op, ScriptLocation};
use crate::host::{HostCall, HostError, HostScope, HostValue, MAX_PARAMS};
use crate::message::Message;
use crate::sandbox::{Limits, StopSignals};

/// One engine instance running in its own child process.
#[derive(Debug)]
pub struct ProcessEngine {
    info: EngineInfo,
    defined: Vec<Method>,
    child: ChildProc,
    limits: Limits,
    file: String,
    cancel: Option<Arc<AtomicBool>>,
    /// The context the child holds (it keeps it resident between calls).
    sent: Vec<Arc<Message>>,
    /// The entry config the child holds.
    sent_config: Option<Arc<Json>>,
    /// Runs the child's `host` requests against the running call.
    scope: HostScope,
    disposed: bool,
}

impl ProcessEngine {
    pub(super) fn new(
        info: EngineInfo,
        defined: Vec<Method>,
        child: ChildProc,
        limits: Limits,
        file: String,
        cancel: Option<Arc<AtomicBool>>,
    ) -> Self {
        let signals = Arc::new(StopSignals::new(cancel.clone()));
        let scope = HostScope::new(&info.id, limits.results.clone(), signals);
        ProcessEngine {
            info,
            defined,
            child,
            limits,
            file,
            cancel,
            sent: Vec::new(),
            sent_config: None,
            scope,
            disposed: false,
        }
    }

    /// The child's process id while it runs; `None` once it was killed or died.
    pub fn pid(&self) -> Option<u32> {
        (!self.child.is_dead()).then(|| self.child.pid())
    }

    /// What the child needs of `call`: the context as a change to what it holds.
    fn call_wire(&mut self, call: &HostCall, method: Option<Method>) -> CallWire {
        let context = call.context();
        let keep = self
            .sent
            .iter()
            .zip(context.iter())
            .take_while(|(a, b)| Arc::ptr_eq(a, b) || a == b)
            .count();
        let add = context[keep..].to_vec();
        self.sent.truncate(keep);
        self.sent.extend(add.iter().cloned());
        let config = match &self.sent_config {
            Some(c) if **c == *call.config() => None,
            _ => {
                self.sent_config = Some(Arc::new(call.config().clone()));
                Some(call.config().clone())
            }
        };
        CallWire {
            engine_id: call.engine_id().to_owned(),
            session_id: call.session_id().to_owned(),
            token_budget: call.token_budget(),
            config,
            keep,
            add,
            client: method.and_then(|m| call.client_params(m).cloned()),
            forward_summarize: call.services().summarizer.calls_a_model(),
        }
    }

    /// Sends `msg` for `op`, serving `host` requests from `call`, and returns the reply (a
    /// failure reported by the child as its error).
    fn run(
        &mut self,
        op: Op,
        call: Option<&HostCall>,
        msg: &ToChild,
    ) -> Result<FromChild, EngineError> {
        if self.child.is_dead() {
            return Err(EngineError::new(
                op,
                &self.info.id,
                EngineErrorKind::Runtime,
                "the engine process is gone (an earlier call killed it or it died)",
            )
            .at(Some(ScriptLocation::new(self.file.clone(), None))));
        }
        self.scope.set_call(call.cloned());
        let ProcessEngine {
            child,
            scope,
            limits,
            cancel,
            ..
        } = self;
        let reply = match call {
            Some(_) => child.exchange(msg, limits.hard_timeout(), cancel.as_deref(), &mut |r| {
                serve(scope, r)
            }),
            None => child.exchange(msg, limits.hard_timeout(), cancel.as_deref(), &mut refuse),
        };
        self.scope.set_call(None);
        let reply =
            reply.map_err(|s| stopped(s, op, &self.info.id, std::path::Path::new(&self.file)))?;
        match reply {
            FromChild::Failed { error } => {
                let e = error.into_error(op);
                if e.kind == EngineErrorKind::Deadline {
                    // The child may have abandoned a stuck thread: nothing keeps running.
                    self.child.kill();
                }
                Err(e)
            }
            reply => Ok(reply),
        }
    }

    /// A lifecycle call whose result is the JSON of `R`.
    fn lifecycle<P: Serialize, R: DeserializeOwned>(
        &mut self,
        call: &HostCall,
        method: Method,
        params: &P,
    ) -> Result<R, EngineError> {
        let msg = ToChild::Call {
            method,
            params: serde_json::to_value(params).map_err(|e| self.host_fault(method.into(), e))?,
            call: self.call_wire(call, Some(method)),
        };
        match self.run(method.into(), Some(call), &msg)? {
            FromChild::Done { value } => self.typed(method.into(), value),
            other => Err(unexpected(method.into(), &self.info.id, &other)),
        }
    }

    fn typed<R: DeserializeOwned>(&self, op: Op, value: Json) -> Result<R, EngineError> {
        serde_json::from_value(value).map_err(|e| {
            EngineError::new(
                op,
                &self.info.id,
                EngineErrorKind::InvalidResult,
                e.to_string(),
            )
        })
    }

    fn host_fault(&self, op: Op, e: impl std::fmt::Display) -> EngineError {
        EngineError::new(op, &self.info.id, EngineErrorKind::Host, e.to_string())
    }
}

/// Runs one `host` request of the child through the API table, as the script called it.
fn serve(scope: &HostScope, (path, name, args): HostRequest) -> Result<HostOutWire, HostError> {
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    let Some(f) = crate::host::api::find(&path) else {
        return Err(HostError::host(format!("{name}: no such host function")));
    };
    if args.len() > MAX_PARAMS {
        return Err(HostError::host(format!("{name}: too many arguments")));
    }
    let mut argv: crate::host::Args = Default::default();
    for (slot, a) in argv.iter_mut().zip(args) {
        *slot = super::wire::arg_from_json(a);
    }
    debug_assert!(argv.iter().all(|a| !matches!(a, HostValue::Other(_))));
    scope.run(f, &name, argv).map(HostOutWire::from)
}

impl Engine for ProcessEngine {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn defines(&self, method: Method) -> bool {
        self.defined.contains(&method)
    }

    fn location(&self, _: Method) -> Option<ScriptLocation> {
        Some(ScriptLocation::new(self.file.clone(), None))
    }

    fn bootstrap(
        &mut self,
        call: &HostCall,
        params: &BootstrapParams,
    ) -> Result<BootstrapResult, EngineError> {
        self.lifecycle(call, Method::Bootstrap, params)
    }

    fn ingest(
        &mut self,
        call: &HostCall,
        params: &IngestParams,
    ) -> Result<IngestResult, EngineError> {
        self.lifecycle(call, Method::Ingest, params)
    }

    fn ingest_batch(
        &mut self,
        call: &HostCall,
        params: &IngestBatchParams,
    ) -> Result<IngestBatchResult, EngineError> {
        self.lifecycle(call, Method::IngestBatch, params)
    }

    fn assemble(
        &mut self,
        call: &HostCall,
        params: &AssembleParams,
    ) -> Result<AssembleResult, EngineError> {
        let method = Method::Assemble;
        let msg = ToChild::Call {
            method,
            params: serde_json::to_value(params).map_err(|e| self.host_fault(method.into(), e))?,
            call: self.call_wire(call, Some(method)),
        };
        let (value, refs) = match self.run(method.into(), Some(call), &msg)? {
            FromChild::Assembled { value, messages } => (value, messages),
            other => return Err(unexpected(method.into(), &self.info.id, &other)),
        };
        let mut out: AssembleResult = self.typed(method.into(), value)?;
        let context = call.context();
        out.messages = refs
            .into_iter()
            .map(|r| match r {
                MessageRef::Context(i) => context.get(i).cloned().ok_or(i),
                MessageRef::New(m) => Ok(m),
            })
            .collect::<Result<_, usize>>()
            .map_err(|i| {
                self.host_fault(
                    method.into(),
                    format!(
                        "the engine process named context message {i} of {}",
                        context.len()
                    ),
                )
            })?;
        Ok(out)
    }

    fn compact(
        &mut self,
        call: &HostCall,
        params: &CompactParams,
    ) -> Result<CompactResult, EngineError> {
        self.lifecycle(call, Method::Compact, params)
    }

    fn after_turn(&mut self, call: &HostCall, params: &AfterTurnParams) -> Result<(), EngineError> {
        self.lifecycle::<_, Json>(call, Method::AfterTurn, params)
            .map(|_| ())
    }

    fn commit_turn(
        &mut self,
        call: &HostCall,
        params: &CommitTurnParams,
    ) -> Result<Option<CommitTurnResult>, EngineError> {
        self.lifecycle(call, Method::CommitTurn, params)
    }

    fn maintain(
        &mut self,
        call: &HostCall,
        params: &MaintainParams,
    ) -> Result<Option<MaintainResult>, EngineError> {
        self.lifecycle(call, Method::Maintain, params)
    }

    fn prepare_subagent_spawn(
        &mut self,
        call: &HostCall,
        params: &SubagentSpawnParams,
    ) -> Result<Option<SpawnRollback>, EngineError> {
        self.lifecycle::<_, Option<u64>>(call, Method::PrepareSubagentSpawn, params)
            .map(|h| h.map(SpawnRollback))
    }

    fn rollback_subagent_spawn(
        &mut self,
        call: &HostCall,
        handle: SpawnRollback,
    ) -> Result<(), EngineError> {
        let op: Op = Method::PrepareSubagentSpawn.into();
        let msg = ToChild::Rollback {
            handle: handle.0,
            call: self.call_wire(call, None),
        };
        match self.run(op, Some(call), &msg)? {
            FromChild::Done { .. } => Ok(()),
            other => Err(unexpected(op, &self.info.id, &other)),
        }
    }

    fn on_subagent_ended(
        &mut self,
        call: &HostCall,
        params: &SubagentEndedParams,
    ) -> Result<(), EngineError> {
        self.lifecycle::<_, Json>(call, Method::OnSubagentEnded, params)
            .map(|_| ())
    }

    fn dispose(&mut self, call: &HostCall) -> Result<(), EngineError> {
        if self.disposed || self.child.is_dead() {
            return Ok(());
        }
        self.disposed = true;
        self.lifecycle::<_, Json>(call, Method::Dispose, &json!({}))
            .map(|_| ())
    }

    fn save_state(&mut self) -> Result<Json, EngineError> {
        match self.run(Op::SaveState, None, &ToChild::SaveState)? {
            FromChild::Done { value } => Ok(value),
            other => Err(unexpected(Op::SaveState, &self.info.id, &other)),
        }
    }

    fn restore_state(&mut self, state: Json) -> Result<(), EngineError> {
        match self.run(Op::RestoreState, None, &ToChild::RestoreState { state })? {
            FromChild::Done { .. } => Ok(()),
            other => Err(unexpected(Op::RestoreState, &self.info.id, &other)),
        }
    }
}
