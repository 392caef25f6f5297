//! A fast path in front of mlua's Luau interrupt.
//!
//! Luau calls its interrupt at every function call and loop back-edge. mlua's own interrupt
//! procedure wraps each of those in its callback machinery (error guard, extra-data lookup,
//! `Rc` checks) before our closure even reads the stop flags: measured, that was about a third
//! of a `recent_turns` assemble (~25 µs of ~85 µs at 10k messages). Here the interrupt pointer
//! mlua installed is kept, and a small procedure in front of it reads this VM's two stop flags
//! and only calls mlua's procedure when one is set, so stopping a script (error raised inside
//! the VM, line noted, `pcall` unable to swallow it) still goes through mlua's safe path.
//!
//! The flags are found through a thread-local keyed by the VM's `lua_Callbacks` address, set by
//! [`Fast::enter`] for the length of each call (a VM runs on whichever pool thread takes its
//! call). A VM that finds no entry of its own (one called without `enter`) always takes mlua's
//! path: slower, never wrong.

#![allow(unsafe_code)]

use std::cell::Cell;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use mlua::{Lua, ffi};

use crate::sandbox::StopSignals;

type InterruptProc = unsafe extern "C-unwind" fn(*mut ffi::lua_State, c_int);

/// The entry of the VM whose call this thread runs: plain values, so that the check at every
/// interrupt is a thread-local read and two loads (it runs at every loop back-edge).
#[derive(Clone, Copy)]
struct Installed {
    /// `lua_callbacks(L)` of the VM this entry is for (0: none).
    callbacks: usize,
    /// The VM's [`StopSignals::cancel`] and [`StopSignals::expired`] flags, kept alive by the
    /// [`Entered`] guard that set this entry.
    cancel: *const AtomicBool,
    expired: *const AtomicBool,
}

const NONE: Installed = Installed {
    callbacks: 0,
    cancel: std::ptr::null(),
    expired: std::ptr::null(),
};

/// mlua's interrupt procedure (one function for every VM: it finds the closure through the
/// VM's own extra data), called whenever a flag is set or the VM has no entry here.
static SLOW: OnceLock<InterruptProc> = OnceLock::new();

thread_local! {
    static INSTALLED: Cell<Installed> = const { Cell::new(NONE) };
}

unsafe extern "C-unwind" fn fast_interrupt(state: *mut ffi::lua_State, gc: c_int) {
    if gc >= 0 {
        // GC steps: mlua ignores them too.
        return;
    }
    // SAFETY: `state` is the running Luau thread handed to us by the VM; `lua_callbacks` only
    // reads its global state.
    let callbacks = unsafe { ffi::lua_callbacks(state) } as usize;
    let e = INSTALLED.get();
    // SAFETY: a non-zero entry's flags are kept alive by the `Entered` guard that set it, which
    // resets the entry before it lets them go.
    let quiet = callbacks != 0
        && e.callbacks == callbacks
        && unsafe { !(*e.cancel).load(Ordering::Relaxed) && !(*e.expired).load(Ordering::Relaxed) };
    if quiet {
        return;
    }
    if let Some(slow) = SLOW.get() {
        // SAFETY: `slow` is the procedure mlua installed on this VM before `speed_up` replaced
        // it; we call it exactly as Luau would have.
        unsafe { slow(state, gc) }
    }
}

/// This VM's entry for the fast path, made by [`speed_up`].
#[derive(Debug, Clone)]
pub(super) struct Fast {
    callbacks: usize,
    signals: Arc<StopSignals>,
}

/// Removes this thread's entry when the call ends (and keeps the flags it points to alive
/// until then).
pub(super) struct Entered {
    _signals: Arc<StopSignals>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let _ = INSTALLED.try_with(|cell| cell.set(NONE));
    }
}

impl Fast {
    /// Makes the fast path serve this VM on the current thread until the guard is dropped.
    pub(super) fn enter(&self) -> Entered {
        INSTALLED.set(Installed {
            callbacks: self.callbacks,
            cancel: Arc::as_ptr(&self.signals.cancel),
            expired: Arc::as_ptr(&self.signals.expired),
        });
        Entered {
            _signals: Arc::clone(&self.signals),
        }
    }
}

/// Puts the fast path in front of the interrupt mlua installed on `lua` (call right after
/// `Lua::set_interrupt`); [`Fast::enter`] then turns it on for a call. Without an mlua
/// interrupt (or one it does not know) it does nothing and gives `None`.
pub(super) fn speed_up(lua: &Lua, signals: Arc<StopSignals>) -> mlua::Result<Option<Fast>> {
    // SAFETY: `exec_raw` holds the VM lock and gives a valid state; we only read and replace
    // the interrupt pointer of its global callbacks, as `Lua::set_interrupt` itself does.
    let mut callbacks = 0usize;
    unsafe {
        lua.exec_raw::<()>((), |state| {
            let cb = ffi::lua_callbacks(state);
            let Some(slow) = (*cb).interrupt else {
                return;
            };
            let fast: InterruptProc = fast_interrupt;
            if !std::ptr::fn_addr_eq(slow, fast) {
                if !std::ptr::fn_addr_eq(*SLOW.get_or_init(|| slow), slow) {
                    // Not the procedure we know how to stand in front of: leave it alone.
                    return;
                }
                (*cb).interrupt = Some(fast);
            }
            callbacks = cb as usize;
        })
    }?;
    Ok((callbacks != 0).then_some(Fast { callbacks, signals }))
}
