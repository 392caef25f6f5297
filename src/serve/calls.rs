//! The lifecycle calls: each OpenClaw method's params read, run on the session through its
//! engine-calling path (quarantine, fallback, validation), and the result answered; sessions
//! opened from (and kept under) the state directory.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde_json::{Value, json};

use crate::contract::client::{self, ClientCall as Call};
use crate::contract::{
    CommitStatus, CompactionTarget, ContextMode, MaintainReason, SubagentEndReason,
};
use crate::engine::api::ClientCompaction;
use crate::error::Result;
use crate::runtime::SessionSpec;
use crate::session::{CallExtras, ClientAssemble, Session};

use super::Hosted;
use super::delegate::PeerCompactor;
use super::mirror::Mirror;
use super::params::*;
use super::protocol::{RpcError, code, method};
use super::views::{self, View};

use super::server::{Job, Served, Server};
use super::state::{self, BridgeRecord};

impl Server {
    /// One lifecycle call for the session `key`.
    pub(super) async fn call(
        &self,
        key: &str,
        served: &mut Option<Served>,
        job: Job,
        cancel: &Arc<AtomicBool>,
    ) -> std::result::Result<Value, RpcError> {
        let Some(hosted) = self.hosted.read().await.clone() else {
            return Err(RpcError::new(code::NOT_INITIALIZED, "not initialized"));
        };
        if served.is_none() {
            *served = Some(self.open(&hosted, key, cancel).await.map_err(from_error)?);
        }
        let Some(s) = served.as_mut() else {
            return Err(internal("the session did not open"));
        };
        // The save of a call that made it in the call's own hand-off to the session's thread
        // (`Served::with_mirror_saved`).
        let mut early = Early::NotSaved;
        let cc = client_call(&job.call);
        let flush = matches!(job.call, Call::Dispose(_));
        let ends_turn = matches!(job.call, Call::CommitTurn(_) | Call::AfterTurn(_));
        s.assembled |= matches!(job.call, Call::Assemble(_));
        let result = match job.call {
            Call::Bootstrap(_) => to_value(
                on_session(&s.handle, move |s| {
                    s.with_extras(cc, |s| s.client_bootstrap())
                })
                .await,
            ),
            Call::Ingest(p) => {
                let heartbeat = p.is_heartbeat.unwrap_or(false);
                let n = match p.view {
                    Some(v) => {
                        let delta = delta_of(&hosted, "ingest", v)?;
                        synced(
                            s.with_mirror_saved(&mut early, move |s, m| {
                                s.with_extras(cc, |s| views::ingest_delta(s, m, delta, heartbeat))
                            })
                            .await,
                        )
                    }
                    None => {
                        let message = one_message(p.message.unwrap_or_default())?;
                        s.with_mirror_saved(&mut early, move |s, m| {
                            s.with_extras(cc, |s| views::ingest(s, m, vec![message], heartbeat))
                        })
                        .await
                    }
                };
                n.map(|n| s.answer(&hosted, json!({ "ingested": n > 0 })))
            }
            Call::IngestBatch(p) => {
                let heartbeat = p.is_heartbeat.unwrap_or(false);
                let n = match p.view {
                    Some(v) => {
                        let delta = delta_of(&hosted, "ingestBatch", v)?;
                        synced(
                            s.with_mirror_saved(&mut early, move |s, m| {
                                s.with_extras(cc, |s| views::ingest_delta(s, m, delta, heartbeat))
                            })
                            .await,
                        )
                    }
                    None => {
                        let messages = messages(p.messages, "messages");
                        s.with_mirror_saved(&mut early, move |s, m| {
                            s.with_extras(cc, |s| views::ingest(s, m, messages, heartbeat))
                        })
                        .await
                    }
                };
                n.map(|n| s.answer(&hosted, json!({ "ingestedCount": n })))
            }
            Call::Assemble(p) => {
                let request = ClientAssemble {
                    token_budget: p.token_budget,
                    prompt: p.prompt,
                    model: p.model,
                };
                let cc = CallExtras {
                    available_tools: p.available_tools,
                    ..cc
                };
                let refs = p.view.is_some();
                let view = match p.view {
                    Some(v) => View::Delta(
                        delta_of(&hosted, "assemble", v)?,
                        readable(p.tail.unwrap_or_default(), "assemble", "tail")?,
                    ),
                    None => View::Full(messages(p.messages, "messages")),
                };
                let r = s
                    .with_mirror_saved(&mut early, move |s, m| {
                        s.with_extras(cc, |s| {
                            let r = views::assemble(s, m, view, request)?;
                            Ok(r.map(|(a, tail)| {
                                let window = refs.then(|| views::window(m, &a.messages, &tail));
                                assembled(a, window)
                            }))
                        })
                    })
                    .await;
                synced(r).map(|v| s.answer(&hosted, v))
            }
            Call::Compact(p) => {
                let r = self.compact(&hosted, s, p, job.raw, cc, cancel).await;
                if let Ok(v) = &r
                    && let Some(next) = successor(v)
                {
                    // Later calls name the successor; they go on in this conversation.
                    self.names.continue_as(next, key);
                }
                r
            }
            Call::AfterTurn(p) => {
                let view = match p.view {
                    Some(v) => View::Delta(delta_of(&hosted, "afterTurn", v)?, Vec::new()),
                    None => View::Full(messages(p.messages, "messages")),
                };
                let pre =
                    usize::try_from(p.pre_prompt_message_count.unwrap_or(0)).unwrap_or(usize::MAX);
                let budget = p.token_budget;
                let heartbeat = p.is_heartbeat.unwrap_or(false);
                let r = s
                    .with_mirror(move |s, m| {
                        s.with_extras(cc, |s| {
                            views::after_turn(s, m, view, pre, budget, heartbeat)
                        })
                    })
                    .await;
                synced(r).map(|()| s.answer(&hosted, Value::Null))
            }
            Call::CommitTurn(p) => {
                let advancement = p.advancement_key.unwrap_or_default();
                if s.record.is_committed(&advancement) {
                    return Ok(json!({ "status": CommitStatus::Duplicate }));
                }
                let messages = messages(p.messages, "messages");
                let key = advancement.clone();
                let r = on_session(&s.handle, move |s| {
                    s.with_extras(cc, |s| s.client_commit_turn(&key, messages))
                })
                .await;
                flatten(r).map(|()| {
                    s.record.commit(&advancement);
                    json!({ "status": CommitStatus::Committed })
                })
            }
            Call::Maintain(p) => {
                let reason = p.reason.unwrap_or(MaintainReason::Turn);
                to_value(
                    on_session(&s.handle, move |s| {
                        s.with_extras(cc, |s| s.client_maintain(reason))
                    })
                    .await,
                )
            }
            Call::PrepareSubagentSpawn(p) => {
                let child = p.child_session_key.unwrap_or_default();
                let mode = p.context_mode.unwrap_or(ContextMode::Isolated);
                let ttl = p.ttl_ms;
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
            Call::RollbackSubagentSpawn(p) => {
                let handle = crate::engine::SpawnRollback(p.rollback_id.unwrap_or_default());
                let r = s
                    .handle
                    .with(move |s| s.subagent_spawn_failed(handle))
                    .await;
                flatten(r).map(|()| Value::Null)
            }
            Call::OnSubagentEnded(p) => {
                let child = p.child_session_key.unwrap_or_default();
                let reason = p.reason.unwrap_or(SubagentEndReason::Completed);
                state::forget_subagent(&self.options.state_dir, &child);
                let r = s
                    .handle
                    .with(move |s| s.subagent_ended(&child, reason))
                    .await;
                flatten(r).map(|()| Value::Null)
            }
            // OpenClaw disposes its engine object after every operation; the session and its
            // engine instance live on in ctxhost, so this only makes the state durable and
            // brings the state file up to it (after the save below).
            Call::Dispose(_) => Ok(Value::Null),
        };
        if matches!(early, Early::Lost) {
            // The session's thread did not give the session back (it panicked, or the session
            // was dropped): what it holds here is gone, so it reopens from its last commit.
            *served = None;
            return result;
        }
        if result
            .as_ref()
            .is_err_and(|e| e.code == code::SESSION_MOVED)
        {
            // Another process serves the session now: nothing more is written from here.
            *served = None;
            return result;
        }
        if ends_turn && std::mem::take(&mut s.assembled) {
            let judged = on_session(&s.handle, |s| s.end_client_turn()).await;
            if let Err(e) = flatten(judged) {
                tracing::warn!(session = key, "ending the turn failed: {}", e.message);
            }
        }
        // The engine's state and the record (mirror, turns committed) in one atomic write.
        let persisted = match std::mem::replace(&mut early, Early::NotSaved) {
            Early::Saved(p) => Ok(p),
            Early::NotSaved | Early::Lost => {
                s.record.view = Some(s.mirror.saved());
                let record = serde_json::to_value(&s.record).map_err(internal);
                s.record.view = None;
                let record = record?;
                on_session(&s.handle, move |s| {
                    let entries = s.transcript_len();
                    s.save_with_record(record, entries)
                })
                .await
            }
        };
        match persisted {
            Ok(Err(moved @ crate::error::Error::SessionMoved { .. })) => {
                // The commit was refused (its lease moved): the call's writes are not stored,
                // so the client is told, and the session is dropped rather than written again.
                tracing::warn!(session = key, "dropping the session: {moved}");
                *served = None;
                return Err(from_error(moved));
            }
            persisted => {
                if let Err(e) = flatten(persisted) {
                    tracing::warn!(
                        session = key,
                        "saving the session state failed: {}",
                        e.message
                    );
                }
            }
        }
        if flush && let Err(e) = flatten(s.handle.with(|s| s.flush_store()).await) {
            tracing::warn!(
                session = key,
                "bringing the state file up to the last commit failed: {}",
                e.message
            );
        }
        result
    }

    pub(super) async fn compact(
        &self,
        hosted: &Hosted,
        s: &mut Served,
        p: client::Compact,
        raw: Option<Value>,
        cc: CallExtras,
        cancel: &Arc<AtomicBool>,
    ) -> std::result::Result<Value, RpcError> {
        let raw = match raw {
            Some(v) => v,
            None => serde_json::to_value(&p).map_err(internal)?,
        };
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
                    raw,
                    self.options.client_timeout,
                    cancel,
                )
                .await;
        }
        let budget = p.token_budget;
        let target = p.compaction_target.unwrap_or(CompactionTarget::Budget);
        let instructions = p.custom_instructions;
        // A script's host.delegateCompaction(p) runs the client's compaction, when offered.
        let cc = CallExtras {
            compaction: hosted.capabilities.delegate_compaction.then(|| {
                ClientCompaction::new(Arc::new(PeerCompactor {
                    peer: self.peer.clone(),
                    params: raw,
                    timeout: self.options.client_timeout,
                    cancel: Arc::clone(cancel),
                    runtime: tokio::runtime::Handle::current(),
                }))
            }),
            ..cc
        };
        let r = s
            .handle
            .with(move |s| s.with_extras(cc, |s| s.client_compact(budget, target, instructions)))
            .await;
        to_value(r)
    }

    pub(super) async fn open(
        &self,
        hosted: &Hosted,
        key: &str,
        cancel: &Arc<AtomicBool>,
    ) -> Result<Served> {
        let spec = SessionSpec {
            cancel: Some(Arc::clone(cancel)),
            ..SessionSpec::new(key, "")
        };
        let handle = hosted
            .host
            .open_in(Arc::clone(&hosted.backend), spec)
            .await?;
        // Kept by an earlier ctxhost beside the state (JSONL store only).
        let dir = handle
            .file()
            .and_then(|f| f.parent().map(Path::to_path_buf));
        let name = key.to_owned();
        let (record, mirror) = handle
            .with(move |s| {
                let saved = s.saved_record().cloned();
                let mut record: BridgeRecord = match &saved {
                    Some(r) => serde_json::from_value(r.value.clone()).unwrap_or_else(|e| {
                        tracing::warn!(session = name, "ignoring an unreadable bridge record: {e}");
                        BridgeRecord::default()
                    }),
                    // Kept by an earlier ctxhost beside the state; the next save moves it in.
                    None => dir.as_deref().map(BridgeRecord::load).unwrap_or_default(),
                };
                let mirror =
                    Mirror::open(s, record.view.take(), record.mirror.take(), saved.as_ref());
                (record, mirror)
            })
            .await?;
        Ok(Served {
            handle,
            record,
            mirror,
            assembled: false,
        })
    }
}

impl Served {
    /// Runs `f` on the session (off the async threads) with the session's mirror of the
    /// client's transcript, and keeps the mirror `f` leaves (what it stored stays stored, so
    /// the mirror says so even when the call failed after).
    pub(super) async fn with_mirror<R: Send + 'static>(
        &mut self,
        f: impl FnOnce(&mut Session, &mut Mirror) -> Result<R> + Send + 'static,
    ) -> std::result::Result<R, RpcError> {
        let mut mirror = std::mem::take(&mut self.mirror);
        let (r, mirror) = on_session(&self.handle, move |s| {
            let r = f(s, &mut mirror);
            (r, mirror)
        })
        .await
        .map_err(from_error)?;
        self.mirror = mirror;
        r.map_err(from_error)
    }

    /// [`Served::with_mirror`], with the call's save ([`persist`]) in the same hand-off to
    /// the session's thread: one trip there and back instead of two. What the save did is
    /// left in `early` (not saved when `f` found the session moved to another process; lost
    /// when the session's thread did not give the session back).
    pub(super) async fn with_mirror_saved<R: Send + 'static>(
        &mut self,
        early: &mut Early,
        f: impl FnOnce(&mut Session, &mut Mirror) -> Result<R> + Send + 'static,
    ) -> std::result::Result<R, RpcError> {
        let mut mirror = std::mem::take(&mut self.mirror);
        let mut record = std::mem::take(&mut self.record);
        let out = on_session(&self.handle, move |s| {
            let r = f(s, &mut mirror);
            let saved = match &r {
                Err(crate::error::Error::SessionMoved { .. }) => None,
                _ => Some(persist(s, &mut record, &mirror)),
            };
            (r, saved, mirror, record)
        })
        .await;
        match out {
            Ok((r, saved, mirror, record)) => {
                self.mirror = mirror;
                self.record = record;
                if let Some(saved) = saved {
                    *early = Early::Saved(saved);
                }
                r.map_err(from_error)
            }
            Err(e) => {
                *early = Early::Lost;
                Err(from_error(e))
            }
        }
    }

    /// `result` as answered: over a delta connection, with ctxhost's view after the call
    /// (`{count, hash}`) in it (an object beside its keys; `null` becomes `{view}`).
    pub(super) fn answer(&self, hosted: &Hosted, result: Value) -> Value {
        if !hosted.capabilities.delta_views {
            return result;
        }
        let view = json!({
            "count": self.mirror.count(),
            "hash": self.mirror.end_hash().map(|h| format!("{h:016x}")),
        });
        match result {
            Value::Object(mut o) => {
                o.insert("view".into(), view);
                Value::Object(o)
            }
            _ => json!({ "view": view }),
        }
    }
}

/// Runs `f` on the session where it does not hold up the runtime: on this thread, inside
/// `block_in_place`, on a multi-thread runtime's worker (the runtime hands this worker's
/// other tasks to another thread, off the call's path; the call itself makes no thread
/// hand-off), else on a blocking thread ([`SessionHandle::with`]). A panic of `f` fails the
/// call as a blocking thread's would.
async fn on_session<R: Send + 'static>(
    handle: &crate::runtime::SessionHandle,
    f: impl FnOnce(&mut Session) -> R + Send + 'static,
) -> Result<R> {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if !multi_thread {
        return handle.with(f).await;
    }
    tokio::task::block_in_place(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handle.with_here(f)))
            .unwrap_or_else(|_| {
                Err(crate::error::Error::Task {
                    task: "session call",
                    message: "the session call panicked".into(),
                })
            })
    })
}

/// Whether a call's save was done in the call's own hand-off ([`Served::with_mirror_saved`]).
pub(super) enum Early {
    /// Not yet: `call` saves after the call.
    NotSaved,
    /// Done, with this outcome.
    Saved(Result<()>),
    /// The session did not come back from its thread: nothing is saved from here.
    Lost,
}

/// Commits the session's engine state with the record (the mirror as saved, the turns
/// committed) and the entries the call stored: one store commit.
fn persist(s: &mut Session, record: &mut BridgeRecord, mirror: &Mirror) -> Result<()> {
    record.view = Some(mirror.saved());
    let value = serde_json::to_value(&*record);
    record.view = None;
    let value = value.map_err(|e| crate::error::Error::Task {
        task: "save the bridge record",
        message: e.to_string(),
    })?;
    let entries = s.transcript_len();
    s.save_with_record(value, entries)
}

/// `assemble`'s answer: the window as messages (the full form) or as references to the
/// client's own ([`views::window`]).
fn assembled(a: crate::session::Assembly, window: Option<Vec<Value>>) -> Value {
    let mut out = match window {
        Some(w) => json!({ "window": w, "estimatedTokens": a.assembled_tokens }),
        None => json!({ "messages": a.messages, "estimatedTokens": a.assembled_tokens }),
    };
    if let Some(add) = a.system_prompt_addition {
        out["systemPromptAddition"] = Value::String(add);
    }
    out
}

/// The conversation a compaction says continues this one (`result.sessionTarget.sessionId`,
/// else `result.sessionId`, as OpenClaw's `resolveCompactionSuccessorTranscript` prefers).
fn successor(answer: &Value) -> Option<&str> {
    let result = answer.get("result")?;
    result
        .get("sessionTarget")
        .and_then(|t| t.get("sessionId"))
        .or_else(|| result.get("sessionId"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}
