//! The child's side: [`child_main`] reads [`ToChild`] lines from stdin, runs each call on the
//! VM of the ordinary in-process transport and writes the script's result ([`FromChild`]) to
//! stdout; typing and checking it is the parent's. A reader thread takes `Cancel`
//! at any time (it sets the instance's cancel flag); `host` functions the parent runs are sent
//! from the VM's worker by the [`Forwarder`] and answered on the same channel.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde_json::Value as Json;

use super::wire::{CallWire, ErrorWire, FeedWire, FromChild, MessageRef, ToChild, arg_to_json};
use crate::contract::message::Message;
use crate::contract::{EngineInfo, Method, ResultLimits};
use crate::engine::api::table::HostFn;
use crate::engine::api::{
    ClientParams, HostCall, HostError, HostForward, HostOut, HostValue, SessionServices,
};
use crate::engine::instance::{ConnectAny, Transport};
use crate::engine::script::{Expect, Feed, Returned};
use crate::engine::{InstanceContext, LoadOptions};
use crate::error::{EngineError, EngineErrorKind, Op};
use crate::services::compaction::CompactionSettings;
use crate::services::summarize::BuiltinSummarizer;
use crate::services::tokens::TokenCache;

/// The child's stdout, shared by the main loop and the forwarder on the VM's worker.
type Out = Arc<Mutex<std::io::Stdout>>;
/// Requests from the parent (all but `Cancel`), shared the same way.
type In = Arc<Mutex<mpsc::Receiver<ToChild>>>;

/// Serves one engine over stdin/stdout until stdin closes; returns the exit code. The
/// `ctxhost` CLI calls it for its hidden `__engine-child` argument; an embedding program that
/// turns on `host.isolation: "process"` calls it the same way (see [`crate::engine::isolation`]).
pub fn child_main() -> i32 {
    let out: Out = Arc::new(Mutex::new(std::io::stdout()));
    let cancel = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let reader_cancel = Arc::clone(&cancel);
    let reader = std::thread::Builder::new()
        .name("ctxhost-child-in".into())
        .spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { return };
                match serde_json::from_str::<ToChild>(&line) {
                    Ok(ToChild::Cancel) => reader_cancel.store(true, Ordering::Relaxed),
                    Ok(msg) => {
                        if tx.send(msg).is_err() {
                            return;
                        }
                    }
                    Err(e) => tracing::error!("engine child: not a request ({e})"),
                }
            }
        });
    if reader.is_err() {
        return 2;
    }
    let input: In = Arc::new(Mutex::new(rx));
    let mut child = Child {
        out: Arc::clone(&out),
        input: Arc::clone(&input),
        cancel,
        factory: None,
        vm: None,
        services: None,
        context: Arc::default(),
        config: Arc::new(Json::Null),
        label: String::new(),
    };
    loop {
        let next = input.lock().recv();
        let Ok(msg) = next else { return 0 };
        if let Some(reply) = child.handle(msg)
            && write(&out, &reply).is_err()
        {
            return 0;
        }
    }
}

fn write(out: &Out, msg: &FromChild) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut out = out.lock();
    out.write_all(&line)?;
    out.flush()
}

/// What one child holds: the loaded file, its one instance, the session's context.
struct Child {
    out: Out,
    input: In,
    cancel: Arc<AtomicBool>,
    factory: Option<Arc<dyn ConnectAny>>,
    /// The instance this child serves: what it says it is, and the transport to its VM.
    vm: Option<(EngineInfo, Box<dyn Transport>)>,
    services: Option<Arc<SessionServices>>,
    context: Arc<Vec<Arc<Message>>>,
    config: Arc<Json>,
    label: String,
}

impl Child {
    fn handle(&mut self, msg: ToChild) -> Option<FromChild> {
        let reply = match msg {
            ToChild::Load {
                path,
                configured_id,
                strict,
                config,
                limits,
                agent_dir,
                workspace_dir,
                tokenizer,
                hook,
            } => {
                limit_address_space(limits.script.memory_bytes);
                self.label = configured_id.clone().unwrap_or_default();
                let counter = match crate::services::tokens::counter(tokenizer) {
                    Ok(c) => c,
                    Err(e) => return Some(self.fail(Op::Load, EngineErrorKind::Host, e)),
                };
                self.services = Some(Arc::new(SessionServices {
                    tokens: TokenCache::new(counter),
                    summarizer: Arc::new(BuiltinSummarizer::new()),
                    compaction: CompactionSettings::default(),
                    limits: limits.script.results.clone(),
                    model: Default::default(),
                    host_times: Default::default(),
                    cancel: Arc::clone(&self.cancel),
                }));
                self.config = Arc::new(config.clone());
                let opts = LoadOptions {
                    configured_id,
                    strict,
                    config: Arc::new(config),
                    limits: limits.script,
                    agent_dir,
                    workspace_dir,
                    cancel: Some(Arc::clone(&self.cancel)),
                    hook,
                };
                crate::engine::load_any(&path, &opts, &limits.rhai).map(|f| {
                    let reply = FromChild::Loaded {
                        info: f.info().clone(),
                        warnings: f.warnings().to_vec(),
                    };
                    self.factory = Some(f);
                    reply
                })
            }
            ToChild::Instantiate {
                config,
                agent_dir,
                workspace_dir,
                session_id,
            } => self.instantiate(InstanceContext {
                config: Arc::new(config),
                agent_dir,
                workspace_dir,
                session_id,
                cancel: Some(Arc::clone(&self.cancel)),
            }),
            ToChild::Call {
                method,
                params,
                feed,
                expect,
                call,
            } => self.call(method, params, feed, expect, call),
            ToChild::Rollback { handle, call } => {
                let call = self.host_call(call, None);
                self.vm(Op::Method(Method::PrepareSubagentSpawn))
                    .and_then(|(_, vm)| vm.rollback(&call, handle))
                    .map(|()| FromChild::Done { value: Json::Null })
            }
            ToChild::SaveState => self
                .vm(Op::SaveState)
                .and_then(|(_, vm)| vm.save_state())
                .map(|value| FromChild::Done { value }),
            ToChild::RestoreState { state } => self
                .vm(Op::RestoreState)
                .and_then(|(_, vm)| vm.restore_state(state))
                .map(|()| FromChild::Done { value: Json::Null }),
            // A late answer to a request given up on, or a cancel the reader already took.
            ToChild::HostReply { .. } | ToChild::Cancel => return None,
        };
        Some(reply.unwrap_or_else(|e| FromChild::Failed { error: e.into() }))
    }

    fn fail(&self, op: Op, kind: EngineErrorKind, e: impl std::fmt::Display) -> FromChild {
        FromChild::Failed {
            error: ErrorWire::from(EngineError::new(op, &self.label, kind, e.to_string())),
        }
    }

    fn vm(&mut self, op: Op) -> Result<(&EngineInfo, &mut Box<dyn Transport>), EngineError> {
        let label = self.label.clone();
        match &mut self.vm {
            Some((info, vm)) => Ok((info, vm)),
            None => Err(EngineError::new(
                op,
                label,
                EngineErrorKind::Host,
                "no engine instance in this process",
            )),
        }
    }

    fn instantiate(&mut self, cx: InstanceContext) -> Result<FromChild, EngineError> {
        let Some(factory) = &self.factory else {
            return Err(EngineError::new(
                Op::Instantiate,
                &self.label,
                EngineErrorKind::Host,
                "no engine loaded in this process",
            ));
        };
        self.config = Arc::clone(&cx.config);
        let (info, defined, vm) = factory.connect_any(&cx)?;
        let lines = defined
            .iter()
            .filter_map(|&m| Some((m, vm.location(m)?.line?)))
            .collect();
        let reply = FromChild::Instantiated {
            info: info.clone(),
            defined,
            noun: vm.noun().to_owned(),
            lines,
        };
        self.vm = Some((info, vm));
        Ok(reply)
    }

    /// The call's `HostCall`, after bringing the resident context up to date.
    fn host_call(&mut self, wire: CallWire, method: Option<Method>) -> HostCall {
        let context = Arc::make_mut(&mut self.context);
        context.truncate(wire.keep);
        context.extend(wire.add);
        if let Some(config) = wire.config {
            self.config = Arc::new(config);
        }
        let services = self.services.clone().unwrap_or_else(|| {
            Arc::new(SessionServices {
                tokens: TokenCache::new(Arc::new(crate::services::tokens::Estimate)),
                summarizer: Arc::new(BuiltinSummarizer::new()),
                compaction: CompactionSettings::default(),
                limits: ResultLimits::default(),
                model: Default::default(),
                host_times: Default::default(),
                cancel: Arc::clone(&self.cancel),
            })
        });
        let forward = Forwarder {
            out: Arc::clone(&self.out),
            input: Arc::clone(&self.input),
            summarize: wire.forward_summarize,
        };
        let client = match (method, wire.client) {
            (Some(method), Some(fields)) => Some(Arc::new(ClientParams { method, fields })),
            _ => None,
        };
        HostCall::new(
            Arc::from(wire.engine_id),
            Arc::from(wire.session_id),
            Arc::clone(&self.context),
            services,
            Arc::clone(&self.config),
            wire.token_budget,
        )
        .with_client_params(client)
        .with_forward(Arc::new(forward))
    }

    fn call(
        &mut self,
        method: Method,
        params: Json,
        feed: FeedWire,
        expect: Expect,
        wire: CallWire,
    ) -> Result<FromChild, EngineError> {
        // A cancel belongs to the call it was sent for.
        self.cancel.store(false, Ordering::Relaxed);
        let call = self.host_call(wire, Some(method));
        let label = self.label.clone();
        let bad = |e: serde_json::Error| {
            EngineError::new(
                method,
                &label,
                EngineErrorKind::Host,
                format!("params: {e}"),
            )
        };
        let feed = match feed {
            FeedWire::Nothing => Feed::Nothing,
            FeedWire::Context => Feed::Context,
            FeedWire::One => Feed::One(typed(field(&params, "message")).map_err(bad)?),
            FeedWire::List => Feed::List(typed(field(&params, "messages")).map_err(bad)?),
        };
        let (info, vm) = self.vm(method.into())?;
        let returned = match vm.invoke(&call, info, method, params, feed, expect)? {
            None => return Ok(FromChild::Undefined),
            Some(Err(message)) => return Ok(FromChild::Refused { message }),
            Some(Ok(returned)) => returned,
        };
        Ok(match returned {
            Returned::Nothing => FromChild::Done { value: Json::Null },
            Returned::Json(value) => FromChild::Done { value },
            Returned::Rollback(handle) => FromChild::Done {
                value: handle.map_or(Json::Null, Json::from),
            },
            Returned::Assembled(fields, messages) => {
                // A context message the VM returned as itself goes back by position too.
                let mut at: Option<HashMap<*const Message, usize>> = None;
                let messages = messages
                    .into_iter()
                    .map(|r| match r {
                        MessageRef::New(m) => {
                            let at = at.get_or_insert_with(|| {
                                call.context()
                                    .iter()
                                    .enumerate()
                                    .map(|(i, m)| (Arc::as_ptr(m), i))
                                    .collect()
                            });
                            match at.get(&Arc::as_ptr(&m)) {
                                Some(&i) => MessageRef::Context(i),
                                None => MessageRef::New(m),
                            }
                        }
                        context => context,
                    })
                    .collect();
                FromChild::Assembled {
                    value: Json::Object(fields.into_map()),
                    messages,
                }
            }
        })
    }
}

/// The params' field `key` (`null` when missing).
fn field(params: &Json, key: &str) -> Json {
    params.get(key).cloned().unwrap_or(Json::Null)
}

fn typed<P: DeserializeOwned>(params: Json) -> Result<P, serde_json::Error> {
    serde_json::from_value(params)
}

/// Limits this process's address space, so a native allocation bomb fails here (the child
/// aborts; the parent reports `Memory`) instead of taking the machine.
fn limit_address_space(memory_bytes: usize) {
    #[cfg(unix)]
    {
        let cap = super::child_address_space(memory_bytes);
        if let Err(e) = rlimit::Resource::AS.set(cap, cap) {
            tracing::warn!("engine child: cannot limit its address space: {e}");
        }
    }
    #[cfg(not(unix))]
    let _ = memory_bytes;
}

/// Sends chosen `host` functions to the parent and waits for the answer; only the waits the
/// parent reports move the call's deadline (the parent's own wait moves by the same).
#[derive(Debug)]
struct Forwarder {
    out: Out,
    input: In,
    summarize: bool,
}

impl HostForward for Forwarder {
    fn forwards(&self, f: &HostFn) -> bool {
        match f.path {
            ["complete" | "search" | "fetch" | "delegateCompaction"] | ["log", _] => true,
            ["summarize"] => self.summarize,
            _ => false,
        }
    }

    fn forward(
        &self,
        f: &HostFn,
        name: &str,
        args: crate::engine::api::Args,
    ) -> Result<HostOut, HostError> {
        // A log line is cut here as the parent's log would cut it: a 200 MB line is never
        // copied into a request, and the parent logs exactly what it logs in process.
        let args = match f.path {
            ["log", _] => args.map(|a| match a {
                HostValue::Text(text) => HostValue::Text(crate::engine::api::cut_log_line(text)),
                other => other,
            }),
            _ => args,
        };
        let mut json = Vec::with_capacity(f.params.len());
        for a in args.into_iter().take(f.params.len()) {
            let what = a.describe();
            json.push(
                arg_to_json(a)
                    .ok_or_else(|| HostError::script(format!("{name}: cannot pass {what}")))?,
            );
        }
        let request = FromChild::Host {
            path: f.path.iter().map(|s| (*s).to_owned()).collect(),
            name: name.to_owned(),
            args: json,
        };
        // Only the parent's waits (a model, the client's compaction) move the deadline: the
        // host work it does for this call counts against it here, as it would in process, so
        // a script looping over such calls is stopped at its next step past the deadline.
        crate::sandbox::outside_deadline_crediting(|| {
            if let Err(e) = write(&self.out, &request) {
                let gone = HostError::host(format!("{name}: the host is gone ({e})"));
                return (Err(gone), std::time::Duration::ZERO);
            }
            loop {
                let next = self.input.lock().recv();
                match next {
                    Ok(ToChild::HostReply { reply, waited_us }) => {
                        let waited = std::time::Duration::from_micros(waited_us);
                        return (reply.map(Into::into).map_err(Into::into), waited);
                    }
                    Ok(_) => continue,
                    Err(_) => {
                        let gone = HostError::host(format!("{name}: the host is gone"));
                        return (Err(gone), std::time::Duration::ZERO);
                    }
                }
            }
        })
    }
}
