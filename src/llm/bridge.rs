//! Waiting on an async model call from a synchronous thread (an engine's worker, a session
//! call on the blocking pool): the future runs on a small shared Tokio runtime, and the waiting
//! thread gives up when the turn is cancelled or the call's own limit passes, aborting the
//! task (which drops the future: that is how a call is cancelled).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::client::LlmError;
use super::model::{ModelAnswer, ModelFuture};

/// How often the waiting thread looks at the cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(10);

/// Extra time past the request's own timeout before the host stops waiting, so the client's
/// own (more precise) timeout error is the one reported.
const SLACK: Duration = Duration::from_millis(250);

/// The runtime model calls run on: one worker thread (calls mostly wait on the network),
/// started on first use.
fn runtime() -> Result<&'static tokio::runtime::Runtime, LlmError> {
    static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("ctxhost-model")
                .enable_time()
                .build()
                .map_err(|e| tracing::error!("cannot start the model-call runtime: {e}"))
                .ok()
        })
        .as_ref()
        .ok_or_else(|| LlmError::Unavailable {
            reason: "the host could not start its model-call runtime".into(),
        })
}

/// Runs `call` to its end, at most `limit` (plus a little slack for the client's own timeout
/// to report first), or until `cancel` is set: then the call is aborted and the answer is
/// [`LlmError::Cancelled`] or [`LlmError::Timeout`] (naming `endpoint`).
pub(crate) fn wait(
    call: ModelFuture,
    limit: Duration,
    cancel: &AtomicBool,
    endpoint: &str,
) -> Result<ModelAnswer, LlmError> {
    let runtime = runtime()?;
    let (tx, rx) = mpsc::sync_channel(1);
    let task = runtime.spawn(async move {
        let _ = tx.send(call.await);
    });
    let until = Instant::now() + limit + SLACK;
    let outcome = loop {
        if cancel.load(Ordering::Relaxed) {
            break Err(LlmError::Cancelled);
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break Err(LlmError::Timeout {
                endpoint: endpoint.to_owned(),
                timeout_ms: u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
            });
        }
        match rx.recv_timeout(left.min(CANCEL_POLL)) {
            Ok(answer) => return answer,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break Err(LlmError::Unavailable {
                    reason: format!("the model call to {endpoint} stopped without an answer"),
                });
            }
        }
    };
    task.abort();
    outcome
}

/// A cancel flag nobody sets, for waits outside a cancellable call.
pub(crate) static NEVER: AtomicBool = AtomicBool::new(false);
