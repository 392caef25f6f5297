//! `host.summarizer: {kind: "client"}` over the wire: `ctxhost::serve` in-process, a test
//! client that declared `llmComplete` answers the `llm.complete` requests ctxhost sends for
//! `host.complete` and for summaries; a client with no model to lend (error -32010), or one
//! that never declared the capability, leaves scripts a clear `unavailable` and summaries to
//! the offline summarizer.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::{Path, PathBuf};
use std::time::Duration;

use ctxhost::serve::{NO_CLIENT_MODEL, ServeOptions, serve};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};

/// Asks `host.complete` and `host.summarize` on every assemble and shows both answers.
const ASKER: &str = r#"local M = { info = { id = "asker", name = "Asker", ownsCompaction = true } }
function M.ingest(p) return { ingested = true } end
function M.assemble(p)
  local r = host.complete({ prompt = "Which file next?", maxTokens = 30 })
  local line = r.error and ("error|" .. r.reason .. "|" .. r.error)
    or ("ok|" .. r.text .. "|" .. r.model .. "|" .. r.usage.input .. "|" .. r.usage.output)
  local s = host.summarize(p.messages, { maxTokens = 400 })
  return { messages = p.messages, estimatedTokens = 1,
           systemPromptAddition = line .. "\n" .. s.text }
end
function M.compact(p) return { ok = true, compacted = false, reason = "not needed" } end
return M
"#;

struct Client {
    lines: Lines<BufReader<tokio::io::ReadHalf<DuplexStream>>>,
    write: tokio::io::WriteHalf<DuplexStream>,
    next: i64,
}

impl Client {
    /// A server on `dir` with the asker engine and `kind: "client"`, initialized with
    /// `capabilities`.
    async fn start(dir: &Path, capabilities: Value) -> Client {
        let engine = write(dir, "asker.lua", ASKER);
        let config = write(
            dir,
            "ctxhost.json5",
            r#"{ host: { summarizer: { kind: "client", timeoutMs: 10000 },
                        complete: { timeoutMs: 10000, maxCallsPerTurn: 4 } } }"#,
        );
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let (their_read, their_write) = tokio::io::split(theirs);
        tokio::spawn(serve(
            their_read,
            their_write,
            ServeOptions::new(dir.join("state")),
        ));
        let (read, write) = tokio::io::split(ours);
        let mut c = Client {
            lines: BufReader::new(read).lines(),
            write,
            next: 1,
        };
        let id = c
            .send(
                "initialize",
                json!({"engine": engine, "config": config, "capabilities": capabilities}),
            )
            .await;
        let r = c.recv().await;
        assert_eq!(r["id"], id, "{r}");
        assert!(r.get("error").is_none(), "{r}");
        c
    }

    async fn send_frame(&mut self, frame: &Value) {
        self.write
            .write_all(format!("{frame}\n").as_bytes())
            .await
            .unwrap();
    }

    async fn send(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next;
        self.next += 1;
        self.send_frame(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        id
    }

    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
            .await
            .expect("the server answered in time")
            .unwrap()
            .expect("the server is still talking");
        serde_json::from_str(&line).unwrap()
    }

    /// Sends `assemble` and answers every `llm.complete` before its response with `answer`
    /// (given the request's params); returns the response and the requests answered.
    async fn assemble(
        &mut self,
        answer: impl Fn(&Value) -> Result<Value, Value>,
    ) -> (Value, Vec<Value>) {
        let params = json!({"sessionId": "s-1", "sessionKey": "agent:main:main",
            "messages": [{"role": "user", "content": "read /srv/app/main.rs", "timestamp": 1},
                         {"role": "assistant", "content": [{"type": "text", "text": "done"}], "timestamp": 2}],
            "tokenBudget": 10000, "prompt": "next"});
        let id = self.send("assemble", params).await;
        let mut asked = Vec::new();
        loop {
            let frame = self.recv().await;
            if frame["id"] == id && frame.get("method").is_none() {
                return (frame, asked);
            }
            assert_eq!(frame["method"], "llm.complete", "{frame}");
            let reply = match answer(&frame["params"]) {
                Ok(result) => json!({"jsonrpc": "2.0", "id": frame["id"], "result": result}),
                Err(error) => json!({"jsonrpc": "2.0", "id": frame["id"], "error": error}),
            };
            asked.push(frame["params"].clone());
            self.send_frame(&reply).await;
        }
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn addition(r: &Value) -> String {
    assert!(r.get("error").is_none(), "{r}");
    r["result"]["systemPromptAddition"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

const SUMMARY: &str = "## Goal\n- Read /srv/app/main.rs\n\n## Progress\n- Done";

#[tokio::test]
async fn client_model_answers_host_complete_and_summaries_over_llm_complete() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Client::start(dir.path(), json!({"llmComplete": true})).await;
    let (r, asked) = c
        .assemble(|p| {
            // Slower than the script's 500 ms deadline: a model wait does not count.
            std::thread::sleep(Duration::from_millis(700));
            let prompt = p["messages"].to_string();
            if prompt.contains("Which file next?") {
                Ok(json!({"text": "src/lib.rs", "usage": {"input": 12, "output": 3}, "model": "claude-test"}))
            } else {
                Ok(json!({"text": SUMMARY, "model": "claude-test"}))
            }
        })
        .await;
    assert_eq!(asked.len(), 2, "{asked:?}");
    // What travels: the chat, the caps, the time limit; never a key or a URL.
    let first = &asked[0];
    assert_eq!(first["maxTokens"], 30);
    assert_eq!(first["timeoutMs"], 10000);
    assert_eq!(
        first["messages"],
        json!([{"role": "user", "content": "Which file next?"}])
    );
    assert!(
        asked[1]["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("handoff summary")
    );
    let text = addition(&r);
    let mut lines = text.splitn(2, '\n');
    assert_eq!(lines.next(), Some("ok|src/lib.rs|claude-test|12|3"));
    assert_eq!(
        lines.next(),
        Some(SUMMARY),
        "the client's model wrote the summary"
    );
}

#[tokio::test]
async fn a_client_without_a_model_leaves_scripts_unavailable_and_summaries_offline() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Client::start(dir.path(), json!({"llmComplete": true})).await;
    let (r, asked) = c
        .assemble(|_| {
            Err(json!({"code": NO_CLIENT_MODEL, "message": "the runtime offers no model call"}))
        })
        .await;
    assert_eq!(
        asked.len(),
        2,
        "both the script and the summarizer asked: {asked:?}"
    );
    let text = addition(&r);
    assert!(
        text.starts_with("error|unavailable|host.complete: no model is configured"),
        "{text}"
    );
    assert!(
        text.contains("/srv/app/main.rs"),
        "the offline summary: {text}"
    );
    assert!(!text.contains(SUMMARY));
}

#[tokio::test]
async fn a_client_that_never_offered_llm_complete_is_never_asked() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Client::start(dir.path(), json!({})).await;
    let (r, asked) = c.assemble(|p| panic!("asked {p}")).await;
    assert!(asked.is_empty());
    let text = addition(&r);
    assert!(text.starts_with("error|unavailable|"), "{text}");
}
