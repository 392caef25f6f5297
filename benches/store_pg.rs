//! The Postgres store (`CTXHOST_TEST_PG` names the server; without it the bench says so and
//! measures nothing):
//!
//! - `pg/commit_one_turn`: append a turn's two messages and commit them with a 2 KB state, in
//!   one transaction that checks and renews the lease.
//! - `pg/cold_open_10k`: open a session of 10,000 messages another process left (take its
//!   lease, read the session row and every entry), and close it (release the lease).
//! - `pg/open_cold_session_10k`: the same through a `Session` (context derived, recall
//!   indexed, engine state restored), as `store/open_cold_10k/{jsonl,sqlite}` measure it.
//! - `pg/turn_with_10k_history`: a driven turn (`assemble` of all 10,000 messages included,
//!   the turn's messages and state committed under the lease), as
//!   `store/turn_with_10k_history/{jsonl,sqlite}` measure it.
//! - `pg/four_processes_200_sessions`: 4 worker processes (this program re-run, see
//!   `tests/pg_fleet.rs`) serve 200 sessions; one iteration is one turn of every session, so
//!   the throughput criterion prints is turns per second over the 4 processes.
//!
//! `CTXHOST_TEST_PG=... cargo bench --bench store_pg`

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is the failure report

#[path = "../tests/pg_fleet.rs"]
mod pg_fleet;

use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput};
use ctxhost::runtime::SessionSpec;
use ctxhost::session::Session;
use ctxhost::store::Backend;
use ctxhost::store::postgres::{PgBackend, PgOptions};
use serde_json::json;

mod common;

use common::store_cases::{self, drive_one_turn, history, roomy_host};

fn options(url: &str, schema: &str) -> PgOptions {
    PgOptions {
        schema: schema.to_owned(),
        ..PgOptions::new(url)
    }
}

fn commit_one_turn(c: &mut Criterion, url: &str, schema: &str) {
    let backend = PgBackend::connect(options(url, schema)).unwrap();
    let state = json!({"engine": "legacy", "state": null});
    backend
        .import(
            "bench-append",
            &history(100),
            Some(&state),
            &Default::default(),
        )
        .unwrap();
    let mut opened = backend.open("bench-append", "").unwrap();
    c.bench_function("pg/commit_one_turn", |b| {
        store_cases::commit_one_turn(b, &mut opened)
    });
}

/// Stores session `id` with 10,000 messages of history and the built-in engine's state.
fn import_10k(backend: &PgBackend, id: &str) {
    backend
        .import(
            id,
            &history(10_000),
            Some(&json!({"engine": "legacy", "state": null})),
            &Default::default(),
        )
        .unwrap();
}

fn cold_open_10k(c: &mut Criterion, url: &str, schema: &str) {
    let backend = PgBackend::connect(options(url, schema)).unwrap();
    import_10k(&backend, "bench-10k");
    c.bench_function("pg/cold_open_10k", |b| {
        b.iter(|| {
            let opened = backend.open("bench-10k", "").unwrap();
            assert_eq!(opened.messages.len(), 10_000);
        })
    });
}

fn open_cold_session_10k(c: &mut Criterion, url: &str, schema: &str) {
    let host = roomy_host();
    let backend = PgBackend::connect(options(url, schema)).unwrap();
    c.bench_function("pg/open_cold_session_10k", |b| {
        b.iter_batched(
            || host.session_setup(&SessionSpec::new("bench-10k", "")),
            |setup| {
                let s = Session::in_backend(setup, &backend, "").unwrap();
                assert_eq!(s.transcript_len(), 10_000);
                // Dropped here, inside the timing: the lease is released as a closing
                // process would.
            },
            BatchSize::PerIteration,
        )
    });
}

fn turn_at_10k(c: &mut Criterion, url: &str, schema: &str) {
    let host = roomy_host();
    let backend = PgBackend::connect(options(url, schema)).unwrap();
    import_10k(&backend, "bench-turns");
    let setup = host.session_setup(&SessionSpec::new("bench-turns", ""));
    let mut session = Session::in_backend(setup, &backend, "").unwrap();
    c.bench_function("pg/turn_with_10k_history", |b| {
        drive_one_turn(b, &mut session)
    });
}

fn four_processes(c: &mut Criterion, url: &str, schema: &str) {
    const SESSIONS: usize = 200;
    drop(PgBackend::connect(options(url, schema)).unwrap());
    let mut fleet = pg_fleet::Fleet::spawn(4, url, schema, Duration::from_secs(10));
    let sessions: Vec<String> = (0..SESSIONS).map(|s| format!("p{s:03}")).collect();
    let mut turn = 0u64;
    let mut round = |fleet: &mut pg_fleet::Fleet| {
        turn += 1;
        for (s, id) in sessions.iter().enumerate() {
            assert!(fleet.send(s % 4, id, turn));
        }
        for _ in 0..SESSIONS {
            let a = fleet.next(Duration::from_secs(60)).expect("an answer");
            assert_eq!(a.kind, "ok", "{a:?}");
        }
    };
    // The first round opens every session (takes the leases).
    round(&mut fleet);
    let mut group = c.benchmark_group("pg");
    group.throughput(Throughput::Elements(SESSIONS as u64));
    group.sample_size(10);
    group.bench_function("four_processes_200_sessions", |b| {
        b.iter_custom(|iters| {
            let started = Instant::now();
            for _ in 0..iters {
                round(&mut fleet);
            }
            started.elapsed()
        })
    });
    group.finish();
    fleet.close();
}

fn main() {
    if pg_fleet::worker_main() {
        return;
    }
    let Ok(url) = std::env::var("CTXHOST_TEST_PG") else {
        eprintln!("store_pg: CTXHOST_TEST_PG is not set: nothing measured");
        return;
    };
    let schema = format!("bench_{}", std::process::id());
    let mut c = Criterion::default().configure_from_args();
    commit_one_turn(&mut c, &url, &schema);
    cold_open_10k(&mut c, &url, &schema);
    open_cold_session_10k(&mut c, &url, &schema);
    turn_at_10k(&mut c, &url, &schema);
    four_processes(&mut c, &url, &schema);
    c.final_summary();
    let backend = PgBackend::connect(options(&url, &schema)).unwrap();
    eprintln!(
        "store_pg: {} sessions, {} bytes in schema {schema} (dropped)",
        backend.sessions().unwrap().len(),
        backend.size_bytes().unwrap_or(0)
    );
    drop(backend);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = url
            .parse::<tokio_postgres::Config>()
            .unwrap()
            .connect(tokio_postgres::NoTls)
            .await
            .unwrap();
        let driver = tokio::spawn(conn);
        client
            .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
            .await
            .unwrap();
        drop(client);
        let _ = driver.await;
    });
}
