//! Sessions whose transcript a client owns (`ctxhost serve`): the small primitives a client's
//! calls are built from, each going through the very same engine-calling path as the turn
//! driver (quarantine, fallback to `legacy`, result checks, pairing repair, re-measuring), so a
//! client's call keeps every promise a driven turn keeps.
//!
//! What the client's transcript looks like and which of its messages are new is the caller's
//! business (`serve` keeps a mirror of it); the session offers: messages stored and ingested
//! ([`Session::store_messages`], [`Session::ingest_stored`]), an assembly over the context plus
//! a tail for that call only ([`Session::assemble_with_tail`]), the caller's host params for
//! the engine calls of one operation ([`Session::with_extras`]), and the engine's state saved
//! together with a record of the caller's own ([`Session::save_with_record`]).

use std::sync::Arc;

use serde_json::Value;

use crate::contract::message::Message;
use crate::contract::{
    self, BootstrapResult, CompactResult, CompactionTarget, MaintainReason, MaintainResult, Method,
    Operation,
};
use crate::engine::api::{ClientCompaction, ClientParams};
use crate::error::Result;

use super::{Assembly, Session};

/// What a caller passes with the engine calls of one operation beyond what the session makes
/// itself (a client's host params, its tools, its own compaction).
#[derive(Clone, Debug)]
pub struct CallExtras {
    /// The method the client called.
    pub method: Method,
    /// Its host params as the client sent them (`runtimeContext`, `sessionTarget`).
    pub host_params: serde_json::Map<String, serde_json::Value>,
    /// `assemble`'s tool names available this turn.
    pub available_tools: Option<Vec<String>>,
    /// The client's own compaction, for a script's `host.delegateCompaction(p)`.
    pub compaction: Option<ClientCompaction>,
}

/// The extras of the operation in progress, as the engine calls read them.
#[derive(Debug)]
pub(super) struct Extras {
    pub(super) params: Arc<ClientParams>,
    pub(super) available_tools: Option<Vec<String>>,
    pub(super) compaction: Option<ClientCompaction>,
}

/// A record a caller keeps with the session's state (committed with it), and
/// how many transcript entries the caller said it accounts for.
#[derive(Clone, Debug, PartialEq)]
pub struct SavedRecord {
    /// The caller's record, as it gave it.
    pub value: Value,
    /// Transcript entries the record accounts for (`None` in a state an older ctxhost wrote
    /// without the count).
    pub entries: Option<usize>,
}

/// What the client asked `assemble` for, beyond its messages.
#[derive(Clone, Debug, Default)]
pub struct ClientAssemble {
    /// The budget the client gives the window (the session's own when `None`).
    pub token_budget: Option<u64>,
    /// The current turn's prompt (not yet in the messages).
    pub prompt: Option<String>,
    /// The model id the client will call.
    pub model: Option<String>,
}

impl Session {
    /// `bootstrap` from a client: runs the engine's `bootstrap` once per engine instance (the
    /// client calls it at every operation); later calls answer without calling the engine.
    pub fn client_bootstrap(&mut self) -> Result<BootstrapResult> {
        self.sync_engine()?;
        if self.bootstrapped {
            return Ok(BootstrapResult {
                bootstrapped: true,
                imported_messages: None,
                reason: Some("already bootstrapped by this engine instance".into()),
            });
        }
        self.bootstrapped = true;
        if !self.defines(Method::Bootstrap) {
            return Ok(BootstrapResult {
                bootstrapped: false,
                imported_messages: None,
                reason: Some("the engine defines no bootstrap".into()),
            });
        }
        self.run_bootstrap()
    }

    /// At a call boundary: follows a reload of the engine (the old instance's state saved, a
    /// new instance made with it restored) before anything else of the call runs.
    pub fn follow_reload(&mut self) -> Result<()> {
        self.sync_engine()
    }

    /// Fails closed when the engine's `hostRequirements` for `op` cannot be met.
    pub fn require(&self, op: Operation) -> Result<()> {
        self.check_requirements(op)
    }

    /// Appends `messages` to the transcript and the context, in order; returns them as stored
    /// (with the session's entry ids). Nothing is ingested: see [`Session::ingest_stored`].
    pub fn store_messages(&mut self, messages: Vec<Message>) -> Result<Vec<Arc<Message>>> {
        self.append(messages)
    }

    /// Ingests messages already stored (`ingestBatch` when the engine defines it, else one
    /// `ingest` each).
    pub fn ingest_stored(&mut self, stored: &[Arc<Message>], is_heartbeat: bool) -> Result<()> {
        self.ingest_new(stored, is_heartbeat)
    }

    /// The transcript's entries from the `n`th on (summaries included), in order.
    pub fn stored_since(&self, n: usize) -> Vec<Arc<Message>> {
        self.recall.since(n)
    }

    /// Derives the context again from what it holds: a summary the client wrote into its own
    /// transcript now stands for everything before it, as on a reopen.
    pub fn adopt_summaries(&mut self) {
        let derived = super::derive_context(&self.context);
        self.set_context(derived);
    }

    /// Assembles (repair, re-measure and overflow recovery exactly like a driven turn) over the
    /// context followed by `tail`: messages that are part of this call's context only (a tool
    /// loop's calls and results after the window the client echoed back), never stored.
    pub fn assemble_with_tail(
        &mut self,
        tail: Vec<Message>,
        request: ClientAssemble,
    ) -> Result<Assembly> {
        if let Some(model) = request.model {
            self.setup.model = Some(model);
        }
        let budget = self.budget_or_default(request.token_budget);
        if tail.is_empty() {
            return self.assemble_within_budget(budget, request.prompt);
        }
        let saved = Arc::clone(&self.context);
        let saved_at = self.summary_at;
        let tail: Vec<Arc<Message>> = tail.into_iter().map(Arc::new).collect();
        let mut transient = saved.as_ref().clone();
        transient.extend(tail.iter().cloned());
        self.summary_at = crate::services::guarantee::newest_summary_at(&tail)
            .map(|i| saved.len() + i)
            .or(saved_at);
        let saved_generation = self.context_generation;
        self.context = Arc::new(transient);
        self.context_generation = self.new_generation();
        let before = Arc::clone(&self.context);
        let r = self.assemble_within_budget(budget, request.prompt);
        if Arc::ptr_eq(&self.context, &before) {
            // Nothing changed the context during the call: it is the one from before again.
            self.context = saved;
            self.summary_at = saved_at;
            self.context_generation = saved_generation;
        } else {
            // A compaction replaced the context during the call: keep it, without the tail.
            let kept: Vec<Arc<Message>> = self
                .context
                .iter()
                .filter(|m| !tail.iter().any(|t| Arc::ptr_eq(t, m)))
                .cloned()
                .collect();
            self.set_context(kept);
        }
        r
    }

    /// `compact` from a client: the engine's `compact` (falling back like any call), its
    /// summary applied to the session so later windows are built from it. With
    /// `CallExtras::compaction`, a script's `host.delegateCompaction(p)` runs the client's
    /// own compaction instead of the built-in one; the client then applies that result to the
    /// transcript it owns, so the session leaves it alone and picks the client's summary up
    /// from its next view.
    pub fn client_compact(
        &mut self,
        token_budget: Option<u64>,
        target: CompactionTarget,
        instructions: Option<String>,
    ) -> Result<CompactResult> {
        self.sync_engine()?;
        self.check_requirements(Operation::ManualCompact)?;
        let budget = self.budget_or_default(token_budget);
        self.engine_compact(budget, target, instructions, None)
    }

    /// Runs `f` (a client's operation) with `extras`: every engine call it makes gets the
    /// client's host params in `p`, `assemble` its `availableTools`, and a script's
    /// `host.delegateCompaction(p)` runs the client's compaction when it offers one.
    pub fn with_extras<R>(&mut self, extras: CallExtras, f: impl FnOnce(&mut Session) -> R) -> R {
        self.extras = Some(Extras {
            params: Arc::new(ClientParams {
                method: extras.method,
                fields: extras.host_params,
            }),
            available_tools: extras.available_tools,
            compaction: extras.compaction,
        });
        let r = f(self);
        self.extras = None;
        r
    }

    /// The client's budget, or the session's own when the client gave none.
    fn budget_or_default(&self, token_budget: Option<u64>) -> u64 {
        token_budget
            .filter(|b| *b > 0)
            .unwrap_or_else(|| self.token_budget())
    }

    /// `afterTurn` from a client, once its snapshot is stored: the engine's `afterTurn` if it
    /// defines one.
    pub fn client_after_turn(
        &mut self,
        pre_prompt_message_count: usize,
        token_budget: Option<u64>,
        is_heartbeat: bool,
    ) -> Result<()> {
        if !self.defines(Method::AfterTurn) {
            return Ok(());
        }
        let budget = self.budget_or_default(token_budget);
        self.run_after_turn(pre_prompt_message_count, budget, is_heartbeat)
    }

    /// `commitTurn` from a client: the engine's `commitTurn` with the client's turn messages.
    /// The caller keeps the idempotency record and calls this once per `advancementKey`.
    pub fn client_commit_turn(
        &mut self,
        advancement_key: &str,
        messages: Vec<Message>,
    ) -> Result<()> {
        self.sync_engine()?;
        if !self.defines(Method::CommitTurn) {
            return Ok(());
        }
        let messages = messages.into_iter().map(Arc::new).collect();
        self.run_commit_turn(advancement_key.to_owned(), messages)
    }

    /// Ends a client's turn (the serving side decides when: `commitTurn` or `afterTurn` after
    /// an `assemble`): the engine time of the turn's calls is held against `host.turnBudget`
    /// as a driven turn's is, so a slow engine is reported (or quarantined) under `serve` too.
    pub fn end_client_turn(&mut self) -> Result<()> {
        self.turn_ended = true;
        let r = self.judge_turn_time();
        self.turn_engine_time = std::time::Duration::ZERO;
        self.stats = super::TurnStats::default();
        r
    }

    /// `maintain` from a client: the engine's result, or a no-change answer when it defines none.
    pub fn client_maintain(&mut self, reason: MaintainReason) -> Result<MaintainResult> {
        self.sync_engine()?;
        let nothing = MaintainResult {
            reason: Some("the engine defines no maintain".into()),
            ..MaintainResult::default()
        };
        if !self.defines(Method::Maintain) {
            return Ok(nothing);
        }
        let r = self.run_maintain(reason)?;
        Ok(r.unwrap_or(MaintainResult {
            reason: None,
            ..nothing
        }))
    }

    /// Commits what the call stored with the engine's per-session state now (a client process
    /// may end at any call) and `record` (what the caller keeps: a client's mirror, the turns
    /// committed), so a crash leaves all three as they were before or as they are now.
    /// `entries` is how many transcript entries the record accounts for (saved with it).
    pub fn save_with_record(&mut self, record: Value, entries: usize) -> Result<()> {
        self.record = Some(SavedRecord {
            value: record,
            entries: Some(entries),
        });
        self.save_state()
    }

    /// The record [`Session::save_with_record`] last saved with this session (or the one its
    /// saved state held when it opened), if any.
    pub fn saved_record(&self) -> Option<&SavedRecord> {
        self.record.as_ref()
    }

    /// The `info` of the engine answering now (`legacy`'s after a quarantine).
    pub fn active_info(&self) -> contract::EngineInfo {
        match &self.engine {
            Some(e) => e.info().clone(),
            None => crate::engine::legacy::legacy_info(),
        }
    }
}
