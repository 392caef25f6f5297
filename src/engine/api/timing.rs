//! Where an engine's time goes: per lifecycle method (and per `host.*` function a script
//! calls), how many calls and how long they took (p50, p95, max), kept in bounded memory
//! however long the session runs.

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

use crate::contract::Method;

/// Samples kept per method for the percentiles (the count, total and max are exact).
const SAMPLES: usize = 1024;

/// The call times of one session's engine, per method (or per `host.*` function).
#[derive(Clone, Debug, Default)]
pub struct CallTimes {
    methods: BTreeMap<String, MethodClock>,
}

#[derive(Clone, Debug, Default)]
struct MethodClock {
    calls: u64,
    total: Duration,
    max: Duration,
    recent: VecDeque<Duration>,
}

/// One method's times, for reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MethodTimes {
    /// The lifecycle method, or the `host` function (`host.summarize`).
    pub method: String,
    /// How many calls.
    pub calls: u64,
    /// Median call, in ms (over the last 1,024 calls).
    pub p50_ms: f64,
    /// 95th percentile call, in ms (over the last 1,024 calls).
    pub p95_ms: f64,
    /// Slowest call, in ms.
    pub max_ms: f64,
    /// All calls together, in ms.
    pub total_ms: f64,
}

impl CallTimes {
    /// Records one call.
    pub fn record(&mut self, method: Method, took: Duration) {
        self.record_as(method.as_str(), took);
    }

    /// Records one call of the `host` function at `path` (`["summarize"]` is `host.summarize`).
    pub fn record_named(&mut self, path: &[&str], took: Duration) {
        let name = format!("host.{}", path.join("."));
        self.record_as(&name, took);
    }

    /// Records one call of work the host times under its own row (`summarizer (builtin)`).
    pub fn record_label(&mut self, label: &str, took: Duration) {
        self.record_as(label, took);
    }

    fn record_as(&mut self, name: &str, took: Duration) {
        let clock = match self.methods.get_mut(name) {
            Some(c) => c,
            None => self.methods.entry(name.to_owned()).or_default(),
        };
        clock.calls += 1;
        clock.total += took;
        clock.max = clock.max.max(took);
        if clock.recent.len() == SAMPLES {
            clock.recent.pop_front();
        }
        clock.recent.push_back(took);
    }

    /// Adds another session's times (a replay's summary covers all its sessions).
    pub fn merge(&mut self, other: &CallTimes) {
        for (name, theirs) in &other.methods {
            let mine = self.methods.entry(name.clone()).or_default();
            mine.calls += theirs.calls;
            mine.total += theirs.total;
            mine.max = mine.max.max(theirs.max);
            for &d in &theirs.recent {
                if mine.recent.len() == SAMPLES {
                    mine.recent.pop_front();
                }
                mine.recent.push_back(d);
            }
        }
    }

    /// Every method called so far, in name order.
    pub fn summary(&self) -> Vec<MethodTimes> {
        self.methods
            .iter()
            .map(|(name, c)| {
                let mut sorted: Vec<Duration> = c.recent.iter().copied().collect();
                sorted.sort_unstable();
                MethodTimes {
                    method: name.clone(),
                    calls: c.calls,
                    p50_ms: ms(percentile(&sorted, 50)),
                    p95_ms: ms(percentile(&sorted, 95)),
                    max_ms: ms(c.max),
                    total_ms: ms(c.total),
                }
            })
            .collect()
    }
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (sorted.len() * p).div_ceil(100).saturating_sub(1);
    sorted[rank.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
