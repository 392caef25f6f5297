//! A script call's cost against how far apart the host has placed this machine's CPUs.
//!
//! On a virtual machine the host may run the two vCPUs on cores close together at times (a
//! cache line's round trip between them measured 60–90 ns here) and far apart at others
//! (330–360 ns), and a call hands its job from the caller's thread to a pool thread and back:
//! every cache line both touch moves between the two cores. This bench alternates a 10 ms
//! measure of that round trip (two threads pinned to CPUs 0 and 1 pass one line back and forth)
//! with 100 ms of back-to-back `assemble`s of a Luau engine on the 10k keep-recent workload
//! through the host path the workloads bench times. It prints each window, then the median of
//! the windows' call medians where the round trip was near (< 150 ns before and after the
//! window) and where it was far (> 250 ns): the difference over the round trips' difference is
//! about how many line round trips a call makes.
//!
//! `cargo bench --bench crosscore`, with `CTXHOST_BENCH_SECS` (20) and `CTXHOST_CALL_ENGINE`
//! (`lua no-op`, or `lua` for keep-recent). Needs two CPUs.

// Pinning a thread to a CPU is one libc call (`sched_setaffinity`); no crate of the project's
// dependencies offers it.
#![allow(unsafe_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ctxhost::contract::{ResultLimits, check_assemble};
use ctxhost::engine::{Engine, InstanceContext};
use serde_json::json;

mod common;

use common::workloads::{self, BUDGET};

/// A round trip at most this long: the CPUs are near.
const NEAR_NS: f64 = 150.0;
/// A round trip at least this long: the CPUs are far apart.
const FAR_NS: f64 = 250.0;

fn fail(message: &str) -> ! {
    eprintln!("benches/crosscore: {message}");
    std::process::exit(2)
}

unsafe extern "C" {
    fn sched_setaffinity(pid: i32, size: usize, mask: *const u64) -> i32;
}

/// Keeps the calling thread on `cpus` (a bit mask of CPUs 0–63).
fn pin(cpus: u64) {
    let mask: [u64; 16] = {
        let mut m = [0; 16];
        m[0] = cpus;
        m
    };
    // SAFETY: `mask` is a valid cpu_set_t of 128 bytes for the whole call; pid 0 is this thread.
    let rc = unsafe { sched_setaffinity(0, std::mem::size_of_val(&mask), mask.as_ptr()) };
    if rc != 0 {
        fail(&format!("cannot pin a thread to CPUs {cpus:#b}"));
    }
}

/// The line passed back and forth: odd values are the measuring thread's, even the echo's.
static LINE: AtomicU64 = AtomicU64::new(0);
/// Whether the echo thread answers now (between measures it sleeps).
static ECHO: AtomicBool = AtomicBool::new(false);

/// The echo thread, on CPU 1: turns each odd value of [`LINE`] even.
fn echo() {
    pin(0b10);
    loop {
        if ECHO.load(Ordering::Acquire) {
            let v = LINE.load(Ordering::Acquire);
            if v & 1 == 1 {
                LINE.store(v + 1, Ordering::Release);
            }
            std::hint::spin_loop();
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The median round trip of [`LINE`] between CPU 0 (this thread, for the measure) and CPU 1,
/// in nanoseconds, over 10 ms.
fn round_trip_ns() -> f64 {
    pin(0b01);
    ECHO.store(true, Ordering::Release);
    std::thread::sleep(Duration::from_millis(2));
    let mut samples = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(10) {
        let t = Instant::now();
        for _ in 0..100 {
            let v = LINE.load(Ordering::Acquire) | 1;
            LINE.store(v, Ordering::Release);
            while LINE.load(Ordering::Acquire) == v {
                std::hint::spin_loop();
            }
        }
        samples.push(t.elapsed().as_nanos() as f64 / 100.0);
    }
    ECHO.store(false, Ordering::Release);
    pin(0b11);
    median(&mut samples)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn lua_engine(path: &std::path::Path) -> Box<dyn Engine> {
    let opts = ctxhost::engine::LoadOptions {
        config: Arc::new(json!({})),
        ..Default::default()
    };
    let f = ctxhost::testing::lua::load(path, &opts).unwrap_or_else(|e| fail(&e.to_string()));
    f.instantiate(&InstanceContext::default())
        .unwrap_or_else(|e| fail(&e.to_string()))
}

fn main() {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        fail("needs two CPUs");
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let secs: u64 = std::env::var("CTXHOST_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let engine = std::env::var("CTXHOST_CALL_ENGINE").unwrap_or_else(|_| "lua no-op".into());
    let file = match engine.as_str() {
        "lua no-op" => "tests/fixtures/lua/noop.lua",
        "lua" => "benches/engines/keep_recent.lua",
        other => fail(&format!("unknown engine {other:?}")),
    };
    std::thread::spawn(echo);
    let out = tempfile::tempdir().unwrap_or_else(|e| fail(&format!("temp dir: {e}")));
    let loaded = workloads::generate(&common::shared_dir(), out.path())
        .unwrap_or_else(|e| fail(&format!("workloads: {e}")));
    let w = loaded
        .iter()
        .find(|w| w.spec.name == "10k")
        .unwrap_or_else(|| fail("no workload 10k"));
    let services = common::services();
    let call = common::call(Arc::clone(&w.messages), &services, BUDGET);
    let p = common::params(BUDGET);
    let limits = ResultLimits::default();
    let mut e = lua_engine(&root.join(file));
    let (mut near, mut far) = (Vec::new(), Vec::new());
    let start = Instant::now();
    println!("{engine}, 10k: per window, the line's round trip before and after, and the calls");
    while start.elapsed().as_secs() < secs {
        let before = round_trip_ns();
        let mut calls = Vec::new();
        let window = Instant::now();
        while window.elapsed() < Duration::from_millis(100) {
            let t = Instant::now();
            let r = e
                .assemble(&call, &p)
                .unwrap_or_else(|e| fail(&e.to_string()));
            check_assemble(&r, &limits).unwrap_or_else(|e| fail(&e));
            std::hint::black_box(r);
            calls.push(t.elapsed().as_nanos() as f64 / 1000.0);
        }
        let after = round_trip_ns();
        let n = calls.len();
        let p50 = median(&mut calls);
        println!("round trip {before:4.0} ns, {after:4.0} ns: {n:6} calls, median {p50:5.2} µs");
        if before < NEAR_NS && after < NEAR_NS {
            near.push(p50);
        } else if before > FAR_NS && after > FAR_NS {
            far.push(p50);
        }
    }
    let summary = |v: &mut Vec<f64>| match v.len() {
        0 => "no window".to_string(),
        n => format!("{:.2} µs ({n} windows)", median(v)),
    };
    println!(
        "{engine}, 10k: median call where the CPUs were near (< {NEAR_NS} ns): {}; far apart (> {FAR_NS} ns): {}",
        summary(&mut near),
        summary(&mut far)
    );
}
