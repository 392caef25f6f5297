//! The memory cap of a Rhai engine (`host.limits.memoryBytes`), for the VM's whole life.
//!
//! Rhai has no allocator hook, and its own data-size limits re-measure a whole container after
//! every change to it (building one is O(N²)). So the cap is kept by a [`Meter`], O(1) per
//! operation:
//!
//! - **Kept** memory: what the engine holds between calls, i.e. its state `this` (Rhai functions
//!   see no other variables that outlive a call), measured after every call by [`held`]
//!   (O(state), the same walk saving the state already costs). A call that leaves more than the
//!   cap kept fails with kind `Memory`.
//! - **Grown** memory: what a call adds, charged by the host's guarded versions of every
//!   builtin that grows a value ([`super::guards`]: `+=` and `+` on strings, arrays, blobs and
//!   maps, `push`, `append`, `insert`, `pad`, `blob`, `replace`, `split`, `to_array`, `to_string`
//!   of numbers for keys made by interpolation). A guarded builtin refuses a single step that
//!   would pass the cap *before* it allocates; the running total is read by the `on_progress`
//!   callback (one relaxed load), which stops the script at its next operation.
//!
//! - **Allocated** memory, where the program installed the counting allocator
//!   ([`crate::engine::sandbox::alloc`]): what the worker thread allocated during the call, net of what
//!   it freed, read by the same `on_progress` check. It sees what no guarded builtin does
//!   (copies by plain assignment and literals, `a = [a, a]`; interpolation), so such a script
//!   stops at its next operation, one native step past the cap at most.
//!
//! Charges are estimates on the high side (an array slot is counted as 32 bytes: a `Dynamic` and
//! the slack of a doubling `Vec`; a string or map entry as its bytes plus 64). Grown bytes are
//! not returned when a temporary is dropped, so a call that builds and drops more than the cap
//! in growth operations is stopped too; a sane engine builds a few MB per call.

use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

use rhai::{Dynamic, EvalAltResult, Position};

use super::messages::{MessageList, ScriptMessage};
use crate::engine::sandbox::alloc;

/// Bytes charged per array slot: a 16-byte `Dynamic` plus the slack of a doubling `Vec`.
pub(super) const SLOT: usize = 32;

/// Bytes charged per allocation (a string, a map entry) on top of its contents.
pub(super) const ENTRY: usize = 64;

/// The termination token `on_progress` returns when the meter is over the cap.
pub(super) const OVER_CAP: &str = "ctxhost: memory cap";

/// One engine's memory account (see the module docs).
#[derive(Debug)]
pub(super) struct Meter {
    cap: usize,
    kept: AtomicUsize,
    grown: AtomicUsize,
    /// The worker thread's net allocation when the call started ([`alloc::thread_net_bytes`]).
    allocated_at_start: AtomicIsize,
}

impl Meter {
    /// A meter for a cap of `cap` bytes.
    pub(super) fn new(cap: usize) -> Self {
        Meter {
            cap,
            kept: AtomicUsize::new(0),
            grown: AtomicUsize::new(0),
            allocated_at_start: AtomicIsize::new(0),
        }
    }

    /// The cap, in bytes.
    pub(super) fn cap(&self) -> usize {
        self.cap
    }

    /// Starts a call: nothing grown yet. Runs on the VM's worker thread, like every call.
    pub(super) fn start_call(&self) {
        self.grown.store(0, Ordering::Relaxed);
        self.allocated_at_start
            .store(alloc::thread_net_bytes(), Ordering::Relaxed);
    }

    /// Bytes the worker thread allocated (net) since the call started, when the counting
    /// allocator is installed; read on the worker thread.
    fn allocated(&self) -> usize {
        if !alloc::installed() {
            return 0;
        }
        let start = self.allocated_at_start.load(Ordering::Relaxed);
        usize::try_from(alloc::thread_net_bytes().saturating_sub(start)).unwrap_or(0)
    }

    /// Records what the engine keeps between calls.
    pub(super) fn set_kept(&self, bytes: usize) {
        self.kept.store(bytes, Ordering::Relaxed);
    }

    /// Bytes counted now (kept + grown this call).
    pub(super) fn in_use(&self) -> usize {
        self.kept
            .load(Ordering::Relaxed)
            .saturating_add(self.grown.load(Ordering::Relaxed))
    }

    /// Whether the count, or what the call allocated, is past the cap (read by `on_progress` at
    /// every operation, on the worker thread).
    #[inline]
    pub(super) fn over(&self) -> bool {
        let kept = self.kept.load(Ordering::Relaxed);
        self.in_use() > self.cap || kept.saturating_add(self.allocated()) > self.cap
    }

    /// Refuses a step that would add `bytes` past the cap, before it allocates.
    pub(super) fn check(&self, bytes: usize, what: &str) -> Result<(), Box<EvalAltResult>> {
        let in_use = self.in_use();
        if in_use.saturating_add(bytes) > self.cap {
            return Err(too_large(format!(
                "{what} needs {bytes} bytes with {in_use} already in use"
            )));
        }
        Ok(())
    }

    /// Checks then counts `bytes` added by a step.
    pub(super) fn charge(&self, bytes: usize, what: &str) -> Result<(), Box<EvalAltResult>> {
        self.check(bytes, what)?;
        self.add(bytes);
        Ok(())
    }

    /// Counts `bytes` without a check (where an error cannot be raised; `on_progress` stops the
    /// script at its next operation).
    pub(super) fn add(&self, bytes: usize) {
        let _ = self
            .grown
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |g| {
                Some(g.saturating_add(bytes))
            });
    }
}

/// The error a refused step raises (classified as kind `Memory`).
pub(super) fn too_large(text: String) -> Box<EvalAltResult> {
    EvalAltResult::ErrorDataTooLarge(text, Position::NONE).into()
}

/// Bytes one value adds where it is stored, counting its own contents but not nested containers'
/// (O(1)): a string its bytes, a blob its bytes, an array or map its slots.
pub(super) fn shallow(v: &Dynamic) -> usize {
    if let Ok(s) = v.as_immutable_string_ref() {
        return s.len().saturating_add(ENTRY);
    }
    if let Ok(b) = v.as_blob_ref() {
        return b.len().saturating_add(ENTRY);
    }
    if let Ok(a) = v.as_array_ref() {
        return a.len().saturating_mul(SLOT).saturating_add(ENTRY);
    }
    if let Ok(m) = v.as_map_ref() {
        return m.len().saturating_mul(ENTRY + SLOT).saturating_add(ENTRY);
    }
    SLOT
}

/// Bytes held by a value and everything in it (host messages excepted: the host's own data does
/// not count against the engine's cap). Shared values count once per reference, cycles once.
pub(super) fn held(v: &Dynamic) -> usize {
    held_in(v, 0)
}

fn held_in(v: &Dynamic, depth: usize) -> usize {
    if depth > 256 || v.is::<ScriptMessage>() || v.is::<MessageList>() {
        return SLOT;
    }
    if v.is_shared() {
        return match v.read_lock::<Dynamic>() {
            Some(inner) => held_in(&inner, depth + 1),
            None => SLOT,
        };
    }
    if let Ok(a) = v.as_array_ref() {
        let items: usize = a.iter().map(|i| held_in(i, depth + 1)).sum();
        return items.saturating_add(ENTRY);
    }
    if let Ok(m) = v.as_map_ref() {
        let items: usize = m
            .iter()
            .map(|(k, i)| held_in(i, depth + 1) + k.len() + ENTRY)
            .sum();
        return items.saturating_add(ENTRY);
    }
    shallow(v)
}
