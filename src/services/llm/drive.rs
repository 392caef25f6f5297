//! Waiting on an async call (a model's answer, a summary) from a synchronous thread (an
//! engine's worker, a session call on the blocking pool): the waiting thread polls the future
//! itself, inside the context of a small shared Tokio runtime (so Tokio timers and I/O work in
//! it, driven by that runtime's thread), parks between polls, and gives up when the turn is
//! cancelled or the call's own limit passes, dropping the future: that is how a call is
//! cancelled. Polling on the caller's thread lets the future borrow from the caller (a
//! summary borrows its span), so no copy is made and nothing outlives the wait.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use super::error::LlmError;
use super::model::{ModelAnswer, ModelFuture};
use crate::services::summarize::{Summarizer, Summary, SummaryRequest};
use crate::services::tokens::TokenCounter;

/// How often the waiting thread looks at the cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(10);

/// Extra time past the request's own timeout before the host stops waiting, so the client's
/// own (more precise) timeout error is the one reported.
const SLACK: Duration = Duration::from_millis(250);

/// The runtime whose context model calls and summaries are polled in: one worker thread
/// (it drives timers and sockets; the futures themselves are polled by their callers),
/// started on first use.
fn runtime() -> Result<&'static tokio::runtime::Runtime, LlmError> {
    static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("ctxhost-model")
                .enable_all()
                .build()
                .map_err(|e| tracing::error!("cannot start the model-call runtime: {e}"))
                .ok()
        })
        .as_ref()
        .ok_or_else(|| LlmError::Unavailable {
            reason: "the host could not start its model-call runtime".into(),
        })
}

/// How a [`drive`] ended.
#[derive(Debug)]
pub(crate) enum Driven<T> {
    /// The future finished.
    Ready(T),
    /// The cancel flag was set first; the future was dropped.
    Cancelled,
    /// The limit passed first; the future was dropped.
    TimedOut,
}

/// Wakes the thread that polls.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `future` on this thread until it finishes, `cancel` is set, or `until` passes;
/// the future is dropped (its work abandoned) in the last two cases. Blocks the thread.
pub(crate) fn drive<F: Future>(
    future: F,
    cancel: &AtomicBool,
    until: Option<Instant>,
) -> Result<Driven<F::Output>, LlmError> {
    let runtime = runtime()?;
    let _context = runtime.enter();
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Ok(Driven::Cancelled);
        }
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return Ok(Driven::Ready(out));
        }
        let mut nap = CANCEL_POLL;
        if let Some(until) = until {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Driven::TimedOut);
            }
            nap = nap.min(left);
        }
        // A wake-up (or a spurious one) ends the nap early; the flag is read every nap.
        std::thread::park_timeout(nap);
    }
}

/// Runs `call` to its end, at most `limit` (plus a little slack for the client's own timeout
/// to report first), or until `cancel` is set: then the call is dropped and the answer is
/// [`LlmError::Cancelled`] or [`LlmError::Timeout`] (naming `endpoint`).
pub(crate) fn wait(
    call: ModelFuture,
    limit: Duration,
    cancel: &AtomicBool,
    endpoint: &str,
) -> Result<ModelAnswer, LlmError> {
    match drive(call, cancel, Some(Instant::now() + limit + SLACK))? {
        Driven::Ready(answer) => answer,
        Driven::Cancelled => Err(LlmError::Cancelled),
        Driven::TimedOut => Err(LlmError::Timeout {
            endpoint: endpoint.to_owned(),
            timeout_ms: u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
        }),
    }
}

/// Awaits `call` for at most `limit` plus the slack [`wait`] gives, inside an async caller
/// (the LLM summarizer): a client that ignores its request's timeout is still cut off.
/// Without a Tokio runtime context (an embedder polling the summarizer by hand) there is no
/// timer to race, and the client's own timeout is the bound.
pub(crate) async fn within(
    call: ModelFuture,
    limit: Duration,
    endpoint: &str,
) -> Result<ModelAnswer, LlmError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return call.await;
    }
    match tokio::time::timeout(limit + SLACK, call).await {
        Ok(answer) => answer,
        Err(_) => Err(LlmError::Timeout {
            endpoint: endpoint.to_owned(),
            timeout_ms: u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
        }),
    }
}

/// Summarizes with `summarizer` on this thread, the way the host asks for every summary
/// (built-in compaction, `host.summarize`, `host.delegateCompaction`): the summary's future is
/// polled here and dropped when `cancel` is set, which is then an error. The summarizer bounds
/// its own time (the LLM summarizer its `timeoutMs`); the built-in one finishes on the first
/// poll.
pub(crate) fn summarize(
    summarizer: &dyn Summarizer,
    request: SummaryRequest<'_>,
    counter: &dyn TokenCounter,
    cancel: &AtomicBool,
) -> crate::Result<Summary> {
    let failed = |e: LlmError| crate::Error::Summarize(e.to_string());
    match drive(summarizer.summarize(request, counter), cancel, None).map_err(failed)? {
        Driven::Ready(summary) => summary,
        Driven::Cancelled | Driven::TimedOut => Err(failed(LlmError::Cancelled)),
    }
}

#[cfg(test)]
#[path = "drive_tests.rs"]
mod tests;
