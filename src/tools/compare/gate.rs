//! Gates (`cost<=1.05,reref>=0.9`) and the figures they compare, against a baseline or not.

use super::meter::{Figures, METRICS};

/// One condition of a gate: `metric op value`.
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    /// The figure ([`METRICS`]).
    pub metric: String,
    /// `<=`, `<`, `>=`, `>`, `==` or `!=`.
    pub op: String,
    /// The bound.
    pub value: f64,
}

impl Condition {
    /// Whether `x` meets the condition.
    pub fn holds(&self, x: f64) -> bool {
        const EPS: f64 = 1e-9;
        match self.op.as_str() {
            "<=" => x <= self.value + EPS,
            "<" => x < self.value,
            ">=" => x + EPS >= self.value,
            ">" => x > self.value,
            "==" => (x - self.value).abs() <= EPS,
            _ => (x - self.value).abs() > EPS,
        }
    }
}

impl std::fmt::Display for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}{}", self.metric, self.op, self.value)
    }
}

/// Parses `cost<=1.05,reref>=0.9,nohistory==0`.
pub fn parse_gate(text: &str) -> std::result::Result<Vec<Condition>, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some(at) = part.find(['<', '>', '=', '!']) else {
            return Err(format!(
                "`{part}` has no comparison (write metric<=N, >=, <, >, == or !=)"
            ));
        };
        let (metric, rest) = part.split_at(at);
        let op_len = if rest.len() > 1 && rest.as_bytes()[1] == b'=' {
            2
        } else {
            1
        };
        let (op, value) = rest.split_at(op_len);
        if !matches!(op, "<=" | "<" | ">=" | ">" | "==" | "!=") {
            return Err(format!("`{part}`: `{op}` is not a comparison"));
        }
        let metric = metric.trim().to_ascii_lowercase();
        if Figures::default().metric(&metric).is_none() {
            return Err(format!("`{part}`: no figure `{metric}` (one of {METRICS})"));
        }
        let value: f64 = value
            .trim()
            .parse()
            .map_err(|_| format!("`{part}`: `{}` is not a number", value.trim()))?;
        out.push(Condition {
            metric,
            op: op.to_owned(),
            value,
        });
    }
    if out.is_empty() {
        return Err("the gate names no condition".into());
    }
    Ok(out)
}

/// The figure a gate or a baseline column shows: the row's own, or its ratio to the
/// baseline's (`reref`, `rerefsearch` and `hit` are rates and stay absolute; a zero baseline gives the
/// row's value when the row is zero too, else infinity).
pub fn relative(metric: &str, row: &Figures, baseline: Option<&Figures>) -> Option<f64> {
    let x = row.metric(metric)?;
    let Some(b) = baseline else { return Some(x) };
    if matches!(
        metric,
        "reref" | "rerefsearch" | "hit" | "hitrate" | "nohistory" | "norequest" | "quarantines"
    ) {
        return Some(x);
    }
    let base = b.metric(metric)?;
    Some(if base == 0.0 {
        if x == 0.0 { 1.0 } else { f64::INFINITY }
    } else {
        x / base
    })
}
