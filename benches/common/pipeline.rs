//! The keep-recent fit as a `pipeline` of hooks (`benches/engines/hook_*.{lua,rhai}`), for
//! `benches/pipeline.rs` and `tests/workloads.rs`: the fit alone as one `project` hook, or the
//! fit among four cheap hooks of the other kinds (a `collect` contributing one small block, a
//! `project` that changes nothing, a `prune` that keeps the list as it is, an `afterAppend`
//! observer); and the check of a pipeline's result against the reference outputs.

use std::path::Path;
use std::sync::Arc;

use ctxhost::config::{Config, Entry};
use ctxhost::contract::AssembleResult;
use ctxhost::engine::pipeline::{PIPELINE_ID, PipelineFactory};
use ctxhost::engine::{Engine, EngineFactory, InstanceContext};
use serde_json::json;

use super::workloads::{BUDGET, Outcome, Workload, kept_suffix, reference};

/// The block the `collect` hook contributes (`hook_note`), appended to the system prompt.
pub const NOTE: &str = "Answer in English.";

/// The five hooks, in the order they run: id and file stem under `benches/engines/`. The
/// one-hook pipeline runs [`FIT`] alone.
pub const HOOKS: [(&str, &str); 5] = [
    ("note", "hook_note"),
    (FIT, "hook_keep_recent"),
    ("noop-project", "hook_noop_project"),
    ("idle-prune", "hook_idle_prune"),
    ("observer", "hook_observer"),
];

/// The hook doing the keep-recent fit (a `project` returning the kept suffix).
pub const FIT: &str = "keep-recent";

/// A host config with the pipeline in the slot: in `lang` (`lua` or `rhai`), the fit alone
/// (`all` false) or all of [`HOOKS`]. The fit's budget is [`BUDGET`] in the workload's tokens
/// (its entry config), whatever the call's budget.
pub fn config(root: &Path, lang: &str, all: bool) -> Config {
    let mut config = Config::default();
    config.plugins.slots.context_engine = Some(PIPELINE_ID.into());
    for (id, stem) in HOOKS.iter().filter(|(id, _)| all || *id == FIT) {
        config.plugins.entries.insert(
            (*id).into(),
            Entry {
                path: Some(root.join(format!("benches/engines/{stem}.{lang}"))),
                config: if *id == FIT {
                    json!({ "budget": BUDGET })
                } else {
                    json!({})
                },
                ..Entry::default()
            },
        );
    }
    config.host.pipeline.hooks = HOOKS
        .iter()
        .filter(|(id, _)| all || *id == FIT)
        .map(|(id, _)| (*id).to_owned())
        .collect();
    config
}

/// Loads the pipeline of [`config`] and makes one instance.
pub fn pipeline(root: &Path, lang: &str, all: bool) -> (Arc<PipelineFactory>, Box<dyn Engine>) {
    let factory = ctxhost::engine::pipeline::load_with(
        &ctxhost::runtime::pipeline_spec(&config(root, lang, all)),
        None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let engine = factory
        .instantiate(&InstanceContext::default())
        .unwrap_or_else(|e| panic!("{e}"));
    (factory, engine)
}

/// `Ok` when the pipeline's result `r` keeps workload `w`'s reference outcome, as the session's
/// own messages, with no hook quarantined and (with `all` hooks) the `collect` hook's block in
/// the system prompt; else what differs, naming `name`. The result's `estimatedTokens` is the
/// host's measure (its tokenizer, the contributions included), so it is not compared.
pub fn check(name: &str, w: &Workload, r: &AssembleResult, all: bool) -> Result<Outcome, String> {
    let what = format!("keep_recent [{name}, {}]", w.spec.name);
    let got = kept_suffix(&w.messages, &r.messages).map_err(|e| format!("{what}: {e}"))?;
    let report = r
        .context_projection
        .as_ref()
        .map(|p| p["pipeline"].clone())
        .unwrap_or_default();
    match report["quarantined"].as_array() {
        Some(q) if q.is_empty() => {}
        _ => return Err(format!("{what}: hooks quarantined: {report}")),
    }
    let addition = r.system_prompt_addition.as_deref().unwrap_or_default();
    if all != addition.contains(NOTE) {
        return Err(format!("{what}: systemPromptAddition {addition:?}"));
    }
    reference(&what, w, got)
}
