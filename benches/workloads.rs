//! Benchmarks others can compare with, measured side by side in one run: the "keep-recent fit"
//! of `shared/data/workloads` (1,000 and 10,000 flat messages of real pi-mono sessions, budget
//! 32,000 tokens) by ctxhost through the whole host path of `assemble` (params in, engine call,
//! result validated by `contract::check_assemble` and mapped back to the host's own messages),
//! and by its peers, run by this bench as they are (`benches/peers/`):
//!
//! - `python`: the policy as a plain Python loop (`keep_recent.py`);
//! - `langchain`: LangChain's `trim_messages` (strategy `last`, the workload's token rule as its
//!   counter) on the same messages, when `langchain-core` is installed (else left out);
//! - `node`: the policy as plain JavaScript (`keep_recent.mjs`), when `node` is on the PATH.
//!
//! ctxhost's engines: `benches/engines/keep_recent.lua` in the Luau adapter, its Rhai twin, the
//! same policy as a native Rust [`Engine`] (`benches/common/workloads.rs`), and the no-op engines
//! of `tests/fixtures` (the adapters' fixed cost of a call on the same sessions). Every engine
//! computes the token rule itself (ceil(chars / 4), chars in code points), cached per message id,
//! so a timed call is a context already seen, as in a tool loop. Before anything is timed, each
//! policy's result (ctxhost's on a first and a second call, the peers' own) must be the reference
//! output (messages kept, first index, tokens), or the bench stops; LangChain's is printed (it
//! keeps no tool call with its result, so it may keep one message more).
//!
//! The run alternates: peers, ctxhost, peers, ctxhost, ... for `CTXHOST_BENCH_ROUNDS` rounds (3).
//! Every implementation is timed the same way: a sample is the mean time of as many calls as fill
//! 20 ms, 15 samples a round. The table at the end holds medians over every sample of this run,
//! the range of the rounds' medians, and the ratios of medians; nothing is copied from another run.
//!
//! `cargo bench --bench workloads`; set `CTXHOST_SHARED` when `../shared` is elsewhere, and
//! `CTXHOST_BENCH_ONLY=<name>` to time only the ctxhost engines whose name holds it (no peers).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use ctxhost::HostCall;
use ctxhost::contract::{AssembleParams, AssembleResult, ResultLimits, check_assemble};
use ctxhost::engine::Engine;

mod common;

use common::timing::{SAMPLE, SAMPLES, Series, ratio, sample, time};
use common::workloads::{self, BUDGET, Outcome, implementations};

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

/// What one peer printed for one workload.
#[derive(Debug, serde::Deserialize)]
struct PeerLine {
    #[serde(rename = "impl")]
    name: String,
    kept: Option<usize>,
    first: Option<usize>,
    tokens: Option<u64>,
    samples: Option<Vec<f64>>,
    missing: Option<String>,
}

/// Runs one peer program on a workload file; each line it prints is one implementation.
fn run_peer(program: &str, script: &Path, file: &Path) -> Result<Vec<PeerLine>, String> {
    let out = Command::new(program)
        .arg(script)
        .arg(file)
        .arg(BUDGET.to_string())
        .arg(SAMPLES.to_string())
        .arg(SAMPLE.as_millis().to_string())
        .output()
        .map_err(|e| format!("{program} {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{program} {} failed ({}): {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).map_err(|e| format!("{program} printed {l:?}: {e}")))
        .collect()
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let shared = common::shared_dir();
    let rounds: usize = std::env::var("CTXHOST_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3)
        .max(1);
    let out = tempfile::tempdir().unwrap_or_else(|e| fail(&format!("temp dir: {e}")));
    let loaded = workloads::generate(&shared, out.path()).unwrap_or_else(|e| {
        fail(&format!(
            "cannot build the workloads from {} (set CTXHOST_SHARED): {e}",
            shared.display()
        ))
    });

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
            runs.push((engine.to_owned(), w.spec, call.clone(), e));
        }
        for (lang, make) in [
            ("lua", common::lua_engine as common::EngineFn),
            ("rhai", common::rhai_engine),
        ] {
            let mut e = make(&root.join(format!("tests/fixtures/{lang}/noop.{lang}")));
            assemble(e.as_mut(), &call, &p, &limits).unwrap_or_else(|err| fail(&err));
            runs.push((format!("{lang} no-op"), w.spec, call.clone(), e));
        }
    }

    // `CTXHOST_BENCH_ONLY=rhai` times only the engines whose name holds it, and no peer (for
    // profiling one engine); the table then says so by leaving the peers out.
    let only = std::env::var("CTXHOST_BENCH_ONLY").ok();
    if let Some(only) = &only {
        runs.retain(|(engine, ..)| engine.contains(only.as_str()));
    }
    let peers_dir = root.join("benches/peers");
    let node = Command::new("node").arg("--version").output().is_ok();
    let mut series: BTreeMap<(String, &'static str), Series> = BTreeMap::new();
    let mut notes: BTreeMap<String, String> = BTreeMap::new();
    for round in 1..=rounds {
        eprintln!("round {round} of {rounds}: peers");
        for w in loaded.iter().filter(|_| only.is_none()) {
            let file = out.path().join(w.spec.file);
            let mut lines = run_peer("python3", &peers_dir.join("keep_recent.py"), &file)
                .unwrap_or_else(|e| fail(&e));
            if node {
                lines.extend(
                    run_peer("node", &peers_dir.join("keep_recent.mjs"), &file)
                        .unwrap_or_else(|e| fail(&e)),
                );
            } else {
                notes.insert("node".into(), "node is not on the PATH".into());
            }
            for l in lines {
                if let Some(why) = l.missing {
                    notes.insert(l.name, why);
                    continue;
                }
                let got = Outcome {
                    kept: l.kept.unwrap_or_default(),
                    first: l.first.unwrap_or_default(),
                    tokens: l.tokens.unwrap_or_default(),
                };
                if got != w.spec.reference {
                    let what = format!(
                        "{} {} kept {} messages from index {} ({} tokens)",
                        l.name, w.spec.name, got.kept, got.first, got.tokens
                    );
                    if l.name == "langchain" {
                        notes.insert(format!("langchain {}", w.spec.name), what);
                    } else {
                        fail(&format!("{what}; the reference is {:?}", w.spec.reference));
                    }
                }
                series
                    .entry((l.name, w.spec.name))
                    .or_default()
                    .rounds
                    .push(l.samples.unwrap_or_default());
            }
        }
        eprintln!("round {round} of {rounds}: ctxhost");
        for (engine, spec, call, e) in &mut runs {
            let samples = sample(|| {
                black_box(assemble(e.as_mut(), call, &p, &limits).unwrap_or_else(|err| fail(&err)));
            });
            series
                .entry((engine.clone(), spec.name))
                .or_default()
                .rounds
                .push(samples);
        }
    }
    drop(out);
    table(&series, &notes, rounds);
}

/// The ratio table of this run.
fn table(
    series: &BTreeMap<(String, &'static str), Series>,
    notes: &BTreeMap<String, String>,
    rounds: usize,
) {
    let peer = |name: &str, w: &'static str| series.get(&(name.to_owned(), w)).map(Series::median);
    println!();
    println!(
        "keep-recent fit, B = {BUDGET} tokens: medians of {rounds} rounds x {SAMPLES} samples of \
         this run (range: the rounds' medians); ratio = ctxhost's median / the peer's median, \
         below 1× is faster"
    );
    println!();
    println!("| implementation | workload | median | rounds | ÷ LangChain | ÷ Python | ÷ Node |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let order = [
        "lua",
        "rhai",
        "lua host.fit",
        "rhai host::fit",
        "rust",
        "lua no-op",
        "rhai no-op",
        "python",
        "node",
        "langchain",
    ];
    for spec in workloads::SPECS {
        for name in order {
            let Some(s) = series.get(&(name.to_owned(), spec.name)) else {
                continue;
            };
            let m = s.median();
            let vs = |p: &str| match peer(p, spec.name) {
                Some(pm) if !matches!(name, "python" | "node" | "langchain") => ratio(m / pm),
                _ => "".into(),
            };
            println!(
                "| {name} | {} | {} | {} | {} | {} | {} |",
                spec.name,
                time(m),
                s.range(),
                vs("langchain"),
                vs("python"),
                vs("node")
            );
        }
    }
    for (k, v) in notes {
        println!("\nnote ({k}): {v}");
    }
}
