//! Token-counting throughput (MB/s) over the raw text of all shared transcripts, the three exact
//! BPEs on the same text in the same run, in both encodings: toktok (what
//! `ctxhost::services::tokens::counter` uses), bpe-openai (the counter before it) and tiktoken-rs (the
//! reference), plus the estimate. Before timing it checks that all three agree, and prints how
//! long each took to build its tables.
//!
//! `cargo bench --bench tokens`; set `CTXHOST_SHARED` when `../shared` is elsewhere.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use ctxhost::services::tokens::{Estimate, TokenCounter, Tokenizer, counter};

/// The raw text of every shared transcript (SOURCES.md left out), one string per file.
fn shared_transcripts() -> Vec<String> {
    let shared = match std::env::var_os("CTXHOST_SHARED") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"),
    };
    let dir = shared.join("data/transcripts");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()) != Some("SOURCES.md"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_else(|e| panic!("read {}: {e}", f.display())))
        .collect()
}

fn count_all(texts: &[String], count: impl Fn(&str) -> u64) -> u64 {
    texts.iter().map(|t| count(black_box(t))).sum()
}

/// Runs `build` once and prints how long it took.
fn timed<T>(what: &str, build: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let t = build();
    eprintln!("build {what}: {:.3} s", start.elapsed().as_secs_f64());
    t
}

fn bench_tokens(c: &mut Criterion) {
    let texts = shared_transcripts();
    let bytes: u64 = texts.iter().map(|t| t.len() as u64).sum();
    // ctxhost's counter builds lazily: count once to time the build.
    let toktok_o200k = counter(Tokenizer::O200k).unwrap_or_else(|e| panic!("{e}"));
    let toktok_cl100k = counter(Tokenizer::Cl100k).unwrap_or_else(|e| panic!("{e}"));
    timed("toktok o200k (ctxhost's counter)", || {
        toktok_o200k.count_text("x")
    });
    timed("toktok cl100k (ctxhost's counter)", || {
        toktok_cl100k.count_text("x")
    });
    let bpe_o200k = timed("bpe-openai o200k", bpe_openai::o200k_base);
    let bpe_cl100k = timed("bpe-openai cl100k", bpe_openai::cl100k_base);
    let tik_o200k = timed("tiktoken-rs o200k", tiktoken_rs::o200k_base_singleton);
    let tik_cl100k = timed("tiktoken-rs cl100k", tiktoken_rs::cl100k_base_singleton);

    type Count<'a> = Box<dyn Fn(&str) -> u64 + 'a>;
    let contenders: [(&str, [(&str, Count); 3]); 2] = [
        (
            "o200k",
            [
                ("toktok", Box::new(|t| toktok_o200k.count_text(t))),
                ("bpe-openai", Box::new(|t| bpe_o200k.count(t) as u64)),
                (
                    "tiktoken-rs",
                    Box::new(|t| tik_o200k.encode_ordinary(t).len() as u64),
                ),
            ],
        ),
        (
            "cl100k",
            [
                ("toktok", Box::new(|t| toktok_cl100k.count_text(t))),
                ("bpe-openai", Box::new(|t| bpe_cl100k.count(t) as u64)),
                (
                    "tiktoken-rs",
                    Box::new(|t| tik_cl100k.encode_ordinary(t).len() as u64),
                ),
            ],
        ),
    ];
    // Check the counters agree before anything is timed.
    for (encoding, counters) in &contenders {
        let totals: Vec<u64> = counters.iter().map(|(_, f)| count_all(&texts, f)).collect();
        assert!(
            totals.iter().all(|&n| n == totals[0]),
            "{encoding}: the counters disagree: {totals:?}"
        );
        eprintln!("{encoding}: {} tokens, all three agree", totals[0]);
    }
    eprintln!(
        "shared transcripts: {} files, {bytes} bytes, estimate {} tokens",
        texts.len(),
        count_all(&texts, |t| Estimate.count_text(t)),
    );

    let mut group = c.benchmark_group("tokens");
    group
        .throughput(Throughput::Bytes(bytes))
        // One pass over ~9 MB takes up to a second for the slowest: time equal-sized samples.
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    group.bench_function("count [estimate, shared transcripts]", |b| {
        b.iter(|| count_all(&texts, |t| Estimate.count_text(t)))
    });
    // The three BPEs interleaved per encoding, so that they meet the same machine load.
    for (encoding, counters) in &contenders {
        for (name, f) in counters {
            group.bench_function(
                format!("count [{name} {encoding}, shared transcripts]"),
                |b| b.iter(|| count_all(&texts, f)),
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench_tokens);
criterion_main!(benches);
