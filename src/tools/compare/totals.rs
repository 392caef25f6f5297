//! Rows summed per engine and window.

use serde::Serialize;

use crate::engine::api::{CallTimes, MethodTimes};

use super::meter::Figures;
use super::prices::Prices;
use super::run::Row;

/// One engine's totals at one window over every transcript.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Total {
    /// The engine's label.
    pub engine: String,
    /// The window in tokens.
    pub window: u64,
    /// The figures summed over the transcripts.
    #[serde(flatten)]
    pub figures: Figures,
    /// Where the engine's time went over all transcripts.
    pub times: Vec<MethodTimes>,
}

/// Sums rows per engine and window, in the order they first appear.
pub fn totals(rows: &[Row], prices: &Prices) -> Vec<Total> {
    let mut out: Vec<(Total, CallTimes)> = Vec::new();
    for r in rows {
        let at = out
            .iter()
            .position(|(t, _)| t.engine == r.engine && t.window == r.window);
        let (total, times) = match at {
            Some(i) => &mut out[i],
            None => {
                out.push((
                    Total {
                        engine: r.engine.clone(),
                        window: r.window,
                        figures: Figures::default(),
                        times: Vec::new(),
                    },
                    CallTimes::default(),
                ));
                let last = out.len() - 1;
                &mut out[last]
            }
        };
        total.figures.add(&r.figures);
        times.merge(&r.raw_times);
    }
    out.into_iter()
        .map(|(mut t, times)| {
            t.figures.finish(prices);
            t.times = times.summary();
            t
        })
        .collect()
}
