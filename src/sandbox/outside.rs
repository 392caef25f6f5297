//! Waiting outside the deadline: a host function's wait on something outside the process (the
//! client's compaction, a model call) moves the running script call's deadline later by the
//! time it took ([`outside_deadline`]); host work done back inside such a wait counts again
//! ([`within_deadline`]); and host work done off a worker thread for a call running elsewhere
//! (the parent serving an isolated child) is credited only for its waits ([`crediting`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Armed, HostWaits, RUNNING, SERVING, Watchdog, gate, watchdog};

/// Runs `f` (a host function's wait on something outside the process: the client's
/// compaction, a model call) without its time counting against the running script call's
/// deadline: the deadline moves later by the time `f` took, and the worker's caller waits that
/// much longer before abandoning the VM. The script cannot run meanwhile (it is inside the host
/// function), so nothing it does escapes the deadline. A deadline that had already passed stays
/// passed. The call gives its place in the [`gate`] back while it waits. Outside a script call
/// (or off a worker thread) this is just `f()`, its time noted for [`crediting`].
pub(crate) fn outside_deadline<R>(f: impl FnOnce() -> R) -> R {
    outside_deadline_by(|| (f(), None))
}

/// [`outside_deadline`] for a stretch only part of which is a wait: `f` returns its result and
/// how much of its time was waiting on something outside the process. Only that much moves the
/// deadline; the rest counts against it, as host work in process does. An isolated child sends
/// a `host` call to its parent this way, and the parent says how much of its serving was a
/// wait (a model, the client's compaction): a script that loops over host work the parent does
/// for it meets its deadline in the child, at the next step, as it would in process.
pub(crate) fn outside_deadline_crediting<R>(f: impl FnOnce() -> (R, Duration)) -> R {
    outside_deadline_by(|| {
        let (r, waited) = f();
        (r, Some(waited))
    })
}

/// [`outside_deadline`], crediting the whole stretch (`None`) or only the wait `f` reports.
fn outside_deadline_by<R>(f: impl FnOnce() -> (R, Option<Duration>)) -> R {
    let running = RUNNING.with(|r| r.borrow().clone());
    let waits = SERVING.with(|w| w.borrow().clone());
    let Some(running) = running else {
        return credited_outside(|| f().0);
    };
    let dog = watchdog();
    let key = running.lock().key;
    let pending = dog.shared.state.lock().timers.remove(&key).is_some();
    if let Some(w) = &waits {
        w.waiting.store(true, Ordering::SeqCst);
    }
    let outer = OUTSIDE.with(|o| {
        o.borrow_mut().replace(Outside {
            key,
            since: Instant::now(),
            pending,
        })
    });
    // Waiting uses no core: another script call may run meanwhile.
    let (r, reported) = gate::cores().outside(f);
    let Some(out) = OUTSIDE.with(|o| std::mem::replace(&mut *o.borrow_mut(), outer)) else {
        return r;
    };
    back_inside(&running, waits.as_deref(), dog, &out, reported);
    r
}

/// Ends a stretch outside the deadline: the caller's wait is credited with its time (at most
/// `reported`, when the stretch said how much of it was a wait), and a deadline that had not
/// passed is armed again that much later. Returns the new deadline.
fn back_inside(
    running: &Mutex<Armed>,
    waits: Option<&HostWaits>,
    dog: &Watchdog,
    out: &Outside,
    reported: Option<Duration>,
) -> (Instant, u64) {
    let elapsed = out.since.elapsed();
    let waited = reported.map_or(elapsed, |w| w.min(elapsed));
    if let Some(w) = waits {
        let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        w.waited_ns.fetch_add(ns, Ordering::SeqCst);
        w.waiting.store(false, Ordering::SeqCst);
    }
    let mut armed = running.lock();
    if out.pending {
        let flag = Arc::clone(&armed.flag);
        armed.key = dog.insert(out.key.0 + waited, flag);
    }
    armed.key
}

/// The state of an [`outside_deadline`] wait on this thread.
#[derive(Debug)]
struct Outside {
    /// The deadline as it stood when the current stretch outside began.
    key: (Instant, u64),
    /// When the current stretch outside began.
    since: Instant,
    /// Whether the deadline had not passed yet (its timer was still armed).
    pending: bool,
}

thread_local! {
    /// The [`outside_deadline`] wait this thread is in, if any.
    static OUTSIDE: std::cell::RefCell<Option<Outside>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` back under the script call's deadline from inside an [`outside_deadline`] wait:
/// host work done after the wait (a model summarizer that failed and falls back to the
/// built-in one) is CPU work the script caused, so it counts against the call's deadline and
/// the caller abandons the worker at deadline + grace as for any native step. The deadline
/// keeps the credit of the wait before `f`. Anywhere else this is just `f()` (its time taken
/// back from a [`crediting`] wait around it).
pub(crate) fn within_deadline<R>(f: impl FnOnce() -> R) -> R {
    let running = RUNNING.with(|r| r.borrow().clone());
    let waits = SERVING.with(|w| w.borrow().clone());
    let Some(running) = running else {
        return credited_within(f);
    };
    let Some(mut out) = OUTSIDE.with(|o| o.borrow_mut().take()) else {
        return f();
    };
    let dog = watchdog();
    let key = back_inside(&running, waits.as_deref(), dog, &out, None);
    if out.pending {
        out.key = key;
    }
    let r = f();
    if out.pending {
        out.pending = dog.shared.state.lock().timers.remove(&out.key).is_some();
    }
    if let Some(w) = &waits {
        w.waiting.store(true, Ordering::SeqCst);
    }
    out.since = Instant::now();
    OUTSIDE.with(|o| *o.borrow_mut() = Some(out));
    r
}

/// Runs `f` (host work done off a worker thread for a script call running elsewhere: the
/// parent serving an isolated child's host call) and says how much of its time was waits on
/// something outside the process ([`outside_deadline`] stretches, less the work
/// [`within_deadline`] did inside them). Only that much is credited to the call's deadline, so
/// host work a child asks for counts against it as it would in process.
pub(crate) fn crediting<R>(f: impl FnOnce() -> R) -> (R, Duration) {
    let outer = CREDIT.with(|c| c.replace(Some(Credit::default())));
    let r = f();
    let got = CREDIT.with(|c| c.replace(outer)).unwrap_or_default();
    (r, got.waited)
}

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Credit {
    /// Waits so far.
    pub(super) waited: Duration,
    /// Inside an [`outside_deadline`] stretch now.
    outside: bool,
    /// Work done back under the deadline within the current stretch.
    within: Duration,
}

thread_local! {
    /// The waits of host work done under [`crediting`] on this thread.
    pub(super) static CREDIT: std::cell::Cell<Option<Credit>> = const { std::cell::Cell::new(None) };
}

/// Times `f` under `state` and then updates the credit with what it took.
fn credit_step<R>(
    state: Credit,
    f: impl FnOnce() -> R,
    after: impl Fn(Credit, Duration) -> Credit,
) -> R {
    CREDIT.with(|cell| cell.set(Some(state)));
    let t0 = Instant::now();
    let r = f();
    let took = t0.elapsed();
    CREDIT.with(|cell| {
        if let Some(c) = cell.get() {
            cell.set(Some(after(c, took)));
        }
    });
    r
}

fn credited_outside<R>(f: impl FnOnce() -> R) -> R {
    match CREDIT.with(std::cell::Cell::get) {
        Some(c) if !c.outside => {
            let start = Credit {
                outside: true,
                within: Duration::ZERO,
                ..c
            };
            credit_step(start, f, |c, took| Credit {
                waited: c.waited + took.saturating_sub(c.within),
                outside: false,
                within: Duration::ZERO,
            })
        }
        _ => f(),
    }
}

fn credited_within<R>(f: impl FnOnce() -> R) -> R {
    match CREDIT.with(std::cell::Cell::get) {
        Some(c) if c.outside => credit_step(
            Credit {
                outside: false,
                ..c
            },
            f,
            |c, took| Credit {
                outside: true,
                within: c.within + took,
                ..c
            },
        ),
        _ => f(),
    }
}
