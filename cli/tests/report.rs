//! `ctxhost replay --report`: the HTML page rendered in a real browser (headless Chromium) draws
//! one chart point per replayed turn, with the markers the summary implies; and the same replay
//! writes the same page apart from its wall time and the time table.
//!
//! The browser tests need Debian's `chromium` (`apt-get install -y chromium`; `.ci/run` installs
//! it). Without it they fail, saying so, rather than pass without having looked: a report that
//! no browser has drawn is not tested. `CTXHOST_CHROMIUM` names another binary.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common;

mod compare;

use common::{fixture_arg as fixture, transcript_arg as transcript};

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use regex::Regex;
use serde_json::Value;

/// Replays with `--json --report`; returns the summary, the turns and the page.
fn replay_report(dir: &Path, args: &[&str]) -> (Value, Vec<Value>, PathBuf) {
    let page = dir.join("report.html");
    let out = Command::new(env!("CARGO_BIN_EXE_ctxhost"))
        .arg("replay")
        .args(args)
        .args(["--json", "--report"])
        .arg(&page)
        .arg("--out")
        .arg(dir.join("sessions"))
        .env("CTXHOST_LOG", "off")
        .output()
        .expect("run ctxhost");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    let summary = lines.pop().expect("summary")["summary"].clone();
    (summary, lines, page)
}

/// The Chromium binary, or a failure that says how to install it.
fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("CTXHOST_CHROMIUM") {
        return PathBuf::from(p);
    }
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        for name in ["chromium", "chromium-browser"] {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "headless Chromium is needed to test the HTML report and was not found on PATH.\n\
         Install Debian's package:  apt-get update && apt-get install -y chromium\n\
         (.ci/run does this in CI), or point CTXHOST_CHROMIUM at a Chromium binary."
    );
}

/// The page's DOM after its scripts ran, as headless Chromium serializes it.
fn dump_dom(page: &Path) -> String {
    dump_dom_at(page, "")
}

/// [`dump_dom`] of the page opened at `fragment` (`#...`, or empty).
pub(crate) fn dump_dom_at(page: &Path, fragment: &str) -> String {
    let profile = tempfile::tempdir().expect("profile dir");
    let url = format!("file://{}{fragment}", page.display());
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-quic",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--dump-dom", &url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    // Read both pipes off-thread so a chatty browser cannot block on a full pipe.
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).map(|_| s)
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for chromium") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let dom = out.join().expect("reader").expect("chromium output");
    let err = err.join().expect("reader");
    assert!(status.success(), "chromium failed ({status}): {err}");
    assert!(dom.contains("</html>"), "no DOM from chromium: {err}");
    dom
}

/// Attribute values of `attr` on `<tag>` elements in serialized HTML.
pub(crate) fn attrs(dom: &str, tag: &str, attr: &str) -> Vec<String> {
    let element = Regex::new(&format!(r"<{tag}\b[^>]*>")).expect("regex");
    let value = Regex::new(&format!(r#"\s{attr}="([^"]*)""#)).expect("regex");
    element
        .find_iter(dom)
        .filter_map(|m| value.captures(m.as_str()).map(|c| c[1].to_owned()))
        .collect()
}

fn count(turns: &[Value], f: impl Fn(&Value) -> bool) -> usize {
    turns.iter().filter(|t| f(t)).count()
}

#[test]
fn the_browser_draws_one_point_per_turn_with_compaction_fallback_and_quarantine_markers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (summary, turns, page) = replay_report(
        dir.path(),
        &[
            &transcript("pimono-large-session.jsonl"),
            "--window",
            "8000",
            "--engine",
            &fixture("hostile/assemble_throws.lua"),
        ],
    );
    let n = summary["turns"].as_u64().expect("turns") as usize;
    assert_eq!(n, 88);
    assert_eq!(turns.len(), n);

    let html = std::fs::read_to_string(&page).expect("report");
    assert_eq!(
        attrs(&html, "circle", "data-point").len(),
        0,
        "the points come from the script, not the file"
    );

    let dom = dump_dom(&page);
    let points = attrs(&dom, "circle", "data-point");
    assert_eq!(points.len(), n, "one point per turn");
    let distinct: BTreeSet<usize> = points.iter().map(|p| p.parse().expect("index")).collect();
    assert_eq!(distinct, (0..n).collect(), "each turn exactly once");
    let drawn_turns: Vec<u64> = attrs(&dom, "circle", "data-turn")
        .iter()
        .map(|t| t.parse().expect("turn"))
        .collect();
    let replayed: Vec<u64> = turns
        .iter()
        .map(|t| t["turn"].as_u64().expect("turn"))
        .collect();
    assert_eq!(drawn_turns, replayed, "in replay order");
    assert_eq!(attrs(&dom, "svg", "data-points"), [n.to_string()]);

    let markers = attrs(&dom, "path", "data-marker");
    let compactions = count(&turns, |t| t["compactions"].as_u64() > Some(0));
    let fallbacks = count(&turns, |t| t["fallback"] == true);
    assert!(compactions > 0 && fallbacks > 0);
    assert_eq!(
        markers.iter().filter(|m| *m == "compaction").count(),
        compactions
    );
    assert_eq!(
        markers.iter().filter(|m| *m == "fallback").count(),
        fallbacks
    );
    assert_eq!(
        fallbacks as u64,
        summary["fallbacks"].as_u64().expect("fallbacks")
    );
    assert_eq!(attrs(&dom, "line", "data-marker"), ["quarantine"]);
    let first_quarantined = turns
        .iter()
        .find(|t| t["quarantined"] == true)
        .expect("a quarantined turn");
    assert!(
        dom.contains(&format!(
            "quarantined from turn {}",
            first_quarantined["turn"]
        )),
        "the quarantine point is labelled"
    );
    // The pinned details were filled in by the script too.
    assert!(dom.contains("<dt>assembled / budget</dt>"), "details panel");

    // The pinned turn (the first largest assembly) opens its context: a button per model call,
    // and the last call's messages, each with its origin.
    let largest = turns
        .iter()
        .map(|t| t["assembledTokens"].as_u64().expect("tokens"))
        .max()
        .expect("turns");
    let pinned = turns
        .iter()
        .find(|t| t["assembledTokens"].as_u64() == Some(largest))
        .expect("pinned turn");
    let calls = pinned["calls"].as_array().expect("calls");
    assert_eq!(attrs(&dom, "button", "data-call").len(), calls.len());
    let last = calls.last().expect("a call");
    let origins = attrs(&dom, "tr", "data-origin");
    assert_eq!(
        origins.len() as u64,
        last["assembledMessages"].as_u64().expect("messages"),
        "one row per message of the shown call"
    );
    let known = [
        "original",
        "summary",
        "pinned",
        "host-repaired",
        "engine-made",
    ];
    assert!(
        origins.iter().all(|o| known.contains(&o.as_str())),
        "{origins:?}"
    );
    // Where the time goes, per engine method.
    assert!(attrs(&html, "tr", "data-time").contains(&"assemble".to_owned()));
}

#[test]
fn a_multi_session_replay_draws_every_turn_of_every_session() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (summary, turns, page) = replay_report(
        dir.path(),
        &[
            &transcript("taubench-gpt-4o-airline.json"),
            "--window",
            "8000",
        ],
    );
    let n = summary["turns"].as_u64().expect("turns") as usize;
    let sessions = summary["sessions"].as_u64().expect("sessions") as usize;
    assert!(sessions > 1);
    assert_eq!(turns.len(), n);

    let dom = dump_dom(&page);
    assert_eq!(
        attrs(&dom, "circle", "data-point").len(),
        n,
        "one point per turn"
    );
    let drawn_sessions: BTreeSet<String> =
        attrs(&dom, "circle", "data-session").into_iter().collect();
    assert_eq!(drawn_sessions.len(), sessions, "every session is drawn");
    // The picker offers every session plus "all".
    assert_eq!(attrs(&dom, "option", "value").len(), sessions + 1);
}

#[test]
fn the_same_replay_writes_the_same_report_apart_from_wall_time() {
    let args = [
        transcript("sweagent-marshmallow-code__marshmallow-1867.traj"),
        "--window".to_owned(),
        "8000".to_owned(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let a = tempfile::tempdir().expect("tempdir");
    let b = tempfile::tempdir().expect("tempdir");
    let (_, _, one) = replay_report(a.path(), &args);
    let (_, _, two) = replay_report(b.path(), &args);
    let strip = |p: &Path| {
        std::fs::read_to_string(p)
            .expect("report")
            .lines()
            .filter(|l| !l.contains("data-stat=\"wall-ms\"") && !l.contains("data-time="))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let one = strip(&one);
    assert!(one.contains("<script type=\"application/json\" id=\"replay-data\">"));
    assert_eq!(one, strip(&two));
}
