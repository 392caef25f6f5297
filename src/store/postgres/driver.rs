//! The Postgres backend's own async runtime, on one thread of its own, and how a synchronous
//! caller waits on it; plus what a failed database call means (try again, or give up) and the
//! bounded retrying that rides out a dropped connection or a restarting server.
//!
//! The store seam is synchronous and its callers are tokio's blocking threads (serve), plain
//! threads (tests, benches) or even an async thread (a session dropped there). The `postgres`
//! crate's sync client keeps a runtime inside every client and panics when one is dropped on
//! an async thread; here the runtime lives on its own thread for the backend's lifetime, and a
//! caller only hands it a future and waits on a channel, which works from any thread.

use std::future::Future;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// A failed database call, as the retrying and the seam see it.
#[derive(Debug)]
pub(crate) enum Fail {
    /// The connection or the server went away (or is starting): the call may be tried again.
    Transient(String),
    /// The server refused the call (bad data, a constraint, a schema this ctxhost does not
    /// know): trying again cannot help.
    Fatal(String),
    /// The session's lease is not this store's any more: drop the session, never write it.
    Moved(String),
}

impl Fail {
    /// What went wrong, for an error message.
    pub(crate) fn message(&self) -> &str {
        match self {
            Fail::Transient(m) | Fail::Fatal(m) | Fail::Moved(m) => m,
        }
    }
}

/// SQLSTATEs after which the same call may succeed on a new connection: connection
/// exceptions (class 08), the server shutting down or starting (57P01-57P03), and the two
/// transaction conflicts Postgres asks a client to retry (40001, 40P01).
fn transient_state(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "40001" | "40P01")
}

impl From<tokio_postgres::Error> for Fail {
    fn from(e: tokio_postgres::Error) -> Self {
        if let Some(db) = e.as_db_error() {
            let code = db.code().code();
            let text = format!("{} (SQLSTATE {code})", db.message());
            return if transient_state(code) {
                Fail::Transient(text)
            } else {
                Fail::Fatal(text)
            };
        }
        // No server answer: the socket closed, a read failed, or connecting failed. The
        // error's text names the cause (never the password, which the client never prints).
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            let more = s.to_string();
            if !text.contains(&more) {
                text.push_str(": ");
                text.push_str(&more);
            }
            source = s.source();
        }
        Fail::Transient(text)
    }
}

impl From<deadpool_postgres::PoolError> for Fail {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        use deadpool_postgres::PoolError;
        match e {
            PoolError::Backend(e) => Fail::from(e),
            PoolError::Timeout(kind) => Fail::Transient(format!(
                "no database connection in time ({kind:?}): the server is unreachable or every connection is busy"
            )),
            other => Fail::Fatal(other.to_string()),
        }
    }
}

/// How long a call keeps trying after transient failures, and the pauses between tries.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Retry {
    /// The time after which no new try starts.
    pub(crate) budget: Duration,
    /// The first pause; each next one doubles, up to `max_pause`.
    pub(crate) first_pause: Duration,
    /// The longest pause.
    pub(crate) max_pause: Duration,
}

impl Retry {
    /// Runs `call` until it succeeds, fails for good, or the budget is spent (then the last
    /// transient failure is returned, with the number of tries).
    pub(crate) async fn run<T, F, Fut>(&self, what: &str, mut call: F) -> Result<T, Fail>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Fail>>,
    {
        let started = Instant::now();
        let mut pause = self.first_pause;
        let mut tries = 0u32;
        loop {
            tries += 1;
            match call().await {
                Err(Fail::Transient(m)) => {
                    if started.elapsed() + pause > self.budget {
                        return Err(Fail::Transient(format!(
                            "{m} (gave up after {tries} tries in {:.1} s)",
                            started.elapsed().as_secs_f64()
                        )));
                    }
                    tracing::warn!(tries, "postgres: {what} failed, trying again: {m}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(self.max_pause);
                }
                done => return done,
            }
        }
    }
}

/// The runtime thread: futures handed to it run there, whoever waits for them.
#[derive(Debug)]
pub(crate) struct Driver {
    handle: tokio::runtime::Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Driver {
    /// Starts the runtime thread.
    pub(crate) fn start() -> std::io::Result<Driver> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("ctxhost-postgres".into())
            .spawn(move || {
                // Drives every task spawned on the handle until the backend is dropped.
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        Ok(Driver {
            handle,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Runs `future` on the runtime thread and waits for its output.
    pub(crate) fn run<T: Send + 'static>(
        &self,
        future: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, Fail> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let _ = tx.send(future.await);
        });
        rx.recv()
            .map_err(|_| Fail::Fatal("the postgres runtime thread stopped".into()))
    }

    /// Starts `future` on the runtime thread without waiting for it.
    pub(crate) fn spawn(&self, future: impl Future<Output = ()> + Send + 'static) {
        drop(self.handle.spawn(future));
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
