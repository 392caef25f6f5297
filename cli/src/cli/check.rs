//! `ctxhost check FILE [--transcript T]`: a report a person can act on, or JSON.

use std::io::Write;

use crate::cli::Outcome;
use crate::cli::args::CheckArgs;
use ctxhost::tools::check::check_engine_with;

pub(crate) fn run(args: CheckArgs, out: &mut dyn Write) -> anyhow::Result<Outcome> {
    let mut config = ctxhost::config::discover(args.config.as_deref())?;
    if let Some(i) = args.isolation {
        config.host.isolation = i;
    }
    let report = check_engine_with(&args.file, &config, args.transcript.as_deref());
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        writeln!(out, "engine {} ({})", report.engine, report.file.display())?;
        if !report.defines.is_empty() {
            writeln!(out, "  defines: {}", report.defines.join(", "))?;
        }
        for w in &report.warnings {
            writeln!(out, "  warning: {w}")?;
        }
        for s in &report.steps {
            let mark = if s.ok { "ok  " } else { "FAIL" };
            if s.detail.is_empty() {
                writeln!(out, "  {mark} {}", s.step)?;
            } else {
                writeln!(out, "  {mark} {}: {}", s.step, s.detail)?;
            }
        }
        writeln!(out, "{}", if report.sound { "sound" } else { "NOT sound" })?;
    }
    Ok(if report.sound {
        Outcome::Ok
    } else {
        Outcome::Problems
    })
}
