//! The `ctxhost` command-line tool: parse, run, map the outcome to an exit code
//! (0 ok, 1 problems found, 2 error).

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

/// Counts what each engine thread allocates, so a Rhai engine's memory cap sees copies no
/// guarded builtin does (`ctxhost::MeteredAlloc`).
#[global_allocator]
static ALLOC: ctxhost::MeteredAlloc = ctxhost::MeteredAlloc;

mod cli;
mod inert;
mod install;
mod report;

fn main() -> ExitCode {
    // `host.isolation: "process"` starts this program again as an engine's child.
    if std::env::args().nth(1).as_deref() == Some(ctxhost::engine::isolation::CHILD_ARG) {
        tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("CTXHOST_LOG")
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_ansi(false)
            .with_writer(std::io::stderr)
            .init();
        let code = ctxhost::engine::isolation::child_main();
        return ExitCode::from(u8::try_from(code).unwrap_or(2));
    }
    let args = cli::Args::parse();
    // `check` reports the engine's load warnings itself: the log would print them a second time.
    let default_filter = match args.command {
        cli::args::Command::Check(_) => "warn,ctxhost::engine::script=error",
        // `watch` prints the engine error of each run itself, once.
        cli::args::Command::Watch(_) => "warn,ctxhost::session::dispatch=error",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CTXHOST_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        // Log lines carry what engines wrote: escaped (`inert`), so no colours of our own either.
        .with_ansi(false)
        .with_writer(|| inert::Inert::new(std::io::stderr()))
        .init();
    let stdout = std::io::stdout();
    // `serve` speaks JSON-RPC on stdout, byte for byte; everything else a person may read on
    // a terminal goes through `inert`.
    let result = if matches!(args.command, cli::args::Command::Serve(_)) {
        let mut out = stdout.lock();
        let r = crate::cli::run(args, &mut out);
        let _ = out.flush();
        r
    } else {
        let mut out = inert::Inert::new(stdout.lock());
        let r = crate::cli::run(args, &mut out);
        let _ = out.flush();
        r
    };
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
            eprintln!("ctxhost: {}", inert::escape(&format!("{e:#}")));
            ExitCode::from(2)
        }
    }
}
