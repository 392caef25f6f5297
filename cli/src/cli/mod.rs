//! The command-line edge: parse, run one subcommand, render, map to an exit code. The only
//! place that uses `anyhow` and prints.

pub mod args;
mod check;
pub mod compare;
mod doctor;
mod engines;
mod new;
mod replay;
mod serve;
mod show;
mod store;
mod watch;

use std::io::Write;

pub use args::Args;

/// Exit codes: 0 success, 1 the run found problems, 2 the command failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Everything was fine.
    Ok,
    /// The command ran but found problems (a quarantined engine, an over-budget turn).
    Problems,
}

/// Runs a parsed command, writing its output to `out`.
pub fn run(args: Args, out: &mut dyn Write) -> anyhow::Result<Outcome> {
    match args.command {
        args::Command::Replay(a) => replay::run(a, out),
        args::Command::Check(a) => check::run(a, out),
        args::Command::Watch(a) => watch::run(a, out),
        args::Command::New(a) => new::run(a, out),
        args::Command::Doctor(a) => doctor::run(a, out),
        args::Command::Engines(a) => engines::run(a, out),
        args::Command::Serve(a) => serve::run(a, out),
        args::Command::Compare(a) => compare::run(a, out),
        args::Command::Store(a) => store::run(a, out),
    }
}
