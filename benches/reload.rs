//! Save-to-active latency of hot reload: from the moment an engine file is written to the
//! moment the new generation is what every session's next turn gets, through the real
//! [`EngineWatcher`] (notify + debouncer) and `Host::reload_engine` (load + validate + swap).
//!
//! - `save_to_active [lua, debounce 200 ms]`: the default debounce; the target is the debounce
//!   plus at most 200 ms.
//! - `save_to_active [lua, debounce 50 ms]`: a short debounce, which shows the fixed cost.
//!
//! After each group the mean time *after* the debounce released the change (load, validate,
//! swap) is printed to stderr.
//!
//! `cargo bench --bench reload`

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is the failure report

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use ctxhost::config::{Config, Entry};
use ctxhost::engine::reload::EngineWatcher;
use ctxhost::runtime::Host;

/// A small but realistic engine: the stdlib's fit, a version string that changes each save.
fn engine(version: u64) -> String {
    format!(
        r#"local fit = require("fit")
local M = {{ info = {{ id = "bench", name = "Bench", version = "{version}.0.0" }} }}
function M.ingest(p) return {{ ingested = false }} end
function M.assemble(p)
  local kept, tokens = fit.newest_first(p.messages, p.tokenBudget)
  return {{ messages = kept, estimatedTokens = tokens, systemPromptAddition = "v{version}" }}
end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#
    )
}

fn host(file: &Path) -> Arc<Host> {
    let mut config = Config::default();
    config.plugins.slots.context_engine = Some("bench".into());
    config.plugins.entries.insert(
        "bench".into(),
        Entry {
            path: Some(file.to_path_buf()),
            ..Entry::default()
        },
    );
    Arc::new(Host::new(config).expect("host"))
}

fn save_to_active(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    for debounce_ms in [200u64, 50] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bench.lua");
        std::fs::write(&file, engine(0)).unwrap();
        let host = host(&file);
        let mut watcher =
            EngineWatcher::for_host(Arc::clone(&host), Duration::from_millis(debounce_ms)).unwrap();
        let mut version = 0;
        let (mut after_debounce, mut reloads) = (Duration::ZERO, 0u32);
        let mut group = c.benchmark_group("reload");
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(5));
        group.bench_function(
            format!("save_to_active [lua, debounce {debounce_ms} ms]"),
            |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        version += 1;
                        let before = host.engine_cell().number();
                        let saved = Instant::now();
                        std::fs::write(&file, engine(version)).unwrap();
                        let outcome = rt.block_on(watcher.next_outcome()).unwrap();
                        let generation = *outcome.result.as_ref().expect("the new version loads");
                        total += saved.elapsed();
                        assert!(generation > before && host.engine_cell().number() == generation);
                        after_debounce += outcome.after_debounce();
                        reloads += 1;
                    }
                    total
                });
            },
        );
        group.finish();
        eprintln!(
            "debounce {debounce_ms} ms: {reloads} reloads, mean {:.1} ms from debounce release to active (load + validate + swap)",
            after_debounce.as_secs_f64() * 1000.0 / f64::from(reloads.max(1))
        );
    }
}

criterion_group!(benches, save_to_active);
criterion_main!(benches);
