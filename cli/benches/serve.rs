//! The round trip of one `assemble` through `ctxhost serve`, as OpenClaw's bridge pays it:
//! the request serialized, sent, parsed, mirrored, assembled by `scripts/recent_turns.lua`, and
//! the window sent back and parsed.
//!
//! - `serve_stdio/assemble [N msgs]`: the whole history (protocol 1: OpenClaw's array on every
//!   call) sent again unchanged, at 1,000 and 10,000 messages; a client in the bench talking to
//!   the real binary (`ctxhost serve --stdio`) over pipes.
//! - `serve_in_process/assemble [N msgs]`: the same requests to `ctxhost::serve::serve` over an
//!   in-memory pipe in this process (no process boundary, no OS pipes).
//! - `serve_new_message/{delta,full} [N msgs]`: `assemble` with one new message after N of
//!   history (1,000, 10,000, 100,000), over delta views (the new message and its hash; the
//!   window as references) and over the full form (the whole history and the window's
//!   messages), against the real binary. The bytes each call puts on the wire (both ways) are
//!   printed. `CTXHOST_BENCH_DURABILITY=none` runs the server with `host.durability: "none"`
//!   (no fsync), to see the wire and the work apart from the disk.
//!
//! The engine call alone, in process, is `cargo bench --bench lua_assemble`
//! (`lua_resident/recent_turns`).
//!
//! `cargo bench -p ctxhost-cli --bench serve`

#![allow(clippy::unwrap_used, clippy::expect_used)] // bench code: a panic is the failure report

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

const SIZES: [usize; 2] = [1_000, 10_000];

/// History sizes for `assemble` with one new message.
const NEW_MESSAGE_SIZES: [usize; 3] = [1_000, 10_000, 100_000];

fn engine() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/recent_turns.lua")
}

fn message(i: usize) -> Value {
    let text = format!(
        "message {i}: the parser returns an error for the config value in session {} and the tool result names the file src/lib.rs line {}",
        i % 97,
        i % 1000
    );
    if i.is_multiple_of(2) {
        json!({"role": "user", "content": text, "timestamp": i})
    } else {
        json!({"role": "assistant", "content": [{"type": "text", "text": text}], "timestamp": i})
    }
}

fn history(n: usize) -> Vec<Value> {
    (0..n).map(message).collect()
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
    initialize_with(&json!({}))
}

fn initialize_with(extra: &Value) -> Vec<u8> {
    let mut params = json!({"engine": engine(), "clientInfo": {"name": "bench", "version": "0"}});
    for (k, v) in extra.as_object().unwrap() {
        params[k] = v.clone();
    }
    line(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}))
}

/// A client's view for delta views: its rolling hash after each message (FNV-1a of each
/// message's JSON, chained).
struct Hashes(Vec<u64>);

impl Hashes {
    fn push(&mut self, m: &Value) -> u64 {
        let mut h = self.0.last().copied().unwrap_or(0xcbf2_9ce4_8422_2325);
        for b in m.to_string().as_bytes() {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0.push(h);
        h
    }
}

/// An `assemble` of session `id` over delta views: `new` appended after the `base` messages
/// the server holds.
fn delta_line(
    id: &str,
    base: usize,
    base_hash: Option<u64>,
    new: &[Value],
    hashes: &[u64],
) -> Vec<u8> {
    let view = json!({"base": base, "baseHash": base_hash.map(|h| format!("{h:016x}")),
                      "append": new, "hashes": hashes.iter().map(|h| format!("{h:016x}")).collect::<Vec<_>>()});
    let params = json!({"sessionId": id, "sessionKey": id, "view": view, "tokenBudget": 32_000,
                        "prompt": "next"});
    line(&json!({"jsonrpc": "2.0", "id": 1, "method": "assemble", "params": params}))
}

/// An `assemble` of session `id` in the full form.
fn full_line(id: &str, messages: &[Value]) -> Vec<u8> {
    let params = json!({"sessionId": id, "sessionKey": id, "messages": messages,
                        "tokenBudget": 32_000, "prompt": "next"});
    line(&json!({"jsonrpc": "2.0", "id": 1, "method": "assemble", "params": params}))
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
        Self::start_with(state, &initialize_line())
    }

    fn start_with(state: &Path, initialize: &[u8]) -> Self {
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
        let r = s.round_trip(initialize);
        assert!(r.get("result").is_some(), "{r}");
        s
    }

    fn round_trip(&mut self, request: &[u8]) -> Value {
        self.send(request);
        serde_json::from_str(&self.reply).unwrap()
    }

    /// Sends a request and reads its answer line (left in `reply`), without parsing it.
    fn send(&mut self, request: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(request).unwrap();
        stdin.flush().unwrap();
        self.reply.clear();
        self.stdout.read_line(&mut self.reply).unwrap();
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

/// `assemble` with one new message after N of history, over delta views and in the full form.
fn bench_new_message(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut init = json!({});
    if std::env::var("CTXHOST_BENCH_DURABILITY").as_deref() == Ok("none") {
        let config = dir.path().join("ctxhost.json5");
        std::fs::write(&config, r#"{ host: { durability: "none" } }"#).unwrap();
        init["config"] = json!(config);
    }
    init["capabilities"] = json!({"deltaViews": true});
    let mut delta = Server::start_with(&dir.path().join("delta"), &initialize_with(&init));
    init["capabilities"] = json!({});
    let mut full = Server::start_with(&dir.path().join("full"), &initialize_with(&init));
    let mut group = c.benchmark_group("serve_new_message");
    group.sample_size(10);
    for n in NEW_MESSAGE_SIZES {
        // Delta views: the first call brings the whole history (a session's first call).
        let id = format!("delta-{n}");
        let mut msgs = history(n);
        let mut hashes = Hashes(Vec::new());
        let all: Vec<u64> = msgs.iter().map(|m| hashes.push(m)).collect();
        let r = delta.round_trip(&delta_line(&id, 0, None, &msgs, &all));
        assert!(r["result"]["window"].is_array(), "{r}");
        let mut bytes = Vec::new();
        group.bench_function(format!("delta [{n} msgs]"), |b| {
            b.iter_batched(
                || {
                    let m = message(msgs.len());
                    let base = msgs.len();
                    let base_hash = hashes.0.last().copied();
                    let h = hashes.push(&m);
                    msgs.push(m);
                    delta_line(&id, base, base_hash, &msgs[base..], &[h])
                },
                |request| {
                    delta.send(&request);
                    bytes.push(request.len() + delta.reply.len());
                },
                BatchSize::PerIteration,
            )
        });
        let r: Value = serde_json::from_str(&delta.reply).unwrap();
        assert_eq!(r["result"]["view"]["count"], msgs.len(), "{r}");
        eprintln!(
            "serve_new_message/delta [{n} msgs]: {} bytes on the wire per call",
            median(&mut bytes)
        );

        let id = format!("full-{n}");
        let mut msgs = history(n);
        let r = full.round_trip(&full_line(&id, &msgs));
        assert!(r["result"]["messages"].is_array(), "{r}");
        let mut bytes = Vec::new();
        group.bench_function(format!("full [{n} msgs]"), |b| {
            b.iter_batched(
                || {
                    msgs.push(message(msgs.len()));
                    full_line(&id, &msgs)
                },
                |request| {
                    full.send(&request);
                    bytes.push(request.len() + full.reply.len());
                },
                BatchSize::PerIteration,
            )
        });
        eprintln!(
            "serve_new_message/full [{n} msgs]: {} bytes on the wire per call",
            median(&mut bytes)
        );
    }
    group.finish();
    delta.stop();
    full.stop();
}

fn median(xs: &mut [usize]) -> usize {
    xs.sort_unstable();
    xs.get(xs.len() / 2).copied().unwrap_or(0)
}

criterion_group!(benches, bench_stdio, bench_in_process, bench_new_message);
criterion_main!(benches);
