//! The `ctxhost` command-line tool: parse, run, map the outcome to an exit code
//! (0 ok, 1 problems found, 2 error).

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::Parser;

/// Counts what each engine thread allocates, so a Rhai engine's memory cap sees copies no
/// guarded builtin does (`ctxhost::sandbox::alloc`).
#[global_allocator]
static ALLOC: ctxhost::sandbox::alloc::MeteredAlloc = ctxhost::sandbox::alloc::MeteredAlloc;

mod cli;
mod install;
mod report;

fn main() -> ExitCode {
    // `host.isolation: "process"` starts this program again as an engine's child.
    if std::env::args().nth(1).as_deref() == Some(ctxhost::isolation::CHILD_ARG) {
        tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("CTXHOST_LOG")
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_ansi(false)
            .with_writer(std::io::stderr)
            .init();
        let code = ctxhost::isolation::child_main();
        return ExitCode::from(u8::try_from(code).unwrap_or(2));
    }
    let args = cli::Args::parse();
    // `check` reports the engine's load warnings itself: the log would print them a second time.
    let default_filter = match args.command {
        cli::args::Command::Check(_) => "warn,ctxhost::engine::script=error",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CTXHOST_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = crate::cli::run(args, &mut out);
    let _ = out.flush();
    match result {
        Ok(crate::cli::Outcome::Ok) => ExitCode::SUCCESS,
        Ok(crate::cli::Outcome::Problems) => ExitCode::from(1),
        Err(e) => {
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("ctxhost: {e:#}");
            ExitCode::from(2)
        }
    }
}
