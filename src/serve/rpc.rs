//! Newline-delimited JSON-RPC 2.0 over any byte stream, with requests in both directions.
//!
//! Framing is one JSON value per line (the same as OpenClaw's bridge and MCP's stdio
//! transport). [`LineReader`] reads lines within a size cap, so one oversized line is refused
//! and skipped without buffering it. [`Peer`] is the sending half: one writer task owns the
//! output, so frames never interleave; [`Peer::request`] sends a request and awaits the
//! client's answer, which the reading loop hands back through [`Peer::resolve`].

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::protocol::{Id, RpcError, code, method};

/// How often a wait on the client looks at its caller's cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(10);

/// The default cap on one incoming line: 64 MiB (a 10,000-message session is a few MiB).
pub(crate) const DEFAULT_MAX_LINE_BYTES: usize = 64 << 20;

/// One line read from the stream.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A line within the cap, without its newline.
    Text(Vec<u8>),
    /// A line over the cap, skipped; how many bytes it had.
    TooLong(usize),
}

/// Reads newline-delimited frames within a size cap.
#[derive(Debug)]
pub(crate) struct LineReader<R> {
    inner: R,
    max: usize,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    /// A reader refusing lines longer than `max` bytes.
    pub(crate) fn new(inner: R, max: usize) -> Self {
        LineReader { inner, max }
    }

    /// The next line, or `None` at the end of the stream.
    pub(crate) async fn next_line(&mut self) -> std::io::Result<Option<Line>> {
        let mut line = Vec::new();
        let mut len = 0usize;
        loop {
            let buf = self.inner.fill_buf().await?;
            if buf.is_empty() {
                return Ok(match len {
                    0 => None,
                    n if n > self.max => Some(Line::TooLong(n)),
                    _ => Some(Line::Text(line)),
                });
            }
            let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (&buf[..i], Some(i + 1)),
                None => (buf, None),
            };
            len += chunk.len();
            if len <= self.max {
                line.extend_from_slice(chunk);
            } else if !line.is_empty() {
                line = Vec::new();
            }
            let consumed = done.unwrap_or(buf.len());
            self.inner.consume(consumed);
            if done.is_some() {
                if len > self.max {
                    return Ok(Some(Line::TooLong(len)));
                }
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(Some(Line::Text(line)));
            }
        }
    }
}

type Pending = HashMap<Id, oneshot::Sender<Result<Value, RpcError>>>;

/// The sending half of a connection: responses, notifications, and requests to the client.
#[derive(Clone, Debug)]
pub(crate) struct Peer {
    out: mpsc::UnboundedSender<Vec<u8>>,
    /// A pipe written at once by the thread that makes a frame, when nothing is queued for
    /// the writer task ([`Peer::direct`]); None: every frame goes through the writer task.
    #[cfg(unix)]
    direct: Option<Arc<Direct>>,
    pending: Arc<Mutex<Pending>>,
    next: Arc<AtomicI64>,
}

/// A non-blocking pipe shared by the threads that answer and the writer task. A frame is
/// written by the thread that made it (no hand-off to the writer task and from it to a
/// blocking thread: two thread wake-ups per answer) unless the pipe is full or frames are
/// queued; then it is queued, and the writer task writes the queue in order as the pipe
/// drains.
#[cfg(unix)]
#[derive(Debug)]
struct Direct {
    pipe: Pipe,
    /// Frames are queued for the writer task (it clears this, under the lock, once the queue
    /// is empty): a frame made now goes after them.
    queued: Mutex<bool>,
}

impl Peer {
    /// A peer writing to `output`; the returned task ends when every clone of the peer is gone
    /// (or the output fails) and flushes what was sent before.
    pub(crate) fn new<W: AsyncWrite + Unpin + Send + 'static>(
        mut output: W,
    ) -> (Peer, tokio::task::JoinHandle<()>) {
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let task = tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                if let Err(e) = output.write_all(&frame).await {
                    tracing::warn!("stopped writing to the client: {e}");
                    return;
                }
                // Batch what is already queued into one flush.
                while let Ok(more) = rx.try_recv() {
                    if output.write_all(&more).await.is_err() {
                        return;
                    }
                }
                if output.flush().await.is_err() {
                    return;
                }
            }
        });
        let peer = Peer {
            out: tx,
            #[cfg(unix)]
            direct: None,
            pending: Arc::default(),
            next: Arc::new(AtomicI64::new(1)),
        };
        (peer, task)
    }

    /// A peer writing to a pipe: each frame is written by the thread that makes it while the
    /// pipe has room and nothing is queued, else queued for the writer task. The returned
    /// task ends as [`Peer::new`]'s does.
    #[cfg(unix)]
    pub(crate) fn direct(pipe: Pipe) -> (Peer, tokio::task::JoinHandle<()>) {
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let direct = Arc::new(Direct {
            pipe,
            queued: Mutex::new(false),
        });
        let out = Arc::clone(&direct);
        let task = tokio::spawn(async move {
            loop {
                let Some(frame) = rx.recv().await else {
                    return;
                };
                if let Err(e) = out.write_all(&frame).await {
                    tracing::warn!("stopped writing to the client: {e}");
                    return;
                }
                // The queue is empty when nothing comes while the lock is held: frames made
                // from here on are written by their own threads.
                let mut queued = out.queued.lock();
                if rx.is_empty() {
                    *queued = false;
                }
            }
        });
        let peer = Peer {
            out: tx,
            direct: Some(direct),
            pending: Arc::default(),
            next: Arc::new(AtomicI64::new(1)),
        };
        (peer, task)
    }

    fn send(&self, frame: &impl Serialize) {
        match serde_json::to_vec(frame) {
            Ok(mut bytes) => {
                bytes.push(b'\n');
                #[cfg(unix)]
                if let Some(direct) = &self.direct {
                    direct.send(bytes, &self.out);
                    return;
                }
                // The writer is gone only when the connection is: nothing left to tell.
                let _ = self.out.send(bytes);
            }
            Err(e) => tracing::error!("cannot encode a frame: {e}"),
        }
    }

    /// Answers request `id` with a result.
    pub(crate) fn respond(&self, id: Id, result: Value) {
        self.send(&serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    /// Answers request `id` (or an unidentifiable frame, with `None`) with an error.
    pub(crate) fn respond_error(&self, id: Option<Id>, error: RpcError) {
        self.send(&serde_json::json!({"jsonrpc": "2.0", "id": id, "error": error}));
    }

    /// Sends a notification.
    pub(crate) fn notify(&self, method: &str, params: Value) {
        self.send(&serde_json::json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a request to the client and waits for its answer, at most `timeout`. When the
    /// wait ends without an answer (the timeout, or the future dropped), the client is sent
    /// `$/cancelRequest` for it and a late answer is ignored.
    pub(crate) async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        let id = Id::Text(format!(
            "ctxhost-{}",
            self.next.fetch_add(1, Ordering::Relaxed)
        ));
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(id.clone(), tx);
        let asked = Asked { peer: self, id };
        self.send(
            &serde_json::json!({"jsonrpc": "2.0", "id": asked.id, "method": method, "params": params}),
        );
        let answer = tokio::time::timeout(timeout, rx).await;
        drop(asked);
        match answer {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(RpcError::new(
                code::INTERNAL_ERROR,
                format!("the connection closed before the client answered {method}"),
            )),
            Err(_) => Err(RpcError::new(
                code::INTERNAL_ERROR,
                format!("the client did not answer {method} within {timeout:?}"),
            )),
        }
    }

    /// [`Peer::request`], ended early with [`code::REQUEST_CANCELLED`] once `cancel` is set (the
    /// request ctxhost is serving was cancelled): the client is sent `$/cancelRequest` for
    /// its part, and its late answer is ignored.
    pub(crate) async fn request_until_cancelled(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        cancel: &AtomicBool,
    ) -> Result<Value, RpcError> {
        let asked = self.request(method, params, timeout);
        tokio::pin!(asked);
        let mut tick = tokio::time::interval(CANCEL_POLL);
        loop {
            tokio::select! {
                answer = &mut asked => return answer,
                _ = tick.tick() => {
                    if cancel.load(Ordering::Relaxed) {
                        return Err(RpcError::new(
                            code::REQUEST_CANCELLED,
                            format!("cancelled while waiting for the client's answer to {method}"),
                        ));
                    }
                }
            }
        }
    }

    /// Hands the client's answer to the request waiting for it; false when none waits.
    pub(crate) fn resolve(&self, id: &Id, answer: Result<Value, RpcError>) -> bool {
        match self.pending.lock().remove(id) {
            Some(tx) => tx.send(answer).is_ok(),
            None => false,
        }
    }

    /// Fails every request still waiting for the client (the connection closed).
    pub(crate) fn fail_pending(&self) {
        self.pending.lock().clear();
    }
}

/// The writing end a client gave: a pipe, or a Unix socket (Node's child processes get
/// socket pairs), both on the runtime's reactor.
#[cfg(unix)]
#[derive(Debug)]
pub(crate) enum Pipe {
    /// A pipe (FIFO).
    Fifo(tokio::net::unix::pipe::Sender),
    /// A Unix stream socket.
    Socket(tokio::net::UnixStream),
}

#[cfg(unix)]
impl Pipe {
    fn try_write(&self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Pipe::Fifo(p) => p.try_write(buf),
            Pipe::Socket(s) => s.try_write(buf),
        }
    }

    async fn writable(&self) -> std::io::Result<()> {
        match self {
            Pipe::Fifo(p) => p.writable().await,
            Pipe::Socket(s) => s.writable().await,
        }
    }
}

#[cfg(unix)]
impl Direct {
    /// Writes `frame` at once when nothing is queued and the pipe takes it; else queues what
    /// is left of it (the whole frame, or the rest of a partial write) for the writer task,
    /// under the lock, so the writer task never finds its queue empty while a frame is on its
    /// way into it.
    fn send(&self, frame: Vec<u8>, queue: &mpsc::UnboundedSender<Vec<u8>>) {
        let mut queued = self.queued.lock();
        let mut written = 0;
        if !*queued {
            while written < frame.len() {
                match self.pipe.try_write(&frame[written..]) {
                    Ok(0) => break,
                    Ok(n) => written += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    // Full (or failed: the writer task meets the error and stops).
                    Err(_) => break,
                }
            }
            if written == frame.len() {
                return;
            }
        }
        *queued = true;
        let rest = if written == 0 {
            frame
        } else {
            frame[written..].to_vec()
        };
        // The writer is gone only when the connection is: nothing left to tell.
        let _ = queue.send(rest);
    }

    /// Writes a queued frame whole, waiting for room.
    async fn write_all(&self, frame: &[u8]) -> std::io::Result<()> {
        let mut written = 0;
        while written < frame.len() {
            self.pipe.writable().await?;
            match self.pipe.try_write(&frame[written..]) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => written += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// A request to the client in flight: when its wait ends without the answer (a timeout, a
/// cancel, the waiting future dropped), it is forgotten and the client is told to stop.
struct Asked<'a> {
    peer: &'a Peer,
    id: Id,
}

impl Drop for Asked<'_> {
    fn drop(&mut self) {
        if self.peer.pending.lock().remove(&self.id).is_some() {
            self.peer
                .notify(method::CANCEL, serde_json::json!({ "id": self.id }));
        }
    }
}
