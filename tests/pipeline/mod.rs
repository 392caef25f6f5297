//! The `pipeline` engine (issue 22): hook scripts composed behind the one engine trait, driven
//! through a real host over the shared transcripts.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use crate::common;

mod builtins;
mod chain;
mod isolation;
mod lifecycle;
mod planner;
mod reload;

use std::path::PathBuf;

use ctxhost::config::{Config, Entry};
use ctxhost::runtime::Host;
use serde_json::{Value as Json, json};

use common::replay::{Call, replay_checked_with};

pub(super) fn hook_script(file: &str) -> PathBuf {
    common::repo_root().join("scripts/hooks").join(file)
}

pub(super) fn fixture(file: &str) -> PathBuf {
    common::repo_root().join("tests/fixtures/hooks").join(file)
}

/// A host config with the pipeline in the slot and `hooks` (id, file, config) in that order.
pub(super) fn pipeline(window: u64, hooks: &[(&str, PathBuf, Json)]) -> Config {
    let mut config = Config::default();
    config.host.window = window;
    config.plugins.slots.context_engine = Some("pipeline".into());
    for (id, path, cfg) in hooks {
        config.plugins.entries.insert(
            (*id).into(),
            Entry {
                path: Some(path.clone()),
                config: cfg.clone(),
                ..Entry::default()
            },
        );
    }
    config.host.pipeline.hooks = hooks.iter().map(|(id, _, _)| (*id).to_owned()).collect();
    config
}

pub(super) fn composed(ext: &str) -> Vec<(&'static str, PathBuf, Json)> {
    vec![
        (
            "pinned-facts",
            hook_script(&format!("pinned_facts.{ext}")),
            json!({"facts": ["The deploy target is staging-2.", "Never force-push main."]}),
        ),
        (
            "reanchor",
            hook_script(&format!("reanchor.{ext}")),
            json!({"rules": "## Red Lines\nNever delete user data."}),
        ),
        (
            "tool-pruner",
            hook_script(&format!("tool_pruner.{ext}")),
            json!({}),
        ),
        (
            "compaction-planner",
            hook_script(&format!("compaction_planner.{ext}")),
            json!({"maxHistoryShare": 0.5}),
        ),
    ]
}

pub(super) async fn replay(config: &Config, file: &std::path::Path) -> Vec<Call> {
    replayed(config, file).await.calls
}

/// A checked replay of `file` through `config`: every model call, and the compaction summaries
/// the host stored (each as its summary, `firstKeptEntryId` and `details`), session by session.
pub(super) struct Replayed {
    pub calls: Vec<Call>,
    pub compactions: usize,
    pub summaries: Vec<Json>,
}

pub(super) async fn replayed(config: &Config, file: &std::path::Path) -> Replayed {
    let dir = tempfile::tempdir().expect("tempdir");
    let checked = replay_checked_with(file, config, 2, None, dir.path()).await;
    Replayed {
        calls: checked.calls,
        compactions: checked.compactions,
        summaries: checked
            .files
            .iter()
            .flat_map(|f| stored_summaries(f))
            .collect(),
    }
}

/// The compaction summaries stored in session file `file`, in order.
pub(super) fn stored_summaries(file: &std::path::Path) -> Vec<Json> {
    let (_, stored, problems) =
        ctxhost::transcript::TranscriptStore::open(file).expect("reopen the session");
    assert!(problems.is_empty(), "{problems:?}");
    stored
        .iter()
        .filter_map(|m| match &m.body {
            ctxhost::contract::message::MessageBody::CompactionSummary(s) => Some(json!({
                "summary": s.summary,
                "firstKeptEntryId": s.first_kept_entry_id,
                "details": s.extra.get("details"),
            })),
            _ => None,
        })
        .collect()
}

#[test]
fn the_composed_pipeline_is_the_same_in_lua_and_rhai_over_every_shared_transcript() {
    common::block_on(async {
        let (mut compared, mut compactions) = (0, 0);
        for file in common::shared_transcripts() {
            let lua = replayed(&pipeline(6_000, &composed("lua")), &file).await;
            let rhai = replayed(&pipeline(6_000, &composed("rhai")), &file).await;
            assert_eq!(lua.calls, rhai.calls, "{}", file.display());
            // The same compactions, planned alike: the same summaries stored.
            assert_eq!(lua.compactions, rhai.compactions, "{}", file.display());
            assert_eq!(lua.summaries, rhai.summaries, "{}", file.display());
            for s in &lua.summaries {
                assert_eq!(
                    s["details"]["pipeline"]["summarizedBy"],
                    "compaction-planner",
                    "{}: a compaction the planner hook did not plan: {s}",
                    file.display()
                );
            }
            compactions += lua.compactions;
            let lua = lua.calls;
            for call in &lua {
                let addition = call.addition.as_deref().unwrap_or_default();
                assert!(
                    addition.contains("Pinned fact: The deploy target is staging-2.")
                        && addition.contains("Pinned fact: Never force-push main."),
                    "{}: a call without the pinned facts: {addition:?}",
                    file.display()
                );
            }
            compared += lua.len();
        }
        assert!(compared > 0, "no model calls compared");
        assert!(compactions > 0, "the composed pipeline never compacted");
    });
}

#[test]
fn a_throwing_a_spinning_and_a_garbage_hook_never_keep_the_good_ones_from_any_call() {
    let mut hooks = vec![
        ("throws", fixture("throws.lua"), json!({})),
        ("spins", fixture("spins.lua"), json!({})),
        ("garbage", fixture("garbage.lua"), json!({})),
    ];
    hooks.extend(composed("lua"));
    let mut config = pipeline(6_000, &hooks);
    config.host.pipeline.timeouts.insert("spins".into(), 50);
    let file = common::shared_transcripts()
        .into_iter()
        .next()
        .expect("a transcript");
    let calls = common::block_on(replay(&config, &file));
    assert!(!calls.is_empty());
    for (i, call) in calls.iter().enumerate() {
        let addition = call.addition.as_deref().unwrap_or_default();
        assert!(
            addition.contains("Pinned fact: Never force-push main."),
            "call {i}: the good hook's contribution is missing: {addition:?}"
        );
    }
    // The same calls as the good hooks alone: the bad ones changed nothing.
    let good = common::block_on(replay(&pipeline(6_000, &composed("lua")), &file));
    assert_eq!(calls, good);
}

#[test]
fn contributions_over_their_share_drop_the_lowest_priority_block_first() {
    let hooks = vec![
        ("bulky", fixture("bulky.lua"), json!({})),
        (
            "pinned-facts",
            hook_script("pinned_facts.lua"),
            json!({"facts": ["A."]}),
        ),
    ];
    let host = Host::new(pipeline(8_000, &hooks)).expect("host");
    let file = common::shared_transcripts()
        .into_iter()
        .next()
        .expect("a transcript");
    let dir = tempfile::tempdir().expect("tempdir");
    let checked = common::block_on(replay_checked_with(
        &file,
        host.config(),
        1,
        None,
        dir.path(),
    ));
    assert!(!checked.calls.is_empty());
    for call in &checked.calls {
        assert_eq!(call.addition.as_deref(), Some("Pinned fact: A."));
    }
}

#[test]
fn a_misspelt_hook_is_a_warning_naming_the_hook_it_resembles() {
    let config = pipeline(8_000, &[("typo", fixture("typo.lua"), json!({}))]);
    let factory = ctxhost::engine::pipeline::load(&ctxhost::runtime::pipeline_spec(&config))
        .expect("loads: `project` is a hook");
    let warnings = factory.warnings().join("\n");
    assert!(
        warnings.contains("`colect`") && warnings.contains("did you mean `collect`?"),
        "{warnings}"
    );
}

#[test]
fn two_hooks_owning_compaction_is_a_config_error_naming_both() {
    let config = pipeline(
        8_000,
        &[
            ("owner-a", fixture("owner_a.lua"), json!({})),
            ("owner-b", fixture("owner_b.rhai"), json!({})),
        ],
    );
    let err = ctxhost::engine::pipeline::load(&ctxhost::runtime::pipeline_spec(&config))
        .expect_err("two owners");
    let m = err.to_string();
    assert!(m.contains("owner-a") && m.contains("owner-b"), "{m}");
}

#[test]
fn a_hook_list_naming_a_missing_entry_fails_the_load_by_name() {
    let mut config = pipeline(8_000, &composed("lua"));
    config.host.pipeline.hooks.push("nope".into());
    let err = ctxhost::engine::pipeline::load(&ctxhost::runtime::pipeline_spec(&config))
        .expect_err("missing entry");
    assert!(err.to_string().contains("\"nope\""), "{err}");
}

/// Every model call's assembly of `file`'s first conversation replayed through `host` (the
/// sessions' files under `dir`), with the transcript's original messages.
pub(super) async fn assemblies(
    host: std::sync::Arc<Host>,
    file: &std::path::Path,
    dir: &std::path::Path,
) -> (
    Vec<ctxhost::session::Assembly>,
    Vec<ctxhost::contract::message::Message>,
) {
    let imported = ctxhost::transcript::import(file).expect("import");
    let source = imported
        .sessions
        .into_iter()
        .next()
        .expect("a conversation");
    let mut spec = ctxhost::runtime::SessionSpec::new("s0", dir.join("s0.jsonl"));
    spec.system_prompt = source.system_prompt.clone();
    let session = host.create_session(spec).await.expect("session");
    let originals = source.messages.clone();
    let (preamble, turns) = ctxhost::tools::replay::split_turns(source.messages);
    session.record(preamble).await.expect("record");
    let mut out = Vec::new();
    for recorded in turns {
        let (a, _) = common::replay::drive_recorded(&session, recorded).await;
        out.extend(a);
    }
    session.close().await.expect("close");
    (out, originals)
}
