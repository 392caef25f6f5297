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
        }
    }

    /// The method with this script name.
    pub fn from_name(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.as_str() == name)
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
