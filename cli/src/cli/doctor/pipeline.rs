//! The pipeline's hooks as `doctor` lists them: what the check of the configured pipeline left
//! of each hook, in the order they run.

use std::io::Write;

use serde::Serialize;

use ctxhost::tools::check::CheckReport;

/// One hook of the configured pipeline as `doctor` shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PipelineHook {
    /// The id in `host.pipeline.hooks`.
    id: String,
    /// `lua`, `rhai` or `builtin`; absent when the pipeline did not load.
    kind: Option<String>,
    /// Where its instances run: `thread`, `process` or `builtin`.
    runs_in: Option<String>,
    /// The hook file (none for a built-in hook).
    file: Option<String>,
    /// The hook functions it defines (`collect`, `project`, `prune`, ...).
    handlers: Vec<String>,
    /// Calls per hook function in doctor's drive of the pipeline.
    calls: std::collections::BTreeMap<String, u64>,
    /// `loaded`, `quarantined` (it failed in the drive) or `not loaded` (the pipeline did not
    /// load).
    state: String,
    /// Why it was quarantined.
    failure: Option<String>,
}

/// The pipeline's hooks as the check of it left them; when it did not load, the hooks the
/// config names, each `not loaded`.
pub(super) fn pipeline_hooks(
    config: &ctxhost::config::Config,
    report: &CheckReport,
) -> Vec<PipelineHook> {
    match report.hooks.as_deref() {
        Some(hooks) if !hooks.is_empty() => hooks
            .iter()
            .map(|h| PipelineHook {
                id: h.id.clone(),
                kind: Some(h.kind.clone()),
                runs_in: Some(h.runs_in.clone()),
                file: h.file.as_ref().map(|f| f.display().to_string()),
                handlers: h.status.defines.clone(),
                calls: h.status.calls.clone(),
                state: if h.status.quarantines > 0 {
                    "quarantined".into()
                } else {
                    "loaded".into()
                },
                failure: h.status.last_failure.clone(),
            })
            .collect(),
        _ => config
            .host
            .pipeline
            .hooks
            .iter()
            .map(|id| PipelineHook {
                id: id.clone(),
                kind: None,
                runs_in: None,
                file: config
                    .plugins
                    .entries
                    .get(id)
                    .and_then(|e| e.path.as_deref())
                    .map(|p| config.resolve(p).display().to_string()),
                handlers: Vec::new(),
                calls: Default::default(),
                state: "not loaded".into(),
                failure: None,
            })
            .collect(),
    }
}

pub(super) fn render_hooks(out: &mut dyn Write, hooks: &[PipelineHook]) -> std::io::Result<()> {
    writeln!(
        out,
        "  hooks:    {} (in the order they run)",
        if hooks.is_empty() {
            "none".to_owned()
        } else {
            hooks.len().to_string()
        }
    )?;
    for h in hooks {
        let mut head = h.id.clone();
        if let (Some(kind), Some(runs_in)) = (&h.kind, &h.runs_in) {
            if kind == runs_in {
                head.push_str(&format!(" ({kind})"));
            } else {
                head.push_str(&format!(" ({kind}, {runs_in})"));
            }
        }
        if let Some(f) = &h.file {
            head.push_str(&format!(" {f}"));
        }
        writeln!(out, "    {head}")?;
        let handlers: Vec<String> = h
            .handlers
            .iter()
            .map(|m| match h.calls.get(m) {
                Some(n) => format!("{m} (ran {n}\u{d7})"),
                None => format!("{m} (never reached)"),
            })
            .collect();
        if !handlers.is_empty() {
            writeln!(out, "      handlers: {}", handlers.join(", "))?;
        }
        match &h.failure {
            Some(why) if h.state == "quarantined" => {
                writeln!(out, "      state:    quarantined: {why}")?
            }
            _ => writeln!(out, "      state:    {}", h.state)?,
        }
    }
    Ok(())
}
