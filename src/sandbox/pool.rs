//! The threads that run engine VMs.
//!
//! A VM is a value a [`Worker`](super::Worker) holds between calls; a call borrows a thread of
//! its language's pool for its length. A VM idle in a session holds no thread, so a process
//! serving a thousand sessions runs as many pool threads as it has calls in flight: at most one
//! running script per core ([`gate`](super::gate)), plus calls waiting outside their deadline
//! (a model call) and calls given up past deadline + grace, whose thread stays with the stuck
//! native step until it ends.
//!
//! Hand-off: a thread that finished a task polls for the next one for [`POLL`] before it
//! sleeps (calls come in bursts: ingest then assemble at a turn's start, assemble again per
//! tool-loop step), a sleeping thread is woken only when no polling thread can take the task,
//! and a task no thread is free for starts a new one. A thread idle for [`IDLE_EXIT`] ends.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// A unit of work for a pool thread, shared with whoever waits for it (a worker's call keeps
/// its job and its answer in one allocation: two, made on the caller's core and freed on the
/// pool thread's, moved their lines and the allocator's between the cores at every call).
pub(crate) type Task = Arc<dyn Run>;

/// What a pool thread runs; run once.
pub(crate) trait Run: Send + Sync {
    /// Does the work.
    fn run(&self);
}

/// A closure as a [`Task`].
pub(crate) fn task(f: impl FnOnce() + Send + 'static) -> Task {
    Arc::new(Once(Mutex::new(Some(f))))
}

/// A closure run at most once.
struct Once<F>(Mutex<Option<F>>);

impl<F: FnOnce() + Send> Run for Once<F> {
    fn run(&self) {
        if let Some(f) = self.0.lock().take() {
            f();
        }
    }
}

/// How long a thread polls for the next task after finishing one before it sleeps. Waking a
/// sleeping thread costs ~20 µs on a virtual machine (the vCPU halts), more than most calls.
const POLL: Duration = Duration::from_micros(100);

/// How long a thread sleeps without a task before it ends.
pub(crate) const IDLE_EXIT: Duration = Duration::from_secs(5);

thread_local! {
    /// The pool this thread serves (none on a thread that is not a pool's).
    static SERVING_POOL: RefCell<Option<Arc<Pool>>> = const { RefCell::new(None) };
    /// Whether the running task has already counted its thread free ([`free_before_answer`]).
    static COUNTED_FREE: Cell<bool> = const { Cell::new(false) };
}

/// Counts the calling pool thread free for the next task, from inside a task about to hand its
/// answer back. Counted only after the task returned, the caller's next call could be queued
/// first, find no thread free and start one (measured: 3 threads took turns serving one Luau
/// caller's calls in the workloads bench, 2 with this).
pub(crate) fn free_before_answer() {
    if COUNTED_FREE.get() {
        return;
    }
    SERVING_POOL.with(|p| {
        if let Some(pool) = &*p.borrow() {
            pool.hand_off.state.lock().waiting += 1;
            COUNTED_FREE.set(true);
        }
    });
}

/// Every pool of the process, by thread name and stack size.
type Pools = HashMap<(String, usize), Arc<Pool>>;

/// The threads of one pool (one per thread name and stack size), started on demand.
#[derive(Debug)]
pub(crate) struct Pool {
    hand_off: HandOff,
    ready: Condvar,
    name: String,
    stack: usize,
}

/// What a caller and a polling thread both touch at each hand-off, in one cache line. Spread
/// over three lines, each hand-off moved each of them between the caller's core and the
/// thread's, which costs most where the cores are far apart (measured: 340 ns a line's round
/// trip between this machine's two vCPUs at times, 60 ns at others).
#[derive(Debug)]
#[repr(C, align(64))]
struct HandOff {
    state: Mutex<PoolState>,
    /// Tasks queued and not yet taken, read by polling threads without the lock. Changed just
    /// after the lock is released, so that a polling thread that sees a task rarely finds the
    /// lock still held (a thread that waits for a `parking_lot` lock may sleep, and waking it
    /// costs more than the hand-off); it may run a moment behind the queue, never wrongly:
    /// threads look at the queue itself under the lock before they sleep.
    queued: AtomicIsize,
}

const _: () = assert!(
    std::mem::size_of::<HandOff>() == 64,
    "the hand-off fills one line"
);

#[derive(Default)]
struct PoolState {
    queue: VecDeque<Task>,
    /// Threads between tasks (polling or asleep).
    waiting: u32,
    /// Threads asleep on `ready`.
    asleep: u32,
    /// Threads alive.
    threads: u32,
}

impl std::fmt::Debug for PoolState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolState")
            .field("queued", &self.queue.len())
            .field("waiting", &self.waiting)
            .field("asleep", &self.asleep)
            .field("threads", &self.threads)
            .finish()
    }
}

impl Pool {
    /// The process-wide pool of threads named `name` with `stack` bytes of stack.
    pub(crate) fn named(name: &str, stack: usize) -> Arc<Pool> {
        static POOLS: OnceLock<Mutex<Pools>> = OnceLock::new();
        let pools = POOLS.get_or_init(Default::default);
        Arc::clone(
            pools
                .lock()
                .entry((name.to_owned(), stack))
                .or_insert_with(|| {
                    Arc::new(Pool {
                        name: name.to_owned(),
                        stack,
                        hand_off: HandOff {
                            state: Mutex::new(PoolState::default()),
                            queued: AtomicIsize::new(0),
                        },
                        ready: Condvar::new(),
                    })
                }),
        )
    }

    /// Threads alive in this pool now (for the unit tests).
    #[cfg(test)]
    pub(crate) fn threads(&self) -> u32 {
        self.hand_off.state.lock().threads
    }

    /// Queues `task` for a thread of the pool: a polling thread takes it, else a sleeping one
    /// is woken, else a new thread is started. Fails only when no thread could be started and
    /// none is left to take it.
    pub(crate) fn submit(self: &Arc<Self>, task: Task) -> Result<(), String> {
        let mut s = self.hand_off.state.lock();
        s.queue.push_back(task);
        let queued = s.queue.len();
        let (waiting, asleep) = (s.waiting as usize, s.asleep as usize);
        if waiting >= queued {
            let wake = waiting - asleep < queued && asleep > 0;
            drop(s);
            self.hand_off.queued.fetch_add(1, Ordering::Release);
            if wake {
                self.ready.notify_one();
            }
            return Ok(());
        }
        // No thread is free for it: start one, counted as waiting until it takes a task.
        s.threads += 1;
        s.waiting += 1;
        drop(s);
        self.hand_off.queued.fetch_add(1, Ordering::Release);
        let pool = Arc::clone(self);
        let started = std::thread::Builder::new()
            .name(self.name.clone())
            .stack_size(self.stack)
            .spawn(move || pool.serve());
        if let Err(e) = started {
            let mut s = self.hand_off.state.lock();
            s.threads -= 1;
            s.waiting -= 1;
            if s.threads == 0 {
                // Nobody is left to take what is queued: give it back (its caller sees `Gone`).
                let dropped = s.queue.len();
                s.queue.clear();
                self.hand_off
                    .queued
                    .fetch_sub(isize::try_from(dropped).unwrap_or(0), Ordering::Release);
            }
            return Err(format!("cannot start a {} thread: {e}", self.name));
        }
        Ok(())
    }

    /// A pool thread's life: take tasks, poll briefly after each, sleep, end when idle.
    fn serve(self: Arc<Self>) {
        SERVING_POOL.with(|p| *p.borrow_mut() = Some(Arc::clone(&self)));
        let mut s = self.hand_off.state.lock();
        loop {
            if let Some(task) = s.queue.pop_front() {
                s.waiting -= 1;
                drop(s);
                self.hand_off.queued.fetch_sub(1, Ordering::Release);
                // A task reports its own failures; one that panics must not end the thread
                // with the pool's counts wrong.
                COUNTED_FREE.set(false);
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task.run()));
                drop(task);
                if !COUNTED_FREE.replace(false) {
                    self.hand_off.state.lock().waiting += 1;
                }
                self.poll();
                s = self.hand_off.state.lock();
                continue;
            }
            s.asleep += 1;
            let timed_out = self.ready.wait_for(&mut s, IDLE_EXIT).timed_out();
            s.asleep -= 1;
            if timed_out && s.queue.is_empty() {
                s.waiting -= 1;
                s.threads -= 1;
                return;
            }
        }
    }

    /// Polls for a queued task for up to [`POLL`], spinning first, then yielding the core.
    fn poll(&self) {
        let start = Instant::now();
        let mut spins = 0u32;
        while self.hand_off.queued.load(Ordering::Acquire) <= 0 {
            spins += 1;
            if spins < 32 {
                std::hint::spin_loop();
                continue;
            }
            if start.elapsed() >= POLL {
                return;
            }
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn tasks_run_on_named_threads_started_on_demand() {
        let pool = Pool::named("test-pool-named", 1 << 20);
        let (tx, rx) = mpsc::channel();
        for i in 0..4 {
            let tx = tx.clone();
            pool.submit(task(move || {
                let name = std::thread::current().name().map(str::to_owned);
                tx.send((i, name)).unwrap();
            }))
            .unwrap();
        }
        let mut got: Vec<_> = (0..4).map(|_| rx.recv().unwrap()).collect();
        got.sort();
        for (i, (n, name)) in got.into_iter().enumerate() {
            assert_eq!(n, i);
            assert_eq!(name.as_deref(), Some("test-pool-named"));
        }
        assert!(pool.threads() >= 1);
    }

    #[test]
    fn a_blocked_task_does_not_hold_up_the_next() {
        let pool = Pool::named("test-pool-blocked", 1 << 20);
        let (release, wait) = mpsc::channel::<()>();
        let (tx, rx) = mpsc::channel();
        pool.submit(task(move || {
            let _ = wait.recv();
        }))
        .unwrap();
        pool.submit(task(move || tx.send("ran").unwrap())).unwrap();
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            "ran",
            "a second thread took the task"
        );
        assert!(pool.threads() >= 2);
        release.send(()).unwrap();
    }

    #[test]
    fn a_panicking_task_leaves_the_pool_serving() {
        let pool = Pool::named("test-pool-panic", 1 << 20);
        pool.submit(task(|| panic!("task failed"))).unwrap();
        let (tx, rx) = mpsc::channel();
        pool.submit(task(move || tx.send(1).unwrap())).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), 1);
    }
}
