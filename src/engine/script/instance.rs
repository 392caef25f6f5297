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
    worker: Worker<VmSlot<V>>,
    limits: Limits,
    file: String,
    /// The line where each function is defined.
    lines: HashMap<String, u32>,
    cancel: Arc<AtomicBool>,
    /// The call the worker's slot holds, as last sent (none when the last job may not have run).
    sent: Option<HostCall>,
    /// The fields of `p` the worker's slot holds for each method, as last sent.
    sent_fields: FieldsByMethod,
}

/// What a worker thread holds of one engine: its VM, once booted, the call its last job ran
/// with and the last fields of `p` of each method. What the caller sees unchanged (a turn's
/// `ingest` and `assemble`s, the bench's loop) is not sent again: a clone made on the caller's
/// core and dropped on the worker's moves each reference count and each allocation it touches
/// between the two cores, and on a machine whose cores are far apart (measured: 340 ns a cache
/// line's round trip instead of 60) those moves were most of a small call.
#[derive(Debug)]
pub(crate) struct VmSlot<V> {
    /// The VM, once booted.
    pub(super) vm: Option<V>,
    call: Option<HostCall>,
    fields: FieldsByMethod,
}

/// The fields of `p` last sent for each method.
type FieldsByMethod = HashMap<Method, Map<String, Json>>;

impl<V> VmSlot<V> {
    /// A slot with no VM booted yet.
    pub(super) fn empty() -> Self {
        VmSlot {
            vm: None,
            call: None,
            fields: HashMap::new(),
        }
    }

    /// The VM, the call it runs for (once `sent`, a call that changed, is held) and the fields
    /// held for each method.
    fn take_call(
        &mut self,
        sent: Option<HostCall>,
    ) -> Result<(&mut V, &HostCall, &FieldsByMethod), Missing> {
        if let Some(call) = sent {
            self.call = Some(call);
        }
        let vm = self.vm.as_mut().ok_or(Missing::Vm)?;
        let call = self.call.as_ref().ok_or(Missing::Call)?;
        Ok((vm, call, &self.fields))
    }
}

/// Why a job found nothing to run on.
enum Missing {
    Vm,
    Call,
    Fields,
}

impl<V: ScriptVm> WorkerVm<V> {
    /// The transport to a booted VM of engine `engine` (`lines`: where its functions are).
    pub(super) fn new(
        engine: String,
        worker: Worker<VmSlot<V>>,
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
            sent: None,
            sent_fields: HashMap::new(),
        }
    }

    /// Runs `f` on the VM under the hard timeout.
    fn on_vm<R: Send + 'static>(
        &mut self,
        op: Op,
        f: impl FnOnce(&mut V) -> Result<R, EngineError> + Send + 'static,
    ) -> Result<R, EngineError> {
        self.on_slot(op, move |slot| slot.vm.as_mut().map(f).ok_or(Missing::Vm))
    }

    /// Runs `f` on the VM under the hard timeout, with `call`, which is sent to the worker
    /// only when its slot does not hold that very call already.
    fn on_vm_for<R: Send + 'static>(
        &mut self,
        op: Op,
        call: &HostCall,
        f: impl FnOnce(&mut V, &HostCall) -> Result<R, EngineError> + Send + 'static,
    ) -> Result<R, EngineError> {
        let call = self.call_to_send(call);
        self.on_slot(op, move |slot| {
            let (vm, call, _) = slot.take_call(call)?;
            Ok(f(vm, call))
        })
    }

    /// `call` when the worker's slot does not hold that very call (it holds it from now on).
    fn call_to_send(&mut self, call: &HostCall) -> Option<HostCall> {
        match &self.sent {
            Some(held) if held.is_same(call) => None,
            _ => {
                self.sent = Some(call.clone());
                Some(call.clone())
            }
        }
    }

    /// `fields` when the worker's slot does not hold the same for `method` (it holds them
    /// from now on).
    fn fields_to_send(
        &mut self,
        method: Method,
        fields: Map<String, Json>,
    ) -> Option<Map<String, Json>> {
        // In order: `p` is built in this order (Lua's `pairs` may follow it).
        let same = self
            .sent_fields
            .get(&method)
            .is_some_and(|held| held.len() == fields.len() && held.iter().eq(fields.iter()));
        if same {
            return None;
        }
        self.sent_fields.insert(method, fields.clone());
        Some(fields)
    }

    /// Runs `job` on the worker's slot under the hard timeout.
    fn on_slot<R: Send + 'static>(
        &mut self,
        op: Op,
        job: impl FnOnce(&mut VmSlot<V>) -> Result<Result<R, EngineError>, Missing> + Send + 'static,
    ) -> Result<R, EngineError> {
        match self.worker.call(self.limits.hard_timeout(), job) {
            Ok(Ok(r)) => r,
            Ok(Err(missing)) => {
                self.forget_sent();
                Err(EngineError::new(
                    op,
                    &self.engine,
                    EngineErrorKind::Runtime,
                    match missing {
                        Missing::Vm => "the engine VM is not loaded",
                        Missing::Call => "the engine's worker holds no call",
                        Missing::Fields => "the engine's worker holds no params",
                    },
                ))
            }
            Err(e) => {
                // The job may not have run: what the slot holds is not known.
                self.forget_sent();
                Err(worker_error(
                    e,
                    op,
                    &self.engine,
                    &self.file,
                    &self.limits,
                    self.cancel.load(Ordering::Relaxed),
                ))
            }
        }
    }

    /// What the worker's slot holds is not known: the next job sends it all again.
    fn forget_sent(&mut self) {
        self.sent = None;
        self.sent_fields.clear();
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
        let fields = self.fields_to_send(method, fields);
        let call = self.call_to_send(call);
        self.on_slot(method.into(), move |slot| {
            if let Some(fields) = fields {
                slot.fields.insert(method, fields);
            }
            let (vm, call, held) = slot.take_call(call)?;
            let fields = held.get(&method).ok_or(Missing::Fields)?;
            Ok(vm.invoke(call, method, fields, feed, expect))
        })
    }

    fn rollback(&mut self, call: &HostCall, handle: u64) -> Result<(), EngineError> {
        self.on_vm_for(
            Method::PrepareSubagentSpawn.into(),
            call,
            move |vm, call| vm.rollback(call, handle),
        )
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
