//! Several OS processes serving sessions over one Postgres database, and the gateway that
//! routes turns to them: shared by the 4-process lease test (`tests/pg_procs.rs`) and the
//! throughput bench (`benches/store_pg.rs`). Each program re-runs itself as a worker when
//! `CTXHOST_PG_WORKER` is set ([`worker_main`]).
//!
//! A worker keeps the sessions it was given open (leases renewed in the background) and
//! answers one line per turn. A turn appends the user's and the assistant's message and
//! commits the state `{"turn": n}`: a turn already committed (a resend after a kill) is
//! answered `dup`, never stored again, as serve's commit record does for a client's retry.
//! A session whose lease moved is dropped, never written, and answered `moved`.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

use ctxhost::Message;
use ctxhost::store::postgres::{PgBackend, PgOptions};
use ctxhost::store::{Backend, Commit, Opened};
use serde_json::json;

/// Set in a worker's environment: the Postgres URL, schema and lease (ms), tab-separated.
pub const WORKER_ENV: &str = "CTXHOST_PG_WORKER";

/// The user's message of turn `n` of `session`.
pub fn question(session: &str, n: u64) -> String {
    format!("{session} t{n} question")
}

/// The assistant's message of turn `n` of `session`.
pub fn answer(session: &str, n: u64) -> String {
    format!("{session} t{n} answer")
}

/// Runs this process as a worker when it was started as one; returns false otherwise.
pub fn worker_main() -> bool {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return false;
    };
    let mut parts = spec.split('\t');
    let (url, schema, lease_ms) = (
        parts.next().unwrap().to_owned(),
        parts.next().unwrap().to_owned(),
        parts.next().unwrap().parse::<u64>().unwrap(),
    );
    let backend = PgBackend::connect(PgOptions {
        schema,
        lease: Duration::from_millis(lease_ms),
        lease_wait: Duration::from_millis(lease_ms * 3),
        retry_for: Duration::from_secs(20),
        max_connections: 4,
        ..PgOptions::new(url)
    })
    .unwrap();
    let mut open: HashMap<String, (Opened, u64)> = HashMap::new();
    let stdout = std::io::stdout();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let mut words = line.split(' ');
        let (Some("turn"), Some(session), Some(n)) = (words.next(), words.next(), words.next())
        else {
            panic!("worker: not a command: {line}");
        };
        let n: u64 = n.parse().unwrap();
        let reply = turn(&backend, &mut open, session, n);
        let mut out = stdout.lock();
        writeln!(out, "{reply} {session} {n}").unwrap();
        out.flush().unwrap();
    }
    true
}

fn turn(
    backend: &PgBackend,
    open: &mut HashMap<String, (Opened, u64)>,
    session: &str,
    n: u64,
) -> &'static str {
    if !open.contains_key(session) {
        match backend.open(session, "") {
            Ok(opened) => {
                let done = opened
                    .state
                    .as_ref()
                    .and_then(|s| s["turn"].as_u64())
                    .unwrap_or(0);
                open.insert(session.to_owned(), (opened, done));
            }
            Err(ctxhost::Error::SessionMoved { .. }) => return "moved",
            Err(e) => {
                eprintln!("worker: open {session}: {e}");
                return "err";
            }
        }
    }
    let (opened, done) = open.get_mut(session).unwrap();
    if *done >= n {
        return "dup";
    }
    assert_eq!(*done + 1, n, "{session}: turn {n} after {done}");
    let state = std::sync::Arc::new(json!({"turn": n}));
    let written = opened
        .store
        .append(vec![
            Message::user(question(session, n)),
            Message::assistant(answer(session, n)),
        ])
        .and_then(|_| {
            opened.store.commit(Commit {
                state: Some(&state),
                turn_ended: true,
            })
        });
    match written {
        Ok(()) => {
            *done = n;
            "ok"
        }
        Err(e) => {
            // Moved or failed: the session is dropped (never written again from here); a
            // later turn reopens it from what was committed.
            open.remove(session);
            if matches!(e, ctxhost::Error::SessionMoved { .. }) {
                "moved"
            } else {
                eprintln!("worker: commit {session}: {e}");
                "err"
            }
        }
    }
}

/// One worker process, by its own handle.
pub struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
}

/// What a worker answered.
#[derive(Debug)]
pub struct Answer {
    /// Which worker.
    pub worker: usize,
    /// `ok`, `dup`, `moved` or `err`.
    pub kind: String,
    pub session: String,
    pub turn: u64,
}

/// The gateway's workers and their answers.
pub struct Fleet {
    pub workers: Vec<Worker>,
    answers: Receiver<Answer>,
    tx: Sender<Answer>,
}

impl Fleet {
    /// Starts `n` workers (this program re-run) over `schema`.
    pub fn spawn(n: usize, url: &str, schema: &str, lease: Duration) -> Fleet {
        let (tx, answers) = channel();
        let workers = (0..n)
            .map(|i| spawn_worker(i, url, schema, lease, tx.clone()))
            .collect();
        Fleet {
            workers,
            answers,
            tx,
        }
    }

    /// Sends turn `n` of `session` to worker `w`; false when its stdin is gone (killed).
    pub fn send(&mut self, w: usize, session: &str, n: u64) -> bool {
        let Some(stdin) = self.workers[w].stdin.as_mut() else {
            return false;
        };
        writeln!(stdin, "turn {session} {n}").is_ok() && stdin.flush().is_ok()
    }

    /// The next answer, or `None` after `timeout`.
    pub fn next(&self, timeout: Duration) -> Option<Answer> {
        self.answers.recv_timeout(timeout).ok()
    }

    /// Worker `w`'s process id (its backend's owner id and connections name it).
    pub fn pid(&self, w: usize) -> u32 {
        self.workers[w].child.id()
    }

    /// Sends a signal (`KILL`, `STOP`, `CONT`) to worker `w`, by its pid.
    pub fn signal(&mut self, w: usize, signal: &str) {
        let pid = self.pid(w).to_string();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {pid}");
        if signal == "KILL" {
            let _ = self.workers[w].child.wait();
            self.workers[w].stdin = None;
        }
    }

    /// Closes every live worker's stdin and waits for it to exit cleanly.
    pub fn close(mut self) {
        for (i, w) in self.workers.iter_mut().enumerate() {
            if let Some(stdin) = w.stdin.take() {
                drop(stdin);
                let status = w.child.wait().unwrap();
                assert!(status.success(), "worker {i} exits cleanly: {status}");
            }
        }
        drop(self.tx);
    }
}

fn spawn_worker(i: usize, url: &str, schema: &str, lease: Duration, tx: Sender<Answer>) -> Worker {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(
            WORKER_ENV,
            format!("{url}\t{schema}\t{}", lease.as_millis()),
        )
        .env("CTXHOST_LOG", "off")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in stdout.lines() {
            let Ok(line) = line else { break };
            let mut words = line.split(' ');
            let answer = Answer {
                worker: i,
                kind: words.next().unwrap_or_default().to_owned(),
                session: words.next().unwrap_or_default().to_owned(),
                turn: words.next().and_then(|n| n.parse().ok()).unwrap_or(0),
            };
            if tx.send(answer).is_err() {
                break;
            }
        }
    });
    Worker { child, stdin }
}
