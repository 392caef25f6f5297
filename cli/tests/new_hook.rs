//! `ctxhost new --kind hook` and `ctxhost check HOOK`: the hook skeletons pass `check` as
//! written and with every optional hook function enabled (each one run by the check), and a
//! hook that fails is NOT sound even though the pipeline hides its failure from the session.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::Path;
use std::process::{Command, Output};

fn ctxhost(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ctxhost"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

const FUNCTIONS: [&str; 7] = [
    "collect",
    "project",
    "prune",
    "compactionPlan",
    "beforeCompaction",
    "afterCompaction",
    "afterAppend",
];

/// Checks `file` (a hook with every function enabled) and asserts each ran.
fn every_function_runs(dir: &Path, file: &str) {
    let o = ctxhost(dir, &["check", file]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains(&format!("defines: {}\n", FUNCTIONS.join(", "))),
        "{out}"
    );
    for f in FUNCTIONS {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("  ok   hook {f}: ran ")) && !l.contains("ran 0 ")),
            "{f} did not run: {out}"
        );
    }
}

#[test]
fn a_new_lua_hook_passes_check_with_and_without_its_optional_functions() {
    let dir = tempfile::tempdir().unwrap();
    let o = ctxhost(
        dir.path(),
        &["new", "my_hook", "--kind", "hook", "--lang", "lua"],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("hook id \"my-hook\""), "{}", text(&o));
    let source = std::fs::read_to_string(dir.path().join("my_hook.lua")).unwrap();
    assert!(source.contains(r#"id = "my-hook""#), "{source}");

    let o = ctxhost(dir.path(), &["check", "my_hook.lua"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.starts_with("hook my-hook (my_hook.lua)\n"), "{out}");
    assert!(out.contains("defines: collect\n"), "{out}");
    assert!(out.contains("  ok   hook collect: ran "), "{out}");

    // `--[[` → `---[[` enables a commented function; enable them all.
    std::fs::create_dir(dir.path().join("all")).unwrap();
    std::fs::write(
        dir.path().join("all/my_hook.lua"),
        source.replace("\n--[[", "\n---[["),
    )
    .unwrap();
    every_function_runs(dir.path(), "all/my_hook.lua");
}

#[test]
fn a_new_rhai_hook_passes_check_with_and_without_its_optional_functions() {
    let dir = tempfile::tempdir().unwrap();
    let o = ctxhost(
        dir.path(),
        &["new", "sub/r_hook", "--kind", "hook", "--lang", "rhai"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let source = std::fs::read_to_string(dir.path().join("sub/r_hook.rhai")).unwrap();
    assert!(source.contains(r#"id: "r-hook""#), "{source}");
    let o = ctxhost(dir.path(), &["check", "sub/r_hook.rhai"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("  ok   hook collect: ran "),
        "{}",
        text(&o)
    );

    // Deleting the `/*` and `*/` lines enables every optional function.
    std::fs::create_dir(dir.path().join("all")).unwrap();
    let enabled: String = source
        .lines()
        .filter(|l| *l != "/*" && *l != "*/")
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dir.path().join("all/r_hook.rhai"), enabled).unwrap();
    every_function_runs(dir.path(), "all/r_hook.rhai");
}

#[test]
fn a_hook_that_throws_is_not_sound_and_check_names_its_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("flaky.lua"),
        "local M = { info = { id = \"flaky\", name = \"Flaky\" } }\n\
         function M.collect(p)\n  if #p.messages > 8 then error(\"flaky broke\") end\n  return nil\nend\n\
         return M\n",
    )
    .unwrap();
    let o = ctxhost(dir.path(), &["check", "flaky.lua", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["sound"], false);
    let failed: Vec<&serde_json::Value> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["ok"] == false)
        .collect();
    assert_eq!(failed.len(), 1, "{report:#}");
    assert_eq!(failed[0]["step"], "hook collect");
    let detail = failed[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("flaky broke") && detail.contains("flaky.lua:3"),
        "{detail}"
    );
    assert_eq!(report["hooks"][0]["status"]["quarantines"], 1, "{report:#}");
}

/// Every example hook in `scripts/hooks/`, in both languages, passes `check` as shipped: each
/// hook function it defines ran in the check's conversation and none failed.
#[test]
fn every_example_hook_passes_check_in_both_languages() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let hooks = root.join("scripts/hooks");
    let mut files: Vec<_> = std::fs::read_dir(&hooks)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "lua" || e == "rhai"))
        .collect();
    files.sort();
    assert!(
        files.iter().any(|f| f.ends_with("compaction_planner.rhai")),
        "{files:?}"
    );
    for file in &files {
        let o = ctxhost(&root, &["check", file.to_str().unwrap(), "--json"]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(0), "{}: {out}", file.display());
        let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(report["sound"], true, "{}: {out}", file.display());
        let steps = report["steps"].as_array().unwrap();
        assert!(
            steps
                .iter()
                .any(|s| s["step"].as_str().is_some_and(|n| n.starts_with("hook "))),
            "{}: no hook function was judged: {out}",
            file.display()
        );
    }
    let planner = ctxhost(&root, &["check", "scripts/hooks/compaction_planner.lua"]);
    let out = text(&planner);
    assert!(
        out.lines()
            .any(|l| l.starts_with("  ok   hook compactionPlan: ran ")),
        "{out}"
    );
}
