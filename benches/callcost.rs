//! The fixed cost of a script call, for instruction counts: `CTXHOST_CALLS` (10) timed
//! `assemble`s of one engine on one keep-recent workload through the host path the workloads
//! bench times (the engine call and `check_assemble`), after two untimed ones (the context
//! marshalled, caches filled). Run it under `valgrind --tool=callgrind` twice, with N and a
//! larger N, and take the difference over the extra calls: what one call costs, by function.
//!
//! `cargo bench --bench callcost --no-run`, then run the binary with `CTXHOST_CALLS=10
//! CTXHOST_CALL_ENGINE=<lua no-op|lua|lua host.fit> CTXHOST_CALL_WORKLOAD=<1k|10k>`. The
//! deadline is 60 s (valgrind runs the first call, which marshals the context, ~50× slower).

use std::path::PathBuf;
use std::sync::Arc;

use ctxhost::contract::{ResultLimits, check_assemble};
use ctxhost::engine::{Engine, InstanceContext};
use serde_json::json;

mod common;

use common::workloads::{self, BUDGET};

fn fail(message: &str) -> ! {
    eprintln!("benches/callcost: {message}");
    std::process::exit(2)
}

/// Loads a Lua engine file with a deadline valgrind does not overrun.
fn lua_engine(path: &std::path::Path) -> Box<dyn Engine> {
    let limits = ctxhost::contract::limits::Limits {
        deadline_ms: 60_000,
        ..Default::default()
    };
    let opts = ctxhost::engine::LoadOptions {
        config: Arc::new(json!({})),
        limits,
        ..Default::default()
    };
    let f = ctxhost::testing::lua::load(path, &opts).unwrap_or_else(|e| fail(&e.to_string()));
    f.instantiate(&InstanceContext::default())
        .unwrap_or_else(|e| fail(&e.to_string()))
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let calls: usize = std::env::var("CTXHOST_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10);
    let engine = std::env::var("CTXHOST_CALL_ENGINE").unwrap_or_else(|_| "lua no-op".into());
    let workload = std::env::var("CTXHOST_CALL_WORKLOAD").unwrap_or_else(|_| "10k".into());
    let file = match engine.as_str() {
        "lua no-op" => "tests/fixtures/lua/noop.lua",
        "lua" => "benches/engines/keep_recent.lua",
        "lua host.fit" => "benches/engines/keep_recent_fit.lua",
        other => fail(&format!("unknown engine {other:?}")),
    };
    let out = tempfile::tempdir().unwrap_or_else(|e| fail(&format!("temp dir: {e}")));
    let loaded = workloads::generate(&common::shared_dir(), out.path())
        .unwrap_or_else(|e| fail(&format!("workloads: {e}")));
    let w = loaded
        .iter()
        .find(|w| w.spec.name == workload)
        .unwrap_or_else(|| fail(&format!("no workload {workload:?}")));
    let services = common::services();
    let call = common::call(Arc::clone(&w.messages), &services, BUDGET);
    let p = common::params(BUDGET);
    let limits = ResultLimits::default();
    let mut e = lua_engine(&root.join(file));
    timed(e.as_mut(), &call, &p, &limits, 2);
    let kept = timed(e.as_mut(), &call, &p, &limits, calls);
    // The VM is dropped on a pool thread: wait for it, so that every run counts its drop.
    drop(e);
    std::thread::sleep(std::time::Duration::from_millis(500));
    eprintln!("{engine} {workload}: {calls} calls (+2), {kept} messages kept");
}

/// `calls` assembles through the host path (the caller's side of a call, for
/// `--toggle-collect=callcost::timed`); the messages the last one kept.
#[inline(never)]
fn timed(
    e: &mut dyn Engine,
    call: &ctxhost::HostCall,
    p: &ctxhost::contract::AssembleParams,
    limits: &ResultLimits,
    calls: usize,
) -> usize {
    let mut kept = 0;
    for _ in 0..calls {
        let r = e.assemble(call, p).unwrap_or_else(|e| fail(&e.to_string()));
        check_assemble(&r, limits).unwrap_or_else(|e| fail(&e));
        kept = std::hint::black_box(r).messages.len();
    }
    kept
}
