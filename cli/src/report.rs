//! `replay --report`: one self-contained HTML page for a replay — a header with the run and its
//! summary, a chart of assembled tokens per turn against the budget with markers for compactions,
//! fallbacks and the quarantine point, per-turn details on hover or click, the context each
//! model call of the pinned turn sent (origins, summaries and drops marked, the diff against
//! the call before), and where the engine's time went (per method and per `host.*` function).
//!
//! The page needs nothing from the network: its CSS and script are inline and the chart is an
//! inline SVG the script draws from the replay's turns, embedded as JSON. Everything from the data
//! is escaped (HTML text in the header, `<`/`>`/`&` as JSON escapes in the embedded data, and the
//! script only ever sets `textContent`). The same replay renders the same bytes apart from the
//! element that shows the wall time and the rows of the time table (`data-time`).
//!
//! `render(&meta, &summary, &turns)` returns the page as one string; `report_tests.rs` pins
//! what it holds.

use std::fmt::Write as _;

use serde::Serialize;

use ctxhost::session::MethodTimes;
use ctxhost::tools::replay::{ReplaySummary, TurnReport};

pub mod compare;

/// What the header says about the run beyond the summary (the summary does not carry these).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportMeta {
    /// The configured engine's id.
    pub engine: String,
    /// The model's context window in tokens.
    pub window: u64,
    /// How tokens were counted.
    pub tokenizer: String,
}

/// The JSON the page's script draws from (no wall time, no temporary paths: deterministic).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ChartData<'a> {
    engine: &'a str,
    window: u64,
    sessions: Vec<&'a str>,
    turns: &'a [TurnReport],
}

const STYLE: &str = include_str!("report/style.css");
/// Helpers both pages' scripts use (number format, SVG and HTML element builders, axis steps,
/// marker shapes), as the global `ctxhostReport`.
const COMMON_SCRIPT: &str = include_str!("report/common.js");
const SCRIPT: &str = include_str!("report/chart.js");

/// Renders a replay as one self-contained HTML page; `turns` in the order `replay` reported them.
pub fn render(meta: &ReportMeta, summary: &ReplaySummary, turns: &[TurnReport]) -> String {
    let mut sessions: Vec<&str> = Vec::new();
    for t in turns {
        if sessions.last() != Some(&t.session.as_str()) {
            sessions.push(&t.session);
        }
    }
    let data = ChartData {
        engine: &meta.engine,
        window: meta.window,
        sessions,
        turns,
    };
    let transcript = summary.transcript.display().to_string();
    let file_name = summary
        .transcript
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| transcript.clone());

    let mut h = String::with_capacity(64 * 1024 + turns.len() * 400);
    page_head(&mut h, &format!("{file_name} · ctxhost replay"), "");

    // Header: the run.
    h.push_str("<header class=\"top\">\n<div class=\"brand\">ctxhost replay report</div>\n");
    let _ = writeln!(
        h,
        "<h1 title=\"{0}\">{1}</h1>",
        escape(&transcript),
        escape(&file_name)
    );
    let _ = writeln!(h, "<p class=\"path\">{}</p>", escape(&transcript));
    h.push_str("<dl class=\"meta\">\n");
    for (k, v) in [
        ("format", summary.format.clone()),
        ("engine", meta.engine.clone()),
        ("window", format!("{} tokens", group(meta.window))),
        ("tokenizer", meta.tokenizer.clone()),
        ("sessions", group(summary.sessions as u64)),
    ] {
        let _ = writeln!(
            h,
            "<div><dt>{}</dt><dd data-meta=\"{}\">{}</dd></div>",
            k,
            k,
            escape(&v)
        );
    }
    h.push_str("</dl>\n</header>\n");

    // Summary numbers.
    h.push_str("<section class=\"stats\">\n");
    let problems = |n: u64| if n > 0 { " warn" } else { "" };
    stat(&mut h, "turns", &group(summary.turns), "", "turns");
    stat(
        &mut h,
        "compactions",
        &group(summary.compactions),
        "",
        "compactions",
    );
    stat(
        &mut h,
        "fallbacks",
        &group(summary.fallbacks),
        problems(summary.fallbacks),
        "fallbacks",
    );
    stat(
        &mut h,
        "max assembled",
        &group(summary.max_assembled_tokens),
        "",
        "max-assembled",
    );
    stat(
        &mut h,
        "over budget",
        &group(summary.over_budget_turns),
        problems(summary.over_budget_turns),
        "over-budget",
    );
    if summary.skipped_lines > 0 {
        stat(
            &mut h,
            "skipped lines",
            &group(summary.skipped_lines as u64),
            " warn",
            "skipped",
        );
    }
    stat(
        &mut h,
        "wall time",
        &format!("{} ms", group(summary.wall_ms)),
        " muted",
        "wall-ms",
    );
    h.push_str("</section>\n");

    if let Some(q) = &summary.quarantine {
        let _ = writeln!(
            h,
            "<section class=\"alert\" data-quarantine><strong>Quarantined:</strong> engine \
             <code>{}</code> failed in <code>{}</code>; later turns ran on legacy.\
             <pre>{}</pre></section>",
            escape(&q.engine),
            escape(&q.operation),
            escape(&q.error)
        );
    }

    // The chart: drawn by the script below from the embedded data.
    h.push_str(
        "<section class=\"card\">\n<div class=\"toolbar\">\n\
         <h2>Assembled tokens per turn</h2>\n\
         <label class=\"picker\" id=\"picker\" hidden>session <select id=\"session\"></select></label>\n\
         </div>\n<div class=\"legend\" id=\"legend\"></div>\n\
         <div class=\"chart-wrap\" id=\"wrap\">\n\
         <svg id=\"chart\" role=\"img\" aria-label=\"assembled tokens per turn against the budget\" \
         viewBox=\"0 0 1200 440\"></svg>\n\
         <div class=\"tip\" id=\"tip\" hidden></div>\n</div>\n\
         <p class=\"hint\" id=\"view-summary\"></p>\n\
         <noscript><p class=\"alert\">The chart is drawn by the page's inline script; enable \
         JavaScript to see it.</p></noscript>\n</section>\n",
    );
    h.push_str(
        "<section class=\"card\" id=\"details\">\n<h2>Turn details</h2>\n\
         <p class=\"hint\" id=\"details-hint\">Hover over the chart for a turn; click to pin it \
         (← → step through turns).</p>\n<dl class=\"detail\" id=\"detail\"></dl>\n</section>\n",
    );
    h.push_str(
        "<section class=\"card\" id=\"context-card\">\n<h2>Context sent to the model</h2>\n\
         <p class=\"hint\" id=\"context-hint\">The pinned turn's model calls; pick one to see its \
         messages. Origins: original, <span class=\"o-summary\">summary</span>, \
         <span class=\"o-pinned\">pinned</span> (kept while newer messages were left out), \
         <span class=\"o-host-repaired\">host-repaired</span>, \
         <span class=\"o-engine-made\">engine-made</span>; <span class=\"is-new\">+</span> marks \
         what the previous call did not have.</p>\n\
         <div class=\"calls\" id=\"calls\"></div>\n<div id=\"context\"></div>\n</section>\n",
    );
    times_section(&mut h, summary);
    h.push_str(
        "<section class=\"card\">\n<details id=\"table-box\"><summary>All turns in view \
         (table)</summary>\n<div class=\"table-wrap\"><table id=\"turns\"><thead><tr>\
         <th>session</th><th>turn</th><th>engine</th><th>assembled</th><th>budget</th>\
         <th>messages</th><th>model calls</th><th>compactions</th><th>repairs</th><th>fallback</th>\
         </tr></thead><tbody></tbody></table></div>\n</details>\n</section>\n",
    );
    page_tail(&mut h, "replay-data", &data, SCRIPT);
    h
}

/// Opens a self-contained page: the doctype, a Content-Security-Policy that forbids every fetch
/// (inline script and style excepted), the title, the shared style and `extra_style`; leaves
/// `<main>` open for the page's sections.
pub(crate) fn page_head(h: &mut String, title: &str, extra_style: &str) {
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    h.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    // No network: forbid every fetch the page could make, inline script and style excepted.
    h.push_str(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n",
    );
    let _ = writeln!(h, "<title>{}</title>", escape(title));
    h.push_str("<style>\n");
    h.push_str(STYLE);
    h.push_str(extra_style);
    h.push_str("</style>\n</head>\n<body>\n<main>\n");
}

/// Closes a page [`page_head`] opened: the footer, `data` embedded as JSON in the element
/// `data_id`, and one script of the shared helpers followed by `script`.
pub(crate) fn page_tail<T: Serialize>(h: &mut String, data_id: &str, data: &T, script: &str) {
    let _ = writeln!(
        h,
        "<footer>ctxhost {} · a self-contained page: no network, no external assets.</footer>",
        env!("CARGO_PKG_VERSION")
    );
    let _ = write!(
        h,
        "</main>\n<script type=\"application/json\" id=\"{data_id}\">"
    );
    h.push_str(&script_json(data));
    h.push_str("</script>\n<script>\n");
    h.push_str(COMMON_SCRIPT);
    h.push_str(script);
    h.push_str("</script>\n</body>\n</html>\n");
}

/// "Where the time goes": the engine's lifecycle methods, then the `host.*` functions its
/// scripts called (their time is part of the methods').
fn times_section(h: &mut String, summary: &ReplaySummary) {
    if summary.engine_times.is_empty() && summary.host_times.is_empty() {
        return;
    }
    h.push_str(
        "<section class=\"card\" id=\"times\">\n<h2>Where the time goes</h2>\n\
         <div class=\"table-wrap\"><table><thead><tr><th></th><th>calls</th><th>p50 ms</th>\
         <th>p95 ms</th><th>max ms</th><th>total ms</th></tr></thead><tbody>\n",
    );
    let sections: [(&str, &[MethodTimes]); 2] = [
        ("engine methods", &summary.engine_times),
        ("host functions (part of the above)", &summary.host_times),
    ];
    for (title, times) in sections {
        if times.is_empty() {
            continue;
        }
        let _ = writeln!(h, "<tr class=\"group\"><th colspan=\"6\">{title}</th></tr>");
        for t in times {
            let _ = writeln!(
                h,
                "<tr data-time=\"{0}\"><td><code>{0}</code></td><td>{1}</td><td>{2:.3}</td>\
                 <td>{3:.3}</td><td>{4:.3}</td><td>{5:.1}</td></tr>",
                escape(&t.method),
                group(t.calls),
                t.p50_ms,
                t.p95_ms,
                t.max_ms,
                t.total_ms
            );
        }
    }
    h.push_str("</tbody></table></div>\n</section>\n");
}

pub(crate) fn stat(h: &mut String, label: &str, value: &str, class: &str, key: &str) {
    let _ = writeln!(
        h,
        "<div class=\"stat{class}\"><div class=\"v\" data-stat=\"{key}\">{}</div>\
         <div class=\"k\">{label}</div></div>",
        escape(value)
    );
}

/// JSON safe inside a `<script>` element: no `<`, `>` or `&` (so no `</script>` or `<!--`), and
/// no U+2028/U+2029.
fn script_json<T: Serialize>(value: &T) -> String {
    let json = serde_json::to_string(value).unwrap_or_else(|_| "{\"turns\":[]}".to_owned());
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// HTML text and attribute escaping.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A count with thousands separators (`12,345`), as every human-facing output prints it.
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
