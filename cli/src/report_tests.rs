#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::PathBuf;

use super::*;
use ctxhost::tools::replay::QuarantineReport;

fn turn(session: &str, n: u64, tokens: u64) -> TurnReport {
    TurnReport {
        session: session.to_owned(),
        turn: n,
        engine: "recent-turns".to_owned(),
        fallback: false,
        quarantined: false,
        session_messages: 3 * n as usize,
        context_messages: 2 * n as usize,
        model_calls: 1,
        assembled_messages: 2 * n as usize,
        assembled_tokens: tokens,
        token_budget: 4_000,
        estimated_tokens: tokens as f64,
        compactions: u32::from(n == 2),
        pairing_repairs: 0,
        manual_compact: false,
        engine_ms: 0.5,
        slow: false,
        calls: Vec::new(),
        guarantees: Vec::new(),
    }
}

fn summary(transcript: &str, turns: u64, wall_ms: u64) -> ReplaySummary {
    ReplaySummary {
        transcript: PathBuf::from(transcript),
        format: "pi/OpenClaw JSONL".to_owned(),
        sessions: 1,
        turns,
        compactions: 1,
        fallbacks: 0,
        max_assembled_tokens: 3_000,
        over_budget_turns: 0,
        quarantine: None,
        skipped_lines: 0,
        session_files: vec![PathBuf::from("/tmp/random-1234/s.jsonl")],
        wall_ms,
        slow_turns: 0,
        engine_times: Vec::new(),
        host_times: Vec::new(),
        guarantees: Default::default(),
    }
}

fn meta() -> ReportMeta {
    ReportMeta {
        engine: "recent-turns".to_owned(),
        window: 8_000,
        tokenizer: "estimate".to_owned(),
    }
}

/// The embedded JSON, parsed back.
fn embedded(html: &str) -> serde_json::Value {
    let start = html.find("id=\"replay-data\">").expect("data") + "id=\"replay-data\">".len();
    let end = start + html[start..].find("</script>").expect("end");
    serde_json::from_str(&html[start..end]).expect("json")
}

#[test]
fn the_header_and_data_carry_the_run() {
    let turns = [turn("s", 1, 1_000), turn("s", 2, 3_000)];
    let html = render(&meta(), &summary("data/run.jsonl", 2, 5), &turns);
    assert!(
        html.contains("<h1 title=\"data/run.jsonl\">run.jsonl</h1>"),
        "{html}"
    );
    assert!(html.contains("<dd data-meta=\"engine\">recent-turns</dd>"));
    assert!(html.contains("<dd data-meta=\"window\">8,000 tokens</dd>"));
    assert!(html.contains("<dd data-meta=\"format\">pi/OpenClaw JSONL</dd>"));
    assert!(html.contains("data-stat=\"max-assembled\">3,000<"));
    let data = embedded(&html);
    assert_eq!(data["turns"].as_array().expect("turns").len(), 2);
    assert_eq!(data["sessions"], serde_json::json!(["s"]));
    assert_eq!(data["turns"][1]["assembledTokens"], 3_000);
    assert_eq!(data["turns"][1]["compactions"], 1);
}

#[test]
fn nothing_is_fetched_from_anywhere() {
    let html = render(&meta(), &summary("t.jsonl", 1, 5), &[turn("s", 1, 10)]);
    for needle in ["http://", "https://", " src=", "<link", "@import", "url("] {
        let hits: Vec<_> = html.match_indices(needle).map(|(i, _)| i).collect();
        // The SVG namespace is a name, not a fetch.
        let fetches = hits
            .iter()
            .filter(|&&i| !html[i..].starts_with("http://www.w3.org/2000/svg"))
            .count();
        assert_eq!(fetches, 0, "{needle} in the page");
    }
    assert!(html.contains("default-src 'none'"));
}

#[test]
fn data_cannot_break_out_of_the_page() {
    let evil = "</script><img src=x onerror=alert(1)>&\u{2028}\"'";
    let mut t = turn(evil, 1, 10);
    t.engine = evil.to_owned();
    let mut s = summary(evil, 1, 5);
    s.quarantine = Some(QuarantineReport {
        engine: evil.to_owned(),
        operation: evil.to_owned(),
        error: evil.to_owned(),
    });
    let m = ReportMeta {
        engine: evil.to_owned(),
        ..meta()
    };
    let html = render(&m, &s, &[t]);
    assert!(!html.contains("<img"), "{html}");
    assert_eq!(html.matches("</script>").count(), 2, "only the page's own");
    let start = html.find("id=\"replay-data\">").expect("data");
    assert!(
        !html[start..].contains('\u{2028}'),
        "raw U+2028 in the script"
    );
    // The data still round-trips exactly.
    let data = embedded(&html);
    assert_eq!(data["turns"][0]["session"], evil);
    assert_eq!(data["engine"], evil);
    assert!(html.contains("&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;&amp;"));
}

#[test]
fn the_same_replay_renders_the_same_bytes_apart_from_wall_time() {
    let turns = [turn("a", 1, 100), turn("a", 2, 200), turn("b", 1, 300)];
    let one = render(&meta(), &summary("t.jsonl", 3, 5), &turns);
    let two = render(&meta(), &summary("t.jsonl", 3, 98_765), &turns);
    assert_ne!(one, two);
    let strip = |h: &str| {
        h.lines()
            .filter(|l| !l.contains("data-stat=\"wall-ms\""))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(strip(&one), strip(&two));
    assert!(!one.contains("random-1234"), "temporary paths stay out");
    assert_eq!(embedded(&one)["sessions"], serde_json::json!(["a", "b"]));
}

#[test]
fn a_quarantine_gets_a_banner() {
    let mut s = summary("t.jsonl", 1, 5);
    assert!(!render(&meta(), &s, &[]).contains("data-quarantine"));
    s.quarantine = Some(QuarantineReport {
        engine: "x".to_owned(),
        operation: "assemble".to_owned(),
        error: "assemble failed in engine \"x\" (x.lua:7): boom".to_owned(),
    });
    let html = render(&meta(), &s, &[]);
    assert!(html.contains("data-quarantine"));
    assert!(html.contains("(x.lua:7): boom"));
}
