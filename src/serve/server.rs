//! The server: frames in, answers out; one worker task per session serving its requests in
//! order, sessions concurrently; `initialize`; closing every session when the input ends.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::contract::Method;
use crate::contract::client::ClientCall;
use crate::runtime::{Host, SessionHandle};

use super::engine::engine_info;
use super::frame::{self, Incoming};
use super::identity::Names;
use super::params::*;
use super::protocol::{self, Id, InitializeParams, InitializeResult, RpcError, code, method};
use super::retention::Retention;
use super::rpc::Peer;
use super::state::{self, BridgeRecord};
use super::{CLOSE_GRACE, Hosted, ServeOptions};

pub(super) struct Server {
    pub(super) options: ServeOptions,
    pub(super) max_line: usize,
    pub(super) peer: Peer,
    pub(super) hosted: tokio::sync::RwLock<Option<Arc<Hosted>>>,
    pub(super) sessions: Mutex<HashMap<String, Worker>>,
    /// Which conversation each call belongs to.
    pub(super) names: Names,
    /// When sessions are released (`host.serve`).
    pub(super) retention: Retention,
    /// The requests queued in a session and not yet started, with each one's cancel flag: a
    /// `$/cancelRequest` for an id found neither here nor in `running` is dropped, so what is
    /// remembered of cancels is bounded by what is queued.
    pub(super) queued: Mutex<HashMap<Id, Arc<AtomicBool>>>,
    /// The requests running now, with the cancel flag of the session running each.
    pub(super) running: Mutex<HashMap<Id, Arc<AtomicBool>>>,
    /// `shutdown` was received: later requests are refused, and the reading loop stops once
    /// every request received before it is answered.
    pub(super) stopping: AtomicBool,
    /// Set when the answer to `shutdown` is sent.
    pub(super) stopped: tokio::sync::Notify,
    /// The task answering `shutdown` (it waits for the sessions to finish their queues).
    pub(super) shutdown: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Lone surrogate escapes read as U+FFFD, over the connection.
    pub(super) surrogates: AtomicU64,
    /// Values cut at the nesting cap, over the connection.
    pub(super) cut: AtomicU64,
}

/// One session's queue and the task that serves it.
pub(super) struct Worker {
    pub(super) jobs: mpsc::UnboundedSender<Job>,
    pub(super) task: tokio::task::JoinHandle<()>,
    /// Asks the worker to release its session between calls (`host.serve.maxLive` reached).
    pub(super) release: Arc<tokio::sync::Notify>,
    /// The server's call count at the session's last call: the least recently used goes first.
    pub(super) used: u64,
    /// Unique to this worker, so a worker that retires removes itself and never its successor.
    pub(super) serial: u64,
}

/// What a session's worker task holds: its queue's receiving end and its flags.
pub(super) struct WorkerSide {
    pub(super) key: String,
    pub(super) jobs: mpsc::UnboundedReceiver<Job>,
    pub(super) cancel: Arc<AtomicBool>,
    pub(super) release: Arc<tokio::sync::Notify>,
    pub(super) serial: u64,
}

pub(super) struct Job {
    pub(super) id: Id,
    pub(super) call: ClientCall,
    /// `compact`'s params as sent (a non-owning engine hands them to the client's own
    /// compaction, unknown fields and all).
    pub(super) raw: Option<Value>,
    /// Set by a `$/cancelRequest` that came while the job was queued.
    pub(super) cancelled: Arc<AtomicBool>,
}

/// A session open in this server.
pub(super) struct Served {
    pub(super) handle: SessionHandle,
    /// Saved with the engine's state after every call (the turns committed; the mirror is
    /// put in as it is saved).
    pub(super) record: BridgeRecord,
    /// The mirror of the client's transcript.
    pub(super) mirror: super::mirror::Mirror,
    /// An `assemble` ran since the last turn ended: the next `commitTurn` or `afterTurn` ends
    /// the turn (a client may call both; the turn ends once).
    pub(super) assembled: bool,
}

/// The methods a client may call, for "did you mean".
fn known_methods() -> impl Iterator<Item = &'static str> {
    [
        method::INITIALIZE,
        method::INFO,
        method::SHUTDOWN,
        method::ROLLBACK_SUBAGENT_SPAWN,
    ]
    .into_iter()
    .chain(Method::ALL.iter().map(|m| m.as_str()))
}

fn no_method(name: &str) -> RpcError {
    let hint = match crate::contract::closest(name, known_methods()) {
        Some(m) => format!("; did you mean `{m}`?"),
        None => String::new(),
    };
    RpcError::new(code::METHOD_NOT_FOUND, format!("no method `{name}`{hint}"))
}

impl Server {
    pub(super) async fn on_frame(self: Arc<Self>, bytes: &[u8]) {
        let (frame, repairs) = frame::decode(bytes);
        if repairs.surrogates > 0 {
            let total = self
                .surrogates
                .fetch_add(repairs.surrogates as u64, Ordering::Relaxed)
                + repairs.surrogates as u64;
            tracing::warn!(
                "read {} lone surrogate escape(s) of a frame as U+FFFD ({total} on this connection)",
                repairs.surrogates
            );
        }
        if repairs.cut > 0 {
            let total =
                self.cut.fetch_add(repairs.cut as u64, Ordering::Relaxed) + repairs.cut as u64;
            tracing::warn!(
                "a frame nested deeper than the parser allows: {} value(s) below level {} replaced by a note ({total} on this connection)",
                repairs.cut,
                frame::CUT_DEPTH
            );
        }
        match frame {
            Incoming::Invalid { id, error } => {
                self.peer.respond_error(id, error);
            }
            Incoming::Dropped(why) => {
                tracing::warn!("dropped {why}");
            }
            Incoming::Response { id, answer } => {
                if !self.peer.resolve(&id, answer) {
                    tracing::debug!(?id, "an answer nobody waits for");
                }
            }
            Incoming::Notification { method, params } => {
                self.on_notification(&method, params);
            }
            Incoming::Request { id, method, params } => {
                if self.stopping.load(Ordering::Relaxed) {
                    self.peer.respond_error(
                        Some(id),
                        RpcError::new(code::INVALID_REQUEST, "the server is shutting down"),
                    );
                    return;
                }
                self.on_request(id, method, params).await;
            }
        }
    }

    /// A notification: never answered; one that cannot be acted on is logged.
    fn on_notification(&self, name: &str, params: Value) {
        if name != method::CANCEL {
            tracing::warn!("ignored the notification `{name}`: only $/cancelRequest is one");
            return;
        }
        let id = match params.get("id").cloned().map(serde_json::from_value::<Id>) {
            Some(Ok(id)) => id,
            _ => {
                tracing::warn!("ignored a $/cancelRequest without a readable id");
                return;
            }
        };
        // Running: stop it (the engine fails as cancelled at its next step). Queued: answered
        // as cancelled when its turn comes. Anything else (answered, never sent): dropped.
        if let Some(flag) = self.running.lock().get(&id) {
            flag.store(true, Ordering::Relaxed);
            return;
        }
        match self.queued.lock().get(&id) {
            Some(flag) => flag.store(true, Ordering::Relaxed),
            None => tracing::debug!(?id, "a cancel for no request in progress, dropped"),
        }
    }

    async fn on_request(self: Arc<Self>, id: Id, name: String, params: Value) {
        match name.as_str() {
            method::INITIALIZE => {
                let r = self.initialize(params).await;
                self.answer(id, r);
            }
            method::INFO => {
                let hosted = self.hosted.read().await.clone();
                let r = match hosted {
                    None => Err(RpcError::new(code::NOT_INITIALIZED, "not initialized")),
                    Some(h) => serde_json::to_value(engine_info(&h.host)).map_err(internal),
                };
                self.answer(id, r);
            }
            method::SHUTDOWN => {
                self.stopping.store(true, Ordering::Relaxed);
                let server = Arc::clone(&self);
                // Off the reading loop, which goes on reading the client's answers to
                // ctxhost's own requests while the queued calls finish.
                let task = tokio::spawn(async move {
                    server.close_sessions(None).await;
                    server.answer(id, Ok(Value::Null));
                    server.stopped.notify_one();
                });
                *self.shutdown.lock() = Some(task);
            }
            method::CANCEL => {
                // A notification whatever it carries: a cancel sent with an id is not answered.
                self.on_notification(&name, params);
            }
            _ => {
                let raw = (name == Method::Compact.as_str()).then(|| params.clone());
                self.lifecycle_request(id, name, params, raw).await;
            }
        }
    }

    async fn lifecycle_request(
        self: &Arc<Self>,
        id: Id,
        name: String,
        params: Value,
        raw: Option<Value>,
    ) {
        match ClientCall::decode(&name, params) {
            None => self.answer(id, Err(no_method(&name))),
            Some(Err(e)) => self.answer(
                id,
                Err(RpcError {
                    code: code::INVALID_PARAMS,
                    message: e.to_string(),
                    data: Some(json!({ "param": e.param })),
                }),
            ),
            Some(Ok(call)) => self.lifecycle(id, name, call, raw).await,
        }
    }

    async fn lifecycle(
        self: &Arc<Self>,
        id: Id,
        name: String,
        call: ClientCall,
        raw: Option<Value>,
    ) {
        if self.hosted.read().await.is_none() {
            self.answer(
                id,
                Err(RpcError::new(
                    code::NOT_INITIALIZED,
                    "call initialize before any lifecycle method",
                )),
            );
            return;
        }
        let child = match &call {
            ClientCall::OnSubagentEnded(p) => p.child_session_key.clone(),
            _ => None,
        };
        let key = self.names.conversation(&call).or_else(|| {
            // OpenClaw's onSubagentEnded names only the child: its parent is the session
            // that prepared the spawn.
            state::subagent_parent(&self.options.state_dir, child.as_deref()?)
        });
        let Some(key) = key else {
            if let Some(child) = child {
                tracing::warn!(
                    child,
                    "onSubagentEnded for a child no session here spawned; nothing to tell an engine"
                );
                self.answer(id, Ok(Value::Null));
                return;
            }
            self.answer(
                id,
                Err(RpcError::new(
                    code::INVALID_PARAMS,
                    format!("{name} needs a sessionKey or a sessionId"),
                )),
            );
            return;
        };
        let cancelled = Arc::new(AtomicBool::new(false));
        self.queued
            .lock()
            .insert(id.clone(), Arc::clone(&cancelled));
        let job = Job {
            id,
            call,
            raw,
            cancelled,
        };
        self.enqueue(key, job);
    }

    pub(super) fn answer(&self, id: Id, r: std::result::Result<Value, RpcError>) {
        match r {
            Ok(v) => self.peer.respond(id, v),
            Err(e) => self.peer.respond_error(Some(id), e),
        }
    }

    pub(super) fn enqueue(self: &Arc<Self>, key: String, job: Job) {
        let mut sessions = self.sessions.lock();
        let used = self.retention.calls.fetch_add(1, Ordering::Relaxed);
        let worker = sessions.entry(key.clone()).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let server = Arc::clone(self);
            let release = Arc::new(tokio::sync::Notify::new());
            let serial = self.retention.serials.fetch_add(1, Ordering::Relaxed);
            let worker = WorkerSide {
                key: key.clone(),
                jobs: rx,
                cancel: Arc::new(AtomicBool::new(false)),
                release: Arc::clone(&release),
                serial,
            };
            let task = tokio::spawn(async move { server.run_session(worker).await });
            Worker {
                jobs: tx,
                task,
                release,
                used,
                serial,
            }
        });
        worker.used = used;
        let sent = worker.jobs.send(job);
        self.release_beyond_max_live(&sessions, &key);
        drop(sessions);
        if let Err(mpsc::error::SendError(job)) = sent {
            self.unqueue(&job);
            self.answer(
                job.id,
                Err(RpcError::new(
                    code::INTERNAL_ERROR,
                    "the session is closing",
                )),
            );
        }
    }

    /// Forgets a job as queued (only its own entry: a later request may reuse the id).
    fn unqueue(&self, job: &Job) {
        let mut queued = self.queued.lock();
        if queued
            .get(&job.id)
            .is_some_and(|f| Arc::ptr_eq(f, &job.cancelled))
        {
            queued.remove(&job.id);
        }
    }

    pub(super) async fn run_session(self: Arc<Self>, mut worker: WorkerSide) {
        let mut served: Option<Served> = None;
        loop {
            let idle = *self.retention.idle.read();
            let job = tokio::select! {
                // A queued call first: a session in use is never the one released.
                biased;
                job = worker.jobs.recv() => match job {
                    Some(job) => job,
                    None => break,
                },
                () = tokio::time::sleep(idle) => {
                    if self.retire(&mut worker, &mut served).await {
                        return;
                    }
                    continue;
                }
                () = worker.release.notified() => {
                    if self.retire(&mut worker, &mut served).await {
                        return;
                    }
                    continue;
                }
            };
            let (key, cancel) = (&worker.key, &worker.cancel);
            // Running from here on, so a cancel arriving now sets the session's flag; one
            // that came while the job was queued set the job's own.
            self.running
                .lock()
                .insert(job.id.clone(), Arc::clone(cancel));
            self.unqueue(&job);
            if job.cancelled.load(Ordering::Relaxed) {
                self.running.lock().remove(&job.id);
                self.answer(
                    job.id,
                    Err(RpcError::new(
                        code::REQUEST_CANCELLED,
                        "cancelled before it ran",
                    )),
                );
                continue;
            }
            let id = job.id.clone();
            let r = self.call(key, &mut served, job, cancel).await;
            // Cancelled while it ran: the answer says so, even when the call got to its end
            // (what it did is kept; a wait on the client ended at the cancel).
            let r = match r {
                Ok(_) if cancel.load(Ordering::Relaxed) => Err(RpcError::new(
                    code::REQUEST_CANCELLED,
                    "cancelled while it ran",
                )),
                r => r,
            };
            // Removed before the flag is cleared: a cancel that comes later finds nothing
            // running and cannot stop the next call.
            self.running.lock().remove(&id);
            cancel.store(false, Ordering::Relaxed);
            self.answer(id, r);
        }
        if let Some(s) = served
            && let Err(e) = s.handle.close().await
        {
            tracing::warn!(session = %worker.key, "closing the session failed: {e}");
        }
    }

    /// Closes every session once its queue is served: within `grace` (the input ended: no one
    /// may be reading), or however long the queued calls take (`shutdown`).
    pub(super) async fn close_sessions(&self, grace: Option<std::time::Duration>) {
        let workers: Vec<Worker> = self.sessions.lock().drain().map(|(_, w)| w).collect();
        let tasks: Vec<_> = workers
            .into_iter()
            .map(|w| {
                drop(w.jobs);
                w.task
            })
            .collect();
        let all = async {
            for t in tasks {
                let _ = t.await;
            }
        };
        match grace {
            None => all.await,
            Some(grace) => {
                if tokio::time::timeout(grace, all).await.is_err() {
                    tracing::warn!("sessions did not close within {grace:?}");
                }
            }
        }
    }

    pub(super) async fn initialize(&self, params: Value) -> std::result::Result<Value, RpcError> {
        let p: InitializeParams = parse(params)?;
        let engine = p
            .engine
            .map(PathBuf::from)
            .or_else(|| self.options.engine.clone());
        let config_path = p
            .config
            .map(PathBuf::from)
            .or_else(|| self.options.config.clone());
        let mut config =
            crate::config::Config::with_engine_file(config_path.as_deref(), engine.as_deref())
                .map_err(internal)?;
        super::engine::apply_serve_defaults(&mut config);
        self.retention.set(&config.host.serve);
        if let Some(isolation) = self.options.isolation {
            config.host.isolation = isolation;
        }
        let debounce = std::time::Duration::from_millis(config.host.watch.debounce_ms);
        // Taken before the load, so a save during the load is a change.
        let watched = if config.host.watch.enabled {
            super::engine::watched_files(&config)
        } else {
            Vec::new()
        };
        let model =
            super::model::client_model(&self.peer, &p.capabilities, self.options.client_timeout);
        let mut builder = Host::builder(config).model(model);
        if let Some(child) = &self.options.child_command {
            builder = builder.child_command(child.clone());
        }
        let host = Arc::new(builder.start().await.map_err(internal)?);
        let info = engine_info(&host);
        if let Some(client) = &p.client_info {
            tracing::info!(client = %client.name, version = %client.version, engine = %info.id, "initialized");
        }
        let backend =
            crate::store::open_backend(host.config(), &self.options.state_dir).map_err(internal)?;
        let watching = (!watched.is_empty())
            .then(|| {
                super::engine::watch(&host, watched, debounce, self.options.reloads.clone())
                    .map_err(|e| {
                        tracing::warn!(
                            "cannot watch the engine's files, a save is not picked up until a restart: {e}"
                        )
                    })
                    .ok()
            })
            .flatten();
        let hosted = Arc::new(Hosted {
            backend,
            host,
            capabilities: p.capabilities,
            watching,
        });
        let old = self.hosted.write().await.replace(hosted);
        if old.is_some() {
            // A second initialize: sessions of the old host close, new ones start on the new.
            self.close_sessions(Some(CLOSE_GRACE)).await;
        }
        let result = InitializeResult {
            protocol_version: protocol::PROTOCOL_VERSION.into(),
            ctxhost_version: env!("CARGO_PKG_VERSION").into(),
            info,
            views: if p.capabilities.delta_views {
                protocol::Views::Delta
            } else {
                protocol::Views::Full
            },
        };
        serde_json::to_value(result).map_err(|e| internal(e.to_string()))
    }
}
