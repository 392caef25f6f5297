//! What a hook costs (issue 22 item 9): the keep-recent fit of `shared/data/workloads` (1,000
//! and 10,000 flat messages, budget 32,000 tokens) as one engine
//! (`benches/engines/keep_recent.{lua,rhai}`, as `benches/workloads.rs` times it) and as a
//! `pipeline` of hooks doing the same (`benches/common/pipeline.rs`): the fit alone as one
//! `project` hook, and the fit among four cheap hooks of the other kinds (a `collect` adding one
//! small block, a `project` that changes nothing, a `prune` that keeps the list, an
//! `afterAppend` observer), in Lua and in Rhai. Each is one `assemble` through the host path
//! (the engine call and `contract::check_assemble`), on a context already seen (as in a tool
//! loop). Before anything is timed, every implementation's first and second results must be
//! the reference output (messages kept, first index, tokens), or the bench stops.
//!
//! The run alternates the implementations for `CTXHOST_BENCH_ROUNDS` rounds (3), each timed as
//! `benches/workloads.rs` times its own (`common::timing`); the table holds medians over every
//! sample of this run and the range of the rounds' medians.
//!
//! `cargo bench --bench pipeline`; set `CTXHOST_SHARED` when `../shared` is elsewhere, and
//! `CTXHOST_BENCH_ONLY=<text>` to time only the implementations whose name holds it.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;

use ctxhost::HostCall;
use ctxhost::contract::{AssembleParams, AssembleResult, ResultLimits, check_assemble};
use ctxhost::engine::Engine;
use ctxhost::engine::pipeline::PipelineFactory;

mod common;

use common::pipeline::{self as hooks, HOOKS};
use common::timing::{SAMPLES, Series, sample, time};
use common::workloads::{self, BUDGET};

/// Stops the bench with a message.
fn fail(message: &str) -> ! {
    eprintln!("benches/pipeline: {message}");
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

/// What is timed: one engine, or a pipeline of one or five hooks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Shape {
    Engine,
    OneHook,
    FiveHooks,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Engine => "engine",
            Shape::OneHook => "pipeline, 1 hook (the fit)",
            Shape::FiveHooks => "pipeline, 5 hooks",
        }
    }
}

/// One implementation on one workload, loaded and checked.
struct Run {
    lang: &'static str,
    shape: Shape,
    workload: &'static str,
    call: HostCall,
    engine: Box<dyn Engine>,
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
    drop(out);

    let p = common::params(BUDGET);
    let limits = ResultLimits::default();

    // Load every implementation and check it against the reference before anything is timed.
    let mut runs: Vec<Run> = Vec::new();
    let mut factories: Vec<(String, Arc<PipelineFactory>)> = Vec::new();
    for w in &loaded {
        // Each workload is its own session, with its own token cache: the two workloads'
        // message ids overlap (`00000000`, ...), and one cache over both would count every
        // message of one of them afresh on every call.
        let services = common::services();
        let call = common::call(Arc::clone(&w.messages), &services, BUDGET);
        for lang in ["lua", "rhai"] {
            for shape in [Shape::Engine, Shape::OneHook, Shape::FiveHooks] {
                let name = format!("{lang} {}", shape.name());
                let mut e = match shape {
                    Shape::Engine => {
                        let file = root.join(format!("benches/engines/keep_recent.{lang}"));
                        if lang == "lua" {
                            common::lua_engine(&file)
                        } else {
                            common::rhai_engine(&file)
                        }
                    }
                    Shape::OneHook | Shape::FiveHooks => {
                        let (factory, e) = hooks::pipeline(&root, lang, shape == Shape::FiveHooks);
                        factories.push((format!("{name}, {}", w.spec.name), factory));
                        e
                    }
                };
                for pass in ["first", "second"] {
                    let r = assemble(e.as_mut(), &call, &p, &limits).unwrap_or_else(|err| {
                        fail(&format!("{name} [{}] {pass} call: {err}", w.spec.name))
                    });
                    let got = match shape {
                        Shape::Engine => workloads::check(&name, w, &r),
                        _ => hooks::check(&name, w, &r, shape == Shape::FiveHooks),
                    }
                    .unwrap_or_else(|err| fail(&err));
                    if pass == "first" {
                        eprintln!(
                            "keep_recent [{name}, {}]: {} messages kept from index {}, {} tokens \
                             (the reference)",
                            w.spec.name, got.kept, got.first, got.tokens
                        );
                    }
                }
                runs.push(Run {
                    lang,
                    shape,
                    workload: w.spec.name,
                    call: call.clone(),
                    engine: e,
                });
            }
        }
    }
    // Which hook functions ran in the two checked calls of each pipeline.
    for (name, factory) in &factories {
        let ran: Vec<String> = factory
            .hooks()
            .iter()
            .map(|h| {
                let calls: Vec<String> = h
                    .status
                    .defines
                    .iter()
                    .map(|m| format!("{m} {}", h.status.calls.get(m).copied().unwrap_or(0)))
                    .collect();
                format!("{} ({})", h.id, calls.join(", "))
            })
            .collect();
        eprintln!(
            "{name}: calls in the 2 checked assembles: {}",
            ran.join("; ")
        );
    }

    if let Ok(only) = std::env::var("CTXHOST_BENCH_ONLY") {
        runs.retain(|r| format!("{} {}", r.lang, r.shape.name()).contains(only.as_str()));
    }
    let mut series: BTreeMap<(&'static str, &'static str, Shape), Series> = BTreeMap::new();
    for round in 1..=rounds {
        eprintln!("round {round} of {rounds}");
        for r in &mut runs {
            let samples = sample(|| {
                black_box(
                    assemble(r.engine.as_mut(), &r.call, &p, &limits)
                        .unwrap_or_else(|err| fail(&err)),
                );
            });
            series
                .entry((r.lang, r.workload, r.shape))
                .or_default()
                .rounds
                .push(samples);
        }
    }
    table(&series, rounds);
}

/// The table of this run: each implementation's median, and what the hooks add.
fn table(series: &BTreeMap<(&'static str, &'static str, Shape), Series>, rounds: usize) {
    println!();
    println!(
        "keep-recent fit, B = {BUDGET} tokens, one engine against a pipeline of hooks: medians of \
         {rounds} rounds x {SAMPLES} samples of this run (range: the rounds' medians)"
    );
    println!();
    println!("| language | workload | implementation | median | rounds | − engine |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for lang in ["lua", "rhai"] {
        for spec in workloads::SPECS {
            let engine = series
                .get(&(lang, spec.name, Shape::Engine))
                .map(Series::median);
            for shape in [Shape::Engine, Shape::OneHook, Shape::FiveHooks] {
                let Some(s) = series.get(&(lang, spec.name, shape)) else {
                    continue;
                };
                let m = s.median();
                let extra = match (shape, engine) {
                    (Shape::Engine, _) | (_, None) => String::new(),
                    (_, Some(e)) => signed(m - e),
                };
                println!(
                    "| {lang} | {} | {} | {} | {} | {extra} |",
                    spec.name,
                    shape.name(),
                    time(m),
                    s.range()
                );
            }
        }
    }
    println!();
    let added = HOOKS.len() - 1;
    for lang in ["lua", "rhai"] {
        for spec in workloads::SPECS {
            let m = |shape| series.get(&(lang, spec.name, shape)).map(Series::median);
            if let (Some(e), Some(one), Some(five)) =
                (m(Shape::Engine), m(Shape::OneHook), m(Shape::FiveHooks))
            {
                println!(
                    "{lang} {}: the fit as a hook {} over the engine; the {added} other hooks {} \
                     together, {} per hook",
                    spec.name,
                    signed(one - e),
                    signed(five - one),
                    signed((five - one) / added as f64)
                );
            }
        }
    }
}

/// A time difference with its sign.
fn signed(d: f64) -> String {
    if d < 0.0 {
        format!("−{}", time(-d))
    } else {
        format!("+{}", time(d))
    }
}
