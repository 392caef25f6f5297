//! Where a session stands in its store, as plain data: what the store seam reports and what an
//! engine sees in the lifecycle context (`storageCursor`, `turnNumber`, `sessionCreatedAt`).
//! Here, not in `store`, so the engine layer reads it without importing the stores.

use serde::{Deserialize, Serialize};

/// Where a lifecycle call's session stands in its store, so an engine can name a point in the
/// history that survives a restart (`storageCursor` in the lifecycle context).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageCursor {
    /// `fs-jsonl`, `memory` or `postgres`.
    pub backend: String,
    /// The session the store keeps.
    pub session_id: String,
    /// How many messages the store holds (the next message is number `seq + 1`).
    pub seq: u64,
    /// The id of the newest stored message, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry_id: Option<String>,
}

/// What a store knows about its session beyond the entries, for the lifecycle context and
/// `doctor`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionMeta {
    /// When the session was created (ISO 8601), when the backend knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// Turns committed so far, when the backend knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turns: Option<u64>,
}
