//! What models may spend: calls per turn and tokens per rolling day, kept by the host for
//! the LLM summarizer and for `host.complete` alike.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::error::LlmError;
use super::model::ModelAnswer;

/// The window `maxTokensPerDay` counts over.
pub(crate) const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// Tokens spent in the last 24 hours, plus what calls in flight may still spend.
#[derive(Debug, Default)]
pub(crate) struct DayLedger {
    pub(crate) spent: VecDeque<(Instant, u64)>,
    pub(crate) reserved: u64,
}

impl DayLedger {
    /// Tokens spent in the 24 hours before `now`.
    pub(crate) fn spent(&mut self, now: Instant) -> u64 {
        while let Some((at, _)) = self.spent.front()
            && now.duration_since(*at) >= DAY
        {
            self.spent.pop_front();
        }
        self.spent.iter().map(|(_, t)| t).sum()
    }

    /// Sets aside `needed` tokens for a call, unless that would pass `limit`.
    pub(crate) fn reserve(&mut self, needed: u64, limit: u64) -> Result<(), LlmError> {
        let spent = self.spent(Instant::now());
        if spent + self.reserved + needed > limit {
            return Err(LlmError::TokensPerDay {
                spent,
                needed,
                limit,
            });
        }
        self.reserved += needed;
        Ok(())
    }

    /// A call that reserved `needed` ended having used `used` tokens.
    pub(crate) fn settle(&mut self, needed: u64, used: u64) {
        self.reserved = self.reserved.saturating_sub(needed);
        if used > 0 {
            self.spent.push_back((Instant::now(), used));
        }
    }
}

/// Tokens set aside in a [`DayLedger`] for one call in flight: [`Reservation::settle`]
/// records what the call used; dropped unsettled (the call's future was dropped: the turn was
/// cancelled), it gives the reservation back and records nothing.
pub(crate) struct Reservation<'a> {
    ledger: &'a parking_lot::Mutex<DayLedger>,
    needed: u64,
    used: u64,
}

impl<'a> Reservation<'a> {
    /// Reserves `needed` tokens in `ledger` unless that would pass `limit`.
    pub(crate) fn take(
        ledger: &'a parking_lot::Mutex<DayLedger>,
        needed: u64,
        limit: u64,
    ) -> Result<Self, LlmError> {
        ledger.lock().reserve(needed, limit)?;
        Ok(Reservation {
            ledger,
            needed,
            used: 0,
        })
    }

    /// The call ended having used `used` tokens.
    pub(crate) fn settle(mut self, used: u64) {
        self.used = used;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.ledger.lock().settle(self.needed, self.used);
    }
}

/// Takes one of a turn's `limit` calls from `calls`.
pub(crate) fn take_call(calls: &AtomicU32, limit: u32) -> Result<(), LlmError> {
    calls
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < limit).then_some(n + 1)
        })
        .map(|_| ())
        .map_err(|_| LlmError::CallsPerTurn { limit })
}

/// The tokens a finished call used: what the model reported, else `prompt` plus the
/// answer's tokens as `count` measures them; 0 for a failed call.
pub(crate) fn used_by(
    result: &Result<ModelAnswer, LlmError>,
    prompt: u64,
    count: impl Fn(&str) -> u64,
) -> u64 {
    match result {
        Ok(a) => match a.usage {
            Some(u) => u.input + u.output,
            None => prompt + count(&a.text),
        },
        Err(_) => 0,
    }
}
