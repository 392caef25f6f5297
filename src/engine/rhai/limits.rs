//! Rhai's own budgets, on top of the [`Limits`](crate::sandbox::Limits) every script engine has.
//! They are configured under `host.limits` beside the shared ones (`maxOperations`,
//! `maxCallLevels`, `maxExprDepth`; see [`crate::config::HostLimits`]) and given to
//! [`load`](super::load), which keeps them with the compiled program for every instance.

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
const EVAL_STACK_BUDGET: usize = crate::engine::script::WORKER_STACK / 2;

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
                    crate::engine::script::WORKER_STACK >> 20
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
                    crate::engine::script::WORKER_STACK >> 20,
                    EVAL_STACK_BUDGET >> 20
                ),
            );
        }
        Ok(())
    }
}
