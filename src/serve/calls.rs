//! The lifecycle calls: each OpenClaw method's params read, run on the session through its
//! engine-calling path (quarantine, fallback, validation), and the result answered; sessions
//! opened from (and kept under) the state directory.

use serde_json::{Value, json};

use crate::contract::{
    CommitStatus, CompactionTarget, ContextMode, MaintainReason, SubagentEndReason,
};
use crate::error::{Error, Result};
use crate::runtime::{Host, SessionSpec};
use crate::session::{ClientAssemble, ClientMirror, Session};

use super::Hosted;
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

    pub(super) async fn compact(
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

    pub(super) async fn open(&self, host: &Host, key: &str) -> Result<Served> {
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
