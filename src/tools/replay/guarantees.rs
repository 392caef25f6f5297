//! What each replayed model call lacked of what every call must carry, and what the host put
//! back ([`crate::services::guarantee`]), with their counts over a replay.

use serde::Serialize;

use crate::services::guarantee::Violation;

/// How one model call fared against what every call must carry ([`crate::services::guarantee`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallGuarantees {
    /// 1-based model call within the turn.
    pub call: u32,
    /// What the call still lacked as sent to the model (expected: never).
    pub violations: Vec<Violation>,
    /// What the engine's assembly lacked and the host put back.
    pub put_back: Vec<Violation>,
}

impl CallGuarantees {
    /// Whether a report lists the call: it lacked something, or the host had to repair it.
    pub fn notable(&self) -> bool {
        !self.violations.is_empty() || !self.put_back.is_empty()
    }

    /// Logs what the call still lacked (expected: never, since the session puts a missing
    /// request or summary back, and history when there is room).
    pub(super) fn log(&self, session: &str, turn: u64) {
        for v in &self.violations {
            tracing::warn!(session, turn, call = self.call, violation = ?v, "{}", v.describe());
        }
    }
}

/// Model calls that broke or needed a repair of a guarantee, over a replay.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GuaranteeCounts {
    /// Calls sent without the current request.
    pub missing_request: u64,
    /// Calls sent without the newest summary.
    pub missing_summary: u64,
    /// Calls sent with no history although the session had some.
    pub no_history: u64,
    /// Calls whose assembly the host had to repair (request, summary or history put back).
    pub put_back: u64,
}

impl GuaranteeCounts {
    /// Counts one call.
    pub(super) fn add(&mut self, c: &CallGuarantees) {
        for v in &c.violations {
            match v {
                Violation::MissingRequest => self.missing_request += 1,
                Violation::MissingSummary => self.missing_summary += 1,
                Violation::NoHistory => self.no_history += 1,
            }
        }
        self.put_back += u64::from(!c.put_back.is_empty());
    }
}
