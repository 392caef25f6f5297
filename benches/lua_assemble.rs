//! The whole host path of one `assemble` on a 10,000-message session with a 32,000-token budget:
//! params in, script runs, result validated and mapped back to the host's messages.
//!
//! - `lua_resident/newest_first`: `tests/fixtures/lua/newest_first.lua`, the context unchanged
//!   since the last call (assemble called again inside a tool loop).
//! - `lua_resident_append1/newest_first`: one new message appended before each call (a turn):
//!   the resident array grows by diff (a pointer-equality prefix check plus one marshalled message).
//! - `lua_resident/noop`: an engine returning nothing: the adapter's fixed cost per call.
//! - `worker_roundtrip`: a bare job to a worker thread and back (back to back: the worker is
//!   still polling for its next job).
//! - `lua_resident_cold/recent_turns`: one call after a 2 ms pause, when the worker has gone to
//!   sleep and must be woken (the first call after a model reply).
//! - `lua_resident/recent_turns`: `scripts/recent_turns.lua` (stdlib fresh tail + fit).
//! - `legacy`: the built-in engine's assemble (pass-through, fitted only when over budget).
//! - `naive_serde_roundtrip`: all 10k messages serialized into a Lua VM and deserialized back,
//!   what an adapter without resident messages would pay before the script even runs.
//!
//! - `rhai_resident/{noop,newest_first,recent_turns}`: the Rhai twins
//!   (`tests/fixtures/rhai/*.rhai`, `scripts/recent_turns.rhai`), measured the same way: the
//!   context resident as a `messages` list of `message` handles, mapped back by downcast.
//! - `rhai_resident_append1/newest_first`: one appended message per call, as for Lua.
//!
//! - `isolation/{assemble_1k,assemble_10k,assemble_10k_append1,ingest}/{thread,process}`:
//!   `host.isolation` per-call cost: `newest_first.lua` on a worker thread of this process
//!   (`thread`) or in a child process (`process`: this bench binary started again as the
//!   child, params and new context messages over a pipe as JSON, kept messages back as
//!   positions). `assemble` with the context unchanged at 1,000 and 10,000 messages, with one
//!   message appended per call, and one `ingest` of a new message.
//!
//! `cargo bench --bench lua_assemble` (only the isolation figures:
//! `cargo bench --bench lua_assemble -- isolation --measurement-time 5 --warm-up-time 1`)

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use ctxhost::HostCall;
use ctxhost::contract::message::Message;
use ctxhost::engine::{EngineFactory, InstanceContext};
use ctxhost::testing::LegacyFactory;
use mlua::LuaSerdeExt;
use serde_json::json;

mod common;

use common::{EngineFn, lua_engine, rhai_engine, services};

const MESSAGES: usize = 10_000;
const BUDGET: u64 = 32_000;

fn text(words: usize, seed: usize) -> String {
    let vocab = [
        "the",
        "file",
        "config",
        "parser",
        "returns",
        "error",
        "value",
        "session",
        "token",
        "budget",
        "context",
        "engine",
        "message",
        "tool",
        "result",
        "compaction",
        "summary",
    ];
    (0..words)
        .map(|i| vocab[(i * 7 + seed) % vocab.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

/// A coding-agent-shaped session: user asks, assistant calls a tool, the result, a reply.
fn message(i: usize) -> Message {
    let id = format!("{i:08x}");
    let v = match i % 4 {
        0 => json!({"id": id, "role": "user", "content": text(30, i), "timestamp": i}),
        1 => json!({"id": id, "role": "assistant", "content": [
                {"type": "text", "text": text(20, i)},
                {"type": "toolCall", "id": format!("call-{i}"), "name": "read",
                 "arguments": {"path": format!("src/file_{i}.rs")}}],
             "stopReason": "toolUse", "timestamp": i}),
        2 => json!({"id": id, "role": "toolResult", "toolCallId": format!("call-{}", i - 1),
                "toolName": "read", "content": [{"type": "text", "text": text(220, i)}],
                "isError": false, "timestamp": i}),
        _ => {
            json!({"id": id, "role": "assistant", "content": [{"type": "text", "text": text(80, i)}],
                "stopReason": "stop", "timestamp": i})
        }
    };
    serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
}

fn call(
    ctx: Arc<Vec<Arc<Message>>>,
    services: &Arc<ctxhost::testing::SessionServices>,
) -> HostCall {
    common::call(ctx, services, BUDGET)
}

fn bench_assemble(c: &mut Criterion) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let ctx: Arc<Vec<Arc<Message>>> =
        Arc::new((0..MESSAGES).map(|i| Arc::new(message(i))).collect());
    let svc = services();
    let hc = call(ctx.clone(), &svc);
    let p = common::params(BUDGET);

    let mut g = c.benchmark_group("assemble_10k_32k");
    g.sample_size(30).measurement_time(Duration::from_secs(8));

    let languages: [(&str, EngineFn); 2] = [("lua", lua_engine), ("rhai", rhai_engine)];
    for (lang, engine) in languages {
        let scripts = [
            (
                "noop",
                root.join(format!("tests/fixtures/{lang}/noop.{lang}")),
            ),
            (
                "newest_first",
                root.join(format!("tests/fixtures/{lang}/newest_first.{lang}")),
            ),
            (
                "recent_turns",
                root.join(format!("scripts/recent_turns.{lang}")),
            ),
        ];
        for (name, path) in &scripts {
            let mut e = engine(path);
            // First call marshals the 10k messages into the VM; the bench measures what follows.
            let first = e.assemble(&hc, &p).unwrap_or_else(|e| panic!("{e}"));
            let tail = &ctx[ctx.len() - first.messages.len()..];
            assert!(
                first
                    .messages
                    .iter()
                    .zip(tail)
                    .all(|(m, c)| Arc::ptr_eq(c, m))
            );
            eprintln!(
                "{lang} {name}: {} messages kept, estimate {}",
                first.messages.len(),
                first.estimated_tokens
            );
            g.bench_function(format!("{lang}_resident/{name}"), |b| {
                b.iter(|| black_box(e.assemble(&hc, &p).unwrap_or_else(|e| panic!("{e}"))))
            });
        }

        // One appended message per call: the resident list grows by diff.
        let mut e = engine(&scripts[1].1);
        let mut grown: Vec<Arc<Message>> = ctx.to_vec();
        e.assemble(&hc, &p).unwrap_or_else(|e| panic!("{e}"));
        g.bench_function(format!("{lang}_resident_append1/newest_first"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                // The session holds the previous context until the new one is assembled, so the
                // engine's release of it is one decrement, as in a real turn.
                let mut previous: Option<HostCall> = None;
                for _ in 0..iters {
                    let n = grown.len();
                    grown.push(Arc::new(message(n)));
                    let call = call(Arc::new(grown.clone()), &svc);
                    let start = Instant::now();
                    black_box(e.assemble(&call, &p).unwrap_or_else(|e| panic!("{e}")));
                    total += start.elapsed();
                    previous = Some(call);
                }
                drop(previous);
                total
            })
        });
    }

    // After a pause (a model call takes seconds), the worker has gone to sleep: the first call
    // pays for waking it. Each sample sleeps 2 ms untimed, then times one call.
    {
        let mut e = lua_engine(&root.join("scripts/recent_turns.lua"));
        e.assemble(&hc, &p).unwrap_or_else(|e| panic!("{e}"));
        g.bench_function("lua_resident_cold/recent_turns", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    std::thread::sleep(Duration::from_millis(2));
                    let start = Instant::now();
                    black_box(e.assemble(&hc, &p).unwrap_or_else(|e| panic!("{e}")));
                    total += start.elapsed();
                }
                total
            })
        });
    }

    // The bare cost of a call to the worker thread and back.
    {
        let w = ctxhost::testing::Worker::spawn("bench", 1 << 20, 0u64)
            .unwrap_or_else(|e| panic!("{e}"));
        g.bench_function("worker_roundtrip", |b| {
            b.iter(|| {
                w.call(Duration::from_secs(1), |s: &mut u64| {
                    *s += 1;
                    *s
                })
                .unwrap_or_else(|e| panic!("{e:?}"))
            })
        });
    }

    let mut legacy = LegacyFactory::default()
        .instantiate(&InstanceContext::default())
        .unwrap_or_else(|e| panic!("{e}"));
    g.bench_function("legacy", |b| {
        b.iter(|| black_box(legacy.assemble(&hc, &p).unwrap_or_else(|e| panic!("{e}"))))
    });

    let lua = mlua::Lua::new();
    g.sample_size(10);
    g.bench_function("naive_serde_roundtrip", |b| {
        b.iter(|| {
            let v = lua.to_value(&*ctx).unwrap_or_else(|e| panic!("{e}"));
            let back: Vec<Message> = lua.from_value(v).unwrap_or_else(|e| panic!("{e}"));
            black_box(back)
        })
    });
    g.finish();
}

/// `host.isolation: "thread"` against `"process"`, per call.
fn bench_isolation(c: &mut Criterion) {
    use ctxhost::contract::IngestParams;
    use ctxhost::engine::isolation::{ChildCommand, ProcessFactory, ProcessOptions};
    use ctxhost::services::tokens::Tokenizer;

    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lua/newest_first.lua");
    let opts = ctxhost::engine::LoadOptions {
        config: Arc::new(json!({})),
        ..Default::default()
    };
    let process = ProcessOptions {
        command: ChildCommand::current_exe().unwrap_or_else(|e| panic!("{e}")),
        tokenizer: Tokenizer::Estimate,
        rhai: Default::default(),
    };
    let factory = ProcessFactory::load(&path, &opts, &process).unwrap_or_else(|e| panic!("{e}"));
    let engine = |mode: &str| -> Box<dyn ctxhost::Engine> {
        match mode {
            "thread" => lua_engine(&path),
            _ => factory
                .instantiate(&InstanceContext::default())
                .unwrap_or_else(|e| panic!("{e}")),
        }
    };
    let svc = services();
    let p = common::params(BUDGET);
    let mut g = c.benchmark_group("isolation");
    g.sample_size(20);
    for mode in ["thread", "process"] {
        for n in [1_000, 10_000] {
            let ctx: Arc<Vec<Arc<Message>>> =
                Arc::new((0..n).map(|i| Arc::new(message(i))).collect());
            let hc = call(ctx, &svc);
            let mut e = engine(mode);
            // The first call puts the messages in the VM (and, in process, in the child).
            e.assemble(&hc, &p).unwrap_or_else(|e| panic!("{e}"));
            g.bench_function(format!("assemble_{}k/{mode}", n / 1000), |b| {
                b.iter(|| black_box(e.assemble(&hc, &p).unwrap_or_else(|e| panic!("{e}"))))
            });
        }
        let mut grown: Vec<Arc<Message>> = (0..MESSAGES).map(|i| Arc::new(message(i))).collect();
        let mut e = engine(mode);
        e.assemble(&call(Arc::new(grown.clone()), &svc), &p)
            .unwrap_or_else(|e| panic!("{e}"));
        g.bench_function(format!("assemble_10k_append1/{mode}"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut previous: Option<HostCall> = None;
                for _ in 0..iters {
                    let n = grown.len();
                    grown.push(Arc::new(message(n)));
                    let call = call(Arc::new(grown.clone()), &svc);
                    let start = Instant::now();
                    black_box(e.assemble(&call, &p).unwrap_or_else(|e| panic!("{e}")));
                    total += start.elapsed();
                    previous = Some(call);
                }
                drop(previous);
                total
            })
        });
        let ctx: Arc<Vec<Arc<Message>>> =
            Arc::new((0..1_000).map(|i| Arc::new(message(i))).collect());
        let hc = call(ctx, &svc);
        let mut e = engine(mode);
        let m = Arc::new(message(1_001));
        let ingest = IngestParams {
            session_id: "s1".into(),
            session_key: None,
            message: m,
            is_heartbeat: false,
        };
        e.ingest(&hc, &ingest).unwrap_or_else(|e| panic!("{e}"));
        g.bench_function(format!("ingest/{mode}"), |b| {
            b.iter(|| black_box(e.ingest(&hc, &ingest).unwrap_or_else(|e| panic!("{e}"))))
        });
    }
    g.finish();
}

criterion_group!(benches, bench_assemble, bench_isolation);

fn main() {
    // `isolation/*/process` starts this binary again as the engine's child.
    if std::env::args().nth(1).as_deref() == Some(ctxhost::engine::isolation::CHILD_ARG) {
        std::process::exit(ctxhost::engine::isolation::child_main());
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
