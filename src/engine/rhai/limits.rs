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
