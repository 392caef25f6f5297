//! [`Worker`]: one VM and the calls made on it, run by a thread of a [`Pool`] one at a time; the
//! caller waits at most deadline + grace and, past that, abandons the VM for good (it is stuck
//! in native code, and keeps the pool thread it runs on until that step ends).

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::gate;
use super::pool::{self, Pool};

/// What a worker's caller needs to know of the host waits of the running call.
#[derive(Debug, Default)]
pub(super) struct HostWaits {
    /// A host function of the running call is waiting now.
    pub(super) waiting: AtomicBool,
    /// Nanoseconds the call numbered [`call`](Self::call) spent in host waits so far.
    pub(super) waited_ns: AtomicU64,
    /// The number of the call whose waits `waited_ns` counts (0 before the first), set by the
    /// call's task when it starts. A caller reads these only once its call outlasts the first
    /// poll: read at every call, their line would move between the caller's core and the
    /// worker's each time.
    call: AtomicU64,
}

impl HostWaits {
    /// The call numbered `n` starts: its waits are counted from zero.
    fn begin(&self, n: u64) {
        self.waited_ns.store(0, Ordering::SeqCst);
        self.call.store(n, Ordering::SeqCst);
    }

    /// What the call numbered `n` has spent in host waits so far (nothing if it has not
    /// started).
    fn waited(&self, n: u64) -> Duration {
        if self.call.load(Ordering::SeqCst) == n {
            Duration::from_nanos(self.waited_ns.load(Ordering::SeqCst))
        } else {
            Duration::ZERO
        }
    }
}

thread_local! {
    /// The host waits of the [`Worker`] whose call this thread runs now, if any.
    pub(super) static SERVING: RefCell<Option<Arc<HostWaits>>> = const { RefCell::new(None) };
}

/// Why a [`Worker`] call produced no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerError {
    /// The call overran its hard timeout; the worker is now abandoned.
    TimedOut,
    /// The worker was abandoned earlier (never reused).
    Abandoned,
    /// The worker's VM is gone (a call panicked on it, or no thread could run it).
    Gone,
}

/// Workers abandoned after a timeout whose call has not finished yet, process-wide.
static ABANDONED_RUNNING: AtomicUsize = AtomicUsize::new(0);

/// How many abandoned workers' calls still run (each stuck in a native step past its call's
/// deadline + grace, holding a pool thread). Shown by `ctxhost doctor`; new engines are refused
/// past [`Limits::max_abandoned_workers`](crate::contract::limits::Limits::max_abandoned_workers).
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

/// A worker's life: serving, abandoned with its call still running (counted in
/// [`ABANDONED_RUNNING`]), abandoned with that call ended (no longer counted), or gone (a call
/// panicked on the VM, which is never used again).
const LIVE: u8 = 0;
const ABANDONED: u8 = 1;
const ENDED: u8 = 2;
const GONE: u8 = 3;

/// How long a caller polls for its answer before it sleeps. Waking a sleeping thread costs
/// ~20 µs on a virtual machine (the vCPU halts), more than most calls take.
const CALLER_POLL: Duration = Duration::from_micros(200);

/// How often a caller looks again while its job waits outside the deadline.
const HOST_WAIT_POLL: Duration = Duration::from_millis(50);

/// The VM a worker holds, shared with the pool task running a call on it.
struct Held<S> {
    state: Mutex<S>,
    life: AtomicU8,
    waits: Arc<HostWaits>,
}

/// One VM state `S`; calls run on a thread of its pool, one at a time, in order. Between calls
/// the VM holds no thread.
///
/// Like Zed's extension host, the caller never runs script code itself: it hands the job to a
/// pool thread and waits with a timeout, so a VM stuck in native code costs a thread, never the
/// host.
pub struct Worker<S: Send + 'static> {
    held: Arc<Held<S>>,
    pool: Arc<Pool>,
    /// Calls made so far (each call's number, for [`HostWaits`]).
    calls: AtomicU64,
}

impl<S: Send + 'static> std::fmt::Debug for Worker<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("abandoned", &self.is_abandoned())
            .finish()
    }
}

/// Where a call's answer is left for its caller.
struct Answer<R> {
    done: AtomicBool,
    value: Mutex<Option<Result<R, WorkerError>>>,
    /// The caller, once it stopped polling to sleep: only then is it woken. (Waking a
    /// polling caller, and handing over its thread handle at every call, moved the handle's
    /// line between the caller's core and the worker's at every call.)
    asleep: AtomicBool,
    caller: Mutex<Option<std::thread::Thread>>,
}

impl<R> Answer<R> {
    fn new() -> Self {
        Answer {
            done: AtomicBool::new(false),
            value: Mutex::new(None),
            asleep: AtomicBool::new(false),
            caller: Mutex::new(None),
        }
    }

    fn put(&self, r: Result<R, WorkerError>) {
        *self.value.lock() = Some(r);
        self.done.store(true, Ordering::SeqCst);
        if self.asleep.load(Ordering::SeqCst)
            && let Some(caller) = &*self.caller.lock()
        {
            caller.unpark();
        }
    }

    fn take(&self) -> Option<Result<R, WorkerError>> {
        if self.done.load(Ordering::SeqCst) {
            self.value.lock().take()
        } else {
            None
        }
    }

    /// The caller stops polling: from now on, an answer wakes it.
    fn sleep_from_now(&self) {
        *self.caller.lock() = Some(std::thread::current());
        self.asleep.store(true, Ordering::SeqCst);
    }
}

impl<S: Send + 'static> Worker<S> {
    /// A worker holding `state`, whose calls run on the threads named `name` (with
    /// `stack_bytes` of stack each). No thread is started until a call needs one.
    pub fn spawn(name: &str, stack_bytes: usize, state: S) -> Result<Self, String> {
        Ok(Worker {
            held: Arc::new(Held {
                state: Mutex::new(state),
                life: AtomicU8::new(LIVE),
                waits: Arc::new(HostWaits::default()),
            }),
            pool: Pool::named(name, stack_bytes),
            calls: AtomicU64::new(0),
        })
    }

    /// Whether the worker was abandoned after a timeout.
    pub fn is_abandoned(&self) -> bool {
        matches!(self.held.life.load(Ordering::Relaxed), ABANDONED | ENDED)
    }

    /// Runs `job` on the VM and waits at most `timeout` for its answer, plus whatever time the
    /// job spent in host waits ([`outside_deadline`](super::outside_deadline)).
    pub fn call<R: Send + 'static>(
        &self,
        timeout: Duration,
        job: impl FnOnce(&mut S) -> R + Send + 'static,
    ) -> Result<R, WorkerError> {
        match self.held.life.load(Ordering::Relaxed) {
            LIVE => {}
            GONE => return Err(WorkerError::Gone),
            _ => return Err(WorkerError::Abandoned),
        }
        // The call's clocks (its deadline, and `timeout` here) start once it has a core.
        let _place = gate::cores().enter();
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let call = Arc::new(InFlight {
            held: Arc::clone(&self.held),
            n,
            job: Mutex::new(Some(job)),
            answer: Answer::new(),
        });
        let answer = &call.answer;
        let sent = Instant::now();
        self.pool.submit(call.clone()).map_err(|e| {
            tracing::error!("{e}");
            WorkerError::Gone
        })?;
        if let Some(r) = poll(CALLER_POLL, || answer.take()) {
            return r;
        }
        answer.sleep_from_now();
        let mut until = sent + timeout;
        loop {
            loop {
                if let Some(r) = answer.take() {
                    return r;
                }
                let now = Instant::now();
                if now >= until {
                    break;
                }
                std::thread::park_timeout(until - now);
            }
            // Time the job spent waiting outside its deadline is not held against it.
            let waits = &self.held.waits;
            let waiting = waits.waiting.load(Ordering::SeqCst);
            let extended = sent + timeout + waits.waited(n);
            let now = Instant::now();
            if waiting {
                until = now + HOST_WAIT_POLL;
            } else if extended > now {
                until = extended;
            } else {
                let life = &self.held.life;
                if life
                    .compare_exchange(LIVE, ABANDONED, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    ABANDONED_RUNNING.fetch_add(1, Ordering::SeqCst);
                    // The answer came just after the last look: its task may have looked at
                    // `life` before it was abandoned, and would then never take it off the count.
                    if answer.done.load(Ordering::SeqCst) {
                        end_abandoned(life);
                    }
                }
                return Err(WorkerError::TimedOut);
            }
        }
    }
}

/// One call in flight: its job and, once run, its answer, shared by the caller and the pool
/// thread that runs it.
struct InFlight<S, F, R> {
    held: Arc<Held<S>>,
    /// The call's number (for [`HostWaits`]).
    n: u64,
    job: Mutex<Option<F>>,
    answer: Answer<R>,
}

impl<S, F, R> pool::Run for InFlight<S, F, R>
where
    S: Send + 'static,
    F: FnOnce(&mut S) -> R + Send + 'static,
    R: Send + 'static,
{
    fn run(&self) {
        let held = &self.held;
        SERVING.with(|w| *w.borrow_mut() = Some(Arc::clone(&held.waits)));
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut state = held.state.lock();
            held.waits.begin(self.n);
            let job = self.job.lock().take();
            job.map(|job| gate::admitted(|| job(&mut state)))
        }));
        SERVING.with(|w| *w.borrow_mut() = None);
        if held.life.load(Ordering::Relaxed) == LIVE {
            // Its caller may call again at once. (An abandoned VM may be dropped below,
            // which takes a while: its thread is not counted free before that.)
            pool::free_before_answer();
        }
        match out {
            Ok(Some(r)) => self.answer.put(Ok(r)),
            // Run a second time: there is no job left to answer with.
            Ok(None) => self.answer.put(Err(WorkerError::Gone)),
            Err(_) => {
                // Never used again; if it was abandoned meanwhile, its call has ended.
                if held.life.swap(GONE, Ordering::SeqCst) == ABANDONED {
                    ABANDONED_RUNNING.fetch_sub(1, Ordering::SeqCst);
                }
                self.answer.put(Err(WorkerError::Gone));
            }
        }
        // Abandoned: the stuck step has ended; it is no longer counted.
        end_abandoned(&held.life);
    }
}

/// An abandoned worker whose call has ended (its task answered) is no longer counted as
/// running. Both the task, after it answers, and a caller that abandons it just as the answer
/// comes try this: whichever comes second finds it done.
fn end_abandoned(life: &AtomicU8) {
    if life
        .compare_exchange(ABANDONED, ENDED, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
    {
        ABANDONED_RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Polls `ready` for up to `window` (spinning briefly, then yielding the core), `None` if it
/// never gave a value.
fn poll<T>(window: Duration, mut ready: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if let Some(v) = ready() {
            return Some(v);
        }
        spins += 1;
        if spins < 32 {
            std::hint::spin_loop();
            continue;
        }
        if start.elapsed() >= window {
            return None;
        }
        std::thread::yield_now();
    }
}

impl<S: Send + 'static> Drop for Worker<S> {
    fn drop(&mut self) {
        // A live VM is dropped on a pool thread (closing a VM with a large heap takes a while);
        // a call still running on an abandoned one drops it when it ends.
        if self.held.life.load(Ordering::Relaxed) == LIVE {
            let held = Arc::clone(&self.held);
            let _ = self.pool.submit(pool::task(move || drop(held)));
        }
    }
}
