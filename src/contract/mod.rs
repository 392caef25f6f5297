//! The engine contract (`docs/contract.md` §3, §4, §6) as plain data: `info`, every lifecycle
//! method's params and result, and the checks the host applies at load and to every result.
//!
//! This module knows no VM. The Lua and Rhai adapters convert script values into these types
//! and call the `check_*` functions here, so every language is validated by the same code.
//!
//! Each part lives in its own submodule and is re-exported here, so callers name everything
//! as `contract::X`: `method` (the lifecycle methods), `info` (an engine's `info` record),
//! `settings` (`runtimeSettings`), `params` and `results` (each method's input and output), and
//! `checks` (what the host checks at load and on every result).
//!
#![doc = include_str!("../../docs/contract.md")]

mod checks;
pub mod client;
pub mod inert;
mod info;
pub mod limits;
pub mod message;
mod method;
mod params;
mod results;
mod settings;
mod storage;

pub use checks::{
    LoadFinding, ResultLimits, Severity, check_assemble, check_compact, check_engine_shape,
    check_hook_shape, closest, closest_member, unmet_requirements,
};
pub use info::{
    EngineInfo, HOST_CAPABILITIES, HostParam, HostRequirement, INFO_FIELDS, LEGACY_ID, Operation,
    PIPELINE_ID, TurnMaintenanceMode,
};
pub use method::{KNOWN_MEMBERS, Method};
pub use params::{
    AfterTurnParams, AssembleParams, BootstrapParams, CommitTurnParams, CompactParams,
    CompactionTarget, ContextMode, IngestBatchParams, IngestParams, MaintainParams, MaintainReason,
    SubagentEndReason, SubagentEndedParams, SubagentSpawnParams,
};
pub use results::{
    AssembleResult, BootstrapResult, CommitStatus, CommitTurnResult, CompactResult,
    CompactionOutcome, IngestBatchResult, IngestResult, MaintainResult, PromptAuthority, count,
    opt_count, to_count,
};
pub use settings::{
    EngineSelection, ModelInfo, RuntimeDiagnostics, RuntimeInfo, RuntimeLimits, RuntimeSettings,
};
pub use storage::{SessionMeta, StorageCursor};
