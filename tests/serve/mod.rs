//! `ctxhost::serve` driven in-process over an in-memory pipe, as OpenClaw's bridge drives it:
//! the wire's robustness, OpenClaw's lifecycle calls, state that outlives a server process,
//! fallback to `legacy`, hot reload, and requests from ctxhost to the client.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod budget;
mod cancel;
mod compaction;
mod corpus;
mod delta;
mod durability;
mod fuzz;
mod identity;
mod lifecycle;
mod reload;
mod requirements;
mod stored;
mod wire;

use std::path::{Path, PathBuf};
use std::time::Duration;

use ctxhost::serve::{ServeOptions, serve};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};

/// Keeps the newest `keep` messages, counts its assembles in `p.state`, and names both (and
/// its version) in the system prompt addition; its estimate is deliberately wrong.
fn window_engine(version: &str, keep: usize, owns: bool) -> String {
    format!(
        r#"local M = {{ info = {{ id = "window", name = "Window", ownsCompaction = {owns} }} }}
function M.ingest(p) p.state.ingested = (p.state.ingested or 0) + 1 return {{ ingested = true }} end
function M.assemble(p)
  p.state.n = (p.state.n or 0) + 1
  local out = {{}}
  local first = math.max(1, #p.messages - {keep} + 1)
  for i = first, #p.messages do table.insert(out, p.messages[i]) end
  return {{ messages = out, estimatedTokens = 1,
           systemPromptAddition = "{version} n=" .. p.state.n .. " kept " .. #out .. " of " .. #p.messages }}
end
function M.compact(p)
  local n = #p.messages
  if n < 3 then return {{ ok = true, compacted = false, reason = "too small" }} end
  local s = host.summarize({{ p.messages[1], p.messages[2] }}, {{}})
  return {{ ok = true, compacted = true,
           result = {{ summary = s.text, firstKeptEntryId = p.messages[n].id, tokensBefore = host.tokens(p.messages) }} }}
end
function M.commitTurn(p) p.state.commits = (p.state.commits or 0) + 1 return {{ status = "committed" }} end
return M
"#
    )
}

/// The window engine whose assemble throws.
fn broken_engine() -> String {
    window_engine("v1", 2, true).replace(
        "p.state.n = (p.state.n or 0) + 1",
        "error(\"broken assemble\")",
    )
}

/// The window engine whose assemble spins for `ms` milliseconds.
fn slow_engine(ms: u32) -> String {
    window_engine("v1", 2, true).replace(
        "p.state.n = (p.state.n or 0) + 1",
        &format!(
            "p.state.n = (p.state.n or 0) + 1\n  local t = host.now() while host.now() - t < {ms} do end"
        ),
    )
}

struct Client {
    lines: Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
    write: tokio::io::WriteHalf<DuplexStream>,
    server: tokio::task::JoinHandle<ctxhost::Result<()>>,
    next: i64,
    /// What the engine file's watcher reloaded.
    reloads: tokio::sync::mpsc::UnboundedReceiver<ctxhost::runtime::reload::ReloadOutcome>,
}

impl Client {
    fn start(state: &Path) -> Client {
        Self::start_with(ServeOptions::new(state.to_path_buf()))
    }

    fn start_with(mut options: ServeOptions) -> Client {
        let (report, reloads) = tokio::sync::mpsc::unbounded_channel();
        options.reloads = Some(report);
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let (their_read, their_write) = tokio::io::split(theirs);
        let server = tokio::spawn(serve(their_read, their_write, options));
        let (read, write) = tokio::io::split(ours);
        Client {
            lines: BufReader::new(read).lines(),
            write,
            server,
            next: 1,
            reloads,
        }
    }

    /// Saves `text` as the engine file and waits until the server's watcher has reloaded it
    /// (or refused it: the error).
    async fn save(&mut self, engine: &Path, text: &str) -> Result<u64, String> {
        std::fs::write(engine, text).unwrap();
        self.reloaded().await
    }

    /// The next reload the engine file's watcher reports.
    async fn reloaded(&mut self) -> Result<u64, String> {
        let outcome = tokio::time::timeout(Duration::from_secs(20), self.reloads.recv())
            .await
            .expect("the watcher reloaded in time")
            .expect("the watcher is running");
        outcome.result.map_err(|e| e.to_string())
    }

    async fn send_raw(&mut self, line: &str) {
        self.write.write_all(line.as_bytes()).await.unwrap();
        self.write.write_all(b"\n").await.unwrap();
    }

    /// Sends a request without waiting; returns its id.
    async fn send(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next;
        self.next += 1;
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_raw(&frame.to_string()).await;
        id
    }

    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(20), self.lines.next_line())
            .await
            .expect("the server answered in time")
            .unwrap()
            .expect("the server is still talking");
        serde_json::from_str(&line).unwrap()
    }

    /// A request and its response (the whole frame).
    async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params).await;
        let r = self.recv().await;
        assert_eq!(r["id"], id, "{r}");
        r
    }

    async fn ok(&mut self, method: &str, params: Value) -> Value {
        let r = self.call(method, params).await;
        assert!(r.get("error").is_none(), "{method} failed: {r}");
        r["result"].clone()
    }

    /// Answers a request the server sent.
    async fn reply(&mut self, request: &Value, result: &Value) {
        let frame = json!({"jsonrpc": "2.0", "id": request["id"], "result": result});
        self.send_raw(&frame.to_string()).await;
    }

    /// Writes `source` as the engine, starts a server and initializes it; returns the client
    /// and the engine file.
    async fn on(dir: &Path, source: &str) -> (Client, PathBuf) {
        Self::on_file(dir, "window.lua", source).await
    }

    /// [`Client::on`] with the engine in the file `name` (its extension picks the language).
    async fn on_file(dir: &Path, name: &str, source: &str) -> (Client, PathBuf) {
        let engine = write_engine(dir, name, source);
        let mut c = Client::start(&dir.join("state"));
        c.init(&engine).await;
        (c, engine)
    }

    /// Starts on a non-owning engine, as a client that runs compaction itself.
    async fn delegating(dir: &Path) -> Client {
        let engine = write_engine(dir, "window.lua", &window_engine("v1", 2, false));
        let mut c = Client::start(&dir.join("state"));
        c.ok(
            "initialize",
            json!({"engine": engine, "capabilities": {"delegateCompaction": true}}),
        )
        .await;
        c
    }

    async fn init(&mut self, engine: &Path) -> Value {
        self.ok(
            "initialize",
            json!({"engine": engine, "clientInfo": {"name": "test", "version": "0"}}),
        )
        .await
    }

    async fn close(mut self) {
        self.write.shutdown().await.unwrap();
        let done = tokio::time::timeout(Duration::from_secs(1), self.server).await;
        done.expect("serve ended within a second of its input closing")
            .unwrap()
            .unwrap();
    }
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text, "timestamp": 1})
}

fn assistant(text: &str) -> Value {
    json!({"role": "assistant", "content": [{"type": "text", "text": text}], "timestamp": 2})
}

fn history(turns: usize) -> Vec<Value> {
    (0..turns)
        .flat_map(|i| {
            [
                user(&format!("question {i}")),
                assistant(&format!("answer {i}")),
            ]
        })
        .collect()
}

fn write_engine(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn assemble_params(messages: &[Value], budget: u64) -> Value {
    json!({"sessionId": "s-1", "sessionKey": "agent:main:main", "messages": messages,
           "tokenBudget": budget, "prompt": "next question"})
}

fn texts(result: &Value) -> Vec<String> {
    result["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            Value::Array(b) => b[0]["text"].as_str().unwrap_or_default().to_owned(),
            _ => String::new(),
        })
        .collect()
}

#[tokio::test]
async fn initialize_reports_the_engine_info_and_the_declared_transcript_semantics() {
    let dir = tempfile::tempdir().unwrap();
    let engine = write_engine(dir.path(), "window.lua", &window_engine("v1", 2, true));
    let mut c = Client::start(&dir.path().join("state"));
    let r = c.init(&engine).await;
    assert_eq!(r["protocolVersion"], "2");
    assert_eq!(
        r["views"], "full",
        "a client that did not ask for delta views"
    );
    assert_eq!(r["ctxhostVersion"], env!("CARGO_PKG_VERSION"));
    assert_eq!(r["info"]["id"], "window");
    assert_eq!(r["info"]["ownsCompaction"], true);
    assert_eq!(
        r["info"]["transcriptSemantics"],
        json!({"currentTurnFence": "before-current-turn-entry-v1",
               "turnAdvancementIdempotency": "atomic-idempotent-v1"})
    );
    c.close().await;
}

#[tokio::test]
async fn bad_lines_unknown_methods_and_oversized_lines_are_answered_and_the_server_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let engine = write_engine(dir.path(), "window.lua", &window_engine("v1", 2, true));
    let mut options = ServeOptions::new(dir.path().join("state"));
    options.max_line_bytes = 4096;
    let mut c = Client::start_with(options);
    c.send_raw("{not json").await;
    let r = c.recv().await;
    assert_eq!(r["error"]["code"], -32700, "{r}");
    assert_eq!(r["id"], Value::Null);
    c.send_raw(&format!("\"{}\"", "x".repeat(10_000))).await;
    let r = c.recv().await;
    assert_eq!(r["error"]["code"], -32600, "{r}");
    let r = c.call("no/such", json!({})).await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
    let r = c.call("assemble", assemble_params(&history(1), 1000)).await;
    assert_eq!(
        r["error"]["code"], -32002,
        "lifecycle before initialize: {r}"
    );
    c.init(&engine).await;
    let r = c.ok("assemble", assemble_params(&history(1), 1000)).await;
    assert_eq!(r["messages"].as_array().unwrap().len(), 2);
    c.close().await;
}

#[tokio::test]
async fn assemble_returns_the_engines_window_re_measured_and_is_idempotent_within_a_turn() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _) = Client::on(dir.path(), &window_engine("v1", 4, true)).await;
    let first = c.ok("assemble", assemble_params(&history(3), 10_000)).await;
    assert_eq!(
        texts(&first),
        ["question 1", "answer 1", "question 2", "answer 2"]
    );
    assert_eq!(first["systemPromptAddition"], "v1 n=1 kept 4 of 6");
    let measured = first["estimatedTokens"].as_u64().unwrap();
    assert!(
        measured > 1,
        "the host measures instead of trusting the engine's 1"
    );
    // OpenClaw's second call of the turn: the first call's output and a larger budget.
    let echoed = first["messages"].as_array().unwrap().clone();
    let second = c.ok("assemble", assemble_params(&echoed, 30_000)).await;
    assert_eq!(texts(&second), texts(&first));
    assert_eq!(second["systemPromptAddition"], "v1 n=2 kept 4 of 6");
    // The echo was not mirrored again: the next turn's view extends the same six messages.
    let third = c.ok("assemble", assemble_params(&history(4), 10_000)).await;
    assert_eq!(third["systemPromptAddition"], "v1 n=3 kept 4 of 8");
    c.close().await;
}

#[tokio::test]
async fn commit_turn_is_idempotent_and_state_survives_a_new_server_process() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let engine = write_engine(dir.path(), "window.lua", &window_engine("v1", 2, true));
    let commit = json!({"sessionId": "s-1", "sessionKey": "agent:main:main",
                        "advancementKey": "turn-1", "messages": [user("q"), assistant("a")]});
    let mut c = Client::start(&state);
    c.init(&engine).await;
    assert_eq!(
        c.ok(
            "bootstrap",
            json!({"sessionId": "s-1", "sessionKey": "agent:main:main"})
        )
        .await["bootstrapped"],
        false
    );
    c.ok("assemble", assemble_params(&history(1), 1000)).await;
    assert_eq!(
        c.ok("commitTurn", commit.clone()).await["status"],
        "committed"
    );
    assert_eq!(
        c.ok("commitTurn", commit.clone()).await["status"],
        "duplicate"
    );
    c.close().await;

    // A new process (every `openclaw agent --local` run is one).
    let mut c = Client::start(&state);
    c.init(&engine).await;
    assert_eq!(c.ok("commitTurn", commit).await["status"], "duplicate");
    let r = c.ok("assemble", assemble_params(&history(2), 1000)).await;
    // p.state.n went on counting from the first process; the mirror kept its two messages.
    assert_eq!(r["systemPromptAddition"], "v1 n=2 kept 2 of 4");
    c.close().await;
    let saved = std::fs::read_dir(state.join("sessions")).unwrap().count();
    assert_eq!(saved, 1, "one directory per session key");
}

#[tokio::test]
async fn a_failing_script_is_answered_by_legacy_and_the_client_sees_no_error() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _) = Client::on(dir.path(), &broken_engine()).await;
    let r = c.ok("assemble", assemble_params(&history(3), 10_000)).await;
    assert_eq!(
        texts(&r).len(),
        6,
        "legacy passes the whole history through"
    );
    assert!(r.get("systemPromptAddition").is_none());
    c.close().await;
}

#[tokio::test]
async fn an_overflowing_window_is_compacted_by_the_engine_and_later_windows_start_from_the_summary()
{
    let dir = tempfile::tempdir().unwrap();
    // Keeps everything: only compaction can bring it under the budget.
    let (mut c, _) = Client::on(dir.path(), &window_engine("v1", 1000, true)).await;
    let long: Vec<Value> = (0..6)
        .map(|i| {
            if i % 2 == 0 {
                user(&format!("{i} {}", "word ".repeat(200)))
            } else {
                assistant(&format!("{i} {}", "word ".repeat(200)))
            }
        })
        .collect();
    let r = c.ok("assemble", assemble_params(&long, 600)).await;
    assert!(
        r["estimatedTokens"].as_u64().unwrap() <= 600,
        "{}",
        r["estimatedTokens"]
    );
    let roles: Vec<&str> = r["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles[0], "compactionSummary", "{roles:?}");
    // The next turn's view still holds the full history: the summary stands in for it.
    let mut next = long.clone();
    next.push(user("short"));
    let r = c.ok("assemble", assemble_params(&next, 600)).await;
    assert_eq!(r["messages"][0]["role"], "compactionSummary");
    c.close().await;
}

#[tokio::test]
async fn compact_of_a_non_owning_engine_is_delegated_to_a_client_that_offers_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Client::delegating(dir.path()).await;
    let id = c
        .send(
            "compact",
            json!({"sessionId": "s-1", "sessionKey": "k", "tokenBudget": 1000, "force": true,
                   "compactionTarget": "threshold"}),
        )
        .await;
    let ask = c.recv().await;
    assert_eq!(ask["method"], "runtime.delegateCompaction");
    assert_eq!(ask["params"]["compactionTarget"], "threshold");
    let answer =
        json!({"ok": true, "compacted": true, "result": {"summary": "s", "tokensBefore": 900}});
    c.reply(&ask, &answer).await;
    let r = c.recv().await;
    assert_eq!(r["id"], id);
    assert_eq!(r["result"], answer);
    c.close().await;
}

#[tokio::test]
async fn requests_of_one_session_are_answered_in_order_and_a_queued_one_can_be_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _) = Client::on(dir.path(), &slow_engine(300)).await;
    let a = c.send("assemble", assemble_params(&history(1), 1000)).await;
    let b = c.send("assemble", assemble_params(&history(1), 1000)).await;
    let d = c.send("assemble", assemble_params(&history(1), 1000)).await;
    c.send_raw(
        &json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": d}}).to_string(),
    )
    .await;
    let ra = c.recv().await;
    let rb = c.recv().await;
    let rd = c.recv().await;
    assert_eq!((ra["id"].as_i64(), rb["id"].as_i64()), (Some(a), Some(b)));
    assert_eq!(ra["result"]["systemPromptAddition"], "v1 n=1 kept 2 of 2");
    assert_eq!(rb["result"]["systemPromptAddition"], "v1 n=2 kept 2 of 2");
    assert_eq!(rd["id"].as_i64(), Some(d));
    assert_eq!(rd["error"]["code"], -32800, "{rd}");
    c.close().await;
}

#[tokio::test]
async fn a_running_request_is_stopped_by_its_cancel_and_the_session_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    // A deadline far beyond the spin, so only the cancel can end the call early.
    let config = dir.path().join("ctxhost.json5");
    std::fs::write(&config, "{ host: { limits: { deadlineMs: 60000 } } }").unwrap();
    let engine = write_engine(dir.path(), "window.lua", &slow_engine(30_000));
    let mut c = Client::start(&dir.path().join("state"));
    c.ok("initialize", json!({"engine": engine, "config": config}))
        .await;
    let a = c.send("assemble", assemble_params(&history(1), 1000)).await;
    // Long enough for the session to open and the call to start spinning.
    tokio::time::sleep(Duration::from_secs(2)).await;
    c.send_raw(
        &json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": a}}).to_string(),
    )
    .await;
    let r = c.recv().await;
    assert_eq!(r["id"].as_i64(), Some(a));
    assert_eq!(r["error"]["code"], -32800, "{r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        !message.contains("before it ran"),
        "the call was running when cancelled: {message}"
    );
    // Nothing quarantined, and the flag does not stop the next call: it runs on the engine.
    c.save(&engine, &window_engine("v2", 2, true))
        .await
        .unwrap();
    let next = c.ok("assemble", assemble_params(&history(1), 1000)).await;
    let addition = next["systemPromptAddition"].as_str().unwrap_or_default();
    assert!(addition.starts_with("v2 n="), "{next}");
    c.close().await;
}

#[tokio::test]
async fn a_session_waiting_on_the_client_does_not_hold_up_another_session() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Client::delegating(dir.path()).await;
    // Session a waits for the client's compaction, which is answered only after b is served.
    let a = c
        .send(
            "compact",
            json!({"sessionId": "a", "tokenBudget": 1000, "force": true}),
        )
        .await;
    let ask = c.recv().await;
    assert_eq!(ask["method"], "runtime.delegateCompaction");
    let b = c
        .send(
            "assemble",
            json!({"sessionId": "b", "messages": history(1), "tokenBudget": 1000}),
        )
        .await;
    let rb = c.recv().await;
    assert_eq!(rb["id"], b, "b was answered while a waited: {rb}");
    let answer = json!({"ok": true, "compacted": false, "reason": "nothing to do"});
    c.reply(&ask, &answer).await;
    let ra = c.recv().await;
    assert_eq!(ra["id"], a);
    assert_eq!(ra["result"], answer);
    c.close().await;
}

#[tokio::test]
async fn a_tool_loop_after_an_echoed_window_is_assembled_once_and_never_mirrored() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _) = Client::on(dir.path(), &window_engine("v1", 1000, true)).await;
    let first = c.ok("assemble", assemble_params(&history(3), 10_000)).await;
    assert_eq!(first["systemPromptAddition"], "v1 n=1 kept 6 of 6");
    let mut echoed = first["messages"].as_array().unwrap().clone();
    echoed.push(json!({"role": "assistant", "timestamp": 5, "content": [
        {"type": "toolCall", "id": "call-1", "name": "read", "arguments": {"path": "a.txt"}}]}));
    echoed.push(
        json!({"role": "toolResult", "toolCallId": "call-1", "toolName": "read",
                       "content": [{"type": "text", "text": "file a"}], "timestamp": 6}),
    );
    let second = c.ok("assemble", assemble_params(&echoed, 30_000)).await;
    assert_eq!(second["systemPromptAddition"], "v1 n=2 kept 8 of 8");
    assert_eq!(second["messages"][7]["toolCallId"], "call-1");
    // The tool loop's messages joined that call only; the next view starts from the mirror.
    let third = c.ok("assemble", assemble_params(&history(3), 10_000)).await;
    assert_eq!(third["systemPromptAddition"], "v1 n=3 kept 6 of 6");
    c.close().await;
}

#[tokio::test]
async fn a_view_the_client_compacted_itself_replaces_the_mirrored_history() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _) = Client::on(dir.path(), &window_engine("v1", 1000, false)).await;
    let r = c.ok("assemble", assemble_params(&history(3), 10_000)).await;
    assert_eq!(r["systemPromptAddition"], "v1 n=1 kept 6 of 6");
    let compacted = vec![
        json!({"role": "compactionSummary", "summary": "they talked", "tokensBefore": 900, "timestamp": 7}),
        user("question 2"),
        assistant("answer 2"),
    ];
    let r = c.ok("assemble", assemble_params(&compacted, 10_000)).await;
    assert_eq!(r["systemPromptAddition"], "v1 n=2 kept 3 of 3");
    assert_eq!(r["messages"][0]["role"], "compactionSummary");
    // Growth after the client's compaction is mirrored as before.
    let mut grown = compacted.clone();
    grown.extend([user("question 3"), assistant("answer 3")]);
    let r = c.ok("assemble", assemble_params(&grown, 10_000)).await;
    assert_eq!(r["systemPromptAddition"], "v1 n=3 kept 5 of 5");
    c.close().await;
}
