//! The cases `benches/store.rs` (JSONL, SQLite) and `benches/store_pg.rs` (Postgres) time, written
//! once so the three backends are measured on the same messages, the same engine state and the
//! same turn.

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is the failure report

use std::sync::Arc;

use criterion::Bencher;
use ctxhost::Message;
use ctxhost::config::Config;
use ctxhost::runtime::Host;
use ctxhost::session::{Session, TurnInput};
use ctxhost::store::{Commit, Opened};
use serde_json::json;

/// `n` messages alternating user and assistant, about 300 bytes each, ids as a store gives.
pub fn history(n: usize) -> Vec<Arc<Message>> {
    (0..n)
        .map(|i| {
            let text = format!(
                "message {i}: {}",
                "the quick brown fox jumps over ".repeat(9)
            );
            let mut m = if i % 2 == 0 {
                Message::user(text)
            } else {
                Message::assistant(text)
            };
            m.id = format!("{:08x}", i + 1);
            Arc::new(m)
        })
        .collect()
}

/// A host whose window holds the whole history: `assemble` gets all 10,000 messages every turn.
pub fn roomy_host() -> Host {
    let mut config = Config::default();
    config.host.window = 8_000_000;
    Host::new(config).expect("the default config with a large window is valid")
}

/// Times committing one turn: two messages appended and a 2 KB engine state, synced.
pub fn commit_one_turn(b: &mut Bencher<'_>, opened: &mut Opened) {
    let mut n = 0u64;
    b.iter(|| {
        n += 1;
        opened
            .store
            .append(vec![
                Message::user(format!("question {n}: what next?")),
                Message::assistant(format!("answer {n}: {}", "done. ".repeat(40))),
            ])
            .unwrap();
        let state =
            Arc::new(json!({"engine": "e", "state": {"turn": n, "notes": "x".repeat(2000)}}));
        opened
            .store
            .commit(Commit {
                state: Some(&state),
                turn_ended: true,
            })
            .unwrap();
    })
}

/// Times one driven turn (`assemble` over the whole history included) of `session`, whose
/// transcript holds more than 10,000 messages.
pub fn drive_one_turn(b: &mut Bencher<'_>, session: &mut Session) {
    let mut n = 0u64;
    b.iter(|| {
        n += 1;
        let a = session
            .begin_turn(TurnInput {
                user: Message::user(format!("question {n}")),
                is_heartbeat: false,
            })
            .unwrap();
        assert!(a.messages.len() > 10_000);
        session
            .end_turn(vec![Message::assistant(format!("answer {n}"))])
            .unwrap();
    })
}
