//! The engine seam: every context engine — built-in `legacy`, Lua, Rhai — sits behind the same
//! two traits, so the turn driver never knows which language it is talking to.
//!
//! An [`EngineFactory`] is a loaded, validated engine (a compiled script); it makes one
//! [`Engine`] instance per session (one VM per session gives isolation and lets messages stay
//! resident between calls). Each lifecycle call gets a [`HostCall`]: the session context and
//! the `host` services the script API exposes.
//!
//! The engine layer, below the session: the seam ([`Engine`], [`EngineFactory`]) and what sits
//! behind it. `legacy` is the built-in engine; `lua` and `rhai` are thin adapters onto the
//! shared `script` layer; `api` is the `host` API scripts see, written once; [`pipeline`]
//! composes hook scripts into one engine; [`isolation`] runs an instance in a child process;
//! `quarantine` keeps a failing engine out (the limits every call runs under are
//! `crate::sandbox`'s); `stdlib` is the script helpers' source.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde_json::Value;

use crate::contract::{
    AfterTurnParams, AssembleParams, AssembleResult, BootstrapParams, BootstrapResult,
    CommitTurnParams, CommitTurnResult, CompactParams, CompactResult, EngineInfo,
    IngestBatchParams, IngestBatchResult, IngestParams, IngestResult, MaintainParams,
    MaintainResult, Method, SubagentEndedParams, SubagentSpawnParams,
};
use crate::engine::api::HostCall;
use crate::error::{EngineError, ScriptLocation};

pub(crate) use cell::{EngineCell, LoadedEngine};
pub use load::load;
pub(crate) use load::load_any;
pub use quarantine::Quarantine;
pub use script::LoadOptions;

pub(crate) mod api;
mod cell;
pub(crate) mod instance;
pub mod isolation;
pub(crate) mod legacy;
mod load;
pub(crate) mod lua;
pub mod pipeline;
mod quarantine;
pub(crate) mod rhai;
pub(crate) mod script;
pub(crate) mod stdlib;

/// What a new engine instance is told about where it runs (the factory's `ctx`).
#[derive(Clone, Debug, Default)]
pub struct InstanceContext {
    /// The engine's entry config (`plugins.entries.<id>.config`).
    pub config: Arc<Value>,
    /// The agent's directory.
    pub agent_dir: String,
    /// The workspace directory.
    pub workspace_dir: String,
    /// The session this instance serves.
    pub session_id: String,
    /// A flag that stops this instance's running call when set (a client's
    /// `$/cancelRequest`); without one, the factory's own (`LoadOptions::cancel`) or the
    /// instance's.
    pub cancel: Option<Arc<AtomicBool>>,
}

/// A loaded engine: validated once, instantiated per session.
pub trait EngineFactory: Send + Sync + std::fmt::Debug {
    /// The engine's `info`.
    fn info(&self) -> &EngineInfo;
    /// The script file, for script engines.
    fn source(&self) -> Option<&Path>;
    /// Warnings found at load (unknown members, id mismatch outside strict mode).
    fn warnings(&self) -> &[String] {
        &[]
    }
    /// The hook pipeline behind this factory, when it is one (for `check`, `doctor` and the
    /// reload of one hook).
    fn pipeline(&self) -> Option<&crate::engine::pipeline::PipelineFactory> {
        None
    }
    /// A fresh instance for one session.
    fn instantiate(&self, cx: &InstanceContext) -> Result<Box<dyn Engine>, EngineError>;
}

/// An opaque handle an engine returned from `prepareSubagentSpawn`; the host passes it back to
/// [`Engine::rollback_subagent_spawn`] when the spawn fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpawnRollback(pub u64);

/// One engine instance serving one session. Optional methods have no-op defaults; the turn
/// driver asks [`Engine::defines`] first, because "not defined" changes what the host does.
pub trait Engine: Send {
    /// The engine's `info`.
    fn info(&self) -> &EngineInfo;
    /// Whether the engine defines an optional method.
    fn defines(&self, method: Method) -> bool;
    /// Where `method` is written (the script file and the function's line), so the session
    /// locates a result it refuses as it would a failed call; `None` for the built-in engines.
    fn location(&self, method: Method) -> Option<ScriptLocation> {
        let _ = method;
        None
    }

    /// Whether the host's own compaction trigger (for an engine that does not own compaction)
    /// runs through this engine's `compact` rather than straight to the built-in compaction:
    /// the `pipeline` engine says yes when a hook plans compactions (`compactionPlan`), as the
    /// design has its trigger go through `compaction.plan`. Default false.
    fn plans_compaction(&self) -> bool {
        false
    }

    /// Once per session per instance, before the first turn.
    fn bootstrap(
        &mut self,
        call: &HostCall,
        params: &BootstrapParams,
    ) -> Result<BootstrapResult, EngineError> {
        let _ = (call, params);
        Ok(BootstrapResult::default())
    }
    /// One message entered the session.
    fn ingest(
        &mut self,
        call: &HostCall,
        params: &IngestParams,
    ) -> Result<IngestResult, EngineError>;
    /// A turn's messages entered the session.
    fn ingest_batch(
        &mut self,
        call: &HostCall,
        params: &IngestBatchParams,
    ) -> Result<IngestBatchResult, EngineError> {
        let _ = call;
        Ok(IngestBatchResult::all_of(params))
    }
    /// Build the context for the model from `call.context()`.
    fn assemble(
        &mut self,
        call: &HostCall,
        params: &AssembleParams,
    ) -> Result<AssembleResult, EngineError>;
    /// Shrink the session.
    fn compact(
        &mut self,
        call: &HostCall,
        params: &CompactParams,
    ) -> Result<CompactResult, EngineError>;
    /// After a turn, with the context snapshot in `call.context()`.
    fn after_turn(&mut self, call: &HostCall, params: &AfterTurnParams) -> Result<(), EngineError> {
        let _ = (call, params);
        Ok(())
    }
    /// Commit a finished turn idempotently.
    fn commit_turn(
        &mut self,
        call: &HostCall,
        params: &CommitTurnParams,
    ) -> Result<Option<CommitTurnResult>, EngineError> {
        let _ = (call, params);
        Ok(None)
    }
    /// Housekeeping.
    fn maintain(
        &mut self,
        call: &HostCall,
        params: &MaintainParams,
    ) -> Result<Option<MaintainResult>, EngineError> {
        let _ = (call, params);
        Ok(None)
    }
    /// Before a subagent starts; may return a rollback handle.
    fn prepare_subagent_spawn(
        &mut self,
        call: &HostCall,
        params: &SubagentSpawnParams,
    ) -> Result<Option<SpawnRollback>, EngineError> {
        let _ = (call, params);
        Ok(None)
    }
    /// Undo a preparation whose spawn failed.
    fn rollback_subagent_spawn(
        &mut self,
        call: &HostCall,
        handle: SpawnRollback,
    ) -> Result<(), EngineError> {
        let _ = (call, handle);
        Ok(())
    }
    /// After a subagent ended.
    fn on_subagent_ended(
        &mut self,
        call: &HostCall,
        params: &SubagentEndedParams,
    ) -> Result<(), EngineError> {
        let _ = (call, params);
        Ok(())
    }
    /// The instance retires (reload, uninstall, shutdown). Called once.
    fn dispose(&mut self, call: &HostCall) -> Result<(), EngineError> {
        let _ = call;
        Ok(())
    }
    /// The per-session state (`p.state` / `this`) as JSON, to be saved with the session.
    fn save_state(&mut self) -> Result<Value, EngineError> {
        Ok(Value::Null)
    }
    /// Restore state saved by [`Engine::save_state`] (after a restart or a reload).
    fn restore_state(&mut self, state: Value) -> Result<(), EngineError> {
        let _ = state;
        Ok(())
    }
}
