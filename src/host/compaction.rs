//! `host.delegateCompaction(p)`: the built-in compaction on this session, which is how an engine
//! that does not own compaction compacts safely (contract §7).

use serde_json::Value as Json;

use super::HostCall;
use super::api::{Args, Ctx};
use super::value::{HostError, HostOut, HostValue};
use crate::compaction;
use crate::contract::{CompactParams, CompactResult};

/// The fields of `p` that `host.delegateCompaction(p)` passes on to the built-in compaction
/// (the rest of `p`, the context and the state, is never read).
pub const COMPACT_FIELDS: [&str; 8] = [
    "sessionId",
    "sessionKey",
    "tokenBudget",
    "force",
    "currentTokenCount",
    "compactionTarget",
    "customInstructions",
    "runtimeSettings",
];

impl HostCall {
    /// The built-in compaction of this session with `params`.
    pub fn delegate_compaction(&self, params: &CompactParams) -> CompactResult {
        let s = &self.services;
        compaction::compact(
            &self.context,
            &s.tokens,
            s.summarizer.as_ref(),
            &s.compaction,
            params,
        )
    }
}

/// `host.delegateCompaction(p)` → the built-in compaction's `CompactResult`; `p` is the
/// script's `compact` params (their [`COMPACT_FIELDS`]).
pub(super) fn delegate(cx: &Ctx<'_>, [p, _]: Args) -> Result<HostOut, HostError> {
    let HostValue::Map(fields) = p else {
        return Err(cx.script_error(format!("expects p, got {}", p.describe())));
    };
    let params: CompactParams =
        serde_json::from_value(Json::Object(*fields)).map_err(|e| cx.script_error(e))?;
    let result = cx.call()?.delegate_compaction(&params);
    serde_json::to_value(&result)
        .map(HostOut::Data)
        .map_err(|e| cx.host_error(e))
}
