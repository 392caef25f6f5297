//! `ctxhost compare --report`: the page drawn by headless Chromium holds one point per model
//! call per engine in each chart, a compaction marker exactly where the `--json` output of the
//! same run says an engine's call compacted, and a drill-down that marks exactly the blocks one
//! engine's context has and the other's lacks.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::{attrs, dump_dom_at};
use crate::bin::ctxhost;
use crate::common;

const SMALL: &str = "fasthooks-sample_main_transcript.jsonl";

/// Opening tags in serialized HTML, as an element name's regex finds them.
static CIRCLE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"<circle\b[^>]*>").expect("regex"));
static PATH: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"<path\b[^>]*>").expect("regex"));
static DRILL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"<section\b[^>]*id="drill"[^>]*>"#).expect("regex"));

/// The drill-down section's opening tag.
fn drill_tag(dom: &str) -> String {
    DRILL.find(dom).expect("the drill-down").as_str().to_owned()
}

/// Runs `compare --json --report` with the given engines at 3,000 and 8,000 tokens.
fn compare_report(dir: &Path, engines: &[&str], transcript: &str) -> (Value, std::path::PathBuf) {
    let page = dir.join("compare.html");
    let page_arg = page.display().to_string();
    let mut args = vec!["compare", "--json", "--report", &page_arg];
    for e in engines {
        args.extend(["--engine", e]);
    }
    args.extend(["--window", "3000", "--window", "8000", transcript]);
    let out = ctxhost(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    (doc, page)
}

fn file_name(v: &Value) -> String {
    Path::new(v.as_str().expect("path"))
        .file_name()
        .expect("file name")
        .to_string_lossy()
        .into_owned()
}

/// The JSON row of engine `e` (its index in `engines`) at `window` over `transcript`.
fn row<'a>(doc: &'a Value, e: usize, transcript: &str, window: u64) -> &'a Value {
    let engine = &doc["engines"][e];
    doc["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| {
            r["engine"] == *engine
                && r["window"] == window
                && file_name(&r["transcript"]) == transcript
        })
        .expect("the row")
}

/// The digests of the blocks call `i` of a row sent, in order.
fn context_digests(row: &Value, i: usize) -> Vec<String> {
    let log = &row["callLog"];
    log["calls"][i]["context"]
        .as_array()
        .expect("context")
        .iter()
        .map(|b| {
            log["blocks"][b.as_u64().expect("index") as usize]["digest"]
                .as_str()
                .expect("digest")
                .to_owned()
        })
        .collect()
}

/// The serialized `<svg>` charts of the page: (chart, transcript, window, the svg's markup).
fn charts(dom: &str) -> Vec<(String, String, u64, String)> {
    let open = Regex::new(r"<svg\b[^>]*\bdata-chart=[^>]*>").expect("regex");
    let mut out = Vec::new();
    for m in open.find_iter(dom) {
        let end = dom[m.end()..].find("</svg>").expect("svg end") + m.end();
        let tag = m.as_str();
        let one = |a: &str| attrs(tag, "svg", a).pop().expect(a);
        out.push((
            one("data-chart"),
            one("data-transcript"),
            one("data-window").parse().expect("window"),
            dom[m.start()..end].to_owned(),
        ));
    }
    out
}

/// The drill-down's rows on one side: (block index, marked as differing).
fn side_rows(dom: &str, side: &str) -> Vec<(String, bool)> {
    let tr = Regex::new(r"<tr\b[^>]*>").expect("regex");
    tr.find_iter(dom)
        .map(|m| m.as_str())
        .filter(|t| t.contains(&format!("data-side=\"{side}\"")))
        .map(|t| {
            (
                attrs(t, "tr", "data-block").pop().expect("block"),
                t.contains("data-differs"),
            )
        })
        .collect()
}

/// Checks the drill-down `dom` shows against the JSON: each side lists its engine's context of
/// that call, and exactly the blocks missing from the other side's context are marked.
/// Returns how many blocks were marked.
fn check_drill(doc: &Value, dom: &str) -> usize {
    let drill = drill_tag(dom);
    let one = |a: &str| attrs(&drill, "section", a).pop().expect(a);
    let transcript = one("data-transcript");
    let window: u64 = one("data-window").parse().expect("window");
    let call: usize = one("data-call").parse().expect("call");
    let left: usize = one("data-left").parse().expect("left");
    let right: usize = one("data-right").parse().expect("right");
    let l = context_digests(row(doc, left, &transcript, window), call);
    let r = context_digests(row(doc, right, &transcript, window), call);
    let mut marked = 0;
    for (side, mine, other) in [("left", &l, &r), ("right", &r, &l)] {
        let shown = side_rows(dom, side);
        assert_eq!(
            shown.len(),
            mine.len(),
            "{side}: one row per block of call {call}"
        );
        let others: HashSet<&String> = other.iter().collect();
        let expected: Vec<bool> = mine.iter().map(|d| !others.contains(d)).collect();
        let got: Vec<bool> = shown.iter().map(|(_, d)| *d).collect();
        assert_eq!(
            got, expected,
            "{side} side of call {call}: the marked blocks"
        );
        marked += got.iter().filter(|d| **d).count();
    }
    marked
}

#[test]
fn the_compare_report_draws_every_call_of_every_engine_and_marks_what_differs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let recent = common::repo_root()
        .join("scripts/recent_turns.lua")
        .display()
        .to_string();
    let t = common::transcript_arg(SMALL);
    let (doc, page) = compare_report(dir.path(), &["legacy", &recent], &t);
    let html = std::fs::read_to_string(&page).expect("report");
    assert_eq!(
        attrs(&html, "circle", "data-point").len(),
        0,
        "the points come from the script, not the file"
    );

    let dom = dump_dom_at(&page, "");
    let charts = charts(&dom);
    assert_eq!(charts.len(), 4, "cost and hit rate at each of 2 windows");
    let mut compactions = 0;
    for (chart, transcript, window, svg) in &charts {
        assert_eq!(transcript, SMALL);
        for e in 0..2 {
            let r = row(&doc, e, transcript, *window);
            let calls = r["callLog"]["calls"].as_array().expect("calls");
            assert_eq!(calls.len() as u64, r["calls"].as_u64().expect("calls"));
            let points: Vec<usize> = CIRCLE
                .find_iter(svg)
                .filter(|m| m.as_str().contains(&format!("data-engine=\"{e}\"")))
                .map(|m| {
                    attrs(m.as_str(), "circle", "data-point")[0]
                        .parse()
                        .expect("i")
                })
                .collect();
            assert_eq!(
                points,
                (0..calls.len()).collect::<Vec<_>>(),
                "{chart} @ {window}, engine {e}: one point per call, in order"
            );
            let marked: BTreeSet<usize> = PATH
                .find_iter(svg)
                .map(|m| m.as_str())
                .filter(|p| {
                    p.contains("data-marker=\"compaction\"")
                        && p.contains(&format!("data-engine=\"{e}\""))
                })
                .map(|p| attrs(p, "path", "data-call")[0].parse().expect("call"))
                .collect();
            let compacted: BTreeSet<usize> = calls
                .iter()
                .enumerate()
                .filter(|(_, c)| c["compacted"] == true)
                .map(|(i, _)| i)
                .collect();
            if chart == "cost" {
                assert_eq!(
                    marked, compacted,
                    "{window}, engine {e}: compaction markers"
                );
                compactions += compacted.len();
            } else {
                assert!(marked.is_empty(), "markers are on the cost chart only");
            }
        }
    }
    // legacy compacts this transcript at 3,000 tokens; recent_turns never does.
    assert!(compactions > 0, "the run has compactions to mark");
    let legacy_3000: u64 = row(&doc, 0, SMALL, 3000)["compactions"]
        .as_u64()
        .expect("n");
    assert!(legacy_3000 > 0);

    // The page opens at the call where the two contexts differ most: something is marked.
    assert!(check_drill(&doc, &dom) > 0, "the opening call differs");
    // Any other call, picked by the address: the first (both engines send the same), and one
    // after legacy's first compaction at 3,000 tokens (they differ).
    let legacy = row(&doc, 0, SMALL, 3000)["callLog"]["calls"]
        .as_array()
        .expect("calls")
        .clone();
    let first_compacted = legacy
        .iter()
        .position(|c| c["compacted"] == true)
        .expect("a compaction");
    let group_3000 = 0; // groups are ordered by window, then transcript
    for (call, differs) in [(1, false), (first_compacted + 1, true)] {
        let dom = dump_dom_at(
            &page,
            &format!("#group={group_3000}&call={call}&left=0&right=1"),
        );
        let drill: BTreeMap<&str, String> = ["data-window", "data-call"]
            .into_iter()
            .map(|a| (a, attrs(&drill_tag(&dom), "section", a).pop().expect(a)))
            .collect();
        assert_eq!(drill["data-window"], "3000");
        assert_eq!(drill["data-call"], (call - 1).to_string());
        let marked = check_drill(&doc, &dom);
        assert_eq!(marked > 0, differs, "call {call}: {marked} marked");
    }
}
