//! The server: frames in, answers out; one worker task per session serving its requests in
//! order, sessions concurrently; `initialize`; closing every session when the input ends.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::contract::Method;
use crate::runtime::{Host, SessionHandle};

use super::engine::{EngineFile, config_for, engine_info};
use super::params::*;
use super::protocol::{self, Id, InitializeParams, InitializeResult, RpcError, code, method};
use super::rpc::Peer;
use super::state::{self, BridgeRecord};
use super::{CLOSE_GRACE, Flow, Hosted, ServeOptions};

pub(super) struct Server {
    pub(super) options: ServeOptions,
    pub(super) max_line: usize,
    pub(super) peer: Peer,
    pub(super) hosted: tokio::sync::RwLock<Option<Arc<Hosted>>>,
    pub(super) sessions: Mutex<HashMap<String, Worker>>,
    pub(super) cancelled: Mutex<HashSet<Id>>,
    /// The requests running now, with the cancel flag of the session running each.
    pub(super) running: Mutex<HashMap<Id, Arc<AtomicBool>>>,
}

/// One session's queue and the task that serves it.
pub(super) struct Worker {
    pub(super) jobs: mpsc::UnboundedSender<Job>,
    pub(super) task: tokio::task::JoinHandle<()>,
}

pub(super) struct Job {
    pub(super) id: Option<Id>,
    pub(super) method: String,
    pub(super) params: Value,
}

/// A session open in this server.
pub(super) struct Served {
    pub(super) handle: SessionHandle,
    /// Saved with the engine's state after every call.
    pub(super) record: BridgeRecord,
}

impl Server {
    pub(super) async fn on_frame(self: Arc<Self>, bytes: &[u8]) -> Flow {
        let frame: protocol::Frame = match serde_json::from_slice(bytes) {
            Ok(f) => f,
            Err(e) => {
                let code = if serde_json::from_slice::<Value>(bytes).is_ok() {
                    code::INVALID_REQUEST
                } else {
                    code::PARSE_ERROR
                };
                self.peer
                    .respond_error(None, RpcError::new(code, format!("bad frame: {e}")));
                return Flow::Go;
            }
        };
        if frame.jsonrpc.as_deref() != Some("2.0") {
            self.peer.respond_error(
                frame.id,
                RpcError::new(code::INVALID_REQUEST, "jsonrpc must be \"2.0\""),
            );
            return Flow::Go;
        }
        let Some(name) = frame.method else {
            // An answer to one of our requests.
            if let Some(id) = frame.id {
                let answer = match frame.error {
                    Some(e) => Err(e),
                    None => Ok(frame.result.unwrap_or(Value::Null)),
                };
                if !self.peer.resolve(&id, answer) {
                    tracing::debug!(?id, "an answer nobody waits for");
                }
            }
            return Flow::Go;
        };
        let params = frame.params.unwrap_or(Value::Null);
        match name.as_str() {
            method::INITIALIZE => {
                let r = self.initialize(params).await;
                self.answer(frame.id, r);
                Flow::Go
            }
            method::INFO => {
                let hosted = self.hosted.read().await.clone();
                let r = match hosted {
                    None => Err(RpcError::new(code::NOT_INITIALIZED, "not initialized")),
                    Some(h) => {
                        h.refresh().await;
                        serde_json::to_value(engine_info(&h.host)).map_err(internal)
                    }
                };
                self.answer(frame.id, r);
                Flow::Go
            }
            method::SHUTDOWN => {
                self.close_sessions().await;
                self.answer(frame.id, Ok(Value::Null));
                Flow::Stop
            }
            method::CANCEL => {
                if let Some(id) = params.get("id").cloned()
                    && let Ok(id) = serde_json::from_value::<Id>(id)
                {
                    // Running: stop it (the engine fails as cancelled at its next step). Queued:
                    // answered as cancelled when its turn comes.
                    match self.running.lock().get(&id) {
                        Some(flag) => flag.store(true, Ordering::Relaxed),
                        None => {
                            self.cancelled.lock().insert(id);
                        }
                    }
                }
                Flow::Go
            }
            m if Method::from_name(m).is_some() || m == method::ROLLBACK_SUBAGENT_SPAWN => {
                if self.hosted.read().await.is_none() {
                    self.answer(
                        frame.id,
                        Err(RpcError::new(
                            code::NOT_INITIALIZED,
                            "call initialize before any lifecycle method",
                        )),
                    );
                    return Flow::Go;
                }
                let key = session_key(&params).or_else(|| {
                    // OpenClaw's onSubagentEnded names only the child: its parent is the
                    // session that prepared the spawn.
                    let child = text(&params, "childSessionKey")?;
                    state::subagent_parent(&self.options.state_dir, &child)
                });
                let Some(key) = key else {
                    if m == "onSubagentEnded" {
                        tracing::warn!(
                            child = text(&params, "childSessionKey").unwrap_or_default(),
                            "onSubagentEnded for a child no session here spawned; nothing to tell an engine"
                        );
                        self.answer(frame.id, Ok(Value::Null));
                        return Flow::Go;
                    }
                    self.answer(
                        frame.id,
                        Err(RpcError::new(
                            code::INVALID_PARAMS,
                            format!("{m} needs a sessionKey or a sessionId"),
                        )),
                    );
                    return Flow::Go;
                };
                let job = Job {
                    id: frame.id,
                    method: name,
                    params,
                };
                self.enqueue(key, job);
                Flow::Go
            }
            other => {
                if frame.id.is_some() {
                    self.answer(
                        frame.id,
                        Err(RpcError::new(
                            code::METHOD_NOT_FOUND,
                            format!("no method {other}"),
                        )),
                    );
                }
                Flow::Go
            }
        }
    }

    pub(super) fn answer(&self, id: Option<Id>, r: std::result::Result<Value, RpcError>) {
        match (id, r) {
            (Some(id), Ok(v)) => self.peer.respond(id, v),
            (id, Err(e)) => self.peer.respond_error(id, e),
            (None, Ok(_)) => {}
        }
    }

    pub(super) fn enqueue(self: &Arc<Self>, key: String, job: Job) {
        let mut sessions = self.sessions.lock();
        let worker = sessions.entry(key.clone()).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let server = Arc::clone(self);
            let cancel = Arc::new(AtomicBool::new(false));
            let task = tokio::spawn(async move { server.run_session(key, rx, cancel).await });
            Worker { jobs: tx, task }
        });
        if let Err(mpsc::error::SendError(job)) = worker.jobs.send(job) {
            self.answer(
                job.id,
                Err(RpcError::new(
                    code::INTERNAL_ERROR,
                    "the session is closing",
                )),
            );
        }
    }

    pub(super) async fn run_session(
        self: Arc<Self>,
        key: String,
        mut jobs: mpsc::UnboundedReceiver<Job>,
        cancel: Arc<AtomicBool>,
    ) {
        let mut served: Option<Served> = None;
        while let Some(mut job) = jobs.recv().await {
            // Running from here on, so a cancel arriving now sets the flag; one that came
            // while the job was queued is in `cancelled`.
            if let Some(id) = &job.id {
                self.running.lock().insert(id.clone(), Arc::clone(&cancel));
                if self.cancelled.lock().remove(id) {
                    self.running.lock().remove(id);
                    self.answer(
                        job.id,
                        Err(RpcError::new(
                            code::REQUEST_CANCELLED,
                            "cancelled before it ran",
                        )),
                    );
                    continue;
                }
            }
            let r = self.call(&key, &mut served, &mut job, &cancel).await;
            // Cancelled while it ran: the answer says so, even when the call got to its end
            // (what it did is kept; a wait on the client ended at the cancel).
            let r = match r {
                Ok(_) if job.id.is_some() && cancel.load(Ordering::Relaxed) => Err(RpcError::new(
                    code::REQUEST_CANCELLED,
                    "cancelled while it ran",
                )),
                r => r,
            };
            if let Some(id) = &job.id {
                self.cancelled.lock().remove(id);
                // Removed before the flag is cleared: a cancel that comes later finds nothing
                // running and cannot stop the next call.
                self.running.lock().remove(id);
            }
            cancel.store(false, Ordering::Relaxed);
            self.answer(job.id, r);
        }
        if let Some(s) = served
            && let Err(e) = s.handle.close().await
        {
            tracing::warn!(session = %key, "closing the session failed: {e}");
        }
    }

    pub(super) async fn close_sessions(&self) {
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
        if tokio::time::timeout(CLOSE_GRACE, all).await.is_err() {
            tracing::warn!("sessions did not close within {CLOSE_GRACE:?}");
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
        let mut config = config_for(config_path.as_deref(), engine.as_deref()).map_err(internal)?;
        if let Some(isolation) = self.options.isolation {
            config.host.isolation = isolation;
        }
        let engine_path = config
            .engine_entry()
            .and_then(|(_, e)| e.path.as_deref().map(|p| config.resolve(p)));
        let watch = config.host.watch.enabled;
        // Taken before the load, so a save during the load is a change at the next call.
        let seen = engine_path.clone().map(EngineFile::new);
        let model =
            super::model::client_model(&self.peer, &p.capabilities, self.options.client_timeout);
        let host = Arc::new(
            Host::start_with_client_model(config, model)
                .await
                .map_err(internal)?,
        );
        let info = engine_info(&host);
        if let Some(client) = &p.client_info {
            tracing::info!(client = %client.name, version = %client.version, engine = %info.id, "initialized");
        }
        let hosted = Arc::new(Hosted {
            seen: tokio::sync::Mutex::new(seen),
            host,
            capabilities: p.capabilities,
            engine_path,
            watch,
        });
        let old = self.hosted.write().await.replace(hosted);
        if old.is_some() {
            // A second initialize: sessions of the old host close, new ones start on the new.
            self.close_sessions().await;
        }
        let result = InitializeResult {
            protocol_version: protocol::PROTOCOL_VERSION.into(),
            ctxhost_version: env!("CARGO_PKG_VERSION").into(),
            info,
        };
        serde_json::to_value(result).map_err(|e| internal(e.to_string()))
    }
}
