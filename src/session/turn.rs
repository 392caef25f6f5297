//! The turn driver: the contract's moments of a turn (§4) — bootstrap once, ingest, auto-compact
//! a non-owning engine's overflow, assemble with overflow recovery, the tool loop, and after the
//! reply ingest, `afterTurn`, `commitTurn`, `maintain` — plus `/compact` and subagents.

use std::sync::Arc;

use crate::config::SlowEnginePolicy;
use crate::contract::message::Message;
use crate::contract::{
    AfterTurnParams, AssembleParams, AssembleResult, BootstrapParams, BootstrapResult,
    CommitTurnParams, CompactResult, CompactionTarget, ContextMode, HostParam, IngestBatchParams,
    IngestParams, MaintainParams, MaintainReason, MaintainResult, Method, Operation,
    PromptAuthority, SubagentEndReason, SubagentEndedParams, SubagentSpawnParams,
};
use crate::engine::SpawnRollback;
use crate::engine::legacy::LEGACY_ID;
use crate::error::Result;
use crate::error::{EngineError, EngineErrorKind, Op};
use crate::services::{guarantee, pairing};

use super::compact::invalid_for;
use super::{Assembly, Session, TurnInput, TurnStats};

impl Session {
    /// Starts a turn: bootstrap (once), store and ingest the user message, auto-compact when a
    /// non-owning engine's context overflows, then `assemble` with overflow recovery.
    pub fn begin_turn(&mut self, input: TurnInput) -> Result<Assembly> {
        let r = self.start_turn(input);
        self.after_call(r)
    }

    fn start_turn(&mut self, input: TurnInput) -> Result<Assembly> {
        self.sync_engine()?;
        self.stats = TurnStats::default();
        self.turn_engine_time = std::time::Duration::ZERO;
        self.turn_index += 1;
        self.services.summarizer.begin_turn();
        self.services.model.begin_turn();
        let _turn = self.turn_span().entered();
        self.check_requirements(Operation::AgentRun)?;
        if !self.bootstrapped {
            self.bootstrap()?;
        }
        self.pre_prompt_count = self.context.len();
        self.turn_start = self.context.len();
        let prompt = input.user.text();
        let stored = self.append(vec![input.user])?;
        self.request = stored.first().cloned();
        self.ingest_new(&stored, input.is_heartbeat)?;

        let budget = self.token_budget();
        if !self.active_owns_compaction() {
            let tokens = self.context_tokens();
            if tokens > budget {
                self.auto_compact(budget)?;
            }
        }
        self.assemble_within_budget(budget, Some(prompt))
    }

    /// The tool loop: the model answered with tool calls and the tools answered; store and
    /// ingest those messages, auto-compact if a non-owning engine's context overflows, and
    /// `assemble` again for the next model call of the same turn.
    pub fn continue_turn(&mut self, messages: Vec<Message>) -> Result<Assembly> {
        let r = self.tool_loop(messages);
        self.after_call(r)
    }

    fn tool_loop(&mut self, messages: Vec<Message>) -> Result<Assembly> {
        let _turn = self.turn_span().entered();
        let stored = self.append(messages)?;
        self.ingest_new(&stored, false)?;
        let budget = self.token_budget();
        if !self.active_owns_compaction() && self.context_tokens() > budget {
            self.auto_compact(budget)?;
        }
        self.assemble_within_budget(budget, None)
    }

    /// Ends a turn: store the model's messages, `ingestBatch` (or `ingest` each) **and**
    /// `afterTurn`, `commitTurn`, then `maintain`, and commit the turn's entries with the
    /// engine's state.
    pub fn end_turn(&mut self, replies: Vec<Message>) -> Result<TurnStats> {
        match self.finish_turn(replies) {
            Ok(stats) => Ok(stats),
            Err(e) => self.after_call(Err(e)),
        }
    }

    fn finish_turn(&mut self, replies: Vec<Message>) -> Result<TurnStats> {
        let _turn = self.turn_span().entered();
        let stored = self.append(replies)?;
        self.ingest_new(&stored, false)?;
        let budget = self.token_budget();
        if self.defines(Method::AfterTurn) {
            self.run_after_turn(self.pre_prompt_count, budget, false)?;
        }
        if self.defines(Method::CommitTurn) {
            let turn: Vec<Arc<Message>> =
                self.context[self.turn_start.min(self.context.len())..].to_vec();
            let key = format!("{}:{}", self.id, self.turn_index);
            self.run_commit_turn(key, turn)?;
        }
        self.maintain(MaintainReason::Turn)?;
        self.turn_ended = true;
        self.save_state()?;
        self.judge_turn_time()?;
        Ok(std::mem::take(&mut self.stats))
    }

    /// Holds the turn's engine time against `host.turnBudget`: a slow turn is reported, and
    /// under `onExceed: "quarantine"` enough slow turns in a row quarantine the engine.
    pub(super) fn judge_turn_time(&mut self) -> Result<()> {
        let budget = &self.setup.turn_budget;
        let spent = self.turn_engine_time;
        self.stats.engine_ms = spent.as_secs_f64() * 1000.0;
        if spent.as_millis() <= u128::from(budget.engine_ms) || self.engine.is_none() {
            self.slow_strikes = 0;
            return Ok(());
        }
        self.stats.slow = true;
        self.slow_strikes += 1;
        tracing::warn!(
            engine = %self.engine_id,
            session = &*self.id,
            "the engine took {:.0} ms of this turn (budget {} ms; {} slow turns in a row)",
            self.stats.engine_ms,
            budget.engine_ms,
            self.slow_strikes
        );
        if budget.on_exceed == SlowEnginePolicy::Quarantine
            && self.slow_strikes >= budget.strikes.max(1)
        {
            let e = EngineError::new(
                Op::Turn,
                self.engine_id.clone(),
                EngineErrorKind::Limit,
                format!(
                    "the engine took more than its turn budget of {} ms in {} turns in a row (last: {:.0} ms)",
                    budget.engine_ms, self.slow_strikes, self.stats.engine_ms
                ),
            );
            self.slow_strikes = 0;
            self.on_failure(e)?;
        }
        Ok(())
    }

    /// `/compact`: the engine's `compact` with `force` and target `threshold`.
    pub fn compact_now(&mut self, instructions: Option<String>) -> Result<CompactResult> {
        let r = self.sync_engine().and_then(|()| {
            self.check_requirements(Operation::ManualCompact)?;
            let budget = self.token_budget();
            self.engine_compact(budget, CompactionTarget::Threshold, instructions, None)
        });
        self.after_call(r)
    }

    /// What happened in the turn so far.
    pub fn stats(&self) -> &TurnStats {
        &self.stats
    }

    /// Prepares a subagent spawn; returns a handle for [`Session::subagent_spawn_failed`].
    pub fn prepare_subagent_spawn(
        &mut self,
        child_session_key: &str,
        context_mode: ContextMode,
        ttl_ms: Option<u64>,
    ) -> Result<Option<SpawnRollback>> {
        self.check_requirements(Operation::SubagentSpawn)?;
        if !self.defines(Method::PrepareSubagentSpawn) {
            return Ok(None);
        }
        let params = SubagentSpawnParams {
            session_id: self.id.to_string(),
            parent_session_key: self.id.to_string(),
            child_session_key: child_session_key.to_owned(),
            context_mode,
            ttl_ms,
        };
        let budget = self.token_budget();
        let handle = self.run(Method::PrepareSubagentSpawn, budget, |e, call| {
            e.prepare_subagent_spawn(call, &params)
        })?;
        if let Some(h) = handle {
            self.rollbacks.push(h);
        }
        Ok(handle)
    }

    /// The spawn prepared under `handle` failed: run the engine's rollback.
    pub fn subagent_spawn_failed(&mut self, handle: SpawnRollback) -> Result<()> {
        let Some(pos) = self.rollbacks.iter().position(|h| *h == handle) else {
            return Ok(());
        };
        self.rollbacks.swap_remove(pos);
        let budget = self.token_budget();
        // A rollback belongs to the instance that prepared it; legacy has nothing to undo.
        if let Some(mut engine) = self.engine.take() {
            let call = self.host_call(&self.engine_id.clone(), budget);
            let r = engine.rollback_subagent_spawn(&call, handle);
            self.engine = Some(engine);
            if let Err(e) = r {
                self.on_failure(e)?;
            }
        }
        Ok(())
    }

    /// A subagent ended.
    pub fn subagent_ended(
        &mut self,
        child_session_key: &str,
        reason: SubagentEndReason,
    ) -> Result<()> {
        if !self.defines(Method::OnSubagentEnded) {
            return Ok(());
        }
        let params = SubagentEndedParams {
            session_id: self.id.to_string(),
            child_session_key: child_session_key.to_owned(),
            reason,
        };
        let budget = self.token_budget();
        self.run(Method::OnSubagentEnded, budget, |e, call| {
            e.on_subagent_ended(call, &params)
        })
    }

    /// Retires the engine instance: saves its state and runs `dispose` once.
    pub fn close(&mut self) -> Result<()> {
        if self.disposed {
            return Ok(());
        }
        self.save_state()?;
        // What a store leaves to be read outside it (the JSONL state file) catches up now.
        if let Err(e) = self.store.flush() {
            tracing::warn!(session = &*self.id, location = %self.store.location(), "the session's state file was not brought up to its last commit: {e}");
        }
        self.disposed = true;
        self.retire_engine();
        Ok(())
    }

    // -----------------------------------------------------------------------------------------

    pub(super) fn bootstrap(&mut self) -> Result<()> {
        self.bootstrapped = true;
        if self.defines(Method::Bootstrap) {
            self.run_bootstrap()?;
            self.maintain(MaintainReason::Bootstrap)?;
        }
        Ok(())
    }

    /// The engine's `bootstrap`, falling back like any call.
    pub(super) fn run_bootstrap(&mut self) -> Result<BootstrapResult> {
        let budget = self.token_budget();
        let params = BootstrapParams {
            session_id: self.id.to_string(),
            session_key: self.host_param(HostParam::SessionKey, self.id.to_string()),
            session_file: self.store.location(),
            runtime_settings: self.runtime_settings_param(budget, None),
        };
        self.run(Method::Bootstrap, budget, |e, call| {
            e.bootstrap(call, &params)
        })
    }

    pub(super) fn maintain(&mut self, reason: MaintainReason) -> Result<()> {
        if !self.defines(Method::Maintain) {
            return Ok(());
        }
        self.run_maintain(reason).map(|_| ())
    }

    /// The engine's `maintain`, falling back like any call.
    pub(super) fn run_maintain(
        &mut self,
        reason: MaintainReason,
    ) -> Result<Option<MaintainResult>> {
        let budget = self.token_budget();
        let params = MaintainParams {
            session_id: self.id.to_string(),
            session_key: self.host_param(HostParam::SessionKey, self.id.to_string()),
            reason,
            runtime_settings: self.runtime_settings_param(budget, None),
        };
        self.run(Method::Maintain, budget, |e, call| {
            e.maintain(call, &params)
        })
    }

    /// The engine's `afterTurn` with the session context as the snapshot.
    pub(super) fn run_after_turn(
        &mut self,
        pre_prompt_message_count: usize,
        budget: u64,
        is_heartbeat: bool,
    ) -> Result<()> {
        let params = AfterTurnParams {
            session_id: self.id.to_string(),
            session_key: self.host_param(HostParam::SessionKey, self.id.to_string()),
            pre_prompt_message_count,
            token_budget: budget,
            is_heartbeat,
            runtime_settings: self.runtime_settings_param(budget, None),
        };
        self.run(Method::AfterTurn, budget, |e, call| {
            e.after_turn(call, &params)
        })
    }

    /// The engine's `commitTurn` of `messages` under `advancement_key`.
    pub(super) fn run_commit_turn(
        &mut self,
        advancement_key: String,
        messages: Vec<Arc<Message>>,
    ) -> Result<()> {
        let budget = self.token_budget();
        let params = CommitTurnParams {
            session_id: self.id.to_string(),
            session_key: self.host_param(HostParam::SessionKey, self.id.to_string()),
            advancement_key,
            messages,
        };
        self.run(Method::CommitTurn, budget, |e, call| {
            e.commit_turn(call, &params).map(|_| ())
        })
    }

    pub(super) fn ingest_new(&mut self, stored: &[Arc<Message>], is_heartbeat: bool) -> Result<()> {
        if stored.is_empty() {
            return Ok(());
        }
        let budget = self.token_budget();
        let session_key = self.host_param(HostParam::SessionKey, self.id.to_string());
        if self.defines(Method::IngestBatch) {
            let params = IngestBatchParams {
                session_id: self.id.to_string(),
                session_key,
                messages: stored.to_vec(),
                is_heartbeat,
            };
            self.run(Method::IngestBatch, budget, |e, call| {
                e.ingest_batch(call, &params).map(|_| ())
            })
        } else {
            for m in stored {
                let params = IngestParams {
                    session_id: self.id.to_string(),
                    session_key: session_key.clone(),
                    message: Arc::clone(m),
                    is_heartbeat,
                };
                self.run(Method::Ingest, budget, |e, call| {
                    e.ingest(call, &params).map(|_| ())
                })?;
            }
            Ok(())
        }
    }

    /// Assemble, repair, measure; on overflow, compact through the engine (at most 3 times,
    /// stopping when one frees nothing); an engine still over budget after that has failed.
    pub(super) fn assemble_within_budget(
        &mut self,
        budget: u64,
        prompt: Option<String>,
    ) -> Result<Assembly> {
        let mut recoveries = 0u32;
        let mut last_tokens = u64::MAX;
        let mut degraded: Option<&'static str> = None;
        loop {
            let params = AssembleParams {
                session_id: self.id.to_string(),
                session_key: self.host_param(HostParam::SessionKey, self.id.to_string()),
                token_budget: budget,
                prompt: prompt
                    .clone()
                    .and_then(|p| self.host_param(HostParam::Prompt, p)),
                model: self.setup.model.clone(),
                available_tools: self.extras.as_ref().and_then(|x| x.available_tools.clone()),
                runtime_settings: self.runtime_settings_param(budget, degraded),
            };
            let limits = self.setup.limits.clone();
            let (result, engine, fallback) =
                self.run_tagged(Method::Assemble, budget, |e, call| {
                    let r = e.assemble(call, &params)?;
                    super::check_assemble(e, &r, &limits)?;
                    Ok(r)
                })?;
            let authority = result.prompt_authority;
            let from_legacy = engine == LEGACY_ID;
            let assembly = self.finish_assembly(result, budget, engine, fallback);
            let mut measured = assembly.assembled_tokens;
            if authority == Some(PromptAuthority::PreassemblyMayOverflow) {
                measured = measured.max(self.context_tokens());
            }
            // legacy fits by construction; it is the last resort and is never quarantined.
            if measured <= budget || from_legacy {
                if measured > budget {
                    tracing::warn!(
                        session = &*self.id,
                        measured,
                        budget,
                        "legacy could not fit the context"
                    );
                }
                return Ok(assembly);
            }
            let stalled = measured >= last_tokens;
            last_tokens = measured;
            if recoveries < 3 && !stalled {
                recoveries += 1;
                degraded = Some("context_overflow");
                self.engine_compact(budget, CompactionTarget::Budget, None, degraded)?;
                continue;
            }
            let err = invalid_for(
                &self.engine_id,
                Method::Assemble,
                format!(
                    "assembled context of {measured} tokens exceeds the budget of {budget} after {recoveries} compactions"
                ),
            );
            self.on_failure(err)?;
        }
    }

    pub(super) fn finish_assembly(
        &mut self,
        result: AssembleResult,
        budget: u64,
        engine: String,
        fallback: bool,
    ) -> Assembly {
        let repaired = pairing::repair(result.messages);
        let tokens = &self.services.tokens;
        // Whatever the engine chose, the model sees the request and the newest summary.
        let guarantee::Enforced {
            messages,
            put_back,
            lacking,
        } = guarantee::enforce(
            &self.context,
            self.newest_summary(),
            self.request.as_ref(),
            repaired.messages,
            result.system_prompt_addition.as_deref(),
            budget,
            tokens,
        );
        let mut host_added = Vec::new();
        for v in &put_back {
            let added = match v {
                guarantee::Violation::MissingRequest => self.request.as_ref(),
                guarantee::Violation::MissingSummary => self.newest_summary(),
                guarantee::Violation::NoHistory => None,
            };
            host_added.extend(added.map(|m| m.id.clone()));
        }
        if !put_back.is_empty() {
            tracing::debug!(session = &*self.id, engine = %engine, ?put_back, "the host put back what the assembly left out");
            self.stats.guarantee_repairs += 1;
        }
        let addition_tokens = result
            .system_prompt_addition
            .as_deref()
            .map(|a| tokens.text(a))
            .unwrap_or(0);
        let assembled_tokens = tokens.messages(&messages) + addition_tokens;
        self.stats.pairing_repairs += repaired.repairs.len();
        Assembly {
            messages,
            system_prompt_addition: result.system_prompt_addition,
            token_budget: budget,
            assembled_tokens,
            estimated_tokens: result.estimated_tokens,
            engine,
            fallback,
            pairing_repairs: repaired.repairs.len(),
            host_added,
            put_back,
            violations: lacking,
            projection: result.context_projection,
        }
    }

    pub(super) fn append(&mut self, messages: Vec<Message>) -> Result<Vec<Arc<Message>>> {
        let stored = self.store.append(messages)?;
        self.recall.add(&stored);
        let before = self.context.len();
        if let Some(i) = crate::services::guarantee::newest_summary_at(&stored) {
            self.summary_at = Some(before + i);
        }
        Arc::make_mut(&mut self.context).extend(stored.iter().cloned());
        Ok(stored)
    }

    /// The span every call of one turn runs in (engine calls nest under it).
    fn turn_span(&self) -> tracing::Span {
        tracing::info_span!(
            "turn",
            session = &*self.id,
            turn = self.turn_index,
            engine = %self.engine_id
        )
    }
}
