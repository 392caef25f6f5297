//! `check HOOK.lua`: a pipeline hook file, checked as the one hook of a `pipeline` engine
//! driven like any engine (the synthetic conversation, or `--transcript`), then each hook
//! function it defines judged: it ran, and it never failed. The pipeline hides a hook's
//! failure from the session (the other hooks, or `legacy`, answer), so a hook that throws,
//! overruns or returns garbage is caught here, with its error.

use std::path::Path;

use crate::config::{Config, Entry};
use crate::engine::pipeline::HookReport;
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
    let unreached = if transcript.is_some() {
        Unreached::Passes("not exercised by this transcript")
    } else {
        Unreached::Fails
    };
    judge(&mut report, hook, "hook", unreached);
    report.hooks = Some(hooks);
    report.sound = report.sound && report.steps.iter().all(|s| s.ok);
    report
}

/// Checks the pipeline `base` configures (`plugins.slots.contextEngine: "pipeline"`, the hooks
/// of `host.pipeline.hooks`), for `doctor`: loaded as the host loads it, driven through the
/// synthetic conversation like one engine, then each hook function of each hook judged as
/// `check HOOK` judges one hook's. A function the conversation never reached passes with a
/// note: in a composed pipeline another hook may leave it nothing to do (a `prune` that handles
/// compaction, for one). The report has no file: a pipeline is its configuration.
pub fn check_pipeline(base: &Config) -> CheckReport {
    let mut report = CheckReport {
        file: std::path::PathBuf::new(),
        engine: crate::engine::pipeline::PIPELINE_ID.into(),
        defines: Vec::new(),
        warnings: Vec::new(),
        steps: Vec::new(),
        sound: false,
        engine_times: Vec::new(),
        slowest_turn_ms: 0.0,
        hooks: Some(Vec::new()),
    };
    let mut config = base.clone();
    config.host.window = CHECK_WINDOW;
    config.plugins.slots.context_engine = Some(crate::engine::pipeline::PIPELINE_ID.into());
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
        return report.fail("load and validate", "the engine is not the pipeline".into());
    };
    report.warnings = factory.warnings().to_vec();
    report.pass(
        "load and validate",
        format!("hooks {}", pipeline.hook_ids().join(", ")),
    );
    let mut report = drive_host(&host, None, report, |session| {
        crate::contract::Method::ALL
            .into_iter()
            .filter(|m| session.defines(*m))
            .map(|m| m.as_str().to_owned())
            .collect()
    });
    let hooks = pipeline.hooks();
    for hook in &hooks {
        judge(
            &mut report,
            hook,
            &format!("hook {}:", hook.id),
            Unreached::Passes("never reached in the check"),
        );
    }
    report.hooks = Some(hooks);
    report.sound = report.sound && report.steps.iter().all(|s| s.ok);
    report
}

/// What a hook function the check never reached is.
#[derive(Clone, Copy)]
enum Unreached {
    /// A failure.
    Fails,
    /// A pass, with this note.
    Passes(&'static str),
}

/// One step per hook function `hook` defines (named `{prefix} {function}`): failed when the
/// hook was quarantined, passed when it ran, else as `unreached` says.
fn judge(report: &mut CheckReport, hook: &HookReport, prefix: &str, unreached: Unreached) {
    for method in &hook.status.defines {
        let step = format!("{prefix} {method}");
        let calls = hook.status.calls.get(method).copied().unwrap_or(0);
        if hook.status.quarantines > 0 {
            let why = hook.status.last_failure.clone().unwrap_or_default();
            report.failed(step, format!("the hook failed and was quarantined: {why}"));
        } else if calls > 0 {
            report.pass(&step, format!("ran {calls} times"));
        } else {
            match unreached {
                Unreached::Passes(note) => report.pass(&step, note.into()),
                Unreached::Fails => {
                    report.failed(step, "never ran in the check".into());
                }
            }
        }
    }
}
