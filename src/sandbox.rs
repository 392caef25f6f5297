//! Limits and the deadline machinery shared by the Lua and Rhai adapters (contract §5).
//!
//! Three pieces, each language-neutral so the Rhai adapter can reuse them:
//!
//! - [`Limits`]: the configurable budgets every language has (`host.limits`), with defaults a
//!   sane engine never meets; defined in [`crate::contract::limits`] beside a language's own budgets
//!   ([`RhaiLimits`](crate::contract::limits::RhaiLimits)), and enforced here.
//! - The process-wide [`watchdog`]: one thread that sets a call's [`StopSignals::expired`] flag when
//!   its deadline passes. VM interrupts (Luau `set_interrupt`, Rhai `on_progress`) only *read*
//!   that flag, because reading the clock inside an interrupt made loops ~6× slower.
//! - [`Worker`]: one VM, whose calls run on a thread of its language's [`pool`] (a VM idle
//!   between calls holds no thread); the caller waits at most deadline + grace and, past that,
//!   abandons the VM for good (it is stuck in C code).
//!
//! Host waits on something outside the process (a model call, the client's compaction) move a
//! call's deadline by their time ([`outside_deadline`], in `sandbox/outside.rs`).

pub(crate) mod alloc;
pub(crate) mod gate;
mod outside;
pub(crate) mod pool;
mod worker;

pub(crate) use outside::{crediting, outside_deadline_crediting};
pub(crate) use outside::{outside_deadline, within_deadline};
pub(crate) use worker::WorkerError;
use worker::{HostWaits, SERVING};
pub use worker::{Worker, abandoned_workers, admit_worker};

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

pub(crate) use crate::contract::limits::Limits;

/// Why an interrupt stopped a script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The call's deadline passed.
    Deadline,
    /// The caller cancelled.
    Cancelled,
}

/// The flags one VM's interrupt reads: set by the watchdog (deadline) or the caller (cancel).
#[derive(Debug, Default)]
pub struct StopSignals {
    /// Set by the watchdog when the running call's deadline passes; cleared when a call starts.
    pub expired: Arc<AtomicBool>,
    /// Set by the caller to abort; never cleared by the host.
    pub cancel: Arc<AtomicBool>,
    /// The script line where the interrupt first stopped the current call (0 = none).
    pub stop_line: AtomicU32,
}

impl StopSignals {
    /// Signals with a caller-owned cancel flag (or a fresh one).
    pub fn new(cancel: Option<Arc<AtomicBool>>) -> Self {
        StopSignals {
            expired: Arc::new(AtomicBool::new(false)),
            cancel: cancel.unwrap_or_default(),
            stop_line: AtomicU32::new(0),
        }
    }

    /// What the interrupt should do now: two relaxed loads, no clock.
    #[inline]
    pub fn check(&self) -> Option<StopReason> {
        if self.cancel.load(Ordering::Relaxed) {
            Some(StopReason::Cancelled)
        } else if self.expired.load(Ordering::Relaxed) {
            Some(StopReason::Deadline)
        } else {
            None
        }
    }

    /// Records the line of the first stop of this call.
    pub fn note_line(&self, line: Option<usize>) {
        if let Some(line) = line.and_then(|l| u32::try_from(l).ok()) {
            let _ = self
                .stop_line
                .compare_exchange(0, line, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// The line noted by [`StopSignals::note_line`] during this call.
    pub fn line(&self) -> Option<u32> {
        match self.stop_line.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    /// Starts a call on this thread: clears the deadline flag and line, and arms the watchdog
    /// (a host function the call makes may step outside the deadline: [`outside_deadline`]).
    pub fn start_call(&self, deadline: Duration) -> WatchGuard {
        self.expired.store(false, Ordering::Relaxed);
        self.stop_line.store(0, Ordering::Relaxed);
        let guard = watchdog().arm(Instant::now() + deadline, self.expired.clone());
        RUNNING.with(|r| *r.borrow_mut() = Some(Arc::clone(&guard.armed)));
        guard
    }
}

// ---------------------------------------------------------------------------------------------
// Watchdog

/// The process-wide deadline timer: one thread, many armed deadlines.
#[derive(Debug)]
pub(crate) struct Watchdog {
    shared: Arc<WatchShared>,
}

#[derive(Debug, Default)]
struct WatchShared {
    state: Mutex<WatchState>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct WatchState {
    next_id: u64,
    timers: BTreeMap<(Instant, u64), Arc<AtomicBool>>,
    /// When the watchdog thread looks at the timers next (`None`: only when notified). A new
    /// deadline later than this needs no wake-up: back-to-back calls on one VM then cost the
    /// thread a wake-up per deadline period, not per call.
    wake_at: Option<Instant>,
}

/// Disarms its deadline when dropped (the call finished in time, or failed).
#[derive(Debug)]
pub struct WatchGuard {
    armed: Arc<Mutex<Armed>>,
    shared: Arc<WatchShared>,
}

/// One armed deadline: its key in the timers (moved by [`outside_deadline`]) and its flag.
#[derive(Debug)]
struct Armed {
    key: (Instant, u64),
    flag: Arc<AtomicBool>,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        let key = self.armed.lock().key;
        self.shared.state.lock().timers.remove(&key);
        // `try_with`: a guard may be dropped while the thread's locals are torn down.
        let _ = RUNNING.try_with(|r| {
            let mut r = r.borrow_mut();
            if r.as_ref().is_some_and(|a| Arc::ptr_eq(a, &self.armed)) {
                *r = None;
            }
        });
    }
}

/// The process-wide watchdog, started on first use.
pub(crate) fn watchdog() -> &'static Watchdog {
    static WATCHDOG: OnceLock<Watchdog> = OnceLock::new();
    WATCHDOG.get_or_init(|| {
        let shared = Arc::new(WatchShared::default());
        let thread_shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("ctxhost-watchdog".into())
            .spawn(move || watch_loop(&thread_shared));
        if let Err(e) = spawned {
            // Without the thread, deadlines are still bounded by the caller's deadline + grace.
            tracing::error!("cannot start the script watchdog thread: {e}");
        }
        Watchdog { shared }
    })
}

fn watch_loop(shared: &WatchShared) {
    let mut state = shared.state.lock();
    loop {
        let now = Instant::now();
        while let Some(entry) = state.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            entry.remove().store(true, Ordering::Relaxed);
        }
        state.wake_at = state.timers.keys().next().map(|k| k.0);
        match state.wake_at {
            Some(at) => {
                shared.wake.wait_until(&mut state, at);
            }
            None => shared.wake.wait(&mut state),
        }
    }
}

impl Watchdog {
    /// Sets `flag` at `at` unless the returned guard is dropped first.
    pub(crate) fn arm(&self, at: Instant, flag: Arc<AtomicBool>) -> WatchGuard {
        let key = self.insert(at, Arc::clone(&flag));
        WatchGuard {
            armed: Arc::new(Mutex::new(Armed { key, flag })),
            shared: self.shared.clone(),
        }
    }

    fn insert(&self, at: Instant, flag: Arc<AtomicBool>) -> (Instant, u64) {
        let mut state = self.shared.state.lock();
        state.next_id += 1;
        let key = (at, state.next_id);
        let sooner = state.wake_at.is_none_or(|w| at < w);
        state.timers.insert(key, flag);
        if sooner {
            state.wake_at = Some(at);
        }
        drop(state);
        if sooner {
            self.shared.wake.notify_one();
        }
        key
    }
}

// ---------------------------------------------------------------------------------------------
// Waiting outside the deadline

thread_local! {
    /// The deadline of the script call running on this thread, if any.
    static RUNNING: std::cell::RefCell<Option<Arc<Mutex<Armed>>>> =
        const { std::cell::RefCell::new(None) };
}

#[cfg(test)]
#[path = "sandbox_tests.rs"]
mod tests;
