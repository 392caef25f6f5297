//! A gateway's memory follows the sessions in use: `ctxhost serve` releases sessions beyond
//! `host.serve.maxLive` (least recently used first) and those idle for `host.serve.idleMs`,
//! and a released session reopens where it was; an open session's engine VM holds no thread of
//! its own between calls. Seen from outside: the process's threads, its log, and what each
//! session answers.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

const ENGINE: &str = r#"local M = { info = { id = "window", name = "Window", ownsCompaction = true } }
function M.ingest(p) return { ingested = true } end
function M.assemble(p)
  p.state.n = (p.state.n or 0) + 1
  return { messages = p.messages, estimatedTokens = host.tokens(p.messages),
           systemPromptAddition = "n=" .. p.state.n .. " of " .. #p.messages }
end
function M.compact(p) return { ok = true, compacted = false, reason = "nothing" } end
return M
"#;

struct Serve {
    child: std::process::Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
    /// Sessions the server said it released (its debug log, read as it comes).
    released: Arc<AtomicUsize>,
}

impl Serve {
    fn start(dir: &std::path::Path, serve_settings: Value) -> Serve {
        let engine = dir.join("window.lua");
        std::fs::write(&engine, ENGINE).unwrap();
        let config = dir.join("ctxhost.json5");
        std::fs::write(
            &config,
            json!({"host": {"serve": serve_settings}}).to_string(),
        )
        .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_ctxhost"))
            .args(["serve", "--stdio", "--engine"])
            .arg(&engine)
            .arg("--config")
            .arg(&config)
            .arg("--state-dir")
            .arg(dir.join("state"))
            .env("CTXHOST_LOG", "warn,ctxhost::serve::retention=debug")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let released = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&released);
        let stderr = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if line.contains("session released") {
                    counter.fetch_add(1, Ordering::SeqCst);
                } else {
                    eprintln!("{line}");
                }
            }
        });
        let mut s = Serve {
            stdin: child.stdin.take().unwrap(),
            stdout: BufReader::new(child.stdout.take().unwrap()),
            child,
            next: 1,
            released,
        };
        s.ok("initialize", json!({}));
        s
    }

    fn ok(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{frame}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let r: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(r["id"], id, "{r}");
        assert!(r.get("error").is_none(), "{method}: {r}");
        r["result"].clone()
    }

    fn assemble(&mut self, session: usize, turns: usize) -> String {
        let messages: Vec<Value> = (0..turns)
            .flat_map(|t| {
                [
                    json!({"role": "user", "content": format!("s{session} q{t}"), "timestamp": 1}),
                    json!({"role": "assistant", "content": [{"type": "text", "text": format!("s{session} a{t}")}], "timestamp": 2}),
                ]
            })
            .collect();
        let r = self.ok(
            "assemble",
            json!({"sessionId": format!("s-{session}"), "sessionKey": format!("agent:main:{session}"),
                   "messages": messages, "tokenBudget": 100_000}),
        );
        r["systemPromptAddition"].as_str().unwrap().to_owned()
    }

    /// The process's engine VM threads now (`/proc/<pid>/task/*/comm`): the Lua pool's, one per
    /// call in flight, not per open session (the runtime's own pools come and go on timers of
    /// their own, so they are not counted).
    fn threads(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/task", self.child.id()))
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|name| name.trim() == "ctxhost-lua")
            .count()
    }

    fn close(mut self) {
        drop(self.stdin);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status:?}");
    }
}

#[test]
fn sessions_beyond_max_live_are_released_and_reopen_where_they_were() {
    let dir = tempfile::tempdir().unwrap();
    let mut serve = Serve::start(dir.path(), json!({"maxLive": 8}));
    let baseline = serve.threads();
    for s in 0..120 {
        assert_eq!(serve.assemble(s, 1), "n=1 of 2");
    }
    let threads = serve.threads();
    // A thread per open session would be 8 more (120 if none were released).
    assert!(
        threads <= baseline + 8,
        "{threads} engine threads with 8 sessions open (baseline {baseline})"
    );
    // The least recently used beyond 8 were released (each between its calls, so the last
    // ones may still be closing).
    for _ in 0..100 {
        if serve.released.load(Ordering::SeqCst) >= 120 - 8 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        serve.released.load(Ordering::SeqCst) >= 120 - 8,
        "{} sessions released of 120 with maxLive 8",
        serve.released.load(Ordering::SeqCst)
    );
    // Released sessions reopen from what was saved: their state and their messages.
    for s in 0..120 {
        assert_eq!(serve.assemble(s, 2), "n=2 of 4", "session {s}");
    }
    serve.close();
}

#[test]
fn idle_sessions_are_released_and_reopen_where_they_were() {
    let dir = tempfile::tempdir().unwrap();
    let mut serve = Serve::start(dir.path(), json!({"idleMs": 3000}));
    let baseline = serve.threads();
    for s in 0..30 {
        assert_eq!(serve.assemble(s, 1), "n=1 of 2");
    }
    let busy = serve.threads();
    // Open and in use, yet their VMs hold no thread each: 30 sessions called one after another
    // run on a thread or two of the pool (a thread per VM would be 30 more).
    assert!(
        busy <= baseline + 4,
        "{busy} engine threads with 30 sessions open (baseline {baseline})"
    );
    // Every session is released once idle, and the pool's threads end once idle too.
    let mut threads = busy;
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(100));
        threads = serve.threads();
        if threads <= baseline && serve.released.load(Ordering::SeqCst) >= 30 {
            break;
        }
    }
    assert_eq!(
        serve.released.load(Ordering::SeqCst),
        30,
        "sessions released after 3 s idle"
    );
    assert!(
        threads <= baseline,
        "{threads} engine threads after every session went idle (baseline {baseline}, {busy} busy)"
    );
    for s in 0..30 {
        assert_eq!(serve.assemble(s, 2), "n=2 of 4", "session {s}");
    }
    serve.close();
}
