//! [`WorkerVm`]: the transport of an engine instance whose VM runs on a worker thread of this
//! process (`host.isolation: "thread"`). Each call prepares `p` and runs the script on the
//! VM's worker under the hard timeout; [`ScriptInstance`] is the shared
//! [`Instance`](crate::engine::instance::Instance) over it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value as Json};

use super::language::{Expect, Feed, Reply, ScriptVm};
use super::located;
use super::site::worker_error;
use crate::contract::{EngineInfo, HostParam, Method};
use crate::engine::api::HostCall;
use crate::engine::instance::{Instance, Transport};
use crate::error::{EngineError, EngineErrorKind, Op, ScriptLocation};
use crate::sandbox::{Limits, StopSignals, Worker};

/// `p` for a lifecycle call, from params already turned into JSON: the params' fields (messages
/// aside, they travel as a [`Feed`]), with the host params a client passed (`client`: fields the
/// host did not set itself), without the host params the engine opted out of
/// (`acceptedHostParams`).
fn fields_of(
    params: Json,
    client: Option<&Map<String, Json>>,
    info: &EngineInfo,
) -> Map<String, Json> {
    let mut map = match params {
        Json::Object(m) => m,
        _ => Map::new(),
    };
    for (k, v) in client.into_iter().flatten() {
        if !map.contains_key(k) {
            map.insert(k.clone(), v.clone());
        }
    }
    // One pass by name: a `remove` per key hashes each (SipHash), on every call.
    map.retain(|k, _| match k.as_str() {
        "message" | "messages" => false,
        "sessionKey" => info.accepts(HostParam::SessionKey),
        "prompt" => info.accepts(HostParam::Prompt),
        "runtimeSettings" => info.accepts(HostParam::RuntimeSettings),
        "sessionTarget" => info.accepts(HostParam::SessionTarget),
        "runtimeContext" => info.accepts(HostParam::RuntimeContext),
        _ => true,
    });
    map
}

/// One script engine instance whose VM runs on its own worker thread, serving one session.
pub type ScriptInstance<V> = Instance<WorkerVm<V>>;

/// The transport to a VM on its own worker thread of this process.
#[derive(Debug)]
pub struct WorkerVm<V: ScriptVm> {
    /// The engine id, for errors.
    engine: String,
    worker: Worker<Option<V>>,
    limits: Limits,
    file: String,
    /// The line where each function is defined.
    lines: HashMap<String, u32>,
    cancel: Arc<AtomicBool>,
}

impl<V: ScriptVm> WorkerVm<V> {
    /// The transport to a booted VM of engine `engine` (`lines`: where its functions are).
    pub(super) fn new(
        engine: String,
        worker: Worker<Option<V>>,
        limits: Limits,
        file: String,
        lines: HashMap<String, u32>,
        signals: &StopSignals,
    ) -> Self {
        WorkerVm {
            engine,
            worker,
            limits,
            file,
            lines,
            cancel: signals.cancel.clone(),
        }
    }

    /// Runs `f` on the VM under the hard timeout.
    fn on_vm<R: Send + 'static>(
        &self,
        op: Op,
        f: impl FnOnce(&mut V) -> Result<R, EngineError> + Send + 'static,
    ) -> Result<R, EngineError> {
        let engine = self.engine.clone();
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
                &self.engine,
                &self.file,
                &self.limits,
                self.cancel.load(Ordering::Relaxed),
            )),
        }
    }
}

impl<V: ScriptVm> ScriptInstance<V> {
    /// The flag that aborts this instance's running call with `Cancelled` (never a quarantine).
    /// The caller sets it and clears it again once the call has returned.
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.transport().cancel.clone()
    }

    /// Whether the VM was abandoned after overrunning deadline + grace (it is never reused).
    pub fn is_abandoned(&self) -> bool {
        self.transport().worker.is_abandoned()
    }
}

impl<V: ScriptVm> Transport for WorkerVm<V> {
    fn noun(&self) -> &str {
        V::NOUN
    }

    fn invoke(
        &mut self,
        call: &HostCall,
        info: &EngineInfo,
        method: Method,
        params: Json,
        feed: Feed,
        expect: Expect,
    ) -> Result<Option<Reply>, EngineError> {
        let fields = fields_of(params, call.client_params(method), info);
        let call = call.clone();
        self.on_vm(method.into(), move |vm| {
            vm.invoke(&call, method, fields, feed, expect)
        })
    }

    fn rollback(&mut self, call: &HostCall, handle: u64) -> Result<(), EngineError> {
        let call = call.clone();
        self.on_vm(Method::PrepareSubagentSpawn.into(), move |vm| {
            vm.rollback(&call, handle)
        })
    }

    fn save_state(&mut self) -> Result<Json, EngineError> {
        self.on_vm(Op::SaveState, |vm| vm.save_state())
    }

    fn restore_state(&mut self, state: Json) -> Result<(), EngineError> {
        self.on_vm(Op::RestoreState, move |vm| vm.restore_state(&state))
    }

    fn location(&self, method: Method) -> Option<ScriptLocation> {
        located(&self.file, self.lines.get(method.as_str()).copied())
    }
}
