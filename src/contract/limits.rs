//! The budgets an engine runs under and where it runs, as plain data: configuration reads
//! them from `host.limits` and `host.isolation`, and the engines, the sandbox and process
//! isolation obey them. This module imports nothing of this crate's but the contract's
//! [`ResultLimits`], so configuration and the engines both depend on it and not on each other.
//!
//! - [`Limits`]: what every script engine has, whatever its language (deadline, grace, memory,
//!   result caps).
//! - [`RhaiLimits`]: Rhai's own budgets (operations, call and expression nesting).
//! - [`HostLimits`]: both, as `host.limits` writes them (one flat map of keys).
//! - [`Isolation`]: a worker thread of this process, or a child process per engine instance.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::contract::ResultLimits;

/// Stack of each VM's worker thread: room for Luau's C recursion, Rhai's recursive evaluator at
/// its call-level limit, and the host's converters.
pub const WORKER_STACK: usize = 16 << 20;

/// Budgets every script engine has, whatever its language; configured under `host.limits`
/// (see [`HostLimits`], which also holds Rhai's own budgets).
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Wall-clock deadline of one lifecycle call, in ms. Default 500. A breach stops the script
    /// at its next call or loop iteration (even inside `pcall`, coroutines or pattern matching)
    /// and fails the call with kind `Deadline` (the engine is quarantined, the call re-runs on
    /// `legacy`).
    pub deadline_ms: u64,
    /// Extra time, in ms, the caller waits past the deadline (it also covers the host's own
    /// marshalling). Default 1000. A call still running then (stuck in C code) has its VM
    /// abandoned for good and fails with kind `Deadline`.
    pub grace_ms: u64,
    /// Memory cap of one engine VM, in bytes, on top of what the host itself puts into the VM
    /// (resident messages). Default 256 MiB. A breach fails the call with kind `Memory`.
    pub memory_bytes: usize,
    /// Caps on results (messages, total bytes, text bytes); see [`ResultLimits`]. A breach fails
    /// the call with kind `InvalidResult`.
    pub results: ResultLimits,
    /// Abandoned workers (calls given up after deadline + grace whose thread still runs, stuck
    /// in native code) the process tolerates. Default 8. Past it, loading or starting an engine
    /// is refused with kind `Limit` until some of them finish
    /// ([`abandoned_workers`](crate::engine::sandbox::abandoned_workers)).
    pub max_abandoned_workers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline_ms: 500,
            grace_ms: 1000,
            memory_bytes: 256 << 20,
            results: ResultLimits::default(),
            max_abandoned_workers: 8,
        }
    }
}

impl Limits {
    /// The per-call deadline.
    pub fn deadline(&self) -> Duration {
        Duration::from_millis(self.deadline_ms)
    }

    /// How long a caller waits for a call before abandoning the VM: deadline + grace.
    pub fn hard_timeout(&self) -> Duration {
        Duration::from_millis(self.deadline_ms.saturating_add(self.grace_ms))
    }
}

/// Budgets only Rhai engines have; defaults a sane engine never meets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RhaiLimits {
    /// Operations one call may run. Default 100,000,000 (a few seconds of Rhai, far past the
    /// deadline). A breach fails the call with kind `Limit`.
    pub max_operations: u64,
    /// Deepest function call nesting. Default 64. A breach fails the call with kind `Limit`.
    /// (Luau has its own fixed stack limit; runaway recursion there also gives `Limit`.)
    pub max_call_levels: usize,
    /// Deepest expression nesting at compile time. Default 64. A breach fails the load with
    /// kind `Syntax`.
    pub max_expr_depth: usize,
}

impl Default for RhaiLimits {
    fn default() -> Self {
        RhaiLimits {
            max_operations: 100_000_000,
            max_call_levels: 64,
            max_expr_depth: 64,
        }
    }
}

/// The highest `maxCallLevels` accepted: each level of Rhai's recursive evaluator takes worker
/// stack, and a level can hold an expression nested `maxExprDepth` deep, so past this a
/// runaway recursion could overflow the worker's stack (aborting the host) before Rhai's own
/// limit stops it. Checked with [`RhaiLimits::check`].
pub const MAX_CALL_LEVELS_CEILING: usize = 256;

/// The highest `maxExprDepth` accepted: the parser (on the loading thread) and the evaluator
/// recurse once per level.
pub const MAX_EXPR_DEPTH_CEILING: usize = 256;

/// The most worker stack, in bytes, Rhai's evaluator may be allowed to reach: half the worker's
/// stack (the rest is for the host's converters and slack).
const EVAL_STACK_BUDGET: usize = WORKER_STACK / 2;

/// Worst-case stack of one script call level and of one expression level, in bytes, measured
/// on a debug build (where frames are largest) with a margin.
const CALL_LEVEL_STACK: usize = 8 << 10;
const EXPR_LEVEL_STACK: usize = 1 << 10;

/// A configured Rhai limit that cannot work: the key (as written in `host.limits`) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitError {
    /// The key under `host.limits`.
    pub key: &'static str,
    /// What is wrong and the accepted range.
    pub message: String,
}

impl RhaiLimits {
    /// Refuses limits that would disable a budget (0 means "none" to Rhai) or let a script
    /// overflow the worker thread's stack.
    pub fn check(&self) -> Result<(), LimitError> {
        let err = |key, message| Err(LimitError { key, message });
        if self.max_operations == 0 {
            return err(
                "maxOperations",
                "must be at least 1 (0 would mean no operation budget)".into(),
            );
        }
        if self.max_call_levels == 0 || self.max_call_levels > MAX_CALL_LEVELS_CEILING {
            return err(
                "maxCallLevels",
                format!(
                    "{} is outside 1..={MAX_CALL_LEVELS_CEILING} (deeper calls could overflow the engine's {} MiB worker stack)",
                    self.max_call_levels,
                    WORKER_STACK >> 20
                ),
            );
        }
        if self.max_expr_depth == 0 || self.max_expr_depth > MAX_EXPR_DEPTH_CEILING {
            return err(
                "maxExprDepth",
                format!(
                    "{} is outside 1..={MAX_EXPR_DEPTH_CEILING} (deeper expressions could overflow the stack while loading or running)",
                    self.max_expr_depth
                ),
            );
        }
        let worst = self
            .max_call_levels
            .saturating_mul(CALL_LEVEL_STACK + self.max_expr_depth * EXPR_LEVEL_STACK);
        if worst > EVAL_STACK_BUDGET {
            return err(
                "maxCallLevels",
                format!(
                    "{} call levels with maxExprDepth {} could take {} MiB of the engine's {} MiB worker stack; at most {} MiB may be used: lower one of them",
                    self.max_call_levels,
                    self.max_expr_depth,
                    worst >> 20,
                    WORKER_STACK >> 20,
                    EVAL_STACK_BUDGET >> 20
                ),
            );
        }
        Ok(())
    }
}

/// `host.limits`: the budgets every script engine has and Rhai's own, written as one flat map
/// of keys (`deadlineMs`, `graceMs`, `memoryBytes`, `results`, `maxAbandonedWorkers`,
/// `maxOperations`, `maxCallLevels`, `maxExprDepth`); every key is optional.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "LimitsKeys", into = "LimitsKeys")]
pub struct HostLimits {
    /// Deadline, grace, memory and result caps, for engines in any language.
    pub script: Limits,
    /// Operation and nesting budgets, for Rhai engines only.
    pub rhai: RhaiLimits,
}

/// `host.limits` as written; [`Limits`] and [`RhaiLimits`] document each key.
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
struct LimitsKeys {
    deadline_ms: u64,
    grace_ms: u64,
    memory_bytes: usize,
    results: ResultLimits,
    max_operations: u64,
    max_call_levels: usize,
    max_expr_depth: usize,
    max_abandoned_workers: usize,
}

impl Default for LimitsKeys {
    fn default() -> Self {
        HostLimits::default().into()
    }
}

impl From<LimitsKeys> for HostLimits {
    fn from(k: LimitsKeys) -> Self {
        HostLimits {
            script: Limits {
                deadline_ms: k.deadline_ms,
                grace_ms: k.grace_ms,
                memory_bytes: k.memory_bytes,
                results: k.results,
                max_abandoned_workers: k.max_abandoned_workers,
            },
            rhai: RhaiLimits {
                max_operations: k.max_operations,
                max_call_levels: k.max_call_levels,
                max_expr_depth: k.max_expr_depth,
            },
        }
    }
}

impl From<HostLimits> for LimitsKeys {
    fn from(l: HostLimits) -> Self {
        LimitsKeys {
            deadline_ms: l.script.deadline_ms,
            grace_ms: l.script.grace_ms,
            memory_bytes: l.script.memory_bytes,
            results: l.script.results,
            max_operations: l.rhai.max_operations,
            max_call_levels: l.rhai.max_call_levels,
            max_expr_depth: l.rhai.max_expr_depth,
            max_abandoned_workers: l.script.max_abandoned_workers,
        }
    }
}

/// Where engine VMs run (`host.isolation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Isolation {
    /// On a worker thread of the host's process (default).
    #[default]
    Thread,
    /// In a child process per engine instance, killed at deadline + grace.
    Process,
}

impl<'de> Deserialize<'de> for Isolation {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.as_str() {
            "thread" => Ok(Isolation::Thread),
            "process" => Ok(Isolation::Process),
            other => Err(serde::de::Error::custom(format!(
                "host.isolation must be \"thread\" or \"process\", not \"{other}\""
            ))),
        }
    }
}

impl std::fmt::Display for Isolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Isolation::Thread => "thread",
            Isolation::Process => "process",
        })
    }
}

impl std::str::FromStr for Isolation {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "thread" => Ok(Isolation::Thread),
            "process" => Ok(Isolation::Process),
            other => Err(format!(
                "isolation must be \"thread\" or \"process\", not \"{other}\""
            )),
        }
    }
}
