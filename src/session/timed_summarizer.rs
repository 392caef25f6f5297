//! The session's summarizer, timed: every summary it writes (built-in compaction,
//! `host.delegateCompaction`, `host.summarize`) is counted with how long it took, as its own
//! row of the session's call times, whoever asked for it (legacy, the host's auto-compaction
//! or a script), so replay, compare and check show where summarizing time goes.

use std::sync::Arc;
use std::time::Instant;

use crate::engine::api::CallTimes;
use crate::services::summarize::{BUILTIN_NAME, Summarizer, SummaryFuture, SummaryRequest};
use crate::services::tokens::TokenCounter;

/// The call-times row of summaries the built-in (offline) summarizer wrote, an LLM
/// summarizer's fallback included.
pub const BUILTIN_ROW: &str = "summarizer (builtin)";
/// The call-times row of summaries a model wrote (an LLM summarizer), and of its failures.
pub(crate) const LLM_ROW: &str = "summarizer (llm)";

/// Wraps a session's summarizer and records each finished summary's time in `times`.
#[derive(Debug)]
pub(super) struct TimedSummarizer {
    inner: Arc<dyn Summarizer>,
    times: Arc<parking_lot::Mutex<CallTimes>>,
}

impl TimedSummarizer {
    /// `inner`, timed into `times`.
    pub(super) fn new(
        inner: Arc<dyn Summarizer>,
        times: Arc<parking_lot::Mutex<CallTimes>>,
    ) -> Self {
        TimedSummarizer { inner, times }
    }
}

impl Summarizer for TimedSummarizer {
    fn summarize<'a>(
        &'a self,
        request: SummaryRequest<'a>,
        counter: &'a dyn TokenCounter,
    ) -> SummaryFuture<'a> {
        Box::pin(async move {
            let started = Instant::now();
            let summary = self.inner.summarize(request, counter).await;
            // Which summarizer wrote it: an LLM summarizer falls back to the built-in one.
            let row = match &summary {
                Ok(s) if s.summarizer == BUILTIN_NAME => BUILTIN_ROW,
                Ok(_) => LLM_ROW,
                Err(_) if self.inner.calls_a_model() => LLM_ROW,
                Err(_) => BUILTIN_ROW,
            };
            self.times.lock().record_label(row, started.elapsed());
            summary
        })
    }

    fn for_session(&self) -> Option<Arc<dyn Summarizer>> {
        None
    }

    fn begin_turn(&self) {
        self.inner.begin_turn();
    }

    fn calls_a_model(&self) -> bool {
        self.inner.calls_a_model()
    }
}
