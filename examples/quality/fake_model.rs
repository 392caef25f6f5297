//! A forgetful fake model: an OpenAI-compatible Chat Completions server on 127.0.0.1 whose
//! summaries drop identifiers on purpose, so the quality run can measure what the LLM
//! summarizer's identifier audit keeps.
//!
//! Its first answer has every section but no identifier: each line it quotes from the
//! transcript has its identifiers cut out. Asked again with the identifiers it left out (the
//! audit's corrective retry), it adds only every other one of them, so the host has to append
//! the rest.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use ctxhost::services::summarize::find_identifiers;
use serde_json::{Value, json};

/// The fake server, stopped when dropped.
pub struct FakeModel {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Requests served: first answers, and corrective retries.
    pub asked: Arc<AtomicU64>,
    /// Of them, corrective retries.
    pub retried: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl FakeModel {
    /// Starts the server on a free port of 127.0.0.1.
    pub fn start() -> std::io::Result<FakeModel> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let asked = Arc::new(AtomicU64::new(0));
        let retried = Arc::new(AtomicU64::new(0));
        let (stop2, asked2, retried2) =
            (Arc::clone(&stop), Arc::clone(&asked), Arc::clone(&retried));
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let retry = serve(stream).unwrap_or(false);
                        asked2.fetch_add(1, Ordering::Relaxed);
                        retried2.fetch_add(u64::from(retry), Ordering::Relaxed);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(_) => break,
                }
            }
        });
        Ok(FakeModel {
            addr,
            stop,
            asked,
            retried,
            thread: Some(thread),
        })
    }

    /// The API base to configure (`http://127.0.0.1:<port>/v1`).
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads one request and answers it; returns whether it was a corrective retry.
fn serve(mut stream: TcpStream) -> std::io::Result<bool> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut data = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let mut body_at = None;
    let mut length = 0usize;
    while data.len() < 64 << 20 {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buf[..n]);
        if body_at.is_none()
            && let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n")
        {
            body_at = Some(i + 4);
            length = String::from_utf8_lossy(&data[..i])
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(n, _)| n.trim().eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse().ok())
                .unwrap_or(0);
        }
        if body_at.is_some_and(|h| data.len() >= h + length) {
            break;
        }
    }
    let h = body_at.unwrap_or(data.len());
    let body: Value =
        serde_json::from_slice(&data[h..(h + length).min(data.len())]).unwrap_or(Value::Null);
    let (text, retry) = answer(&body);
    let reply = json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": "forgetful",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    })
    .to_string();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reply.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(reply.as_bytes())?;
    stream.flush()?;
    Ok(retry)
}

/// The summary for a request, and whether the request was a corrective retry.
fn answer(body: &Value) -> (String, bool) {
    let messages: Vec<&str> = body["messages"]
        .as_array()
        .map(|ms| ms.iter().filter_map(|m| m["content"].as_str()).collect())
        .unwrap_or_default();
    let first_user = messages.get(1).copied().unwrap_or_default();
    let transcript = first_user
        .split_once("<transcript>")
        .and_then(|(_, rest)| rest.split_once("</transcript>"))
        .map_or("", |(t, _)| t);
    let said = |label: &str| -> Vec<String> {
        transcript
            .lines()
            .filter(|l| l.starts_with(label))
            .map(|l| forget(&l[label.len()..]))
            .filter(|l| !l.trim().is_empty())
            .collect()
    };
    let users = said("user:");
    let assistants = said("assistant:");
    let first = |v: &[String]| v.first().cloned().unwrap_or_else(|| "None".into());
    let last = |v: &[String]| v.last().cloned().unwrap_or_else(|| "None".into());
    let mut text = format!(
        "## Goal\n- {}\n\n## Constraints\n- None\n\n## Progress\n- {}\n\n## Decisions\n- None\n\n## Open questions / pending\n- {}\n\n## Exact identifiers\n",
        first(&users),
        last(&assistants),
        last(&users)
    );
    // A corrective retry names the missing identifiers, one per `- ` line: keep every other.
    let retry = messages.len() > 3;
    let mut listed = 0;
    if retry && let Some(correction) = messages.last() {
        for (i, id) in correction
            .lines()
            .filter_map(|l| l.strip_prefix("- "))
            .enumerate()
        {
            if i % 2 == 0 {
                text.push_str("- ");
                text.push_str(id);
                text.push('\n');
                listed += 1;
            }
        }
    }
    if listed == 0 {
        text.push_str("- None\n");
    }
    (text, retry)
}

/// A line with its identifiers cut out, at most 30 words.
fn forget(line: &str) -> String {
    let mut out = line.to_owned();
    for (_, id) in find_identifiers(line) {
        out = out.replace(id, "");
    }
    out.split_whitespace()
        .take(30)
        .collect::<Vec<_>>()
        .join(" ")
}
