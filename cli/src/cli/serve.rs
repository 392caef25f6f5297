//! `ctxhost serve --stdio`: the engine behind OpenClaw's context-engine contract, as
//! newline-delimited JSON-RPC on stdin/stdout (logs on stderr only). The protocol lives in the
//! library (`ctxhost::serve`); this only picks the state directory and runs the loop.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;

use crate::cli::Outcome;
use crate::cli::args::ServeArgs;
use ctxhost::serve::{ServeOptions, serve, state};
use ctxhost::tools::status::StatusFile;

/// How long the process waits for blocking work (an engine call in flight) after the loop ends.
const EXIT_GRACE: Duration = Duration::from_millis(150);

pub(crate) fn run(args: ServeArgs, _out: &mut dyn Write) -> anyhow::Result<Outcome> {
    anyhow::ensure!(
        args.stdio,
        "serve speaks only over stdin/stdout for now: pass --stdio"
    );
    let state_dir = match args.state_dir {
        Some(d) => d,
        None => state::default_state_dir()
            .context("no state directory: pass --state-dir, or set CTXHOST_STATE_DIR or HOME")?,
    };
    std::fs::create_dir_all(&state_dir)
        .with_context(|| format!("create the state directory {}", state_dir.display()))?;
    // Published for `ctxhost doctor` (abandoned workers are counted per process); removed when
    // the server ends.
    let _status = StatusFile::publish(&state_dir, "serve");
    let mut options = ServeOptions::new(state_dir);
    options.engine = args.engine;
    options.config = args.config;
    options.isolation = args.isolation;
    if let Some(n) = args.max_line_bytes {
        anyhow::ensure!(n > 0, "--max-line-bytes must be positive");
        options.max_line_bytes = n;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    let result = match pipes().context("open stdin and stdout")? {
        // A client that spawned this process (OpenClaw's bridge): both ends on the reactor,
        // the reading loop on a worker (the session it wakes runs there next, no thread
        // hand-off), answers written where they are made.
        #[cfg(unix)]
        Some((input, output)) => runtime.block_on(async move {
            tokio::spawn(ctxhost::serve::serve_pipes(input, output, options))
                .await
                .context("the server's task")?
                .map_err(anyhow::Error::from)
        }),
        _ => {
            let output = stdout().context("open stdout")?;
            runtime
                .block_on(async move {
                    let output = output.into_async();
                    serve(tokio::io::stdin(), output, options).await
                })
                .map_err(anyhow::Error::from)
        }
    };
    // tokio's stdin reader is a blocking thread that may still wait for input: do not wait
    // for it (nor for longer than a moment for anything else).
    runtime.shutdown_timeout(EXIT_GRACE);
    result?;
    Ok(Outcome::Ok)
}

/// Standard input and output as descriptors of their own (duplicated), when both are pipes
/// or sockets (a client that spawned this process); None when either is not (a terminal,
/// a file).
#[cfg(unix)]
fn pipes() -> std::io::Result<Option<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)>> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    let input = std::io::stdin().as_fd().try_clone_to_owned()?;
    let output = std::io::stdout().as_fd().try_clone_to_owned()?;
    let fifo = |fd: &std::os::fd::OwnedFd| -> std::io::Result<bool> {
        let file = std::fs::File::from(fd.try_clone()?);
        let kind = file.metadata()?.file_type();
        Ok(kind.is_fifo() || kind.is_socket())
    };
    Ok((fifo(&input)? && fifo(&output)?).then_some((input, output)))
}

/// Elsewhere: no pipes of the reactor's.
#[cfg(not(unix))]
fn pipes() -> std::io::Result<Option<()>> {
    Ok(None)
}

/// Standard output for the server, written through its own file descriptor: `main` holds the
/// lock of `std::io::stdout()` for the whole run, and tokio's stdout writes through that lock
/// from another thread, so it would wait forever.
#[cfg(unix)]
fn stdout() -> std::io::Result<Output> {
    use std::os::fd::AsFd;
    let fd = std::io::stdout().as_fd().try_clone_to_owned()?;
    Ok(Output(std::fs::File::from(fd)))
}

/// A duplicate of standard output's file descriptor.
#[cfg(unix)]
struct Output(std::fs::File);

#[cfg(unix)]
impl Output {
    fn into_async(self) -> tokio::fs::File {
        tokio::fs::File::from_std(self.0)
    }
}

/// Elsewhere tokio's stdout (the caller must not hold the stdout lock).
#[cfg(not(unix))]
fn stdout() -> std::io::Result<Output> {
    Ok(Output)
}

/// Standard output through tokio.
#[cfg(not(unix))]
struct Output;

#[cfg(not(unix))]
impl Output {
    fn into_async(self) -> tokio::io::Stdout {
        tokio::io::stdout()
    }
}
