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
//!
//! Direct hand-off: each thread has its own slot ([`Direct`]). A caller that knows which thread
//! served its VM's last call (a [`Worker`](super::Worker) keeps it) and finds that thread still
//! polling puts its task straight into the thread's slot: one cache line changes hands, no lock
//! or queue is shared with the other callers. A thread whose slot is taken leaves the pool's
//! waiting count and makes sure every queued task still has a thread to take it.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicIsize, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

/// A unit of work for a pool thread.
pub(crate) type Task = Box<dyn FnOnce() + Send>;

/// How long a thread polls for the next task after finishing one before it sleeps. Waking a
/// sleeping thread costs ~20 µs on a virtual machine (the vCPU halts), more than most calls.
const POLL: Duration = Duration::from_micros(100);

/// Spins of a poll before it yields the core between looks. Spinning longer does not pay: on
/// an idle machine a yield returns at once, and on a busy one a spinning thread keeps the core
/// from the thread it waits for (measured: a no-op call 18 µs yielding, 37 µs spinning 20 µs,
/// at load average 8 on 2 cores).
pub(super) const SPINS: u32 = 64;

/// How long a thread sleeps without a task before it ends.
pub(crate) const IDLE_EXIT: Duration = Duration::from_secs(5);

/// [`Direct`] states: the thread runs a task, sleeps or has ended (a caller must queue).
const BUSY: u8 = 0;
/// The thread polls for its next task: a caller may claim the slot.
const POLLING: u8 = 1;
/// A caller claimed the slot and is putting its task in.
const CLAIMED: u8 = 2;
/// A task is in the slot for the thread to take.
const FULL: u8 = 3;

/// One pool thread's own hand-off slot (see the module docs).
#[derive(Default)]
pub(crate) struct Direct {
    state: AtomicU8,
    task: Mutex<Option<Task>>,
}

impl std::fmt::Debug for Direct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Direct")
            .field("state", &self.state.load(Ordering::Relaxed))
            .finish()
    }
}

impl Direct {
    /// Hands `task` to this slot's thread if it is polling now; gives the task back if not.
    pub(crate) fn try_put(&self, task: Task) -> Result<(), Task> {
        if self.state.load(Ordering::Relaxed) != POLLING
            || self
                .state
                .compare_exchange(POLLING, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return Err(task);
        }
        *self.task.lock() = Some(task);
        self.state.store(FULL, Ordering::Release);
        Ok(())
    }

    /// Stops taking direct tasks: `None` when none was claimed, else the claimed task (waited
    /// for: its caller is between claiming the slot and filling it).
    fn close(&self) -> Option<Task> {
        if self
            .state
            .compare_exchange(POLLING, BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return None;
        }
        self.take()
    }

    /// The task of a claimed slot, once filled; the slot is then busy.
    fn take(&self) -> Option<Task> {
        let mut spins = 0u32;
        while self.state.load(Ordering::Acquire) != FULL {
            // Its caller may have lost its core between claiming and filling the slot.
            spins += 1;
            if spins < SPINS {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let task = self.task.lock().take();
        self.state.store(BUSY, Ordering::Relaxed);
        task
    }
}

thread_local! {
    /// The direct slot of the pool thread this is (none on other threads).
    static CURRENT: RefCell<Option<Arc<Direct>>> = const { RefCell::new(None) };
}

/// The direct slot of the pool thread running the caller (for a task to say where its VM's
/// next call may go).
pub(crate) fn current_direct() -> Option<Arc<Direct>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Every pool of the process, by thread name and stack size.
type Pools = HashMap<(String, usize), Arc<Pool>>;

/// The threads of one pool (one per thread name and stack size), started on demand.
#[derive(Debug)]
pub(crate) struct Pool {
    name: String,
    stack: usize,
    state: Mutex<PoolState>,
    ready: Condvar,
    /// Tasks queued and not yet taken, read by polling threads without the lock. Changed just
    /// after the lock is released, so that a polling thread that sees a task rarely finds the
    /// lock still held (a thread that waits for a `parking_lot` lock may sleep, and waking it
    /// costs more than the hand-off); it may run a moment behind the queue, never wrongly:
    /// threads look at the queue itself under the lock before they sleep.
    queued: AtomicIsize,
}

#[derive(Default)]
struct PoolState {
    queue: VecDeque<Task>,
    /// Threads between tasks (polling or asleep).
    waiting: usize,
    /// Threads asleep on `ready`.
    asleep: usize,
    /// Threads alive.
    threads: usize,
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
                        state: Mutex::new(PoolState::default()),
                        ready: Condvar::new(),
                        queued: AtomicIsize::new(0),
                    })
                }),
        )
    }

    /// Threads alive in this pool now (for the unit tests).
    #[cfg(test)]
    pub(crate) fn threads(&self) -> usize {
        self.state.lock().threads
    }

    /// Queues `task` for a thread of the pool: a polling thread takes it, else a sleeping one
    /// is woken, else a new thread is started. Fails only when no thread could be started and
    /// none is left to take it.
    pub(crate) fn submit(self: &Arc<Self>, task: Task) -> Result<(), String> {
        let mut s = self.state.lock();
        s.queue.push_back(task);
        self.dispatch(s, 1)
    }

    /// After `added` tasks were queued (0: a waiting thread took a direct task instead), sees
    /// that each queued task has a thread to take it: a polling one, else a sleeping one woken,
    /// else a new one.
    fn dispatch(
        self: &Arc<Self>,
        mut s: MutexGuard<'_, PoolState>,
        added: isize,
    ) -> Result<(), String> {
        let queued = s.queue.len();
        if s.waiting >= queued {
            let wake = s.waiting - s.asleep < queued && s.asleep > 0;
            drop(s);
            if added > 0 {
                self.queued.fetch_add(added, Ordering::Release);
            }
            if wake {
                self.ready.notify_one();
            }
            return Ok(());
        }
        // No thread is free for it: start one, counted as waiting until it takes a task.
        s.threads += 1;
        s.waiting += 1;
        drop(s);
        if added > 0 {
            self.queued.fetch_add(added, Ordering::Release);
        }
        let pool = Arc::clone(self);
        let started = std::thread::Builder::new()
            .name(self.name.clone())
            .stack_size(self.stack)
            .spawn(move || pool.serve());
        if let Err(e) = started {
            let mut s = self.state.lock();
            s.threads -= 1;
            s.waiting -= 1;
            if s.threads == 0 {
                // Nobody is left to take what is queued: give it back (its caller sees `Gone`).
                let dropped = s.queue.len();
                s.queue.clear();
                self.queued
                    .fetch_sub(isize::try_from(dropped).unwrap_or(0), Ordering::Release);
            }
            return Err(format!("cannot start a {} thread: {e}", self.name));
        }
        Ok(())
    }

    /// A pool thread's life: take tasks (queued, or put in its direct slot while it polls),
    /// poll briefly after each, sleep, end when idle.
    fn serve(self: Arc<Self>) {
        let direct = Arc::new(Direct::default());
        CURRENT.with(|c| *c.borrow_mut() = Some(Arc::clone(&direct)));
        let mut s = self.state.lock();
        loop {
            if let Some(task) = s.queue.pop_front() {
                s.waiting -= 1;
                drop(s);
                self.queued.fetch_sub(1, Ordering::Release);
                let mut next = Some(task);
                while let Some(task) = next.take() {
                    // A task reports its own failures; one that panics must not end the thread
                    // with the pool's counts wrong.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task));
                    self.state.lock().waiting += 1;
                    next = self.poll(&direct);
                    if next.is_some() {
                        // Taken directly: no longer waiting; what is queued needs another thread.
                        let mut s = self.state.lock();
                        s.waiting -= 1;
                        if !s.queue.is_empty() {
                            let _ = self.dispatch(s, 0);
                        }
                    }
                }
                s = self.state.lock();
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

    /// Polls for a task for up to [`POLL`], spinning first, then yielding the core: a task put
    /// in `direct` is returned; a queued one is left for the caller to take from the queue.
    fn poll(&self, direct: &Direct) -> Option<Task> {
        direct.state.store(POLLING, Ordering::Release);
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if direct.state.load(Ordering::Acquire) != POLLING {
                return direct.take();
            }
            if self.queued.load(Ordering::Acquire) > 0 {
                return direct.close();
            }
            spins += 1;
            if spins < SPINS {
                std::hint::spin_loop();
                continue;
            }
            if start.elapsed() >= POLL {
                return direct.close();
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
            pool.submit(Box::new(move || {
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
        pool.submit(Box::new(move || {
            let _ = wait.recv();
        }))
        .unwrap();
        pool.submit(Box::new(move || tx.send("ran").unwrap()))
            .unwrap();
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
        pool.submit(Box::new(|| panic!("task failed"))).unwrap();
        let (tx, rx) = mpsc::channel();
        pool.submit(Box::new(move || tx.send(1).unwrap())).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), 1);
    }

    #[test]
    fn a_polling_thread_takes_a_task_put_in_its_slot() {
        let pool = Pool::named("test-pool-direct", 1 << 20);
        let (tx, rx) = mpsc::channel();
        let first = tx.clone();
        pool.submit(Box::new(move || {
            let me = (std::thread::current().id(), current_direct());
            first.send(me).unwrap();
        }))
        .unwrap();
        let (thread, direct) = rx.recv().unwrap();
        let direct = direct.expect("a pool thread has a direct slot");
        // The thread polls for a while after each task: hand it the task directly, and give it
        // a queued no-op to run (then poll again) whenever the slot refuses, in case a busy
        // machine kept this thread away past the poll.
        let mut taken = false;
        let mut task: Task = Box::new(move || {
            tx.send((std::thread::current().id(), None)).unwrap();
        });
        for _ in 0..1000 {
            match direct.try_put(task) {
                Ok(()) => {
                    taken = true;
                    break;
                }
                Err(back) => task = back,
            }
            pool.submit(Box::new(|| {})).unwrap();
            std::thread::yield_now();
        }
        assert!(taken, "the slot never took a task");
        let (ran_on, _) = rx.recv().unwrap();
        assert_eq!(ran_on, thread, "the task ran on the slot's own thread");
    }

    #[test]
    fn a_slot_whose_thread_is_not_polling_gives_the_task_back() {
        let direct = Direct::default();
        let (tx, rx) = mpsc::channel::<()>();
        let back = direct.try_put(Box::new(move || tx.send(()).unwrap()));
        let task = back.expect_err("no thread polls this slot");
        task();
        assert!(rx.try_recv().is_ok(), "the task given back is the one put");
    }
}
