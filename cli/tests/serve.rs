//! `ctxhost serve --stdio` as a client process sees it: JSON-RPC lines on stdout only, logs on
//! stderr, state kept in the state directory, and a clean exit soon after stdin closes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const ENGINE: &str = r#"local M = { info = { id = "window", name = "Window", ownsCompaction = true } }
function M.ingest(p) return { ingested = true } end
function M.assemble(p)
  p.state.n = (p.state.n or 0) + 1
  local out = {}
  for i = math.max(1, #p.messages - 1), #p.messages do table.insert(out, p.messages[i]) end
  return { messages = out, estimatedTokens = host.tokens(out), systemPromptAddition = "n=" .. p.state.n }
end
function M.compact(p) return { ok = true, compacted = false, reason = "nothing" } end
function M.commitTurn(p) return { status = "committed" } end
return M
"#;

fn spawn(dir: &std::path::Path, engine: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ctxhost"))
        .args(["serve", "--stdio", "--engine"])
        .arg(engine)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .env("CTXHOST_LOG", "info")
        .env_remove("CTXHOST_CONFIG")
        .env("HOME", dir)
        .env_remove("XDG_CONFIG_HOME")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Sends `requests`, closes stdin, and returns the response lines, stderr, and how long the
/// process took to exit after stdin closed.
fn session(
    dir: &std::path::Path,
    engine: &std::path::Path,
    requests: &[Value],
) -> (Vec<Value>, String, Duration) {
    let mut child = spawn(dir, engine);
    let mut stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let reader =
        std::thread::spawn(move || stdout.lines().map(|l| l.unwrap()).collect::<Vec<String>>());
    for r in requests {
        writeln!(stdin, "{r}").unwrap();
    }
    stdin.flush().unwrap();
    // Let the server answer before the input closes.
    std::thread::sleep(Duration::from_millis(1500));
    drop(stdin);
    let closed = Instant::now();
    let deadline = closed + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("serve did not exit after stdin closed");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = closed.elapsed();
    assert!(status.success(), "{status:?}");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let lines = reader.join().unwrap();
    let mut frames: Vec<Value> = lines
        .iter()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {l}"))
        })
        .collect();
    // Answers of different sessions (and of methods served inline) may come in any order.
    frames.sort_by_key(|f| f["id"].as_i64());
    (frames, stderr, took)
}

fn request(id: i64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

#[test]
fn serve_answers_on_stdout_logs_on_stderr_keeps_state_and_exits_when_stdin_closes() {
    let dir = tempfile::tempdir().unwrap();
    let engine = dir.path().join("window.lua");
    std::fs::write(&engine, ENGINE).unwrap();
    let history = json!([
        {"role": "user", "content": "one", "timestamp": 1},
        {"role": "assistant", "content": [{"type": "text", "text": "two"}], "timestamp": 2},
        {"role": "user", "content": "three", "timestamp": 3}
    ]);
    let assemble = json!({"sessionKey": "agent:main:main", "sessionId": "s", "messages": history, "tokenBudget": 1000});
    let commit = json!({"sessionKey": "agent:main:main", "sessionId": "s", "advancementKey": "k1", "messages": []});
    let (frames, stderr, took) = session(
        dir.path(),
        &engine,
        &[
            request(
                1,
                "initialize",
                json!({"clientInfo": {"name": "cli-test", "version": "1"}}),
            ),
            request(2, "assemble", assemble.clone()),
            request(3, "commitTurn", commit.clone()),
            request(4, "nope", json!({})),
        ],
    );
    assert_eq!(frames.len(), 4, "{frames:?}");
    assert_eq!(frames[0]["result"]["info"]["id"], "window");
    assert_eq!(frames[1]["result"]["systemPromptAddition"], "n=1");
    assert_eq!(frames[1]["result"]["messages"].as_array().unwrap().len(), 2);
    assert_eq!(frames[2]["result"]["status"], "committed");
    assert_eq!(frames[3]["error"]["code"], -32601);
    assert!(
        stderr.contains("initialized"),
        "logs go to stderr: {stderr}"
    );
    assert!(took < Duration::from_secs(1), "exit took {took:?}");

    // The next process continues: the engine's state and the commit record were kept.
    let (frames, _, _) = session(
        dir.path(),
        &engine,
        &[
            request(1, "initialize", json!({})),
            request(2, "assemble", assemble),
            request(3, "commitTurn", commit),
        ],
    );
    assert_eq!(frames[1]["result"]["systemPromptAddition"], "n=2");
    assert_eq!(frames[2]["result"]["status"], "duplicate");
}

#[test]
fn serve_without_stdio_is_refused() {
    let o = Command::new(env!("CARGO_BIN_EXE_ctxhost"))
        .args(["serve"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--stdio"));
}

fn doctor(openclaw_config: &std::path::Path) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_ctxhost"))
        .args(["doctor"])
        .env("CTXHOST_LOG", "off")
        .env_remove("CTXHOST_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/ctxhost-test-config")
        .env("OPENCLAW_CONFIG_PATH", openclaw_config)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

#[test]
fn doctor_reports_the_openclaw_bridge_and_checks_its_engine() {
    let dir = tempfile::tempdir().unwrap();
    let engine = dir.path().join("window.lua");
    std::fs::write(&engine, ENGINE).unwrap();
    let config = dir.path().join("openclaw.json");
    let (code, out) = doctor(&config);
    assert_eq!(code, Some(0));
    assert!(out.contains("openclaw:   no config at"), "{out}");

    let installed = json!({"plugins": {
        "load": {"paths": ["/somewhere/bridges/openclaw"]},
        "entries": {"ctxhost": {"enabled": true, "config": {"engine": engine}}},
        "slots": {"contextEngine": "ctxhost"}}});
    std::fs::write(&config, installed.to_string()).unwrap();
    let (code, out) = doctor(&config);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("plugin:   ctxhost enabled, selected as the context engine"),
        "{out}"
    );
    assert!(
        out.contains(&format!("engine:   {}", engine.display())),
        "{out}"
    );
    assert!(out.contains("check:    sound"), "{out}");

    std::fs::write(&engine, "return {").unwrap();
    let (code, out) = doctor(&config);
    assert_eq!(
        code,
        Some(1),
        "a plugin pointing at a broken engine is a problem: {out}"
    );
    assert!(!out.contains("check:    sound"), "{out}");

    std::fs::write(&config, r#"{"plugins": {"entries": {}}}"#).unwrap();
    let (_, out) = doctor(&config);
    assert!(out.contains("plugin:   not installed"), "{out}");
}

/// Abandoned workers are counted per process: a running `serve` publishes its count under the
/// state directory, `doctor` (another process) lists it, and the entry goes when serve ends.
#[test]
fn doctor_lists_a_running_serve_with_its_abandoned_workers() {
    let dir = tempfile::tempdir().unwrap();
    let engine = dir.path().join("window.lua");
    std::fs::write(&engine, ENGINE).unwrap();
    let state = dir.path().join("state");
    let mut child = spawn(dir.path(), &engine);
    let pid = child.id();
    let published = state.join("running").join(format!("{pid}.json"));
    let start = Instant::now();
    while !published.exists() && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let doctor = |state: &std::path::Path| {
        let o = Command::new(env!("CARGO_BIN_EXE_ctxhost"))
            .args(["doctor"])
            .env("CTXHOST_LOG", "off")
            .env_remove("CTXHOST_CONFIG")
            .env("XDG_CONFIG_HOME", "/nonexistent/ctxhost-test-config")
            .env("OPENCLAW_CONFIG_PATH", "/nonexistent/openclaw.json")
            .env("CTXHOST_STATE_DIR", state)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let text = doctor(&state);
    assert!(
        text.contains(&format!(
            "  serve (pid {pid}): 0 abandoned and still running"
        )),
        "{text}"
    );
    drop(child.stdin.take());
    child.wait().unwrap();
    assert!(!published.exists(), "serve removed its entry when it ended");
    let text = doctor(&state);
    assert!(!text.contains("serve (pid"), "{text}");
}

/// Node spawns `serve --stdio` with a socket pair for each of stdin and stdout (not pipes):
/// served on the reactor, an answer written by the thread that made it. Answers larger than
/// the socket's buffer, to a client that reads only once everything was sent, arrive whole
/// (no frame cut into another), each once, a session's in the order asked.
#[cfg(unix)]
#[test]
fn serve_over_socket_pairs_writes_answers_larger_than_the_buffer_whole_and_in_order() {
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    let dir = tempfile::tempdir().unwrap();
    let engine = dir.path().join("window.lua");
    std::fs::write(&engine, ENGINE).unwrap();
    let (mut to_serve, their_stdin) = UnixStream::pair().unwrap();
    let (from_serve, their_stdout) = UnixStream::pair().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ctxhost"))
        .args(["serve", "--stdio", "--engine"])
        .arg(&engine)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .env_remove("CTXHOST_CONFIG")
        .env("HOME", dir.path())
        .env_remove("XDG_CONFIG_HOME")
        .stdin(Stdio::from(OwnedFd::from(their_stdin)))
        .stdout(Stdio::from(OwnedFd::from(their_stdout)))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The window engine answers with the newest two messages: 2 × 400 KB per `assemble`.
    let big = |tag: &str| "x".repeat(400_000) + tag;
    let history = |n: usize| {
        (0..n)
            .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": big(&format!("-{i}")), "timestamp": i}))
            .collect::<Vec<_>>()
    };
    let assemble = |session: &str, n: usize| json!({"sessionKey": session, "sessionId": session, "messages": history(n), "tokenBudget": 10_000_000});
    let requests = [
        request(1, "initialize", json!({})),
        request(2, "assemble", assemble("a", 3)),
        request(3, "assemble", assemble("b", 3)),
        request(4, "assemble", assemble("a", 4)),
        request(5, "assemble", assemble("b", 5)),
        request(6, "assemble", assemble("a", 6)),
    ];
    for r in &requests {
        writeln!(to_serve, "{r}").unwrap();
    }
    // Nothing read yet: the server's answers fill the socket and wait.
    std::thread::sleep(Duration::from_millis(1500));
    to_serve.shutdown(std::net::Shutdown::Write).unwrap();
    let lines: Vec<String> = BufReader::new(from_serve)
        .lines()
        .map(|l| l.unwrap())
        .collect();
    assert!(child.wait().unwrap().success());
    let frames: Vec<Value> = lines
        .iter()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("a cut frame ({e}): {} bytes", l.len()))
        })
        .collect();
    let ids: Vec<i64> = frames.iter().map(|f| f["id"].as_i64().unwrap()).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(sorted, vec![1, 2, 3, 4, 5, 6], "each answered once");
    let order = |session: &[i64]| -> Vec<i64> {
        ids.iter()
            .copied()
            .filter(|id| session.contains(id))
            .collect()
    };
    assert_eq!(
        order(&[2, 4, 6]),
        vec![2, 4, 6],
        "session a's answers in order"
    );
    assert_eq!(order(&[3, 5]), vec![3, 5], "session b's answers in order");
    // Each window message is one of the request's own, byte for byte.
    let sent = [(2, 3), (3, 3), (4, 4), (5, 5), (6, 6)];
    for (id, n) in sent {
        let f = frames.iter().find(|f| f["id"] == id).unwrap();
        let window = f["result"]["messages"].as_array().unwrap();
        assert_eq!(window.len(), 2, "answer {id}");
        for m in window {
            let content = m["content"].as_str().unwrap();
            assert!(
                (0..n).any(|i| content == big(&format!("-{i}"))),
                "answer {id}: a message of {} bytes that is none of the {n} sent",
                content.len()
            );
        }
    }
}
