//! `check HOOK.lua`: a pipeline hook file, checked as the one hook of a `pipeline` engine
//! driven like any engine (the synthetic conversation, or `--transcript`), then each hook
//! function it defines judged: it ran, and it never failed. The pipeline hides a hook's
//! failure from the session (the other hooks, or `legacy`, answer), so a hook that throws,
//! overruns or returns garbage is caught here, with its error.

use std::path::Path;

use crate::config::{Config, Entry};
use crate::runtime::Host;

use super::{CHECK_WINDOW, CheckReport, drive_host};

/// Checks hook file `path` (`report` already names the file and the id from its name).
pub(super) fn check(
    path: &Path,
    base: &Config,
    transcript: Option<&Path>,
    mut report: CheckReport,
) -> CheckReport {
    let id = report.engine.clone();
    let mut config = base.clone();
    config.host.window = CHECK_WINDOW;
    config.plugins.slots.context_engine = Some(crate::engine::pipeline::PIPELINE_ID.into());
    let mut entry = config.plugins.entries.remove(&id).unwrap_or_default();
    entry.path = Some(std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()));
    config.plugins.entries.insert(
        id.clone(),
        Entry {
            enabled: true,
            ..entry
        },
    );
    config.host.pipeline.hooks = vec![id.clone()];
    report.hooks = Some(Vec::new());

    let host = match Host::new(config) {
        Ok(h) => h,
        Err(e) => return report.fail("start host", e.to_string()),
    };
    let factory = match host.engine() {
        Some(Ok(factory)) => factory,
        Some(Err(e)) => return report.fail("load and validate", e.to_string()),
        None => return report.fail("load and validate", "no pipeline configured".into()),
    };
    let Some(pipeline) = factory.pipeline() else {
        return report.fail(
            "load and validate",
            "the file did not load as a pipeline hook".into(),
        );
    };
    report.warnings = factory.warnings().to_vec();
    report.pass(
        "load and validate",
        format!("a pipeline hook, run as host.pipeline.hooks: [\"{id}\"]"),
    );
    let mut report = drive_host(&host, transcript, report, |_| {
        pipeline
            .hooks()
            .first()
            .map(|h| h.status.defines.clone())
            .unwrap_or_default()
    });
    let hooks = pipeline.hooks();
    let Some(hook) = hooks.first() else {
        return report;
    };
    for method in &hook.status.defines {
        let step = format!("hook {method}");
        let calls = hook.status.calls.get(method).copied().unwrap_or(0);
        if hook.status.quarantines > 0 {
            let why = hook.status.last_failure.clone().unwrap_or_default();
            report.failed(step, format!("the hook failed and was quarantined: {why}"));
        } else if calls > 0 {
            report.pass(&step, format!("ran {calls} times"));
        } else if transcript.is_some() {
            report.pass(&step, "not exercised by this transcript".into());
        } else {
            report.failed(step, "never ran in the check".into());
        }
    }
    report.hooks = Some(hooks);
    report.sound = report.sound && report.steps.iter().all(|s| s.ok);
    report
}
