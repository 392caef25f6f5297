//! A script's `host.delegateCompaction(p)` while ctxhost serves a client's `compact`: the
//! client's own compaction (`runtime.delegateCompaction`), asked from the engine's worker
//! thread, which blocks until the client answers (outside the script's deadline) or the
//! request being served is cancelled.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::engine::api::ClientCompactor;

use super::protocol::method;
use super::rpc::Peer;

/// The fields of the script's `p` that change what the client is asked; everything else is
/// the client's own `compact` params as it sent them (its identity, `runtimeContext`, ...).
const OVERRIDES: [&str; 4] = [
    "tokenBudget",
    "force",
    "compactionTarget",
    "customInstructions",
];

/// Asks the client `runtime.delegateCompaction` for one served `compact` call.
#[derive(Debug)]
pub(super) struct PeerCompactor {
    pub(super) peer: Peer,
    /// The client's `compact` params.
    pub(super) params: Value,
    pub(super) timeout: Duration,
    /// The served request's cancel flag: a `$/cancelRequest` for it ends the wait.
    pub(super) cancel: Arc<AtomicBool>,
    pub(super) runtime: tokio::runtime::Handle,
}

impl ClientCompactor for PeerCompactor {
    fn compact(&self, fields: &Map<String, Value>) -> Result<Value, String> {
        let mut params = self.params.clone();
        if let Value::Object(p) = &mut params {
            for key in OVERRIDES {
                if let Some(v) = fields.get(key) {
                    p.insert(key.to_owned(), v.clone());
                }
            }
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let peer = self.peer.clone();
        let timeout = self.timeout;
        let cancel = Arc::clone(&self.cancel);
        self.runtime.spawn(async move {
            let answer = peer
                .request_until_cancelled(method::DELEGATE_COMPACTION, params, timeout, &cancel)
                .await;
            let _ = tx.send(answer);
        });
        match rx.recv() {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(e.message),
            Err(_) => Err("the server stopped before the client answered".into()),
        }
    }
}
