//! `ctxhost compare` through the real binary, on the shared transcripts and the example
//! engines: the figures add up, the same engine in Lua and Rhai measures the same, baselines
//! give ratios, gates fail with the row named, and the JSON carries its schema.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::bin::ctxhost;
use crate::common;

use common::transcript_arg as transcript;
use serde_json::Value;

const SMALL: &str = "fasthooks-sample_main_transcript.jsonl";

fn script(name: &str) -> String {
    common::repo_root()
        .join("scripts")
        .join(name)
        .display()
        .to_string()
}

fn compare_json(args: &[&str]) -> (Value, i32) {
    let mut all = vec!["compare", "--json"];
    all.extend_from_slice(args);
    let out = ctxhost(&all);
    let code = out.status.code().unwrap_or(-1);
    let text = String::from_utf8_lossy(&out.stdout);
    let doc = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "not one JSON document ({e}): {text}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (doc, code)
}

fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a count in {v}"))
}

#[test]
fn compare_rows_add_up_and_legacy_compacts_at_a_small_window() {
    let t = transcript(SMALL);
    let recent = script("recent_turns.lua");
    let (doc, code) = compare_json(&[
        "--engine", "legacy", "--engine", &recent, "--window", "3000", "--window", "8000", &t,
    ]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["schema"], "ctxhost.compare/1");
    assert_eq!(doc["model"], "claude-sonnet-4");
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "2 engines × 2 windows × 1 transcript");
    assert_eq!(doc["totals"].as_array().unwrap().len(), 4);
    let calls = u(&rows[0], "calls");
    let output = u(&rows[0], "outputTokens");
    assert!(calls > 1);
    for r in rows {
        // Every engine sees the same recorded model calls and replies.
        assert_eq!(u(r, "calls"), calls, "{r}");
        assert_eq!(u(r, "outputTokens"), output, "{r}");
        assert_eq!(
            u(r, "inputTokens"),
            u(r, "cachedTokens") + u(r, "freshTokens"),
            "{r}"
        );
        let expected = (u(r, "freshTokens") as f64 * 3.0
            + u(r, "cachedTokens") as f64 * 0.3
            + output as f64 * 15.0)
            / 1e6;
        assert!((r["cost"].as_f64().unwrap() - expected).abs() < 1e-9, "{r}");
        let causes: u64 = r["breakCauses"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(causes, u(r, "cacheBreaks"), "{r}");
    }
    let legacy_small = rows
        .iter()
        .find(|r| r["engine"] == "legacy" && r["window"] == 3000)
        .unwrap();
    assert!(u(legacy_small, "compactions") > 0, "{legacy_small}");
    assert!(
        legacy_small["breakCauses"]["compaction"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "a compaction rewrites the prefix: {legacy_small}"
    );
    let legacy_big = rows
        .iter()
        .find(|r| r["engine"] == "legacy" && r["window"] == 8000)
        .unwrap();
    // A bigger window compacts less often, so more of each call is reused.
    assert!(
        legacy_big["cacheHitRate"].as_f64().unwrap()
            >= legacy_small["cacheHitRate"].as_f64().unwrap(),
        "{legacy_big}\n{legacy_small}"
    );
    assert!(
        legacy_small["times"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["method"] == "assemble"),
        "{legacy_small}"
    );
}

#[test]
fn the_same_engine_in_lua_and_rhai_measures_the_same() {
    let t = transcript(SMALL);
    for name in ["hierarchical", "tool_pruner"] {
        let (lua, rhai) = (
            script(&format!("{name}.lua")),
            script(&format!("{name}.rhai")),
        );
        let (doc, code) =
            compare_json(&["--engine", &lua, "--engine", &rhai, "--window", "3000", &t]);
        assert_eq!(code, 0, "{doc}");
        let rows = doc["rows"].as_array().unwrap();
        let keys = [
            "calls",
            "inputTokens",
            "cachedTokens",
            "cacheBreaks",
            "breakCauses",
            "compactions",
            "noHistory",
            "noRequest",
            "fallbacks",
            "rerefs",
            "rerefsFound",
            "rerefsSearchable",
        ];
        for k in keys {
            assert_eq!(rows[0][k], rows[1][k], "{name}: {k} differs");
        }
        assert_eq!(u(&rows[0], "fallbacks"), 0, "{name}: {}", rows[0]);
    }
}

#[test]
fn a_baseline_gives_ratios_and_a_gate_names_the_failing_rows() {
    let t = transcript(SMALL);
    let recent = script("recent_turns.lua");
    let out = ctxhost(&[
        "compare",
        "--engine",
        &recent,
        "--baseline",
        "legacy",
        "--window",
        "3000",
        "--gate",
        "cost<=0.0001,calls>=1",
        &t,
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("cost (×)"), "{text}");
    assert!(
        text.contains("gate cost<=0.0001,calls>=1 failed:"),
        "{text}"
    );
    assert!(
        text.contains(&format!("{recent} @ 3000 {SMALL}: cost = ")),
        "{text}"
    );
    assert!(!text.contains("calls = "), "calls>=1 holds: {text}");
    assert!(
        !text.contains("legacy @ 3000 (all"),
        "the baseline is not gated: {text}"
    );

    // As a ratio to itself the baseline's engine passes any ratio gate it meets.
    let (doc, code) = compare_json(&[
        "--engine",
        "legacy",
        "--baseline",
        "legacy",
        "--window",
        "3000",
        "--gate",
        "cost<=1.0,nohistory==0",
        &t,
    ]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["gate"]["passed"], true, "{doc}");
    assert_eq!(doc["baseline"], "legacy");
}

#[test]
fn a_price_table_of_ones_own_sets_the_cost() {
    let dir = tempfile::tempdir().unwrap();
    let prices = dir.path().join("prices.json");
    std::fs::write(
        &prices,
        r#"{"house": {"input": 10.0, "cachedInput": 0.0, "output": 0.0}}"#,
    )
    .unwrap();
    let t = transcript(SMALL);
    let (doc, code) = compare_json(&[
        "--engine",
        "legacy",
        "--window",
        "3000",
        "--prices",
        prices.to_str().unwrap(),
        &t,
    ]);
    assert_eq!(code, 0, "{doc}");
    assert_eq!(doc["model"], "house");
    let r = &doc["rows"][0];
    let expected = u(r, "freshTokens") as f64 * 10.0 / 1e6;
    assert!((r["cost"].as_f64().unwrap() - expected).abs() < 1e-9, "{r}");
}

#[test]
fn compare_refuses_what_it_cannot_run_and_says_why() {
    let t = transcript(SMALL);
    let out = ctxhost(&["compare", "--engine", "no_such_engine.lua", &t]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no_such_engine.lua is neither a file nor `legacy`"),
        "{err}"
    );

    let out = ctxhost(&["compare", "--engine", "legacy", "--gate", "price<=1", &t]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no figure `price`"), "{err}");

    let out = ctxhost(&["compare", "--engine", "legacy", "--model", "gpt-9", &t]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no prices for model \"gpt-9\""), "{err}");
}

#[test]
fn a_re_reference_out_of_the_context_can_be_one_search_away() {
    let t = transcript("pimono-large-session.jsonl");
    let recent = script("recent_turns.lua");
    let (doc, code) = compare_json(&["--engine", &recent, "--window", "3000", &t]);
    assert_eq!(code, 0, "{doc}");
    let r = &doc["rows"][0];
    let (all, found, searchable) = (
        u(r, "rerefs"),
        u(r, "rerefsFound"),
        u(r, "rerefsSearchable"),
    );
    // recent_turns at 3,000 tokens leaves out identifiers a later request names again; the
    // session's stored messages still hold them, and a search finds them.
    assert!(found < all, "{r}");
    assert!(searchable > 0, "{r}");
    assert!(found + searchable <= all, "{r}");
    let rate = r["rerefSearchRate"].as_f64().unwrap();
    assert!((rate - searchable as f64 / all as f64).abs() < 1e-12, "{r}");
}
