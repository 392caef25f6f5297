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
//! - [`Worker`]: a thread that owns one VM and runs calls sent over a channel; the caller waits
//!   at most deadline + grace and, past that, abandons the VM for good (it is stuck in C code).
//!
//! Host waits on something outside the process (a model call, the client's compaction) move a
//! call's deadline by their time ([`outside_deadline`], in `sandbox/outside.rs`).

pub mod alloc;
pub mod gate;
mod outside;

pub(crate) use outside::crediting;
pub use outside::{outside_deadline, within_deadline};

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

pub use crate::contract::limits::Limits;

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
pub struct Watchdog {
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
pub fn watchdog() -> &'static Watchdog {
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
    pub fn arm(&self, at: Instant, flag: Arc<AtomicBool>) -> WatchGuard {
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
    /// The [`Worker`] this thread serves, if it is one.
    static SERVING: std::cell::RefCell<Option<Arc<HostWaits>>> =
        const { std::cell::RefCell::new(None) };
}

/// What a worker's caller needs to know of the host waits of the running call.
#[derive(Debug, Default)]
struct HostWaits {
    /// A host function of the running call is waiting now.
    waiting: AtomicBool,
    /// Nanoseconds spent in host waits on this worker, ever (callers take differences).
    waited_ns: std::sync::atomic::AtomicU64,
}

// ---------------------------------------------------------------------------------------------
// Worker

/// Why a [`Worker`] call produced no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerError {
    /// The call overran its hard timeout; the worker is now abandoned.
    TimedOut,
    /// The worker was abandoned earlier (never reused).
    Abandoned,
    /// The worker thread is gone (it panicked, or could not start).
    Gone,
}

type Job<S> = Box<dyn FnOnce(&mut S) + Send>;

/// Workers abandoned after a timeout whose thread has not finished yet, process-wide.
static ABANDONED_RUNNING: AtomicUsize = AtomicUsize::new(0);

/// How many abandoned workers' threads still run (each stuck in a native step past its call's
/// deadline + grace). Shown by `ctxhost doctor`; new engines are refused past
/// [`Limits::max_abandoned_workers`].
pub fn abandoned_workers() -> usize {
    ABANDONED_RUNNING.load(Ordering::Relaxed)
}

/// Refuses to start another engine VM while more than `max` abandoned workers still run: each
/// holds a thread (and its VM's memory) until its native step ends.
pub fn admit_worker(max: usize) -> Result<(), String> {
    let running = abandoned_workers();
    if running > max {
        return Err(format!(
            "{running} abandoned engine workers are still running (stuck past their deadline); \
             no new engine starts past host.limits.maxAbandonedWorkers = {max} until they finish"
        ));
    }
    Ok(())
}

/// A worker's life: running normally, abandoned (counted in [`ABANDONED_RUNNING`]), or its
/// thread ended after being abandoned (no longer counted).
const LIVE: u8 = 0;
const ABANDONED: u8 = 1;
const ENDED: u8 = 2;

/// How long a caller polls for its answer before it sleeps on the channel. Waking a sleeping
/// thread costs ~20 µs on a virtual machine (the vCPU halts), more than most calls take.
const CALLER_POLL: Duration = Duration::from_micros(200);

/// How long a worker polls for the next job after finishing one: calls come in bursts (ingest
/// then assemble at a turn's start; assemble again per tool-loop step), each otherwise paying a
/// wake-up. An idle worker then sleeps and costs nothing.
const WORKER_POLL: Duration = Duration::from_micros(100);

/// How often a caller looks again while its job waits outside the deadline.
const HOST_WAIT_POLL: Duration = Duration::from_millis(50);

/// Polls `ready` for up to `window` (spinning briefly, then yielding the core), `None` if it
/// never gave a value.
fn poll_then_wait<T>(window: Duration, mut ready: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if let Some(v) = ready() {
            return Some(v);
        }
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
            continue;
        }
        if start.elapsed() >= window {
            return None;
        }
        std::thread::yield_now();
    }
}

/// A thread owning one VM state `S`; calls run on it one at a time, in order.
///
/// Like Zed's extension host, the caller never runs script code itself: it sends a job and
/// waits with a timeout, so a VM stuck in C code costs a thread, never the host.
pub struct Worker<S: 'static> {
    jobs: Option<mpsc::Sender<Job<S>>>,
    abandoned: Arc<AtomicU8>,
    waits: Arc<HostWaits>,
}

impl<S: 'static> std::fmt::Debug for Worker<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field(
                "abandoned",
                &(self.abandoned.load(Ordering::Relaxed) != LIVE),
            )
            .finish()
    }
}

impl<S: Send + 'static> Worker<S> {
    /// Starts a worker thread that owns `state`.
    pub fn spawn(name: &str, stack_bytes: usize, mut state: S) -> Result<Self, String> {
        let (tx, rx) = mpsc::channel::<Job<S>>();
        let abandoned = Arc::new(AtomicU8::new(LIVE));
        let flag = abandoned.clone();
        let waits = Arc::new(HostWaits::default());
        let thread_waits = Arc::clone(&waits);
        std::thread::Builder::new()
            .name(name.into())
            .stack_size(stack_bytes)
            .spawn(move || {
                SERVING.with(|w| *w.borrow_mut() = Some(thread_waits));
                while let Some(job) =
                    poll_then_wait(WORKER_POLL, || rx.try_recv().ok()).or_else(|| rx.recv().ok())
                {
                    if flag.load(Ordering::Relaxed) != LIVE {
                        break;
                    }
                    job(&mut state);
                    if flag.load(Ordering::Relaxed) != LIVE {
                        break;
                    }
                }
                // Abandoned: the stuck step has ended, the thread goes; it is no longer counted.
                if flag
                    .compare_exchange(ABANDONED, ENDED, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    ABANDONED_RUNNING.fetch_sub(1, Ordering::Relaxed);
                }
            })
            .map_err(|e| format!("cannot start a worker thread: {e}"))?;
        Ok(Worker {
            jobs: Some(tx),
            abandoned,
            waits,
        })
    }

    /// Whether the worker was abandoned after a timeout.
    pub fn is_abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Relaxed) != LIVE
    }

    /// Runs `job` on the worker and waits at most `timeout` for its answer, plus whatever time
    /// the job spent in host waits ([`outside_deadline`]).
    pub fn call<R: Send + 'static>(
        &self,
        timeout: Duration,
        job: impl FnOnce(&mut S) -> R + Send + 'static,
    ) -> Result<R, WorkerError> {
        if self.is_abandoned() {
            return Err(WorkerError::Abandoned);
        }
        let jobs = self.jobs.as_ref().ok_or(WorkerError::Gone)?;
        // The call's clocks (its deadline, and `timeout` here) start once it has a core.
        let _place = gate::cores().enter();
        let (reply_tx, reply_rx) = mpsc::sync_channel::<R>(1);
        let boxed: Job<S> = Box::new(move |state: &mut S| {
            let _ = reply_tx.send(gate::admitted(|| job(state)));
        });
        let sent = Instant::now();
        let waited_before = self.waits.waited_ns.load(Ordering::SeqCst);
        jobs.send(boxed).map_err(|_| WorkerError::Gone)?;
        if let Some(r) = poll_then_wait(CALLER_POLL, || reply_rx.try_recv().ok()) {
            return Ok(r);
        }
        let mut until = sent + timeout;
        loop {
            match reply_rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(r) => return Ok(r),
                Err(mpsc::RecvTimeoutError::Disconnected) => return Err(WorkerError::Gone),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            // Time the job spent waiting outside its deadline is not held against it.
            let waiting = self.waits.waiting.load(Ordering::SeqCst);
            let waited = self
                .waits
                .waited_ns
                .load(Ordering::SeqCst)
                .saturating_sub(waited_before);
            let extended = sent + timeout + Duration::from_nanos(waited);
            let now = Instant::now();
            if waiting {
                until = now + HOST_WAIT_POLL;
            } else if extended > now {
                until = extended;
            } else {
                if self
                    .abandoned
                    .compare_exchange(LIVE, ABANDONED, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    ABANDONED_RUNNING.fetch_add(1, Ordering::Relaxed);
                }
                return Err(WorkerError::TimedOut);
            }
        }
    }
}

impl<S: 'static> Drop for Worker<S> {
    fn drop(&mut self) {
        // Closing the channel ends the thread after its current job; never join (it may be stuck).
        self.jobs.take();
    }
}

#[cfg(test)]
#[path = "sandbox_tests.rs"]
mod tests;
