//! The lifecycle methods of the contract (§4) and the other top-level member names an engine
//! may define.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A lifecycle method (contract §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Method {
    /// Once per session per engine instance.
    Bootstrap,
    /// One message.
    Ingest,
    /// A turn's messages at once.
    IngestBatch,
    /// Build the context for the model.
    Assemble,
    /// Shrink the session.
    Compact,
    /// After each turn, with a snapshot.
    AfterTurn,
    /// Durable, idempotent turn commit.
    CommitTurn,
    /// Housekeeping after bootstrap, turns and compaction.
    Maintain,
    /// Before a subagent starts.
    PrepareSubagentSpawn,
    /// After a subagent ended.
    OnSubagentEnded,
    /// When the engine instance retires.
    Dispose,
    /// A pipeline hook: contribute prompt blocks for the model call.
    Collect,
    /// A pipeline hook: reshape the outgoing messages or amend the contributions.
    Project,
    /// A pipeline hook: trim the context in memory under token pressure.
    Prune,
    /// A pipeline hook: plan the summary the host persists.
    CompactionPlan,
    /// A pipeline observer: before a compaction.
    BeforeCompaction,
    /// A pipeline observer: after a compaction.
    AfterCompaction,
    /// A pipeline observer: after messages were stored.
    AfterAppend,
}

impl Method {
    /// Every method, required ones first.
    pub const ALL: [Method; 11] = [
        Method::Ingest,
        Method::Assemble,
        Method::Compact,
        Method::Bootstrap,
        Method::IngestBatch,
        Method::AfterTurn,
        Method::CommitTurn,
        Method::Maintain,
        Method::PrepareSubagentSpawn,
        Method::OnSubagentEnded,
        Method::Dispose,
    ];

    /// The name scripts use.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Bootstrap => "bootstrap",
            Method::Ingest => "ingest",
            Method::IngestBatch => "ingestBatch",
            Method::Assemble => "assemble",
            Method::Compact => "compact",
            Method::AfterTurn => "afterTurn",
            Method::CommitTurn => "commitTurn",
            Method::Maintain => "maintain",
            Method::PrepareSubagentSpawn => "prepareSubagentSpawn",
            Method::OnSubagentEnded => "onSubagentEnded",
            Method::Dispose => "dispose",
            Method::Collect => "collect",
            Method::Project => "project",
            Method::Prune => "prune",
            Method::CompactionPlan => "compactionPlan",
            Method::BeforeCompaction => "beforeCompaction",
            Method::AfterCompaction => "afterCompaction",
            Method::AfterAppend => "afterAppend",
        }
    }

    /// The functions a pipeline hook file may define (none is required), kept apart from
    /// [`Method::ALL`] so engines are validated as before.
    pub const HOOKS: [Method; 7] = [
        Method::Collect,
        Method::Project,
        Method::Prune,
        Method::CompactionPlan,
        Method::BeforeCompaction,
        Method::AfterCompaction,
        Method::AfterAppend,
    ];

    /// The method with this script name.
    pub fn from_name(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.as_str() == name)
    }

    /// The engine method or pipeline hook with this script name (what a VM looks up).
    pub fn any_from_name(name: &str) -> Option<Method> {
        Method::ALL
            .into_iter()
            .chain(Method::HOOKS)
            .find(|m| m.as_str() == name)
    }

    /// Whether this is a pipeline hook rather than an engine method.
    pub fn is_hook(self) -> bool {
        Method::HOOKS.contains(&self)
    }

    /// Whether every engine must define it.
    pub fn required(self) -> bool {
        matches!(self, Method::Ingest | Method::Assemble | Method::Compact)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The known top-level members of an engine besides the methods.
pub const KNOWN_MEMBERS: [&str; 1] = ["info"];
