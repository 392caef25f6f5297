//! `ctxhost serve`: an engine behind OpenClaw's context-engine contract, spoken as
//! newline-delimited JSON-RPC 2.0 over a byte stream (stdin/stdout in the binary), with
//! requests in both directions.
//!
//! The client (OpenClaw's `bridges/openclaw` plugin) calls `initialize` once, then every
//! lifecycle method under its OpenClaw name with OpenClaw's params, and `shutdown`. ctxhost may
//! ask the client `runtime.delegateCompaction` (a non-owning engine's compaction is the
//! client's own, since the client owns the transcript) and `llm.complete`.
//!
//! Each session (keyed by `sessionKey`, else `sessionId`) has one worker that serves its
//! requests in arrival order; different sessions run concurrently. Every call goes through the
//! session's engine-calling path ([`crate::session::Session::client_assemble`] and its
//! siblings): a failing script is quarantined and `legacy` answers, results are checked,
//! pairing is repaired and the window re-measured. The mirror of the client's transcript, the
//! engine's state and the `commitTurn` record live under a state directory ([`state`]), so a
//! new client process continues where the last left off. When `host.watch.enabled` (the
//! default), a change of the engine file is loaded before the next call; a version that fails
//! to load leaves the old one serving, and one that loads lifts the quarantine.
//!
//! ```no_run
//! # async fn demo() -> ctxhost::Result<()> {
//! use ctxhost::serve::{serve, ServeOptions};
//! let options = ServeOptions::new("/tmp/ctxhost-state".into());
//! serve(tokio::io::stdin(), tokio::io::stdout(), options).await
//! # }
//! ```

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::contract::{
    self, CommitStatus, CompactionTarget, ContextMode, MaintainReason, SubagentEndReason,
};
use crate::error::{Error, Result};
use crate::message::Message;
use crate::runtime::{Host, SessionHandle, SessionSpec};
use crate::session::{ClientAssemble, ClientMirror, Session};

pub mod protocol;
pub mod rpc;
pub mod state;

use protocol::{
    ClientCapabilities, Id, InitializeParams, InitializeResult, RpcError, code, method,
};
use rpc::{Line, LineReader, Peer};
use state::BridgeRecord;

/// The input buffer (1 MiB).
const INPUT_BUFFER: usize = 1 << 20;

/// How long `serve` waits for sessions to save and retire once the input closes.
const CLOSE_GRACE: Duration = Duration::from_millis(800);

/// How a server starts.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The engine file when `initialize` names none.
    pub engine: Option<PathBuf>,
    /// The ctxhost config file when `initialize` names none (default: the usual discovery).
    pub config: Option<PathBuf>,
    /// Where sessions are kept between client processes.
    pub state_dir: PathBuf,
    /// The longest line accepted ([`rpc::DEFAULT_MAX_LINE_BYTES`] by default).
    pub max_line_bytes: usize,
    /// How long a request to the client may take (default 120 s).
    pub client_timeout: Duration,
}

impl ServeOptions {
    /// Defaults, keeping sessions under `state_dir`.
    pub fn new(state_dir: PathBuf) -> Self {
        ServeOptions {
            engine: None,
            config: None,
            state_dir,
            max_line_bytes: rpc::DEFAULT_MAX_LINE_BYTES,
            client_timeout: Duration::from_secs(120),
        }
    }
}

/// Serves one client until its input closes or it asks `shutdown`; then every session's state
/// is saved and its engine instance retired (within `CLOSE_GRACE` of the end of input).
pub async fn serve<R, W>(input: R, output: W, options: ServeOptions) -> Result<()>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (peer, writer) = Peer::new(output);
    let server = Arc::new(Server {
        max_line: options.max_line_bytes,
        options,
        peer: peer.clone(),
        hosted: tokio::sync::RwLock::new(None),
        sessions: Mutex::new(HashMap::new()),
        cancelled: Mutex::new(HashSet::new()),
    });
    // A large buffer: tokio's stdin reads on the blocking pool, one round trip per fill, and a
    // 10,000-message `assemble` is a few MiB.
    let mut reader = LineReader::new(
        BufReader::with_capacity(INPUT_BUFFER, input),
        server.max_line,
    );
    loop {
        let line = match reader.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!("reading from the client failed: {e}");
                break;
            }
        };
        match line {
            Line::TooLong(n) => peer.respond_error(
                None,
                RpcError::new(
                    code::INVALID_REQUEST,
                    format!(
                        "line of {n} bytes refused: the cap is {} bytes",
                        server.max_line
                    ),
                ),
            ),
            Line::Text(bytes) => {
                if bytes.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                if Arc::clone(&server).on_frame(&bytes).await == Flow::Stop {
                    break;
                }
            }
        }
    }
    server.close_sessions().await;
    peer.fail_pending();
    drop(server);
    drop(peer);
    let _ = tokio::time::timeout(CLOSE_GRACE, writer).await;
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Go,
    Stop,
}

/// The engine host and what the client said at `initialize`.
struct Hosted {
    host: Arc<Host>,
    capabilities: ClientCapabilities,
    engine_path: Option<PathBuf>,
    watch: bool,
    /// The engine file's last seen modification stamp, under a lock so one reload runs at a time.
    seen: tokio::sync::Mutex<Option<Stamp>>,
}

/// The engine file's modification time, length and content hash: a save within the file
/// system's timestamp granularity still changes the hash.
type Stamp = (Option<SystemTime>, u64, u64);

struct Server {
    options: ServeOptions,
    max_line: usize,
    peer: Peer,
    hosted: tokio::sync::RwLock<Option<Arc<Hosted>>>,
    sessions: Mutex<HashMap<String, Worker>>,
    cancelled: Mutex<HashSet<Id>>,
}

/// One session's queue and the task that serves it.
struct Worker {
    jobs: mpsc::UnboundedSender<Job>,
    task: tokio::task::JoinHandle<()>,
}

struct Job {
    id: Option<Id>,
    method: String,
    params: Value,
}

/// A session open in this server.
struct Served {
    handle: SessionHandle,
    dir: PathBuf,
    record: BridgeRecord,
    /// The record as last written, so an unchanged record is not written again.
    saved: BridgeRecord,
}

impl Server {
    async fn on_frame(self: Arc<Self>, bytes: &[u8]) -> Flow {
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
                    self.cancelled.lock().insert(id);
                }
                Flow::Go
            }
            m if is_lifecycle(m) => {
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
                let Some(key) = session_key(&params) else {
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

    fn answer(&self, id: Option<Id>, r: std::result::Result<Value, RpcError>) {
        match (id, r) {
            (Some(id), Ok(v)) => self.peer.respond(id, v),
            (id, Err(e)) => self.peer.respond_error(id, e),
            (None, Ok(_)) => {}
        }
    }

    fn enqueue(self: &Arc<Self>, key: String, job: Job) {
        let mut sessions = self.sessions.lock();
        let worker = sessions.entry(key.clone()).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let server = Arc::clone(self);
            let task = tokio::spawn(async move { server.run_session(key, rx).await });
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

    async fn run_session(self: Arc<Self>, key: String, mut jobs: mpsc::UnboundedReceiver<Job>) {
        let mut served: Option<Served> = None;
        while let Some(mut job) = jobs.recv().await {
            if let Some(id) = &job.id
                && self.cancelled.lock().remove(id)
            {
                self.answer(
                    job.id,
                    Err(RpcError::new(
                        code::REQUEST_CANCELLED,
                        "cancelled before it ran",
                    )),
                );
                continue;
            }
            let r = self.call(&key, &mut served, &mut job).await;
            if let Some(id) = &job.id {
                self.cancelled.lock().remove(id);
            }
            self.answer(job.id, r);
        }
        if let Some(s) = served
            && let Err(e) = s.handle.close().await
        {
            tracing::warn!(session = %key, "closing the session failed: {e}");
        }
    }

    async fn close_sessions(&self) {
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

    async fn initialize(&self, params: Value) -> std::result::Result<Value, RpcError> {
        let p: InitializeParams = parse(params)?;
        let engine = p
            .engine
            .map(PathBuf::from)
            .or_else(|| self.options.engine.clone());
        let config_path = p
            .config
            .map(PathBuf::from)
            .or_else(|| self.options.config.clone());
        let config = config_for(config_path.as_deref(), engine.as_deref()).map_err(internal)?;
        let engine_path = config
            .engine_entry()
            .and_then(|(_, e)| e.path.as_deref().map(|p| config.resolve(p)));
        let watch = config.host.watch.enabled;
        let host = Arc::new(Host::start(config).await.map_err(internal)?);
        let info = engine_info(&host);
        if let Some(client) = &p.client_info {
            tracing::info!(client = %client.name, version = %client.version, engine = %info.id, "initialized");
        }
        let hosted = Arc::new(Hosted {
            seen: tokio::sync::Mutex::new(engine_path.as_deref().map(stamp)),
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

    /// One lifecycle call for the session `key`.
    async fn call(
        &self,
        key: &str,
        served: &mut Option<Served>,
        job: &mut Job,
    ) -> std::result::Result<Value, RpcError> {
        let Some(hosted) = self.hosted.read().await.clone() else {
            return Err(RpcError::new(code::NOT_INITIALIZED, "not initialized"));
        };
        hosted.refresh().await;
        if served.is_none() {
            *served = Some(self.open(&hosted.host, key).await.map_err(from_error)?);
        }
        let Some(s) = served.as_mut() else {
            return Err(internal("the session did not open"));
        };
        let p = &mut job.params;
        let result = match job.method.as_str() {
            "bootstrap" => to_value(s.handle.with(|s| s.client_bootstrap()).await),
            "ingest" | "ingestBatch" => {
                let batch = job.method == "ingestBatch";
                let messages = if batch {
                    messages(p, "messages")
                } else {
                    vec![one_message(p)?]
                };
                let heartbeat = flag(p, "isHeartbeat");
                s.with_mirror(move |s, m| s.client_ingest(m, messages, heartbeat))
                    .await
                    .map(|n| match batch {
                        true => json!({ "ingestedCount": n }),
                        false => json!({ "ingested": n > 0 }),
                    })
            }
            "assemble" => {
                let messages = messages(p, "messages");
                let request = ClientAssemble {
                    token_budget: number(p, "tokenBudget"),
                    prompt: text(p, "prompt"),
                    model: text(p, "model"),
                };
                s.with_mirror(move |s, m| s.client_assemble(m, messages, request))
                    .await
                    .map(|a| {
                        let mut out = json!({
                            "messages": a.messages,
                            "estimatedTokens": a.assembled_tokens,
                        });
                        if let Some(add) = a.system_prompt_addition {
                            out["systemPromptAddition"] = Value::String(add);
                        }
                        out
                    })
            }
            "compact" => self.compact(&hosted, s, p).await,
            "afterTurn" => {
                let messages = messages(p, "messages");
                let pre = number(p, "prePromptMessageCount").unwrap_or(0) as usize;
                let budget = number(p, "tokenBudget");
                let heartbeat = flag(p, "isHeartbeat");
                s.with_mirror(move |s, m| s.client_after_turn(m, messages, pre, budget, heartbeat))
                    .await
                    .map(|()| Value::Null)
            }
            "commitTurn" => {
                let Some(advancement) = text(p, "advancementKey") else {
                    return Err(RpcError::new(
                        code::INVALID_PARAMS,
                        "commitTurn needs an advancementKey",
                    ));
                };
                if s.record.is_committed(&advancement) {
                    return Ok(json!({ "status": CommitStatus::Duplicate }));
                }
                let messages = messages(p, "messages");
                let key = advancement.clone();
                let r = s
                    .handle
                    .with(move |s| s.client_commit_turn(&key, messages))
                    .await;
                flatten(r).map(|()| {
                    s.record.commit(&advancement);
                    json!({ "status": CommitStatus::Committed })
                })
            }
            "maintain" => {
                let reason = match text(p, "reason").as_deref() {
                    Some("bootstrap") => MaintainReason::Bootstrap,
                    Some("compaction") => MaintainReason::Compaction,
                    _ => MaintainReason::Turn,
                };
                to_value(s.handle.with(move |s| s.client_maintain(reason)).await)
            }
            "prepareSubagentSpawn" => {
                let child = text(p, "childSessionKey").unwrap_or_default();
                let mode = match text(p, "contextMode").as_deref() {
                    Some("fork") => ContextMode::Fork,
                    _ => ContextMode::Isolated,
                };
                let ttl = number(p, "ttlMs");
                let r = s
                    .handle
                    .with(move |s| s.prepare_subagent_spawn(&child, mode, ttl).map(|_| ()))
                    .await;
                flatten(r).map(|()| Value::Null)
            }
            "onSubagentEnded" => {
                let child = text(p, "childSessionKey").unwrap_or_default();
                let reason = match text(p, "reason").as_deref() {
                    Some("deleted") => SubagentEndReason::Deleted,
                    Some("swept") => SubagentEndReason::Swept,
                    Some("released") => SubagentEndReason::Released,
                    _ => SubagentEndReason::Completed,
                };
                let r = s
                    .handle
                    .with(move |s| s.subagent_ended(&child, reason))
                    .await;
                flatten(r).map(|()| Value::Null)
            }
            // OpenClaw disposes its engine object after every operation; the session and its
            // engine instance live on in ctxhost, so this only makes the state durable.
            "dispose" => Ok(Value::Null),
            other => Err(RpcError::new(
                code::METHOD_NOT_FOUND,
                format!("no method {other}"),
            )),
        };
        let persisted = s.handle.with(|s| s.persist_state()).await;
        if let Err(e) = flatten(persisted) {
            tracing::warn!(
                session = key,
                "saving the engine state failed: {}",
                e.message
            );
        }
        if s.record != s.saved {
            match s.record.save(&s.dir) {
                Ok(()) => s.saved = s.record.clone(),
                Err(e) => tracing::warn!(session = key, "saving the bridge record failed: {e}"),
            }
        }
        result
    }

    async fn compact(
        &self,
        hosted: &Hosted,
        s: &mut Served,
        p: &Value,
    ) -> std::result::Result<Value, RpcError> {
        let owns = s
            .handle
            .with(|s| s.active_info().owns_compaction())
            .await
            .map_err(from_error)?;
        if !owns && hosted.capabilities.delegate_compaction {
            // The client owns the transcript; a non-owning engine leaves compaction to it.
            return self
                .peer
                .request(
                    method::DELEGATE_COMPACTION,
                    p.clone(),
                    self.options.client_timeout,
                )
                .await;
        }
        let budget = number(p, "tokenBudget");
        let target = match text(p, "compactionTarget").as_deref() {
            Some("threshold") => CompactionTarget::Threshold,
            _ => CompactionTarget::Budget,
        };
        let instructions = text(p, "customInstructions");
        let r = s
            .handle
            .with(move |s| s.client_compact(budget, target, instructions))
            .await;
        to_value(r)
    }

    async fn open(&self, host: &Host, key: &str) -> Result<Served> {
        let dir = state::session_dir(&self.options.state_dir, key);
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io("create session directory", &dir, e))?;
        let file = dir.join("transcript.jsonl");
        let spec = SessionSpec::new(key, &file);
        let handle = if file.exists() {
            host.open_session(spec).await?
        } else {
            host.create_session(spec).await?
        };
        let record = BridgeRecord::load(&dir);
        Ok(Served {
            handle,
            dir,
            saved: record.clone(),
            record,
        })
    }
}

impl Served {
    /// Runs `f` on the session (off the async threads) with the session's mirror of the
    /// client's transcript, and keeps the mirror `f` leaves.
    async fn with_mirror<R: Send + 'static>(
        &mut self,
        f: impl FnOnce(&mut Session, &mut ClientMirror) -> Result<R> + Send + 'static,
    ) -> std::result::Result<R, RpcError> {
        let mut mirror = self.record.mirror.clone();
        let r = self
            .handle
            .with(move |s| f(s, &mut mirror).map(|v| (v, mirror)))
            .await;
        let (v, mirror) = flatten(r)?;
        self.record.mirror = mirror;
        Ok(v)
    }
}

impl Hosted {
    /// Loads the engine file again when it changed since the last call (with
    /// `host.watch.enabled`); a version that fails to load leaves the old one serving.
    async fn refresh(&self) {
        let (true, Some(path)) = (self.watch, self.engine_path.clone()) else {
            return;
        };
        let mut seen = self.seen.lock().await;
        let now = stamp(&path);
        if seen.as_ref() == Some(&now) {
            return;
        }
        *seen = Some(now);
        let host = Arc::clone(&self.host);
        match tokio::task::spawn_blocking(move || host.reload_engine()).await {
            Ok(Ok(generation)) => {
                tracing::info!(file = %path.display(), generation, "engine reloaded")
            }
            Ok(Err(e)) => {
                tracing::warn!(file = %path.display(), "kept the running engine; the new version failed: {e}")
            }
            Err(e) => tracing::error!("engine reload did not finish: {e}"),
        }
    }
}

/// The configuration `serve` runs with: the config file (or the usual discovery), with `engine`
/// (when given) in the context-engine slot under an id made from its file name.
pub fn config_for(config: Option<&Path>, engine: Option<&Path>) -> Result<Config> {
    let mut config = crate::config::discover(config)?;
    if let Some(engine) = engine {
        let id = engine_id_from_path(engine);
        config.plugins.slots.context_engine = Some(id.clone());
        let mut entry = config.plugins.entries.remove(&id).unwrap_or_default();
        entry.path = Some(std::path::absolute(engine).unwrap_or_else(|_| engine.to_path_buf()));
        entry.enabled = true;
        config.plugins.entries.insert(id, entry);
    }
    Ok(config)
}

/// The entry id for an engine file named on the command line: the file stem with `_` as `-`
/// (`recent_turns.lua` → `recent-turns`), which is what the example engines declare as
/// `info.id`.
pub fn engine_id_from_path(path: &Path) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("engine")
        .replace('_', "-")
}

/// The `info` the client sees: the engine's own (or `legacy`'s when it failed to load), with
/// the transcript semantics the host provides on its behalf.
fn engine_info(host: &Host) -> contract::EngineInfo {
    let mut info = match host.engine() {
        Some(Ok(f)) => f.info().clone(),
        Some(Err(e)) => {
            tracing::warn!("the engine failed to load; legacy answers: {e}");
            crate::engine::legacy::legacy_info()
        }
        None => crate::engine::legacy::legacy_info(),
    };
    info.transcript_semantics = Some(protocol::declared_semantics());
    info
}

fn stamp(path: &Path) -> Stamp {
    let modified = std::fs::metadata(path).ok().and_then(|m| m.modified().ok());
    match std::fs::read(path) {
        Ok(bytes) => {
            let mut h = crate::session::Fnv::new();
            h.write(&bytes);
            (modified, bytes.len() as u64, h.0)
        }
        Err(_) => (modified, 0, 0),
    }
}

fn is_lifecycle(m: &str) -> bool {
    matches!(
        m,
        "bootstrap"
            | "ingest"
            | "ingestBatch"
            | "assemble"
            | "compact"
            | "afterTurn"
            | "commitTurn"
            | "maintain"
            | "prepareSubagentSpawn"
            | "onSubagentEnded"
            | "dispose"
    )
}

fn session_key(p: &Value) -> Option<String> {
    ["sessionKey", "sessionId", "parentSessionKey"]
        .iter()
        .find_map(|k| text(p, k).filter(|s| !s.is_empty()))
}

fn text(p: &Value, key: &str) -> Option<String> {
    p.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn number(p: &Value, key: &str) -> Option<u64> {
    p.get(key)
        .and_then(Value::as_f64)
        .and_then(|n| contract::to_count(n.floor()).ok())
}

fn flag(p: &Value, key: &str) -> bool {
    p.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// The messages under `key` (taken out of the params, not copied); a message ctxhost cannot
/// read is left out and reported.
fn messages(p: &mut Value, key: &str) -> Vec<Message> {
    let Some(Value::Array(list)) = p.get_mut(key).map(Value::take) else {
        return Vec::new();
    };
    list.into_iter()
        .enumerate()
        .filter_map(|(i, v)| match serde_json::from_value::<Message>(v) {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!("{key}[{i}] is not a message ctxhost can read, left out: {e}");
                None
            }
        })
        .collect()
}

fn one_message(p: &mut Value) -> std::result::Result<Message, RpcError> {
    let v = p.get_mut("message").map(Value::take).unwrap_or(Value::Null);
    serde_json::from_value(v)
        .map_err(|e| RpcError::new(code::INVALID_PARAMS, format!("message: {e}")))
}

fn parse<T: serde::de::DeserializeOwned>(p: Value) -> std::result::Result<T, RpcError> {
    let p = if p.is_null() { json!({}) } else { p };
    serde_json::from_value(p).map_err(|e| RpcError::new(code::INVALID_PARAMS, e.to_string()))
}

fn internal(e: impl std::fmt::Display) -> RpcError {
    RpcError::new(code::INTERNAL_ERROR, e.to_string())
}

/// A library error as the client sees it: an engine error only reaches here under
/// `failurePolicy: "strict"`, a failed host requirement or a cancellation.
fn from_error(e: Error) -> RpcError {
    match e {
        Error::Engine(e) => RpcError::new(code::ENGINE_ERROR, e.to_string()),
        other => internal(other),
    }
}

fn flatten<T>(r: Result<Result<T>>) -> std::result::Result<T, RpcError> {
    r.and_then(|r| r).map_err(from_error)
}

fn to_value<T: serde::Serialize>(r: Result<Result<T>>) -> std::result::Result<Value, RpcError> {
    flatten(r).and_then(|v| serde_json::to_value(v).map_err(internal))
}
