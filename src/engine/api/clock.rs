//! `host.now()`: milliseconds since the Unix epoch, for logs and timing (engines must not let it
//! decide what the model sees).

use std::time::{SystemTime, UNIX_EPOCH};

use super::table::{Args, Ctx};
use super::value::{HostError, HostOut};

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

/// `host.now()`.
pub(super) fn now(_cx: &Ctx<'_>, _args: Args) -> Result<HostOut, HostError> {
    Ok(HostOut::Number(now_ms()))
}
