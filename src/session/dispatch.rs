//! Calling the engine: instantiating and following reloads, the params the host injects, and
//! every call with quarantine and fallback (§8). A failing configured engine is quarantined under
//! its entry and the call re-runs on `legacy`; a host fault is returned and quarantines nothing.

use std::sync::Arc;

use crate::config::FailurePolicy;
use crate::contract::{
    self, EngineSelection, HostParam, Method, ModelInfo, Operation, RuntimeDiagnostics,
    RuntimeInfo, RuntimeLimits, RuntimeSettings,
};
use crate::engine::api::HostCall;
use crate::engine::legacy::LEGACY_ID;
use crate::engine::{Engine, InstanceContext};
use crate::error::{Disposition, EngineError, EngineErrorKind, Error, Result};

use super::Session;

impl Session {
    pub(super) fn instantiate_engine(&mut self) -> Result<()> {
        let current = self.setup.engine.current();
        self.generation = current.number;
        self.engine_config = current.config;
        self.entry = current.entry;
        self.reinstantiate = false;
        let Some(choice) = current.engine else {
            self.engine_id = LEGACY_ID.to_owned();
            self.engine_info = None;
            return Ok(());
        };
        let factory = match choice {
            Ok(f) => f,
            Err(e) => {
                self.engine_id = e.engine.clone();
                return self.on_failure(e);
            }
        };
        self.engine_id = factory.info().id.clone();
        self.engine_info = Some(factory.info().clone());
        if self.setup.quarantine.contains(&self.entry) {
            return Ok(());
        }
        let cx = InstanceContext {
            config: Arc::clone(&self.engine_config),
            agent_dir: String::new(),
            workspace_dir: String::new(),
            session_id: self.setup.id.clone(),
            cancel: self.setup.cancel.clone(),
        };
        match factory.instantiate(&cx) {
            Ok(instance) => {
                self.engine = Some(instance);
                Ok(())
            }
            Err(e) => self.on_failure(e),
        }
    }

    /// At a turn boundary: if the host reloaded the engine, retire this session's instance
    /// (state saved, `dispose` run) and continue on a new one with the state restored.
    pub(super) fn sync_engine(&mut self) -> Result<()> {
        if self.reinstantiate && self.setup.engine.number() == self.generation {
            self.instantiate_engine()?;
            return self.restore_state();
        }
        if self.setup.engine.number() == self.generation {
            return Ok(());
        }
        self.save_state()?;
        self.retire_engine();
        self.bootstrapped = false;
        self.warned_noop_compact = false;
        self.instantiate_engine()?;
        self.restore_state()
    }

    /// Whether the engine answering now defines a lifecycle method.
    pub fn defines(&self, method: Method) -> bool {
        match &self.engine {
            Some(e) => e.defines(method),
            None => self.legacy.defines(method),
        }
    }

    /// Whether the engine answering now owns compaction.
    pub fn active_owns_compaction(&self) -> bool {
        self.engine
            .as_ref()
            .is_some_and(|e| e.info().owns_compaction())
    }

    pub(super) fn host_param<T>(&self, p: HostParam, value: T) -> Option<T> {
        let accepts = match &self.engine {
            Some(e) => e.info().accepts(p),
            None => true,
        };
        accepts.then_some(value)
    }

    pub(super) fn runtime_settings_param(
        &self,
        budget: u64,
        degraded: Option<&str>,
    ) -> Option<RuntimeSettings> {
        let fallback = self.engine.is_none() && self.engine_id != LEGACY_ID;
        let settings = RuntimeSettings {
            schema_version: 1,
            runtime: RuntimeInfo {
                host: "ctxhost".into(),
                mode: if degraded.is_some() {
                    "degraded"
                } else if fallback {
                    "fallback"
                } else {
                    "normal"
                }
                .into(),
            },
            model: ModelInfo {
                requested: self.setup.model.clone(),
                resolved: self.setup.model.clone(),
                provider: None,
            },
            context_engine_selection: EngineSelection {
                selected_id: Some(self.engine_id.clone()),
                source: if self.engine_id != LEGACY_ID {
                    "configured"
                } else {
                    "default"
                }
                .into(),
            },
            limits: RuntimeLimits {
                prompt_token_budget: Some(budget),
                max_output_tokens: Some(self.setup.compaction.reserve_tokens(self.setup.window)),
            },
            diagnostics: RuntimeDiagnostics {
                fallback_reason: fallback.then(|| "runtime_unavailable".to_owned()),
                degraded_reason: degraded.map(str::to_owned),
            },
        };
        self.host_param(HostParam::RuntimeSettings, settings)
    }

    pub(super) fn host_call(&self, engine_id: &str, budget: u64) -> HostCall {
        HostCall::new(
            Arc::from(engine_id),
            Arc::clone(&self.id),
            Arc::clone(&self.context),
            Arc::clone(&self.services),
            Arc::clone(&self.engine_config),
            budget,
        )
        .with_client_params(self.serving.as_ref().map(|s| Arc::clone(&s.params)))
        .with_client_compaction(self.serving.as_ref().and_then(|s| s.compaction.clone()))
        .with_recall(Arc::clone(&self.recall))
    }

    pub(super) fn check_requirements(&self, op: Operation) -> Result<()> {
        let Some(engine) = &self.engine else {
            return Ok(());
        };
        match contract::unmet_requirements(engine.info(), op) {
            None => Ok(()),
            Some(message) => Err(Error::Engine(EngineError::new(
                crate::error::Op::Requirements(op),
                self.engine_id.clone(),
                EngineErrorKind::HostRequirement,
                message,
            ))),
        }
    }

    pub(super) fn run<T>(
        &mut self,
        method: Method,
        budget: u64,
        f: impl FnMut(&mut dyn Engine, &HostCall) -> std::result::Result<T, EngineError>,
    ) -> Result<T> {
        self.run_tagged(method, budget, f).map(|(v, _, _)| v)
    }

    /// Runs a call on the configured engine; on a quarantining failure re-runs it on `legacy`.
    /// Returns the value, the engine that produced it and whether that was a fallback.
    pub(super) fn run_tagged<T>(
        &mut self,
        method: Method,
        budget: u64,
        mut f: impl FnMut(&mut dyn Engine, &HostCall) -> std::result::Result<T, EngineError>,
    ) -> Result<(T, String, bool)> {
        if let Some(mut engine) = self.engine.take() {
            let call = self.host_call(&self.engine_id.clone(), budget);
            let (r, took) = traced(&self.engine_id, method, || f(engine.as_mut(), &call));
            self.turn_engine_time += took;
            self.call_times.record(method, took);
            self.engine = Some(engine);
            match r {
                Ok(v) => return Ok((v, self.engine_id.clone(), false)),
                Err(e) => self.on_failure(e)?,
            }
        }
        let call = self.host_call(LEGACY_ID, budget);
        // legacy is the host's own engine: its failure is a host fault, never a quarantine.
        let (v, took) = traced(LEGACY_ID, method, || f(&mut self.legacy, &call));
        if self.engine_id == LEGACY_ID {
            self.call_times.record(method, took);
        }
        let v = v.map_err(|e| {
            tracing::error!(op = %method, "legacy failed: {e}");
            Error::Host(e)
        })?;
        let fallback = self.engine_id != LEGACY_ID;
        self.stats.fallback |= fallback;
        Ok((v, LEGACY_ID.to_owned(), fallback))
    }

    /// Decides what a failure means: quarantine and fall back, or return the error.
    pub(super) fn on_failure(&mut self, e: EngineError) -> Result<()> {
        match e.disposition() {
            Disposition::FailClosed | Disposition::Cancelled => Err(Error::Engine(e)),
            Disposition::HostFault => {
                // Not the engine's fault, so no quarantine; but the instance may be broken (a
                // dead worker): drop it and make a new one, state restored, at the next turn.
                tracing::error!(engine = %e.engine, session = &*self.id, "host fault: {e}");
                if self.engine.take().is_some() {
                    self.reinstantiate = true;
                }
                Err(Error::Host(e))
            }
            Disposition::Quarantine if self.setup.failure_policy == FailurePolicy::Strict => {
                Err(Error::Engine(e))
            }
            Disposition::Quarantine => {
                if self.setup.quarantine.record(&self.entry, &e) {
                    tracing::warn!(engine = %e.engine, session = &*self.id, "engine quarantined, falling back to legacy: {e}");
                }
                self.stats.fallback = true;
                let abandoned =
                    matches!(e.kind, EngineErrorKind::Deadline | EngineErrorKind::Memory);
                if abandoned {
                    self.engine = None;
                } else {
                    self.retire_engine();
                }
                Ok(())
            }
        }
    }

    pub(super) fn retire_engine(&mut self) {
        if let Some(mut engine) = self.engine.take() {
            let call = self.host_call(&self.engine_id.clone(), self.token_budget());
            // The instance is leaving either way; a failing dispose is reported, and does not
            // quarantine the entry (after a reload that would punish the new version).
            if let Err(e) = engine.dispose(&call) {
                tracing::warn!(engine = %self.engine_id, session = &*self.id, "dispose failed: {e}");
            }
        }
    }
}

/// Runs one engine call inside its own span, recording how long it took and how it ended.
fn traced<T>(
    engine: &str,
    method: Method,
    call: impl FnOnce() -> std::result::Result<T, EngineError>,
) -> (std::result::Result<T, EngineError>, std::time::Duration) {
    let span = tracing::debug_span!(
        "engine_call",
        engine,
        method = method.as_str(),
        duration_us = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    let _entered = span.enter();
    let started = std::time::Instant::now();
    let r = call();
    let took = started.elapsed();
    span.record("duration_us", took.as_micros() as u64);
    span.record(
        "outcome",
        match &r {
            Ok(_) => "ok",
            Err(e) => e.kind.label(),
        },
    );
    tracing::trace!("engine call finished");
    (r, took)
}
