//! The built-in hooks a config switches on by name (issue 22 item 6): tool-result pruning in
//! memory, the `AGENTS.md` re-anchor after every compaction, and compaction under
//! `maxHistoryShare` with the strict identifier policy.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value as Json, json};

use ctxhost::config::{Config, Entry};
use ctxhost::contract::message::{MessageBody, Role};
use ctxhost::runtime::Host;
use ctxhost::session::Assembly;
use ctxhost::transcript::TranscriptStore;

use super::{assemblies, hook_script, pipeline};
use crate::common;

/// A pipeline of built-in hooks, each with `config` (when not null) as its entry config.
fn builtins(window: u64, hooks: &[(&str, Json)]) -> Config {
    let mut config = pipeline(window, &[]);
    for (id, cfg) in hooks {
        config.host.pipeline.hooks.push((*id).into());
        if !cfg.is_null() {
            config.plugins.entries.insert(
                (*id).into(),
                Entry {
                    config: cfg.clone(),
                    ..Entry::default()
                },
            );
        }
    }
    config
}

/// What the model sees of a call: each message's id, role and text (a summary's own
/// timestamp aside).
pub(super) fn seen(a: &Assembly) -> Vec<(String, Role, String)> {
    a.messages
        .iter()
        .map(|m| (m.id.clone(), m.role(), m.text()))
        .collect()
}

/// The calls of `file`'s first conversation; the pipeline never fell back.
fn run(config: &Config, file: &Path, dir: &Path) -> Vec<Assembly> {
    let host = Arc::new(Host::new(config.clone()).expect("host"));
    let calls = common::block_on(assemblies(Arc::clone(&host), file, dir)).0;
    assert!(
        host.quarantine().all().is_empty(),
        "{}: {:?}",
        file.display(),
        host.quarantine().all()
    );
    assert!(calls.iter().all(|a| !a.fallback), "{}", file.display());
    calls
}

#[test]
fn builtin_tool_pruning_prunes_as_the_example_hook_does_and_never_rewrites_history() {
    let builtin = builtins(6_000, &[("builtin:tool-pruning", Json::Null)]);
    let script = pipeline(
        6_000,
        &[("tool-pruner", hook_script("tool_pruner.lua"), json!({}))],
    );
    let mut changed = 0;
    for file in common::shared_transcripts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = run(&builtin, &file, dir.path());
        let b = run(&script, &file, tempfile::tempdir().expect("tempdir").path());
        assert_eq!(a.len(), b.len(), "{}", file.display());
        for (x, y) in a.iter().zip(&b) {
            assert!(seen(x) == seen(y), "{}: the calls differ", file.display());
            let report = &x.projection.as_ref().expect("report")["pipeline"];
            for p in report["pruned"].as_array().expect("pruned") {
                assert_eq!(p["hook"], "builtin:tool-pruning");
                changed += p["changed"].as_u64().unwrap_or(0);
            }
        }
        // The history on disk is the transcript's, every message as it was.
        let originals = ctxhost::transcript::import(&file).expect("import").sessions;
        let (_, stored, _) = TranscriptStore::open(dir.path().join("s0.jsonl")).expect("open");
        let kept: Vec<&MessageBody> = stored
            .iter()
            .filter(|m| m.role() != Role::CompactionSummary)
            .map(|m| &m.body)
            .collect();
        let given: Vec<&MessageBody> = originals[0].messages.iter().map(|m| &m.body).collect();
        assert!(
            kept == given,
            "{}: the stored history changed",
            file.display()
        );
    }
    assert!(changed > 0, "no tool result was pruned");
}

const AGENTS_MD: &str = "# Agents\n\nIntro text.\n\n## Session Startup\nRead NOTES.md first.\n\
Check the open tickets.\n\n### Details\nStill part of startup.\n\n## Style\nShort sentences.\n\n\
## Red Lines\nNever delete user data.\nNever push to main.\n\n## Red lines\nnear-miss heading, not re-anchored\n";

#[test]
fn builtin_reanchor_places_the_agents_md_sections_after_every_compaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let agents = dir.path().join("AGENTS.md");
    std::fs::write(&agents, AGENTS_MD).expect("write");
    let config = builtins(
        6_000,
        &[(
            "builtin:agents-reanchor",
            json!({"file": agents.display().to_string()}),
        )],
    );
    let startup = "## Session Startup\nRead NOTES.md first.\nCheck the open tickets.\n\n### Details\nStill part of startup.";
    let red = "## Red Lines\nNever delete user data.\nNever push to main.";
    let (mut after, mut before) = (0, 0);
    for file in common::shared_transcripts() {
        let out = tempfile::tempdir().expect("tempdir");
        for a in run(&config, &file, out.path()) {
            let compacted = a
                .messages
                .iter()
                .any(|m| m.role() == Role::CompactionSummary);
            let anchor: Vec<String> = a
                .messages
                .iter()
                .map(|m| m.text())
                .filter(|t| t.starts_with("[Post-compaction context refresh]"))
                .collect();
            if compacted {
                after += 1;
                assert_eq!(anchor.len(), 1, "{}: {:?}", file.display(), a.messages);
                let text = &anchor[0];
                assert_eq!(
                    text,
                    &format!("[Post-compaction context refresh]\n\n{startup}\n\n{red}"),
                    "{}",
                    file.display()
                );
                assert!(!text.contains("near-miss") && !text.contains("## Style"));
            } else {
                before += 1;
                assert!(
                    anchor.is_empty(),
                    "{}: re-anchored before any compaction",
                    file.display()
                );
            }
        }
    }
    assert!(
        after > 0 && before > 0,
        "{after} calls after a compaction, {before} before"
    );
}

#[test]
fn builtin_compaction_keeps_history_within_its_share_and_every_identifier() {
    for share in [0.5, 0.3] {
        let config = builtins(
            6_000,
            &[(
                "builtin:compaction",
                if share == 0.5 {
                    Json::Null
                } else {
                    json!({"maxHistoryShare": share})
                },
            )],
        );
        let (mut summaries, mut over, mut all_kept) = (0, 0, 0);
        for file in common::shared_transcripts() {
            let dir = tempfile::tempdir().expect("tempdir");
            run(&config, &file, dir.path());
            let (_, stored, _) = TranscriptStore::open(dir.path().join("s0.jsonl")).expect("open");
            // Summaries the transcript brought along are not this host's.
            let imported = ctxhost::transcript::import(&file).expect("import").sessions;
            let given: Vec<&MessageBody> = imported[0].messages.iter().map(|m| &m.body).collect();
            for m in &stored {
                let MessageBody::CompactionSummary(s) = &m.body else {
                    continue;
                };
                if given.contains(&&m.body) {
                    continue;
                }
                let d = &s.extra["details"];
                assert_eq!(d["pipeline"]["summarizedBy"], "builtin:compaction", "{d}");
                assert_eq!(d["maxHistoryShare"], json!(share));
                assert_eq!(d["identifierPolicy"], "strict");
                // The audit is the summary's own count; an identifier left out (the
                // summary's budget, not the policy) is said so in the summary itself.
                let audit = &d["identifierAudit"];
                let (found, kept) = (audit["found"].as_u64(), audit["kept"].as_u64());
                assert_eq!(audit["found"], d["identifiersFound"], "{d}");
                assert_eq!(audit["kept"], d["identifiersKept"], "{d}");
                assert!(kept <= found && found.is_some(), "{d}");
                assert_eq!(audit["allKept"], found == kept, "{d}");
                if found == kept {
                    all_kept += 1;
                } else {
                    assert!(
                        s.summary.contains("omitted to fit the budget"),
                        "{}: identifiers left out silently: {d}\n{}",
                        file.display(),
                        s.summary
                    );
                }
                let budget = d["historyBudget"].as_u64().expect("historyBudget");
                // The window's budget: 6,000 less the output reserve (1,500) and the prompt.
                assert!(
                    budget as f64 <= share * 4_500.0,
                    "{budget} for share {share}"
                );
                let after = d["pipeline"]["tokensAfter"].as_u64().expect("tokensAfter");
                assert_eq!(d["withinShare"], after <= budget, "{d}");
                if after > budget {
                    // Only the turn in progress or its newest group, larger than the share
                    // alone, stays over it: what was kept (up to this summary) is within one
                    // turn.
                    let first = d["pipeline"]["firstKeptEntryId"].as_str().expect("kept");
                    let from = stored.iter().position(|k| k.id == first).expect("kept id");
                    let to = stored.iter().position(|k| k.id == m.id).expect("summary");
                    assert!(
                        stored[from + 1..to].iter().all(|k| k.role() != Role::User),
                        "{}: {after} tokens of history after compacting, over {budget} ({share} of the budget): {d}",
                        file.display()
                    );
                    over += 1;
                }
                summaries += 1;
            }
        }
        assert!(summaries > 0, "maxHistoryShare {share}: nothing compacted");
        assert!(
            over < summaries,
            "maxHistoryShare {share}: every compaction over its share"
        );
        assert!(
            all_kept > 0,
            "maxHistoryShare {share}: no summary kept every identifier"
        );
    }
}
