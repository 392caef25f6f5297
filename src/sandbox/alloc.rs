//! A counting global allocator a program installs so the host knows what each engine thread
//! allocates.
//!
//! Rhai has no allocator hook, and a value copied in native code by a plain assignment or a
//! literal (`a = [a, a]`, `` s = `${s}${s}` ``) grows where no guarded builtin sees it: without an
//! exact count, only the deadline stops such a script, and the copy in progress cannot be
//! interrupted. With [`MeteredAlloc`] as the program's global allocator, each thread's net
//! allocation ([`thread_net_bytes`]) is one thread-local add per allocation, and a Rhai engine's
//! `on_progress` check compares what its worker thread allocated during the call with the cap:
//! the script stops at its next operation, at most one native step past the cap.
//!
//! The CLI and the test binaries install it; an embedding program opts in the same way:
//!
//! ```
//! #[global_allocator]
//! static ALLOC: ctxhost::MeteredAlloc = ctxhost::MeteredAlloc;
//! # fn main() {}
//! ```
//!
//! Without it, Rhai's memory cap rests on the guarded builtins' estimates alone.

#![allow(unsafe_code)] // implementing `GlobalAlloc` is unsafe by definition; see each SAFETY note

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

/// The system allocator, counting each thread's net allocated bytes (see the module docs).
#[derive(Debug, Default, Clone, Copy)]
pub struct MeteredAlloc;

static INSTALLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    // Const-initialized and without `Drop`: no lazy registration and no allocation, so it is
    // safe to touch from inside the allocator, also while a thread is being torn down.
    static NET: Cell<isize> = const { Cell::new(0) };
}

#[inline]
fn count(delta: isize) {
    if !INSTALLED.load(Ordering::Relaxed) {
        INSTALLED.store(true, Ordering::Relaxed);
    }
    let _ = NET.try_with(|n| n.set(n.get().wrapping_add(delta)));
}

/// [`MeteredAlloc`] over another allocator than the system's: `Metered(mimalloc::MiMalloc)`
/// counts the same per-thread bytes (the CLI's choice: a replay of 200,000 messages holds
/// millions of small allocations, which glibc's malloc keeps in more memory).
#[derive(Debug, Default, Clone, Copy)]
pub struct Metered<A>(pub A);

// SAFETY: every method forwards to `System` through `Metered`, whose note holds.
unsafe impl GlobalAlloc for MeteredAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        unsafe { Metered(System).alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        unsafe { Metered(System).alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { Metered(System).dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        unsafe { Metered(System).realloc(ptr, layout, new_size) }
    }
}

// SAFETY: every method forwards to the inner allocator with the caller's own arguments, so the
// `GlobalAlloc` contract holds exactly as it does for it; counting touches only a
// const-initialized thread-local `Cell` and never allocates.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Metered<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged (see the impl's note).
        let p = unsafe { self.0.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged (see the impl's note).
        let p = unsafe { self.0.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged (see the impl's note).
        unsafe { self.0.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged (see the impl's note).
        let p = unsafe { self.0.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// Whether [`MeteredAlloc`] is the program's allocator (it has served an allocation).
pub(crate) fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

/// Bytes this thread has allocated minus the bytes it freed, since it started (0 when
/// [`MeteredAlloc`] is not installed). Memory freed by another thread than the one that
/// allocated it shifts both threads' figures; compare two readings on one thread.
pub(crate) fn thread_net_bytes() -> isize {
    NET.try_with(Cell::get).unwrap_or(0)
}
