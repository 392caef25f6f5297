//! [`HostForward`]: where a `host` function runs when the VM is not in the host's process.
//!
//! An engine VM in a child process (`host.isolation: "process"`, see [`crate::engine::isolation`]) runs
//! the `host` functions that only read what the child holds (`host.tokens`,
//! `host.repairPairing`, `host.now`) itself, and sends the others (`host.complete`,
//! `host.search`, `host.fetch`, `host.delegateCompaction`, `host.log.*`) to the parent, which
//! runs them through the same [`API`](super::API) table against its own [`HostCall`](super::HostCall).
//! A [`HostCall`](super::HostCall) carries the forwarder; [`HostScope::run`](super::HostScope::run)
//! asks it first.

use super::table::{Args, HostFn};
use super::value::{HostError, HostOut};

/// Sends chosen `host` functions elsewhere (to the parent of a child-process VM).
pub trait HostForward: Send + Sync + std::fmt::Debug {
    /// Whether `f` runs elsewhere rather than here.
    fn forwards(&self, f: &HostFn) -> bool;
    /// Runs `f` elsewhere, as the script called it by `name`, on converted `args`.
    fn forward(&self, f: &HostFn, name: &str, args: Args) -> Result<HostOut, HostError>;
}
