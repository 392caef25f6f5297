//! A fake OpenAI-compatible Chat Completions server on 127.0.0.1 for tests: a tiny HTTP
//! server on a `TcpListener` answering scripted responses (with delays, statuses, headers) and
//! recording every request.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Connections one fake model serves at most, and how long it lives at most.
const MAX_CONNECTIONS: usize = 2_000;
const MAX_LIFETIME: Duration = Duration::from_secs(300);

/// One scripted answer.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub body: String,
    pub headers: Vec<(String, String)>,
    pub delay: Duration,
    /// Put the request's Authorization header into the body (a careless server echoing it).
    pub echo_auth: bool,
    /// Never answer: hold the connection until the client closes it (or the fake stops).
    pub silent: bool,
}

impl Reply {
    pub fn answer(text: &str) -> Reply {
        Reply::json(
            200,
            json!({
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
            }),
        )
    }

    pub fn json(status: u16, body: Value) -> Reply {
        Reply::raw(status, &body.to_string())
    }

    pub fn raw(status: u16, body: &str) -> Reply {
        Reply {
            status,
            body: body.to_owned(),
            headers: Vec::new(),
            delay: Duration::ZERO,
            echo_auth: false,
            silent: false,
        }
    }

    /// A model that reads the request and never answers.
    pub fn silent() -> Reply {
        Reply {
            silent: true,
            ..Reply::raw(200, "")
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn slow(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }
}

/// A request the fake model received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The text of every message of the request, joined.
    pub fn prompt(&self) -> String {
        self.body["messages"]
            .as_array()
            .map(|ms| {
                ms.iter()
                    .filter_map(|m| m["content"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    }
}

/// A fake Chat Completions server on 127.0.0.1, stopped when dropped.
pub struct FakeModel {
    addr: SocketAddr,
    tls: bool,
    stop: Arc<AtomicBool>,
    requests: Arc<Mutex<Vec<Recorded>>>,
    closed: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl FakeModel {
    /// Serves `script` in order, then `default` for every later request.
    pub fn start(script: Vec<Reply>, default: Reply) -> FakeModel {
        FakeModel::serving(script, default, None)
    }

    /// [`FakeModel::start`] over https with `tls` (its certificate chain and key).
    pub fn start_tls(
        script: Vec<Reply>,
        default: Reply,
        tls: Arc<rustls::ServerConfig>,
    ) -> FakeModel {
        FakeModel::serving(script, default, Some(tls))
    }

    fn serving(
        script: Vec<Reply>,
        default: Reply,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> FakeModel {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let closed = Arc::new(AtomicUsize::new(0));
        let (stop2, requests2, closed2) = (
            Arc::clone(&stop),
            Arc::clone(&requests),
            Arc::clone(&closed),
        );
        let is_tls = tls.is_some();
        let thread = std::thread::spawn(move || {
            let mut script: VecDeque<Reply> = script.into();
            let started = Instant::now();
            let mut served = 0;
            while !stop2.load(Ordering::SeqCst)
                && served < MAX_CONNECTIONS
                && started.elapsed() < MAX_LIFETIME
            {
                match listener.accept() {
                    Ok((stream, _)) => {
                        served += 1;
                        let reply = script.pop_front().unwrap_or_else(|| default.clone());
                        stream.set_nonblocking(false).unwrap();
                        stream
                            .set_read_timeout(Some(Duration::from_secs(5)))
                            .unwrap();
                        let raw = stream.try_clone().unwrap();
                        let closed = match &tls {
                            None => serve(stream, &raw, &reply, &stop2, &requests2),
                            Some(cfg) => {
                                let conn = rustls::ServerConnection::new(Arc::clone(cfg)).unwrap();
                                let tls = rustls::StreamOwned::new(conn, stream);
                                serve(tls, &raw, &reply, &stop2, &requests2)
                            }
                        };
                        if closed {
                            closed2.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(_) => break,
                }
            }
        });
        FakeModel {
            addr,
            tls: is_tls,
            stop,
            requests,
            closed,
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}/v1", self.addr)
    }

    /// How many connections of silent replies the client closed (rather than the fake
    /// stopping).
    pub fn closed_by_client(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }

    /// Waits until `closed_by_client` reaches `n`, at most `limit`; whether it did.
    pub fn await_closed(&self, n: usize, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if self.closed_by_client() >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.closed_by_client() >= n
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

/// Reads one request from `stream` (over the socket `raw`), records it and writes `reply`;
/// for a silent reply, holds the connection instead and says whether the client closed it.
fn serve(
    mut stream: impl Read + Write,
    raw: &TcpStream,
    reply: &Reply,
    stop: &AtomicBool,
    requests: &Mutex<Vec<Recorded>>,
) -> bool {
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    let mut head_end = None;
    let mut content_length = 0usize;
    // Bounded: at most 16 MiB or until the declared body has arrived.
    while data.len() < 16 << 20 {
        let n = match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        data.extend_from_slice(&buf[..n]);
        if head_end.is_none()
            && let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n")
        {
            head_end = Some(i + 4);
            let head = String::from_utf8_lossy(&data[..i]).to_string();
            content_length = head
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(n, _)| n.trim().eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse().ok())
                .unwrap_or(0);
        }
        if let Some(h) = head_end
            && data.len() >= h + content_length
        {
            break;
        }
    }
    let Some(h) = head_end else {
        return false;
    };
    let head = String::from_utf8_lossy(&data[..h]).to_string();
    let headers: Vec<(String, String)> = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let body_end = (h + content_length).min(data.len());
    let body = serde_json::from_slice(&data[h..body_end]).unwrap_or(Value::Null);
    let recorded = Recorded { headers, body };
    let auth = recorded.header("authorization").unwrap_or("").to_owned();
    requests.lock().unwrap().push(recorded);
    if reply.silent {
        // Reads until the client closes the connection (end of stream, a reset), or the fake
        // stops or outlives its lifetime.
        raw.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let until = Instant::now() + MAX_LIFETIME;
        while !stop.load(Ordering::SeqCst) && Instant::now() < until {
            match stream.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return true,
            }
        }
        return false;
    }

    let deadline = Instant::now() + reply.delay;
    while Instant::now() < deadline && !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let body = if reply.echo_auth {
        format!("{{\"error\": \"bad credentials: {auth}\"}}")
    } else {
        reply.body.clone()
    };
    let mut out = format!(
        "HTTP/1.1 {} Scripted\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        body.len()
    );
    for (n, v) in &reply.headers {
        let _ = write!(out, "{n}: {v}\r\n");
    }
    out.push_str("\r\n");
    out.push_str(&body);
    let _ = stream.write_all(out.as_bytes());
    let _ = stream.flush();
    false
}

/// Runs `f` with a subscriber that keeps every event and span field as text.
pub fn capture<R>(f: impl FnOnce() -> R) -> (R, String) {
    let logs = Arc::new(Mutex::new(String::new()));
    let result = tracing::subscriber::with_default(Capture(Arc::clone(&logs)), f);
    let text = logs.lock().unwrap().clone();
    (result, text)
}

struct Capture(Arc<Mutex<String>>);

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={value:?} ", field.name());
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut logs = self.0.lock().unwrap();
        span.record(&mut Fields(&mut logs));
        logs.push('\n');
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut logs = self.0.lock().unwrap();
        values.record(&mut Fields(&mut logs));
        logs.push('\n');
    }

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let mut logs = self.0.lock().unwrap();
        event.record(&mut Fields(&mut logs));
        logs.push('\n');
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}
