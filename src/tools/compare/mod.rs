//! The policy lab behind `ctxhost compare`: the same recorded conversations replayed through
//! several engines (and windows), measured in what a team pays and what the model still sees.
//!
//! # Prefix reuse (what the provider's prompt cache can serve)
//!
//! Each model call is a sequence of *blocks*: the `systemPromptAddition` first (when the engine
//! returned one; it goes into the system prompt, ahead of every message), then the assembled
//! messages in order. Two blocks are identical when they are the same kind and equal as values
//! (a message's id, role and every content block; the addition's text). A call's **cached**
//! tokens are the host-counted tokens of its longest run of leading blocks identical to the
//! previous call's leading blocks (the previous call of the same conversation; the first call
//! has none); the rest are **fresh**. This is the ideal block-granular cache: a provider that
//! caches at finer granularity can serve a little more of a changed block, one with minimum
//! cacheable lengths or expiry a little less. The static system prompt is the same for every
//! engine and is not counted.
//!
//! A **cache break** is a call (after the first) whose cached tokens are less than
//! `break_share` (default 0.9) of the previous call's tokens. Its cause, checked in this order:
//! `compaction` (a summary the session did not hold at the previous call), `fallback` (the
//! answering engine changed), `system-prompt-addition` (the addition differs), `pruned-tool-result`
//! (the first differing block is a tool result the previous call sent and this one sent changed
//! or not at all), else `engine-cut` (the engine left out or reordered messages).
//!
//! # Re-references
//!
//! At each turn's first call, every identifier (`find_identifiers`: paths, hashes, UUIDs,
//! issue numbers, function names) of the user's request that an earlier message of the
//! conversation already named is a re-reference; it is **found** when the call's context
//! (any sent message other than the request, or the addition) contains it verbatim.

mod calls;
mod gate;
mod meter;
mod prefix;
mod prices;
mod run;
mod totals;

pub use calls::{BlockEntry, CallEntry, CallLog, CallRecorder, PREVIEW_CHARS};
pub use gate::{Condition, parse_gate, relative};
pub use meter::{Figures, METRICS, Meter};
pub use prefix::{Block, Shape, break_cause, shape, shared_prefix};
pub use prices::{DEFAULT_MODEL, Prices, default_prices, load_prices};
pub use run::{CompareOptions, Job, Row, run, run_job};
pub use totals::{Total, totals};

/// The version of `compare --json`'s schema, bumped on any incompatible change.
pub const SCHEMA: &str = "ctxhost.compare/1";

/// The default share of the previous call's tokens a call must reuse not to count as a break.
pub const DEFAULT_BREAK_SHARE: f64 = 0.9;

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
