//! How the side-by-side benches (`workloads`, `pipeline`) time an implementation: a sample is
//! the mean time of as many calls as fill [`SAMPLE`], [`SAMPLES`] samples a round; the tables
//! hold medians over every sample of the run and the range of the rounds' medians.

use std::time::{Duration, Instant};

/// Samples per implementation per round.
pub const SAMPLES: usize = 15;
/// Time one sample fills.
pub const SAMPLE: Duration = Duration::from_millis(20);

/// Per-call times: each sample runs `f` as often as fills [`SAMPLE`] (as the peers do).
pub fn sample(mut f: impl FnMut()) -> Vec<f64> {
    let mut n = 1u64;
    let mut took;
    loop {
        let t0 = Instant::now();
        for _ in 0..n {
            f();
        }
        took = t0.elapsed();
        if took >= SAMPLE / 4 || n >= 1 << 24 {
            break;
        }
        n *= 2;
    }
    let n = ((n as f64 * SAMPLE.as_secs_f64() / took.as_secs_f64().max(1e-9)) as u64).max(1);
    (0..SAMPLES)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..n {
                f();
            }
            t0.elapsed().as_secs_f64() / n as f64
        })
        .collect()
}

/// The median of `xs` (NaN when empty).
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// A time with a unit that keeps three significant digits readable.
pub fn time(s: f64) -> String {
    match s {
        s if s >= 1e-3 => format!("{:.3} ms", s * 1e3),
        s if s >= 1e-6 => format!("{:.2} µs", s * 1e6),
        s => format!("{:.0} ns", s * 1e9),
    }
}

/// A ratio with two significant digits.
pub fn ratio(r: f64) -> String {
    if !r.is_finite() {
        return "–".into();
    }
    let decimals = if r > 0.0 {
        (1 - r.log10().floor() as i32).max(0) as usize
    } else {
        0
    };
    format!("{r:.decimals$}×")
}

/// Every sample of one implementation on one workload, by round.
#[derive(Default)]
pub struct Series {
    /// Each round's samples.
    pub rounds: Vec<Vec<f64>>,
}

impl Series {
    /// Every sample of every round.
    pub fn all(&self) -> Vec<f64> {
        self.rounds.iter().flatten().copied().collect()
    }
    /// The median over every sample.
    pub fn median(&self) -> f64 {
        median(&self.all())
    }
    /// The lowest and highest of the rounds' medians.
    pub fn range(&self) -> String {
        let meds: Vec<f64> = self.rounds.iter().map(|r| median(r)).collect();
        let lo = meds.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = meds.iter().copied().fold(0.0, f64::max);
        format!("{}–{}", time(lo), time(hi))
    }
}
