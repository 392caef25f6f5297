//! Benchmarks others can compare with: the "keep-recent fit" of `shared/data/workloads` (1,000
//! and 10,000 flat messages of real pi-mono sessions, budget 32,000 tokens), which LangChain's
//! `trim_messages`, a plain Python loop and plain JavaScript were measured on, run by ctxhost
//! through the whole host path of `assemble`: params in, engine call, result validated
//! (`contract::check_assemble`) and mapped back to the host's own messages.
//!
//! - `keep_recent [lua, 1k|10k]`: `benches/engines/keep_recent.lua` in the Luau adapter, the
//!   session resident in the VM (the first, untimed call marshals it).
//! - `keep_recent [rhai, 1k|10k]`: its twin `benches/engines/keep_recent.rhai`.
//! - `keep_recent [rust, 1k|10k]`: the same policy as a native [`Engine`]
//!   (`benches/common/workloads.rs`).
//!
//! Every engine computes the workload's token rule itself (ceil(chars / 4), chars in code
//! points), cached per message id, so a timed call is a context already seen, as in a tool
//! loop. The workloads are generated at startup by `python3 build_workload.py <tempdir>`. Before
//! anything is timed, each engine's result (on its first and on a second call) must be the
//! reference output (messages kept, first index, tokens), or the bench stops. At the end a table
//! puts criterion's medians beside the reference medians as ratios of time.
//!
//! `cargo bench --bench workloads`; set `CTXHOST_SHARED` when `../shared` is elsewhere.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use criterion::Criterion;
use ctxhost::contract::{AssembleParams, AssembleResult, ResultLimits, check_assemble};
use ctxhost::engine::Engine;
use ctxhost::engine::api::HostCall;

mod common;

use common::workloads::{self, BUDGET, Spec, implementations};

/// Stops the bench with a message.
fn fail(message: &str) -> ! {
    eprintln!("benches/workloads: {message}");
    std::process::exit(2)
}

/// One `assemble` through the host path: the engine call and the host's check of its result.
fn assemble(
    e: &mut dyn Engine,
    call: &HostCall,
    p: &AssembleParams,
    limits: &ResultLimits,
) -> Result<AssembleResult, String> {
    let r = e.assemble(call, p).map_err(|e| e.to_string())?;
    check_assemble(&r, limits)?;
    Ok(r)
}

/// Criterion's output directory, as criterion finds it when run by `cargo bench`.
fn criterion_dir(root: &Path) -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => PathBuf::from(t).join("criterion"),
        None => root.join("target/criterion"),
    }
}

/// The median (seconds) criterion saved for `id` in this run (a file older than `since` is from
/// an earlier run, e.g. when a filter skipped the bench).
fn median(dir: &Path, id: &str, since: SystemTime) -> Result<f64, String> {
    let path = dir.join(id).join("new/estimates.json");
    let fresh = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if fresh < since {
        return Err(format!("{} is from an earlier run", path.display()));
    }
    let raw = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_slice(&raw).map_err(|e| format!("{}: {e}", path.display()))?;
    v["median"]["point_estimate"]
        .as_f64()
        .map(|ns| ns * 1e-9)
        .ok_or_else(|| format!("{}: no median.point_estimate", path.display()))
}

/// A time with a unit that keeps three significant digits readable.
fn time(s: f64) -> String {
    match s {
        s if s >= 1e-3 => format!("{:.3} ms", s * 1e3),
        s if s >= 1e-6 => format!("{:.2} µs", s * 1e6),
        s => format!("{:.0} ns", s * 1e9),
    }
}

/// A ratio with two significant digits.
fn ratio(r: f64) -> String {
    let decimals = if r > 0.0 {
        (1 - r.log10().floor() as i32).max(0) as usize
    } else {
        0
    };
    format!("{r:.decimals$}×")
}

fn table(root: &Path, ids: &[(String, &'static str, Spec)], since: SystemTime) {
    let dir = criterion_dir(root);
    println!();
    println!(
        "keep-recent fit, criterion medians beside the reference medians of \
         shared/data/workloads (ratio = our time / theirs; below 1× is faster):"
    );
    for (id, engine, spec) in ids {
        match median(&dir, id, since) {
            Ok(m) => println!(
                "  {engine} {}: {} = {} LangChain, {} Python, {} JS",
                spec.name,
                time(m),
                ratio(m / spec.langchain_s),
                ratio(m / spec.python_s),
                ratio(m / spec.js_s),
            ),
            Err(e) => println!("  {engine} {}: not measured in this run ({e})", spec.name),
        }
    }
    println!(
        "  reference: LangChain trim_messages 0.353 ms / 3.36 ms, plain Python 21.7 µs / \
         5.67 µs, plain JS 3.16 µs / 0.99 µs (1k / 10k)"
    );
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let shared = common::shared_dir();
    let out = tempfile::tempdir().unwrap_or_else(|e| fail(&format!("temp dir: {e}")));
    let loaded = workloads::generate(&shared, out.path()).unwrap_or_else(|e| {
        fail(&format!(
            "cannot build the workloads from {} (set CTXHOST_SHARED): {e}",
            shared.display()
        ))
    });
    drop(out);

    let services = common::services();
    let p = common::params(BUDGET);
    let limits = ResultLimits::default();

    // Load every engine and check it against the reference before anything is timed.
    let mut runs = Vec::new();
    for w in &loaded {
        let call = common::call(Arc::clone(&w.messages), &services, BUDGET);
        for (engine, make) in implementations() {
            let mut e = make(&root);
            for pass in ["first", "second"] {
                let r = assemble(e.as_mut(), &call, &p, &limits).unwrap_or_else(|err| {
                    fail(&format!(
                        "keep_recent [{engine}, {}] {pass} call: {err}",
                        w.spec.name
                    ))
                });
                let got = workloads::check(engine, w, &r).unwrap_or_else(|err| fail(&err));
                if pass == "first" {
                    eprintln!(
                        "keep_recent [{engine}, {}]: {} messages kept from index {}, {} tokens \
                         (the reference)",
                        w.spec.name, got.kept, got.first, got.tokens
                    );
                }
            }
            runs.push((engine, w.spec, call.clone(), e));
        }
    }

    let since = SystemTime::now();
    let mut c = Criterion::default().configure_from_args();
    let mut ids = Vec::new();
    for (engine, spec, call, mut e) in runs {
        let id = format!("keep_recent [{engine}, {}]", spec.name);
        c.bench_function(&id, |b| {
            b.iter(|| {
                black_box(assemble(e.as_mut(), &call, &p, &limits).unwrap_or_else(|err| fail(&err)))
            })
        });
        ids.push((id, engine, spec));
    }
    c.final_summary();
    table(&root, &ids, since);
}
