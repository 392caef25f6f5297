//! `ctxhost doctor`: which engine is active and why, whether it loads and runs, and the host's
//! settings. Exit 1 when the configured engine cannot run.

use std::io::Write;

use serde::Serialize;

use crate::cli::Outcome;
use crate::cli::args::DoctorArgs;
use ctxhost::check::check_engine;
use ctxhost::config::discover;
use ctxhost::engine::legacy::LEGACY_ID;

/// The doctor's findings.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Diagnosis {
    version: &'static str,
    config: String,
    active_engine: String,
    why: String,
    configured_engine: Option<String>,
    engine_file: Option<String>,
    engine_version: Option<String>,
    load: Option<String>,
    warnings: Vec<String>,
    quarantine: Option<String>,
    tokenizer: String,
    window: u64,
    token_budget: u64,
    failure_policy: String,
    limits: serde_json::Value,
}

pub(crate) fn run(args: DoctorArgs, out: &mut dyn Write) -> anyhow::Result<Outcome> {
    let config = discover(args.config.as_deref())?;
    let h = &config.host;
    let reserve = h.compaction.reserve_tokens(h.window);
    let mut d = Diagnosis {
        version: env!("CARGO_PKG_VERSION"),
        config: config.source.to_string(),
        active_engine: LEGACY_ID.into(),
        why: "default: no engine in plugins.slots.contextEngine".into(),
        configured_engine: config.plugins.slots.context_engine.clone(),
        engine_file: None,
        engine_version: None,
        load: None,
        warnings: Vec::new(),
        quarantine: None,
        tokenizer: h.tokenizer.to_string(),
        window: h.window,
        token_budget: h.window.saturating_sub(reserve),
        failure_policy: serde_json::to_value(h.failure_policy)?
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        limits: serde_json::to_value(&h.limits)?,
    };
    let mut healthy = true;
    match config.plugins.slots.context_engine.as_deref() {
        None => {}
        Some(LEGACY_ID) => d.why = "default: plugins.slots.contextEngine is \"legacy\"".into(),
        Some(id) => match config.plugins.entries.get(id) {
            None => {
                d.why = format!("fallback: the slot names \"{id}\" but there is no such entry");
                healthy = false;
            }
            Some(e) if !e.enabled => {
                d.why = format!("fallback: the entry \"{id}\" is disabled");
                healthy = false;
            }
            Some(e) => match &e.path {
                None => {
                    d.why = format!("fallback: the entry \"{id}\" has no path");
                    healthy = false;
                }
                Some(p) => {
                    let file = config.resolve(p);
                    d.engine_file = Some(file.display().to_string());
                    let report = check_engine(&file, &config);
                    d.warnings = report.warnings.clone();
                    let failed = report.steps.iter().find(|s| !s.ok);
                    d.load = Some(match report.steps.first() {
                        Some(s) if s.ok => "ok".into(),
                        Some(s) => format!("failed: {}", s.detail),
                        None => "not run".into(),
                    });
                    if let Some(f) = failed {
                        d.quarantine = Some(format!("{}: {}", f.step, f.detail));
                        d.why = format!("fallback: \"{id}\" would be quarantined");
                        healthy = false;
                    } else {
                        d.active_engine = report.engine.clone();
                        d.why = format!("configured in plugins.slots.contextEngine (\"{id}\")");
                    }
                }
            },
        },
    }
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &d)?;
        writeln!(out)?;
    } else {
        writeln!(out, "ctxhost {}", d.version)?;
        writeln!(out, "config:     {}", d.config)?;
        writeln!(out, "engine:     {} ({})", d.active_engine, d.why)?;
        if let Some(f) = &d.engine_file {
            writeln!(out, "  file:     {f}")?;
        }
        if let Some(l) = &d.load {
            writeln!(out, "  load:     {l}")?;
        }
        for w in &d.warnings {
            writeln!(out, "  warning:  {w}")?;
        }
        match &d.quarantine {
            Some(q) => writeln!(out, "  quarantine: {q}")?,
            None if d.engine_file.is_some() => writeln!(out, "  quarantine: none (check passed)")?,
            None => {}
        }
        writeln!(out, "tokenizer:  {}", d.tokenizer)?;
        writeln!(
            out,
            "window:     {} tokens ({} reserved for output, {} left for the prompt)",
            d.window, reserve, d.token_budget
        )?;
        writeln!(out, "failures:   {}", d.failure_policy)?;
        writeln!(
            out,
            "limits:     deadline {} ms (+{} ms grace), memory {} MiB per engine, {} operations (Rhai)",
            h.limits.script.deadline_ms,
            h.limits.script.grace_ms,
            h.limits.script.memory_bytes >> 20,
            h.limits.rhai.max_operations
        )?;
    }
    Ok(if healthy {
        Outcome::Ok
    } else {
        Outcome::Problems
    })
}
