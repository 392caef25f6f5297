//! The lifecycle calls: each OpenClaw method's params read, run on the session through its
//! engine-calling path (quarantine, fallback, validation), and the result answered; sessions
//! opened from (and kept under) the state directory.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde_json::{Value, json};

use crate::contract::{
    CommitStatus, CompactionTarget, ContextMode, MaintainReason, Method, SubagentEndReason,
};
use crate::error::{Error, Result};
use crate::host::ClientCompaction;
use crate::runtime::{Host, SessionSpec};
use crate::session::{ClientAssemble, ClientCall, ClientMirror, Session};

use super::Hosted;
use super::delegate::PeerCompactor;
use super::params::*;
use super::protocol::{RpcError, code, method};
use super::server::{Job, Served, Server};
use super::state::{self, BridgeRecord};

impl Server {
    /// One lifecycle call for the session `key`.
    pub(super) async fn call(
        &self,
        key: &str,
        served: &mut Option<Served>,
        job: &mut Job,
        cancel: &Arc<AtomicBool>,
    ) -> std::result::Result<Value, RpcError> {
        let Some(hosted) = self.hosted.read().await.clone() else {
            return Err(RpcError::new(code::NOT_INITIALIZED, "not initialized"));
        };
        hosted.refresh().await;
        if served.is_none() {
            *served = Some(
                self.open(&hosted.host, key, cancel)
                    .await
                    .map_err(from_error)?,
            );
        }
        let Some(s) = served.as_mut() else {
            return Err(internal("the session did not open"));
        };
        let p = &mut job.params;
        let lifecycle = match job.method.as_str() {
            method::ROLLBACK_SUBAGENT_SPAWN => Some(Method::PrepareSubagentSpawn),
            m => Method::from_name(m),
        };
        let Some(lifecycle) = lifecycle else {
            return Err(RpcError::new(
                code::METHOD_NOT_FOUND,
                format!("no method {}", job.method),
            ));
        };
        let cc = client_call(lifecycle, p);
        let result = match job.method.as_str() {
            "bootstrap" => to_value(
                s.handle
                    .with(move |s| s.serve_client(cc, |s| s.client_bootstrap()))
                    .await,
            ),
            "ingest" | "ingestBatch" => {
                let batch = job.method == "ingestBatch";
                let messages = if batch {
                    messages(p, "messages")
                } else {
                    vec![one_message(p)?]
                };
                let heartbeat = flag(p, "isHeartbeat");
                s.with_mirror(move |s, m| {
                    s.serve_client(cc, |s| s.client_ingest(m, messages, heartbeat))
                })
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
                let cc = ClientCall {
                    available_tools: tools(p),
                    ..cc
                };
                s.with_mirror(move |s, m| {
                    s.serve_client(cc, |s| s.client_assemble(m, messages, request))
                })
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
            "compact" => self.compact(&hosted, s, p, cc, cancel).await,
            "afterTurn" => {
                let messages = messages(p, "messages");
                let pre = number(p, "prePromptMessageCount").unwrap_or(0) as usize;
                let budget = number(p, "tokenBudget");
                let heartbeat = flag(p, "isHeartbeat");
                s.with_mirror(move |s, m| {
                    s.serve_client(cc, |s| {
                        s.client_after_turn(m, messages, pre, budget, heartbeat)
                    })
                })
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
                    .with(move |s| s.serve_client(cc, |s| s.client_commit_turn(&key, messages)))
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
                to_value(
                    s.handle
                        .with(move |s| s.serve_client(cc, |s| s.client_maintain(reason)))
                        .await,
                )
            }
            "prepareSubagentSpawn" => {
                let child = text(p, "childSessionKey").unwrap_or_default();
                let mode = match text(p, "contextMode").as_deref() {
                    Some("fork") => ContextMode::Fork,
                    _ => ContextMode::Isolated,
                };
                let ttl = number(p, "ttlMs");
                if let Err(e) = state::note_subagent(&self.options.state_dir, &child, key) {
                    tracing::warn!(session = key, "cannot note the subagent {child}: {e}");
                }
                let r = s
                    .handle
                    .with(move |s| s.prepare_subagent_spawn(&child, mode, ttl))
                    .await;
                // The engine's rollback stays here; the client gets an id to ask for it.
                flatten(r).map(|h| match h {
                    Some(h) => json!({ "rollbackId": h.0 }),
                    None => Value::Null,
                })
            }
            method::ROLLBACK_SUBAGENT_SPAWN => {
                let Some(id) = number(p, "rollbackId") else {
                    return Err(RpcError::new(
                        code::INVALID_PARAMS,
                        "rollbackSubagentSpawn needs the rollbackId prepareSubagentSpawn answered",
                    ));
                };
                let handle = crate::engine::SpawnRollback(id);
                let r = s
                    .handle
                    .with(move |s| s.subagent_spawn_failed(handle))
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
                state::forget_subagent(&self.options.state_dir, &child);
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
        // The engine's state and the record (mirror, turns committed) in one atomic write.
        let record = serde_json::to_value(&s.record).map_err(internal)?;
        let persisted = s.handle.with(move |s| s.persist_state(record)).await;
        if let Err(e) = flatten(persisted) {
            tracing::warn!(
                session = key,
                "saving the session state failed: {}",
                e.message
            );
        }
        result
    }

    pub(super) async fn compact(
        &self,
        hosted: &Hosted,
        s: &mut Served,
        p: &Value,
        cc: ClientCall,
        cancel: &Arc<AtomicBool>,
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
                .request_until_cancelled(
                    method::DELEGATE_COMPACTION,
                    p.clone(),
                    self.options.client_timeout,
                    cancel,
                )
                .await;
        }
        let budget = number(p, "tokenBudget");
        let target = match text(p, "compactionTarget").as_deref() {
            Some("threshold") => CompactionTarget::Threshold,
            _ => CompactionTarget::Budget,
        };
        let instructions = text(p, "customInstructions");
        // A script's host.delegateCompaction(p) runs the client's compaction, when offered.
        let cc = ClientCall {
            compaction: hosted.capabilities.delegate_compaction.then(|| {
                ClientCompaction::new(Arc::new(PeerCompactor {
                    peer: self.peer.clone(),
                    params: p.clone(),
                    timeout: self.options.client_timeout,
                    cancel: Arc::clone(cancel),
                    runtime: tokio::runtime::Handle::current(),
                }))
            }),
            ..cc
        };
        let r = s
            .handle
            .with(move |s| s.serve_client(cc, |s| s.client_compact(budget, target, instructions)))
            .await;
        to_value(r)
    }

    pub(super) async fn open(
        &self,
        host: &Host,
        key: &str,
        cancel: &Arc<AtomicBool>,
    ) -> Result<Served> {
        let dir = state::session_dir(&self.options.state_dir, key);
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io("create session directory", &dir, e))?;
        let file = dir.join("transcript.jsonl");
        let spec = SessionSpec {
            cancel: Some(Arc::clone(cancel)),
            ..SessionSpec::new(key, &file)
        };
        let handle = if file.exists() {
            host.open_session(spec).await?
        } else {
            host.create_session(spec).await?
        };
        let saved = handle.with(|s| s.client_record().cloned()).await?;
        let record = match saved {
            Some(v) => serde_json::from_value(v).unwrap_or_else(|e| {
                tracing::warn!(session = key, "ignoring an unreadable bridge record: {e}");
                BridgeRecord::default()
            }),
            // Kept by an earlier ctxhost beside the state; the next save moves it in.
            None => BridgeRecord::load(&dir),
        };
        Ok(Served { handle, record })
    }
}

impl Served {
    /// Runs `f` on the session (off the async threads) with the session's mirror of the
    /// client's transcript, and keeps the mirror `f` leaves.
    pub(super) async fn with_mirror<R: Send + 'static>(
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
