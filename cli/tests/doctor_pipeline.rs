//! `ctxhost doctor` with the `pipeline` engine configured (issue 22 item 8): it drives the
//! pipeline as `check` drives an engine and lists its hooks in the order they run, each with its
//! kind, where it runs, its file, the hook functions it defines, and whether it is loaded, was
//! quarantined in the drive (with the failure) or did not load.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::Path;

use serde_json::{Value, json};

use crate::bin::ctxhost;
use crate::common;

/// A config in `dir` with the pipeline in the slot and `hooks` (id, path or null) in order.
fn config(dir: &Path, hooks: &[(&str, Option<&Path>)]) -> String {
    let mut entries = serde_json::Map::new();
    for (id, path) in hooks {
        if let Some(p) = path {
            entries.insert((*id).into(), json!({ "path": p }));
        }
    }
    let ids: Vec<&str> = hooks.iter().map(|(id, _)| *id).collect();
    let cfg = json!({
        "plugins": { "slots": { "contextEngine": "pipeline" }, "entries": entries },
        "host": { "pipeline": { "hooks": ids } },
    });
    let file = dir.join("pipeline.json5");
    std::fs::write(&file, cfg.to_string()).expect("write the config");
    file.display().to_string()
}

fn doctor(config: &str, json: bool) -> (Option<i32>, String) {
    let mut args = vec!["doctor", "--config", config];
    if json {
        args.push("--json");
    }
    let o = ctxhost(&args);
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

fn hook<'a>(d: &'a Value, id: &str) -> &'a Value {
    d["hooks"]
        .as_array()
        .expect("hooks")
        .iter()
        .find(|h| h["id"] == id)
        .unwrap_or_else(|| panic!("no hook {id} in {d}"))
}

#[test]
fn doctor_lists_the_pipelines_hooks_in_order_with_their_handlers_and_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = common::repo_root();
    let pinned = root.join("scripts/hooks/pinned_facts.lua");
    let pruner = root.join("scripts/hooks/tool_pruner.rhai");
    let cfg = config(
        dir.path(),
        &[
            ("pinned-facts", Some(&pinned)),
            ("tool-pruner", Some(&pruner)),
            ("builtin:compaction", None),
        ],
    );
    let (code, out) = doctor(&cfg, true);
    assert_eq!(code, Some(0), "{out}");
    let d: Value = serde_json::from_str(&out).expect("doctor --json");
    assert_eq!(d["activeEngine"], "pipeline", "{d}");
    assert_eq!(d["load"], "ok", "{d}");
    let ids: Vec<&str> = d["hooks"]
        .as_array()
        .expect("hooks")
        .iter()
        .map(|h| h["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["pinned-facts", "tool-pruner", "builtin:compaction"]);
    let p = hook(&d, "pinned-facts");
    assert_eq!(p["kind"], "lua");
    assert_eq!(p["runsIn"], "thread");
    assert_eq!(p["file"], pinned.display().to_string());
    assert_eq!(p["handlers"], json!(["collect"]));
    assert!(p["calls"]["collect"].as_u64().unwrap() > 0, "{p}");
    assert_eq!(p["state"], "loaded");
    let t = hook(&d, "tool-pruner");
    assert_eq!(t["kind"], "rhai");
    assert_eq!(t["handlers"], json!(["prune"]));
    assert_eq!(t["state"], "loaded");
    let b = hook(&d, "builtin:compaction");
    assert_eq!(b["kind"], "builtin");
    assert_eq!(b["file"], Value::Null);
    assert_eq!(b["handlers"], json!(["compactionPlan"]));

    let (code, text) = doctor(&cfg, false);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains(
            "engine:     pipeline (configured in plugins.slots.contextEngine (\"pipeline\"))"
        ),
        "{text}"
    );
    assert!(
        text.contains("  hooks:    3 (in the order they run)"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "    pinned-facts (lua, thread) {}",
            pinned.display()
        )),
        "{text}"
    );
    assert!(
        text.contains("    builtin:compaction (builtin)\n"),
        "{text}"
    );
    assert!(text.contains("  quarantine: none (check passed)"), "{text}");
}

#[test]
fn doctor_names_a_hook_that_fails_and_the_others_stay_loaded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pinned = common::repo_root().join("scripts/hooks/pinned_facts.lua");
    let throws = common::repo_root().join("tests/fixtures/hooks/throws.lua");
    let cfg = config(
        dir.path(),
        &[("throws", Some(&throws)), ("pinned-facts", Some(&pinned))],
    );
    let (code, out) = doctor(&cfg, true);
    assert_eq!(code, Some(1), "{out}");
    let d: Value = serde_json::from_str(&out).expect("doctor --json");
    // The pipeline still answers: the failing hook is quarantined alone.
    assert_eq!(d["activeEngine"], "pipeline", "{d}");
    let t = hook(&d, "throws");
    assert_eq!(t["state"], "quarantined", "{t}");
    assert!(t["failure"].as_str().unwrap().contains("boom"), "{t}");
    assert_eq!(hook(&d, "pinned-facts")["state"], "loaded");
    assert!(
        d["quarantine"]
            .as_str()
            .unwrap()
            .starts_with("hook throws: collect"),
        "{d}"
    );

    let (_, text) = doctor(&cfg, false);
    assert!(text.contains("      state:    quarantined: "), "{text}");
    assert!(text.contains("boom"), "{text}");
}

#[test]
fn doctor_lists_the_configured_hooks_as_not_loaded_when_one_does_not_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pinned = common::repo_root().join("scripts/hooks/pinned_facts.lua");
    let missing = dir.path().join("missing.lua");
    let cfg = config(
        dir.path(),
        &[("pinned-facts", Some(&pinned)), ("gone", Some(&missing))],
    );
    let (code, out) = doctor(&cfg, true);
    assert_eq!(code, Some(1), "{out}");
    let d: Value = serde_json::from_str(&out).expect("doctor --json");
    assert_eq!(d["activeEngine"], "legacy", "{d}");
    assert!(d["load"].as_str().unwrap().starts_with("failed: "), "{d}");
    assert!(d["load"].as_str().unwrap().contains("missing.lua"), "{d}");
    for id in ["pinned-facts", "gone"] {
        assert_eq!(hook(&d, id)["state"], "not loaded", "{d}");
    }
    assert_eq!(hook(&d, "gone")["file"], missing.display().to_string());
}
