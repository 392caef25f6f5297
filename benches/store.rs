//! What keeping sessions costs, per backend (issue 21): committing one turn (two messages and
//! the engine's state, synced), a driven turn (`assemble` included) over 10,000 messages of
//! history, and opening a cold session of 10,000 messages (read, context derived, recall
//! indexed, engine state restored).
//!
//! `cargo bench --bench store`; figures in `docs/benchmarks.md`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is the failure report

use std::path::Path;
use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use ctxhost::runtime::SessionSpec;
use ctxhost::session::Session;
use ctxhost::store::jsonl::JsonlBackend;
use ctxhost::store::sqlite::SqliteBackend;
use ctxhost::store::{Backend, SessionMeta};
use ctxhost::transcript::Durability;
use serde_json::json;

mod common;

use common::store_cases::{commit_one_turn, drive_one_turn, history, roomy_host};

type Open = fn(&Path) -> Arc<dyn Backend>;

/// The backends benched, each over a scratch directory (one line per backend).
const BACKENDS: &[(&str, Open)] = &[
    ("jsonl", |dir| {
        Arc::new(JsonlBackend::new(dir, Durability::Entry))
    }),
    ("sqlite", |dir| {
        Arc::new(SqliteBackend::open(&dir.join("ctxhost.db"), Durability::Entry).unwrap())
    }),
];

fn filled(open: Open, dir: &Path, n: usize) -> Arc<dyn Backend> {
    let backend = open(dir);
    let state = json!({"engine": "legacy", "state": null});
    backend
        .import("s", &history(n), Some(&state), &SessionMeta::default())
        .unwrap();
    backend
}

fn append_one_turn(c: &mut Criterion) {
    for (name, open) in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        let backend = filled(*open, dir.path(), 100);
        let mut opened = backend.open("s", "").unwrap();
        c.bench_function(&format!("store/append_one_turn/{name}"), |b| {
            commit_one_turn(b, &mut opened)
        });
    }
}

fn turn_at_10k(c: &mut Criterion) {
    let host = roomy_host();
    for (name, open) in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        let backend = filled(*open, dir.path(), 10_000);
        let setup = host.session_setup(&SessionSpec::new("s", ""));
        let mut session = Session::in_backend(setup, backend.as_ref(), "").unwrap();
        c.bench_function(&format!("store/turn_with_10k_history/{name}"), |b| {
            drive_one_turn(b, &mut session)
        });
    }
}

fn open_cold_10k(c: &mut Criterion) {
    let host = roomy_host();
    for (name, open) in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        drop(filled(*open, dir.path(), 10_000));
        c.bench_function(&format!("store/open_cold_10k/{name}"), |b| {
            b.iter_batched(
                || open(dir.path()),
                |backend| {
                    let setup = host.session_setup(&SessionSpec::new("s", ""));
                    let s = Session::in_backend(setup, backend.as_ref(), "").unwrap();
                    assert_eq!(s.transcript_len(), 10_000);
                    s
                },
                BatchSize::PerIteration,
            )
        });
    }
}

criterion_group! {
    name = store;
    config = Criterion::default().sample_size(20);
    targets = append_one_turn, turn_at_10k, open_cold_10k
}
criterion_main!(store);
