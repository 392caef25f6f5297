//! Token-counting throughput (MB/s) over the raw text of all shared transcripts: the estimate,
//! bpe-openai's o200k and cl100k (what `ctxhost::tokens::counter` uses), and tiktoken-rs's o200k
//! for comparison.
//!
//! `cargo bench --bench tokens`; set `CTXHOST_SHARED` when `../shared` is elsewhere.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use ctxhost::tokens::{Estimate, TokenCounter, Tokenizer, counter};

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

fn bench_tokens(c: &mut Criterion) {
    let texts = shared_transcripts();
    let bytes: u64 = texts.iter().map(|t| t.len() as u64).sum();
    let o200k = counter(Tokenizer::O200k).unwrap_or_else(|e| panic!("{e}"));
    let cl100k = counter(Tokenizer::Cl100k).unwrap_or_else(|e| panic!("{e}"));
    let tiktoken = tiktoken_rs::o200k_base_singleton();
    // Build everything, and check the counters agree, before anything is timed.
    let ours = count_all(&texts, |t| o200k.count_text(t));
    let theirs = count_all(&texts, |t| tiktoken.encode_ordinary(t).len() as u64);
    assert_eq!(ours, theirs, "bpe-openai and tiktoken-rs disagree on o200k");
    eprintln!(
        "shared transcripts: {} files, {bytes} bytes, o200k {ours} tokens, cl100k {} tokens, \
         estimate {} tokens",
        texts.len(),
        count_all(&texts, |t| cl100k.count_text(t)),
        count_all(&texts, |t| Estimate.count_text(t)),
    );

    let mut group = c.benchmark_group("tokens");
    group
        .throughput(Throughput::Bytes(bytes))
        // One pass over ~9 MB takes a few hundred ms for the BPEs: time equal-sized samples.
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    group.bench_function("count [estimate, shared transcripts]", |b| {
        b.iter(|| count_all(&texts, |t| Estimate.count_text(t)))
    });
    group.bench_function("count [bpe-openai o200k, shared transcripts]", |b| {
        b.iter(|| count_all(&texts, |t| o200k.count_text(t)))
    });
    group.bench_function("count [bpe-openai cl100k, shared transcripts]", |b| {
        b.iter(|| count_all(&texts, |t| cl100k.count_text(t)))
    });
    group.bench_function("count [tiktoken-rs o200k, shared transcripts]", |b| {
        b.iter(|| count_all(&texts, |t| tiktoken.encode_ordinary(t).len() as u64))
    });
    group.finish();
}

criterion_group!(benches, bench_tokens);
criterion_main!(benches);
