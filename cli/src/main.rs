//! The `ctxhost` command-line tool: parse, run, map the outcome to an exit code
//! (0 ok, 1 problems found, 2 error).

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

mod cli;
mod install;
mod report;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CTXHOST_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = crate::cli::Args::parse();
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
