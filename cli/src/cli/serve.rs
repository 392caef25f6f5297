//! `ctxhost serve --stdio`: the engine behind OpenClaw's context-engine contract, as
//! newline-delimited JSON-RPC on stdin/stdout (logs on stderr only). The protocol lives in the
//! library (`ctxhost::serve`); this only picks the state directory and runs the loop.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;

use crate::cli::Outcome;
use crate::cli::args::ServeArgs;
use ctxhost::serve::{ServeOptions, serve, state};

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
    let mut options = ServeOptions::new(state_dir);
    options.engine = args.engine;
    options.config = args.config;
    if let Some(n) = args.max_line_bytes {
        anyhow::ensure!(n > 0, "--max-line-bytes must be positive");
        options.max_line_bytes = n;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    let result = runtime.block_on(serve(tokio::io::stdin(), tokio::io::stdout(), options));
    // tokio's stdin reader is a blocking thread that may still wait for input: do not wait
    // for it (nor for longer than a moment for anything else).
    runtime.shutdown_timeout(EXIT_GRACE);
    result?;
    Ok(Outcome::Ok)
}
