//! The built-in engine's per-turn costs: `legacy` assemble (the whole host path: params in,
//! engine runs, pairing repair and measurement) and built-in compaction, at 1,000 and 10,000
//! messages of real transcripts.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::PathBuf;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use ctxhost::HostCall;
use ctxhost::contract::message::Message;
use ctxhost::contract::{AssembleParams, CompactParams, CompactionTarget, ResultLimits};
use ctxhost::engine::Engine;
use ctxhost::services::compaction::{self, CompactionSettings};
use ctxhost::services::summarize::BuiltinSummarizer;
use ctxhost::services::tokens::{Estimate, TokenCache};
use ctxhost::testing::Legacy;
use ctxhost::testing::SessionServices;

fn shared() -> PathBuf {
    std::env::var_os("CTXHOST_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"))
}

/// `n` messages cycled from the pi-mono session, each with its own id.
fn session(n: usize) -> Vec<Arc<Message>> {
    let path = shared().join("data/transcripts/pimono-large-session.jsonl");
    let imported = ctxhost::transcript::import(&path).expect("import");
    let source = &imported.sessions[0].messages;
    (0..n)
        .map(|i| {
            let mut m = source[i % source.len()].clone();
            // Tool call ids repeat across cycles; suffix them so pairing stays unambiguous.
            let cycle = i / source.len();
            let mut v = serde_json::to_value(&m).expect("json");
            if cycle > 0 {
                suffix_ids(&mut v, cycle);
                m = serde_json::from_value(v).expect("message");
            }
            m.id = format!("{i:08x}");
            Arc::new(m)
        })
        .collect()
}

fn suffix_ids(v: &mut serde_json::Value, cycle: usize) {
    if let Some(id) = v
        .get_mut("toolCallId")
        .and_then(|x| x.as_str().map(str::to_owned))
    {
        v["toolCallId"] = format!("{id}-{cycle}").into();
    }
    if let Some(blocks) = v.get_mut("content").and_then(|c| c.as_array_mut()) {
        for b in blocks {
            if b["type"] == "toolCall"
                && let Some(id) = b["id"].as_str().map(str::to_owned)
            {
                b["id"] = format!("{id}-{cycle}").into();
            }
        }
    }
}

fn services() -> Arc<SessionServices> {
    Arc::new(SessionServices {
        tokens: TokenCache::new(Arc::new(Estimate)),
        summarizer: Arc::new(BuiltinSummarizer),
        compaction: CompactionSettings::default(),
        limits: ResultLimits::default(),
        model: Default::default(),
        host_times: Default::default(),
        cancel: Default::default(),
    })
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("legacy");
    group.sample_size(20);
    for n in [1_000usize, 10_000] {
        let context = Arc::new(session(n));
        let services = services();
        let budget = 32_000;
        let call = HostCall::new(
            Arc::from("legacy"),
            Arc::from("bench"),
            Arc::clone(&context),
            Arc::clone(&services),
            Arc::new(serde_json::Value::Null),
            budget,
        );
        services.tokens.messages(&context); // a running session has counted its messages
        let params = AssembleParams {
            session_id: "bench".into(),
            session_key: None,
            token_budget: budget,
            prompt: None,
            model: None,
            available_tools: None,
            runtime_settings: None,
        };
        let mut legacy = Legacy::default();
        group.bench_function(format!("assemble [legacy, {}k msgs]", n / 1000), |b| {
            b.iter(|| {
                let r = legacy.assemble(&call, &params).expect("assemble");
                let repaired = ctxhost::testing::pairing::repair(r.messages);
                services.tokens.messages(&repaired.messages)
            })
        });
        let compact = CompactParams {
            session_id: "bench".into(),
            session_key: None,
            token_budget: budget,
            force: true,
            current_token_count: 0,
            compaction_target: CompactionTarget::Budget,
            custom_instructions: None,
            runtime_settings: None,
        };
        group.bench_function(format!("compact [builtin, {}k msgs]", n / 1000), |b| {
            b.iter(|| {
                compaction::compact(
                    &context,
                    &services.tokens,
                    services.summarizer.as_ref(),
                    &services.compaction,
                    &compact,
                    &services.cancel,
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
