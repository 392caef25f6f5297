//! `ctxhost serve`: an engine behind OpenClaw's context-engine contract, spoken as
//! newline-delimited JSON-RPC 2.0 over a byte stream (stdin/stdout in the binary), with
//! requests in both directions.
//!
//! The client (OpenClaw's `bridges/openclaw` plugin) calls `initialize` once, then every
//! lifecycle method under its OpenClaw name with OpenClaw's params, and `shutdown`. ctxhost may
//! ask the client `runtime.delegateCompaction` (a non-owning engine's compaction is the
//! client's own, since the client owns the transcript) and `llm.complete`.
//!
//! Each session (one conversation: OpenClaw's `sessionId`, whatever its `sessionKey`) has one
//! worker that serves its requests in arrival order; different sessions run concurrently. The
//! client's messages reach the session through serve's mirror of the client's transcript
//! (`mirror`), and every call goes through the session's engine-calling path
//! ([`crate::session::Session::assemble_with_tail`] and its siblings): a failing script is
//! quarantined and `legacy` answers, results are checked, pairing is repaired and the window
//! re-measured. The mirror of the client's transcript, the
//! engine's state and the `commitTurn` record live under a state directory ([`state`]), so a
//! new client process continues where the last left off. When `host.watch.enabled` (the
//! default), a save of the engine file is noticed by a watcher and loaded after
//! `host.watch.debounceMs` (no call looks at the file); a version that fails to load leaves
//! the old one serving, and one that loads lifts the quarantine.
//!
//! ```no_run
//! # async fn demo() -> ctxhost::Result<()> {
//! use ctxhost::serve::{serve, ServeOptions};
//! let options = ServeOptions::new("/tmp/ctxhost-state".into());
//! serve(tokio::io::stdin(), tokio::io::stdout(), options).await
//! # }
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, BufReader};

use crate::error::Result;

pub(crate) mod protocol;
pub(crate) mod rpc;
pub mod state;

mod calls;
mod delegate;
mod engine;
mod frame;
mod identity;
mod mirror;
mod model;
mod params;
mod retention;
mod server;
mod views;

use engine::Hosted;
pub use model::NO_CLIENT_MODEL;
use server::Server;

use protocol::{RpcError, code};
use rpc::{Line, LineReader, Peer};

/// The input buffer (1 MiB).
const INPUT_BUFFER: usize = 1 << 20;

/// How long `serve` waits for sessions to save and retire once the input closes.
const CLOSE_GRACE: Duration = Duration::from_millis(800);

/// How a server starts.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The engine file when `initialize` names none.
    pub engine: Option<PathBuf>,
    /// The ctxhost config file when `initialize` names none (default: the usual discovery).
    pub config: Option<PathBuf>,
    /// Where sessions are kept between client processes.
    pub state_dir: PathBuf,
    /// The longest line accepted (`rpc::DEFAULT_MAX_LINE_BYTES` by default).
    pub max_line_bytes: usize,
    /// How long a request to the client may take (default 120 s).
    pub client_timeout: Duration,
    /// Where engine VMs run, over the config's `host.isolation` (`serve --isolation`).
    pub isolation: Option<crate::engine::isolation::Isolation>,
    /// The program started as each engine's child under process isolation (default: this
    /// program with [`crate::engine::isolation::CHILD_ARG`]; see
    /// [`HostBuilder::child_command`](crate::runtime::HostBuilder::child_command)).
    pub child_command: Option<crate::engine::isolation::ChildCommand>,
    /// Where each reload of the engine file's watcher is reported, besides the log (an
    /// embedder that shows them; tests that wait for one). None by default.
    pub reloads: Option<tokio::sync::mpsc::UnboundedSender<crate::runtime::reload::ReloadOutcome>>,
}

impl ServeOptions {
    /// Defaults, keeping sessions under `state_dir`.
    pub fn new(state_dir: PathBuf) -> Self {
        ServeOptions {
            engine: None,
            config: None,
            state_dir,
            max_line_bytes: rpc::DEFAULT_MAX_LINE_BYTES,
            client_timeout: Duration::from_secs(120),
            isolation: None,
            child_command: None,
            reloads: None,
        }
    }
}

/// Serves one client until its input closes or it asks `shutdown`; then every session's state
/// is saved and its engine instance retired (within `CLOSE_GRACE` of the end of input).
pub async fn serve<R, W>(input: R, output: W, options: ServeOptions) -> Result<()>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (peer, writer) = Peer::new(output);
    run(input, peer, writer, options).await
}

/// [`serve`] over a client's pipes or Unix sockets (a client that spawned `serve --stdio`;
/// Node gives its children socket pairs): both ends are driven by the runtime's reactor, not
/// by blocking threads, and an answer is written by the thread that made it. Each end is set
/// non-blocking. Fails when either end is neither a pipe nor a Unix stream socket.
#[cfg(unix)]
pub async fn serve_pipes(
    input: std::os::fd::OwnedFd,
    output: std::os::fd::OwnedFd,
    options: ServeOptions,
) -> Result<()> {
    use tokio::net::UnixStream;
    use tokio::net::unix::pipe;
    let io = |e: std::io::Error| crate::error::Error::Task {
        task: "serve over pipes",
        message: e.to_string(),
    };
    let socket = |fd: std::os::fd::OwnedFd| -> std::io::Result<UnixStream> {
        let s = std::os::unix::net::UnixStream::from(fd);
        s.set_nonblocking(true)?;
        UnixStream::from_std(s)
    };
    let output = if is_socket(&output).map_err(io)? {
        rpc::Pipe::Socket(socket(output).map_err(io)?)
    } else {
        rpc::Pipe::Fifo(pipe::Sender::from_owned_fd(output).map_err(io)?)
    };
    let (peer, writer) = Peer::direct(output);
    if is_socket(&input).map_err(io)? {
        run(socket(input).map_err(io)?, peer, writer, options).await
    } else {
        let input = pipe::Receiver::from_owned_fd(input).map_err(io)?;
        run(input, peer, writer, options).await
    }
}

/// Whether a descriptor is a socket.
#[cfg(unix)]
fn is_socket(fd: &std::os::fd::OwnedFd) -> std::io::Result<bool> {
    use std::os::unix::fs::FileTypeExt;
    let file = std::fs::File::from(fd.try_clone()?);
    Ok(file.metadata()?.file_type().is_socket())
}

/// The reading loop, until the input ends or `shutdown` is answered; then the sessions close.
async fn run<R>(
    input: R,
    peer: Peer,
    writer: tokio::task::JoinHandle<()>,
    options: ServeOptions,
) -> Result<()>
where
    R: AsyncRead + Unpin + Send,
{
    let server = Arc::new(Server {
        max_line: options.max_line_bytes,
        names: identity::Names::new(&options.state_dir),
        retention: retention::Retention::new(&crate::config::ServeSettings::default()),
        options,
        peer: peer.clone(),
        hosted: tokio::sync::RwLock::new(None),
        sessions: Mutex::new(HashMap::new()),
        queued: Mutex::new(HashMap::new()),
        running: Mutex::new(HashMap::new()),
        stopping: AtomicBool::new(false),
        stopped: tokio::sync::Notify::new(),
        shutdown: Mutex::new(None),
        surrogates: AtomicU64::new(0),
        cut: AtomicU64::new(0),
    });
    // A large buffer: tokio's stdin reads on the blocking pool, one round trip per fill, and a
    // 10,000-message `assemble` is a few MiB.
    let mut reader = LineReader::new(
        BufReader::with_capacity(INPUT_BUFFER, input),
        server.max_line,
    );
    loop {
        let next = tokio::select! {
            next = reader.next_line() => next,
            // `shutdown` answered: every request received before it was.
            () = server.stopped.notified() => break,
        };
        let line = match next {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!("reading from the client failed: {e}");
                break;
            }
        };
        match line {
            Line::TooLong(n) => peer.respond_error(
                None,
                RpcError::new(
                    code::INVALID_REQUEST,
                    format!(
                        "line of {n} bytes refused: the cap is {} bytes",
                        server.max_line
                    ),
                ),
            ),
            Line::Text(bytes) => {
                if bytes.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                Arc::clone(&server).on_frame(&bytes).await;
            }
        }
    }
    // The input ended while `shutdown` was being served: its answer still goes out.
    let shutdown = server.shutdown.lock().take();
    if let Some(task) = shutdown {
        let _ = task.await;
    }
    server.close_sessions(Some(CLOSE_GRACE)).await;
    peer.fail_pending();
    drop(server);
    drop(peer);
    let _ = tokio::time::timeout(CLOSE_GRACE, writer).await;
    Ok(())
}
