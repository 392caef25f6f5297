//! [`ScriptInstance`]: one script engine instance, the [`Engine`] implementation every language
//! shares. Each lifecycle call prepares `p`, runs the script on the VM's worker under the hard
//! timeout and converts the result into the contract's type.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use serde_json::{Map, Value as Json, json};

use super::language::{Expect, Feed, Loaded, Returned, ScriptVm};
use super::located;
use super::result::{optional, result_of, typed};
use super::site::worker_error;
use crate::contract::{
    AfterTurnParams, AssembleParams, AssembleResult, BootstrapParams, BootstrapResult,
    CommitTurnParams, CommitTurnResult, CompactParams, CompactResult, EngineInfo, HostParam,
    IngestBatchParams, IngestBatchResult, IngestParams, IngestResult, MaintainParams,
    MaintainResult, Method, SubagentEndedParams, SubagentSpawnParams,
};
use crate::engine::{Engine, SpawnRollback};
use crate::error::{EngineError, EngineErrorKind, Op, ScriptLocation};
use crate::host::HostCall;
use crate::sandbox::{Limits, StopSignals, Worker};

/// `p` for a lifecycle call: the params' fields (messages aside, they travel as a [`Feed`]),
/// with the host params a client passed (`client`: fields the host did not set itself), without
/// the host params the engine opted out of (`acceptedHostParams`).
pub fn params_object<P: Serialize>(
    params: &P,
    client: Option<&Map<String, Json>>,
    info: &EngineInfo,
) -> Result<Map<String, Json>, String> {
    let mut map = match serde_json::to_value(params).map_err(|e| e.to_string())? {
        Json::Object(m) => m,
        _ => Map::new(),
    };
    map.remove("message");
    map.remove("messages");
    for (k, v) in client.into_iter().flatten() {
        if !map.contains_key(k) {
            map.insert(k.clone(), v.clone());
        }
    }
    for (hp, key) in [
        (HostParam::SessionKey, "sessionKey"),
        (HostParam::Prompt, "prompt"),
        (HostParam::RuntimeSettings, "runtimeSettings"),
        (HostParam::SessionTarget, "sessionTarget"),
        (HostParam::RuntimeContext, "runtimeContext"),
    ] {
        if !info.accepts(hp) {
            map.remove(key);
        }
    }
    Ok(map)
}

/// One script engine instance: a VM on its own worker thread, serving one session.
#[derive(Debug)]
pub struct ScriptInstance<V: ScriptVm> {
    info: EngineInfo,
    defined: Vec<Method>,
    worker: Worker<Option<V>>,
    limits: Limits,
    file: String,
    /// The line where each function is defined.
    lines: HashMap<String, u32>,
    cancel: Arc<AtomicBool>,
    disposed: bool,
}

impl<V: ScriptVm> ScriptInstance<V> {
    /// An instance over a booted VM: `loaded` says what it defines.
    pub(super) fn new(
        loaded: Loaded,
        worker: Worker<Option<V>>,
        limits: Limits,
        file: String,
        signals: Arc<StopSignals>,
    ) -> Self {
        let defined = Method::ALL
            .into_iter()
            .chain(Method::HOOKS)
            .filter(|m| loaded.members.iter().any(|(n, f)| *f && n == m.as_str()))
            .collect();
        ScriptInstance {
            info: loaded.info,
            defined,
            worker,
            limits,
            file,
            lines: loaded.lines,
            cancel: signals.cancel.clone(),
            disposed: false,
        }
    }

    /// The flag that aborts this instance's running call with `Cancelled` (never a quarantine).
    /// The caller sets it and clears it again once the call has returned.
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    /// Whether the VM was abandoned after overrunning deadline + grace (it is never reused).
    pub fn is_abandoned(&self) -> bool {
        self.worker.is_abandoned()
    }

    /// Runs `f` on the VM under the hard timeout.
    fn on_vm<R: Send + 'static>(
        &self,
        op: Op,
        f: impl FnOnce(&mut V) -> Result<R, EngineError> + Send + 'static,
    ) -> Result<R, EngineError> {
        let engine = self.info.id.clone();

        let out =
            self.worker.call(
                self.limits.hard_timeout(),
                move |slot: &mut Option<V>| match slot {
                    Some(vm) => f(vm),
                    None => Err(EngineError::new(
                        op,
                        engine,
                        EngineErrorKind::Runtime,
                        "the engine VM is not loaded",
                    )),
                },
            );
        match out {
            Ok(r) => r,
            Err(e) => Err(worker_error(
                e,
                op,
                &self.info.id,
                &self.file,
                &self.limits,
                self.cancel.load(Ordering::Relaxed),
            )),
        }
    }

    /// One lifecycle call: params prepared here, the script called on the worker, its result
    /// converted by `convert` (with the function's line for an invalid result).
    fn lifecycle<P: Serialize, R: Send + 'static>(
        &self,
        call: &HostCall,
        method: Method,
        params: &P,
        feed: Feed,
        expect: Expect,
        convert: impl FnOnce(Returned, &Limits) -> Result<R, String> + Send + 'static,
    ) -> Result<Option<R>, EngineError> {
        if !self.defined.contains(&method) {
            return Ok(None);
        }
        let fields =
            params_object(params, call.client_params(method), &self.info).map_err(|e| {
                EngineError::new(
                    method,
                    &self.info.id,
                    EngineErrorKind::Runtime,
                    format!("host could not pass the params: {e}"),
                )
            })?;
        let call = call.clone();
        let limits = self.limits.clone();
        let (engine, file) = (self.info.id.clone(), self.file.clone());
        self.on_vm(method.into(), move |vm| {
            let Some(reply) = vm.invoke(&call, method, fields, feed, expect)? else {
                return Ok(None);
            };
            reply
                .value
                .and_then(|r| convert(r, &limits))
                .map(Some)
                .map_err(|m| {
                    EngineError::new(method, engine, EngineErrorKind::InvalidResult, m)
                        .at(located(&file, reply.line))
                })
        })
    }
}

impl<V: ScriptVm> ScriptInstance<V> {
    /// Calls a pipeline hook (`collect`, `prune`, ...) with `p` = `fields` + the session context
    /// as `p.messages`; its result as JSON, `None` when the file does not define it.
    pub fn hook(
        &self,
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
}

impl<V: ScriptVm> Engine for ScriptInstance<V> {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn defines(&self, method: Method) -> bool {
        self.defined.contains(&method)
    }

    fn location(&self, method: Method) -> Option<ScriptLocation> {
        located(&self.file, self.lines.get(method.as_str()).copied())
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
            |r, _| {
                result_of(
                    r,
                    Method::Bootstrap,
                    V::NOUN,
                    json!({"bootstrapped": false}),
                )
            },
        )
        .map(Option::unwrap_or_default)
    }

    fn ingest(
        &mut self,
        call: &HostCall,
        params: &IngestParams,
    ) -> Result<IngestResult, EngineError> {
        let feed = Feed::One(params.message.clone());
        self.lifecycle(call, Method::Ingest, params, feed, Expect::Json, |r, _| {
            result_of(r, Method::Ingest, V::NOUN, json!({"ingested": true}))
        })
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
            |r, _| result_of(r, Method::IngestBatch, V::NOUN, json!({"ingestedCount": 0})),
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
                let Returned::Assembled(mut map, messages) = r else {
                    return Err(format!("assemble: unexpected result {r:?}"));
                };
                map.insert("messages".into(), Json::Array(Vec::new()));
                let mut out: AssembleResult =
                    typed(&map, &json!({"messages": [], "estimatedTokens": 0}))?;
                out.messages = messages;
                Ok(out)
            },
        )?
        .ok_or_else(|| not_defined(&self.info, Method::Assemble))
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
            |r, _| {
                result_of(
                    r,
                    Method::Compact,
                    V::NOUN,
                    json!({"ok": true, "compacted": false}),
                )
            },
        )?
        .ok_or_else(|| not_defined(&self.info, Method::Compact))
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
            |r, _| {
                optional(
                    r,
                    Method::CommitTurn,
                    V::NOUN,
                    json!({"status": "committed"}),
                )
            },
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
            |r, _| optional(r, Method::Maintain, V::NOUN, json!({"changed": false})),
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
        let call = call.clone();
        self.on_vm(Method::PrepareSubagentSpawn.into(), move |vm| {
            vm.rollback(&call, handle.0)
        })
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
        if self.disposed {
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
        self.on_vm(Op::SaveState, |vm| vm.save_state())
    }

    fn restore_state(&mut self, state: Json) -> Result<(), EngineError> {
        self.on_vm(Op::RestoreState, move |vm| vm.restore_state(&state))
    }
}

fn not_defined(info: &EngineInfo, method: Method) -> EngineError {
    EngineError::new(
        method,
        &info.id,
        EngineErrorKind::Contract,
        format!("{method} is not defined"),
    )
}
