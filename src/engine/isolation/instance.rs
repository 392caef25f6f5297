//! [`InChild`]: the transport of an engine instance whose VM runs in a child process. Each
//! call sends the params and what is new in the context and serves the child's `host` requests
//! from this process's [`HostCall`]; the child answers with the script's result as its VM
//! converted it, which the shared [`Instance`](crate::engine::instance::Instance) ([`ProcessEngine`])
//! types here, and the session checks, as any engine's: the child is never trusted with the
//! contract.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde_json::Value as Json;

use super::factory::{refuse, stopped, unexpected};
use super::process::{ChildProc, HostRequest};
use super::wire::{CallWire, FeedWire, FromChild, HostOutWire, MessageRef, ToChild};
use crate::contract::message::Message;
use crate::contract::{EngineInfo, Method};
use crate::engine::api::{HostCall, HostError, HostScope, HostValue, MAX_PARAMS};
use crate::engine::instance::{Instance, Transport};
use crate::engine::script::{Expect, Feed, Reply, Returned};
use crate::error::{EngineError, EngineErrorKind, Op, ScriptLocation};
use crate::sandbox::{Limits, StopSignals};

/// One engine instance running in its own child process.
pub(super) type ProcessEngine = Instance<InChild>;

/// The transport to an engine instance in its own child process.
#[derive(Debug)]
pub struct InChild {
    /// The engine id, for errors.
    engine: String,
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
    /// What the engine's language calls a map of fields.
    noun: String,
    /// The line of each defined method's function.
    lines: Vec<(Method, u32)>,
}

impl ProcessEngine {
    /// The child's process id while it runs; `None` once it was killed or died.
    pub fn pid(&self) -> Option<u32> {
        let child = &self.transport().child;
        (!child.is_dead()).then(|| child.pid())
    }
}

impl InChild {
    pub(super) fn new(
        info: &EngineInfo,
        child: ChildProc,
        limits: Limits,
        file: String,
        cancel: Option<Arc<AtomicBool>>,
        noun: String,
        lines: Vec<(Method, u32)>,
    ) -> Self {
        let signals = Arc::new(StopSignals::new(cancel.clone()));
        let scope = HostScope::new(&info.id, limits.results.clone(), signals);
        InChild {
            engine: info.id.clone(),
            child,
            limits,
            file,
            cancel,
            sent: Vec::new(),
            sent_config: None,
            scope,
            noun,
            lines,
        }
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
                &self.engine,
                EngineErrorKind::Runtime,
                "the engine process is gone (an earlier call killed it or it died)",
            )
            .at(Some(ScriptLocation::new(self.file.clone(), None))));
        }
        self.scope.set_call(call.cloned());
        let InChild {
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
            reply.map_err(|s| stopped(s, op, &self.engine, std::path::Path::new(&self.file)))?;
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
}

/// Runs one `host` request of the child through the API table, as the script called it.
fn serve(scope: &HostScope, (path, name, args): HostRequest) -> Result<HostOutWire, HostError> {
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    let Some(f) = crate::engine::api::table::find(&path) else {
        return Err(HostError::host(format!("{name}: no such host function")));
    };
    if args.len() > MAX_PARAMS {
        return Err(HostError::host(format!("{name}: too many arguments")));
    }
    let mut argv: crate::engine::api::Args = Default::default();
    for (slot, a) in argv.iter_mut().zip(args) {
        *slot = super::wire::arg_from_json(a);
    }
    debug_assert!(argv.iter().all(|a| !matches!(a, HostValue::Other(_))));
    scope.run(f, &name, argv).map(HostOutWire::from)
}

impl Transport for InChild {
    fn noun(&self) -> &str {
        &self.noun
    }

    fn invoke(
        &mut self,
        call: &HostCall,
        _: &EngineInfo,
        method: Method,
        params: Json,
        feed: Feed,
        expect: Expect,
    ) -> Result<Option<Reply>, EngineError> {
        let op: Op = method.into();
        let feed = match feed {
            Feed::Nothing => FeedWire::Nothing,
            Feed::One(_) => FeedWire::One,
            Feed::List(_) => FeedWire::List,
            Feed::Context => FeedWire::Context,
        };
        let msg = ToChild::Call {
            method,
            params,
            feed,
            expect,
            call: self.call_wire(call, Some(method)),
        };
        let returned = match (expect, self.run(op, Some(call), &msg)?) {
            (_, FromChild::Undefined) => return Ok(None),
            (_, FromChild::Refused { message }) => return Ok(Some(Err(message))),
            (Expect::Assembled, FromChild::Assembled { value, messages }) => {
                let Json::Object(fields) = value else {
                    return Err(unexpected(op, &self.engine, &FromChild::Done { value }));
                };
                let context = call.context();
                let beyond = messages
                    .iter()
                    .filter_map(MessageRef::context_end)
                    .find(|end| *end > context.len());
                if let Some(i) = beyond {
                    return Err(EngineError::new(
                        op,
                        &self.engine,
                        EngineErrorKind::Host,
                        format!(
                            "the engine process named context message {} of {}",
                            i - 1,
                            context.len()
                        ),
                    ));
                }
                Returned::Assembled(fields.into(), messages)
            }
            (Expect::Nothing, FromChild::Done { .. }) => Returned::Nothing,
            (Expect::Json, FromChild::Done { value: Json::Null }) => Returned::Nothing,
            (Expect::Json, FromChild::Done { value }) => Returned::Json(value),
            (Expect::Rollback, FromChild::Done { value }) => Returned::Rollback(value.as_u64()),
            (_, other) => return Err(unexpected(op, &self.engine, &other)),
        };
        Ok(Some(Ok(returned)))
    }

    fn rollback(&mut self, call: &HostCall, handle: u64) -> Result<(), EngineError> {
        let op: Op = Method::PrepareSubagentSpawn.into();
        let msg = ToChild::Rollback {
            handle,
            call: self.call_wire(call, None),
        };
        match self.run(op, Some(call), &msg)? {
            FromChild::Done { .. } => Ok(()),
            other => Err(unexpected(op, &self.engine, &other)),
        }
    }

    fn save_state(&mut self) -> Result<Json, EngineError> {
        match self.run(Op::SaveState, None, &ToChild::SaveState)? {
            FromChild::Done { value } => Ok(value),
            other => Err(unexpected(Op::SaveState, &self.engine, &other)),
        }
    }

    fn restore_state(&mut self, state: Json) -> Result<(), EngineError> {
        match self.run(Op::RestoreState, None, &ToChild::RestoreState { state })? {
            FromChild::Done { .. } => Ok(()),
            other => Err(unexpected(Op::RestoreState, &self.engine, &other)),
        }
    }

    fn location(&self, method: Method) -> Option<ScriptLocation> {
        let line = self
            .lines
            .iter()
            .find(|(m, _)| *m == method)
            .map(|(_, l)| *l);
        Some(ScriptLocation::new(self.file.clone(), line))
    }

    fn gone(&self) -> bool {
        self.child.is_dead()
    }
}
