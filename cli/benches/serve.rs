//! The round trip of one `assemble` through `ctxhost serve`, as OpenClaw's bridge pays it: the
//! whole history (OpenClaw sends it on every call) serialized, sent, parsed, mirrored
//! (fingerprinted against what the session holds), assembled by `scripts/recent_turns.lua`,
//! and the window sent back and parsed, at 1,000 and 10,000 messages.
//!
//! - `serve_stdio/assemble [N msgs]`: a client in the bench talking to the real binary
//!   (`ctxhost serve --stdio`) over pipes.
//! - `serve_in_process/assemble [N msgs]`: the same requests to `ctxhost::serve::serve` over an
//!   in-memory pipe in this process (no process boundary, no OS pipes).
//!
//! The engine call alone, in process, is `cargo bench --bench lua_assemble`
//! (`lua_resident/recent_turns`).
//!
//! `cargo bench -p ctxhost-cli --bench serve`

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is the failure report

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

const SIZES: [usize; 2] = [1_000, 10_000];

fn engine() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/recent_turns.lua")
}

fn history(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let text = format!(
                "message {i}: the parser returns an error for the config value in session {} and the tool result names the file src/lib.rs line {}",
                i % 97,
                i % 1000
            );
            if i % 2 == 0 {
                json!({"role": "user", "content": text, "timestamp": i})
            } else {
                json!({"role": "assistant", "content": [{"type": "text", "text": text}], "timestamp": i})
            }
        })
        .collect()
}

fn line(frame: &Value) -> Vec<u8> {
    let mut line = serde_json::to_vec(frame).unwrap();
    line.push(b'\n');
    line
}

/// One `assemble` request line for a session of `n` messages.
fn assemble_line(n: usize) -> Vec<u8> {
    let params = json!({"sessionId": format!("bench-{n}"), "sessionKey": format!("bench-{n}"),
                        "messages": history(n), "tokenBudget": 32_000, "prompt": "next"});
    line(&json!({"jsonrpc": "2.0", "id": 1, "method": "assemble", "params": params}))
}

fn initialize_line() -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"engine": engine(), "clientInfo": {"name": "bench", "version": "0"}}}))
}

/// A `ctxhost serve --stdio` child and a blocking client for it.
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    reply: String,
}

impl Server {
    fn start(state: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ctxhost"))
            .args(["serve", "--stdio", "--state-dir"])
            .arg(state)
            .env_remove("CTXHOST_CONFIG")
            .env("XDG_CONFIG_HOME", "/nonexistent/ctxhost-bench-config")
            .env("CTXHOST_LOG", "off")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut s = Server {
            child,
            stdin,
            stdout,
            reply: String::new(),
        };
        let r = s.round_trip(&initialize_line());
        assert!(r.get("result").is_some(), "{r}");
        s
    }

    fn round_trip(&mut self, request: &[u8]) -> Value {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(request).unwrap();
        stdin.flush().unwrap();
        self.reply.clear();
        self.stdout.read_line(&mut self.reply).unwrap();
        serde_json::from_str(&self.reply).unwrap()
    }

    fn stop(mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

fn bench_stdio(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path());
    let mut group = c.benchmark_group("serve_stdio");
    group.sample_size(20);
    for n in SIZES {
        let request = assemble_line(n);
        // The first call mirrors (and ingests) the whole history; the bench measures the calls
        // after it, as in a running session.
        let r = server.round_trip(&request);
        assert!(r["result"]["messages"].is_array(), "{r}");
        group.bench_function(format!("assemble [{n} msgs]"), |b| {
            b.iter(|| server.round_trip(&request))
        });
    }
    group.finish();
    server.stop();
}

fn bench_in_process(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (ours, theirs) = tokio::io::duplex(1 << 22);
    let (their_read, their_write) = tokio::io::split(theirs);
    let options = ctxhost::serve::ServeOptions::new(dir.path().to_path_buf());
    let server = runtime.spawn(ctxhost::serve::serve(their_read, their_write, options));
    let (read, mut write) = tokio::io::split(ours);
    let mut lines = tokio::io::BufReader::new(read).lines();
    let mut round_trip = |request: &[u8]| -> Value {
        runtime.block_on(async {
            write.write_all(request).await.unwrap();
            let reply = lines.next_line().await.unwrap().unwrap();
            serde_json::from_str(&reply).unwrap()
        })
    };
    assert!(round_trip(&initialize_line()).get("result").is_some());
    let mut group = c.benchmark_group("serve_in_process");
    group.sample_size(20);
    for n in SIZES {
        let request = assemble_line(n);
        let r = round_trip(&request);
        assert!(r["result"]["messages"].is_array(), "{r}");
        group.bench_function(format!("assemble [{n} msgs]"), |b| {
            b.iter(|| round_trip(&request))
        });
    }
    group.finish();
    runtime.block_on(async {
        write.shutdown().await.unwrap();
        server.await.unwrap().unwrap();
    });
}

criterion_group!(benches, bench_stdio, bench_in_process);
criterion_main!(benches);
