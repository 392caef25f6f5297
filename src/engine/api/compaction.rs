//! `host.delegateCompaction(p)`: the built-in compaction on this session, which is how an engine
//! that does not own compaction compacts safely (contract §7) — or, where a client owns the
//! transcript and offers its own compaction for the call being served (`ctxhost serve` serving
//! OpenClaw's `compact`), the client's compaction.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value as Json};

use super::HostCall;
use super::table::{Args, Ctx};
use super::value::{HostError, HostOut, HostValue};
use crate::contract::{CompactParams, CompactResult};
use crate::services::compaction;

/// The fields of `p` that `host.delegateCompaction(p)` passes on to the built-in compaction
/// (the rest of `p`, the context and the state, is never read).
pub(crate) const COMPACT_FIELDS: [&str; 8] = [
    "sessionId",
    "sessionKey",
    "tokenBudget",
    "force",
    "currentTokenCount",
    "compactionTarget",
    "customInstructions",
    "runtimeSettings",
];

/// A client's own compaction of the session (OpenClaw's `delegateCompactionToRuntime`, asked
/// over `ctxhost serve`'s wire). It blocks until the client answers.
pub trait ClientCompactor: Send + Sync + std::fmt::Debug {
    /// Runs the client's compaction with the script's `p` fields ([`COMPACT_FIELDS`]) and
    /// returns the client's result as it sent it, or why there is none.
    fn compact(&self, fields: &Map<String, Json>) -> Result<Json, String>;
}

/// The client compaction one call may use, remembering whether it did (the session then leaves
/// the result to the client, which compacted its own transcript).
#[derive(Clone, Debug)]
pub struct ClientCompaction {
    compactor: Arc<dyn ClientCompactor>,
    used: Arc<AtomicBool>,
}

impl ClientCompaction {
    /// Whether `other` is this very client compaction (see [`HostCall::is_same`](super::HostCall::is_same)).
    pub(crate) fn is_same(&self, other: &ClientCompaction) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.compactor), Arc::as_ptr(&other.compactor))
            && Arc::ptr_eq(&self.used, &other.used)
    }

    /// `host.delegateCompaction(p)` goes to `compactor` while this is on the call.
    pub fn new(compactor: Arc<dyn ClientCompactor>) -> Self {
        ClientCompaction {
            compactor,
            used: Arc::default(),
        }
    }

    /// Whether the client compacted since the last call of this, and forgets it.
    pub fn take_used(&self) -> bool {
        self.used.swap(false, Ordering::SeqCst)
    }

    /// The client's compaction, waited for outside the script's deadline; a client that fails
    /// or answers something that is not a `CompactResult` gives `{ok: false, compacted: false}`
    /// with the reason (OpenClaw turns a thrown compaction into the same).
    fn run(&self, fields: &Map<String, Json>) -> CompactResult {
        self.used.store(true, Ordering::SeqCst);
        match crate::sandbox::outside_deadline(|| self.compactor.compact(fields)) {
            Ok(v) => client_result(v),
            Err(e) => CompactResult::nothing(false, format!("the client's compaction failed: {e}")),
        }
    }
}

/// The client's answer as a `CompactResult`: fields ctxhost does not know (a successor
/// `sessionFile`, ...) are left out rather than failing the result.
fn client_result(v: Json) -> CompactResult {
    const TOP: [&str; 4] = ["ok", "compacted", "reason", "result"];
    const OUTCOME: [&str; 7] = [
        "summary",
        "firstKeptEntryId",
        "tokensBefore",
        "tokensAfter",
        "details",
        "sessionId",
        "sessionTarget",
    ];
    let Json::Object(mut top) = v else {
        return CompactResult::nothing(false, "the client's compaction answered no object");
    };
    top.retain(|k, _| TOP.contains(&k.as_str()));
    if let Some(Json::Object(outcome)) = top.get_mut("result") {
        outcome.retain(|k, _| OUTCOME.contains(&k.as_str()));
    }
    serde_json::from_value(Json::Object(top)).unwrap_or_else(|e| {
        CompactResult::nothing(
            false,
            format!("the client's compaction answered no CompactResult: {e}"),
        )
    })
}

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
            &s.cancel,
        )
    }
}

/// `host.delegateCompaction(p)` → the built-in compaction's `CompactResult` (or the client's,
/// when the call carries a [`ClientCompaction`]); `p` is the script's `compact` params (their
/// [`COMPACT_FIELDS`]).
pub(super) fn delegate(cx: &Ctx<'_>, [p, ..]: Args) -> Result<HostOut, HostError> {
    let HostValue::Map(fields) = p else {
        return Err(cx.script_error(format!("expects p, got {}", p.describe())));
    };
    let fields = Json::Object(*fields);
    let params: CompactParams =
        serde_json::from_value(fields.clone()).map_err(|e| cx.script_error(e))?;
    let call = cx.call()?;
    let result = match (call.client_compaction(), fields) {
        (Some(client), Json::Object(fields)) => client.run(&fields),
        _ => call.delegate_compaction(&params),
    };
    serde_json::to_value(&result)
        .map(HostOut::Data)
        .map_err(|e| cx.host_error(e))
}
