//! Admission of script calls to the machine's cores.
//!
//! A script's deadline is wall-clock time, so it only means "the script took too long" while
//! the script has a core. With a thousand sessions calling their engines at once on two cores,
//! each call would get a sliver of CPU and a clean engine would overrun its deadline (measured:
//! a 35-line Lua engine's load quarantined for "exceeded its deadline of 500 ms" at 1,000
//! concurrent sessions). So at most one script call per core runs at a time; the others wait
//! here, and a call's deadline (and its caller's deadline + grace) starts when it is admitted.
//!
//! A caller that times out releases its place even if the VM it abandoned is still stuck in
//! native code: the gate bounds the calls a host waits for, not threads it gave up on.

use std::cell::Cell;
use std::sync::OnceLock;

use parking_lot::{Condvar, Mutex};

/// A counting gate: `enter` waits for a free place.
#[derive(Debug)]
pub(crate) struct Gate {
    free: Mutex<usize>,
    freed: Condvar,
}

/// A place in the gate, given back when dropped.
#[derive(Debug)]
pub(crate) struct Place<'a> {
    gate: &'a Gate,
}

impl Gate {
    /// A gate with `places` places (at least one).
    pub(crate) fn new(places: usize) -> Self {
        Gate {
            free: Mutex::new(places.max(1)),
            freed: Condvar::new(),
        }
    }

    /// Waits for a free place and takes it.
    pub(crate) fn enter(&self) -> Place<'_> {
        let mut free = self.free.lock();
        while *free == 0 {
            self.freed.wait(&mut free);
        }
        *free -= 1;
        Place { gate: self }
    }

    /// Runs `f` with the caller's place given back meanwhile, then waits for a place again. A
    /// host function that waits on something outside the host (a model, the client's
    /// compaction) uses no core while it waits, so other scripts may run. On a thread that is
    /// not running an admitted call, it just runs `f`.
    pub(crate) fn outside<R>(&self, f: impl FnOnce() -> R) -> R {
        if !ADMITTED.get() {
            return f();
        }
        {
            *self.free.lock() += 1;
            self.freed.notify_one();
        }
        let out = f();
        let mut free = self.free.lock();
        while *free == 0 {
            self.freed.wait(&mut free);
        }
        *free -= 1;
        out
    }

    /// Places free now (for the unit tests).
    #[cfg(test)]
    pub(crate) fn free(&self) -> usize {
        *self.free.lock()
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        *self.gate.free.lock() += 1;
        self.gate.freed.notify_one();
    }
}

thread_local! {
    /// Whether this thread is running a call admitted through the gate (a VM worker's job).
    static ADMITTED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` (a job admitted through the gate, on the thread that runs it) marked as admitted,
/// so a host function inside it can step [`outside`](Gate::outside).
pub(crate) fn admitted<R>(f: impl FnOnce() -> R) -> R {
    let before = ADMITTED.replace(true);
    let out = f();
    ADMITTED.set(before);
    out
}

/// The process-wide gate every script call passes: one place per core the process may use.
pub(crate) fn cores() -> &'static Gate {
    static GATE: OnceLock<Gate> = OnceLock::new();
    GATE.get_or_init(|| {
        Gate::new(std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get))
    })
}

#[cfg(test)]
mod tests {
    use super::Gate;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn no_more_than_its_places_are_inside_at_once() {
        let gate = Arc::new(Gate::new(2));
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (gate, inside, most) = (gate.clone(), inside.clone(), most.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let _place = gate.enter();
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::yield_now();
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            assert!(t.join().is_ok());
        }
        assert_eq!(most.load(Ordering::SeqCst), 2);
        assert_eq!(gate.free(), 2);
    }

    #[test]
    fn a_call_waiting_outside_lets_another_in() {
        let gate = Arc::new(Gate::new(1));
        let place = gate.enter();
        let other = gate.clone();
        let waited = super::admitted(|| {
            gate.outside(move || {
                // Without the place given back, this would wait forever.
                let _inner = other.enter();
                "ran"
            })
        });
        assert_eq!(waited, "ran");
        assert_eq!(gate.free(), 0);
        drop(place);
        assert_eq!(gate.free(), 1);
    }

    #[test]
    fn outside_an_admitted_call_it_changes_nothing() {
        let gate = Gate::new(1);
        let _place = gate.enter();
        assert_eq!(gate.outside(|| gate.free()), 0);
        assert_eq!(gate.free(), 0);
    }
}
