//! `compare --report`: one self-contained HTML page putting the compared engines side by side —
//! the totals, per transcript and window a chart of cumulative input cost and one of cache hit
//! rate per model call (one series per engine, compaction markers where each engine compacted),
//! and a drill-down showing two engines' contexts for one call next to each other with the
//! blocks that differ marked.
//!
//! Size stays bounded on long transcripts: every distinct block (message or
//! `systemPromptAddition`, recognised by its digest across engines) is embedded once as its
//! role, tokens and a preview of at most [`PREVIEW_CHARS`](ctxhost::tools::compare::PREVIEW_CHARS)
//! characters, and each call's context as the number of leading blocks it shares with the
//! previous call's plus the indices of the blocks after them.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use ctxhost::tools::compare::{CallLog, Prices, Row, Total};

use super::{escape, group, page_head, page_tail, stat};

/// What the header says about the comparison.
#[derive(Clone, Debug)]
pub struct CompareMeta {
    /// The engines' labels, in the order compared.
    pub engines: Vec<String>,
    /// The transcripts, in the order given.
    pub transcripts: Vec<PathBuf>,
    /// The windows, in tokens.
    pub windows: Vec<u64>,
    /// The model whose prices apply.
    pub model: String,
    /// Its prices.
    pub prices: Prices,
    /// The share below which a call is a cache break.
    pub break_share: f64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PageData<'a> {
    engines: &'a [String],
    transcripts: Vec<String>,
    windows: &'a [u64],
    prices: Prices,
    blocks: Vec<PageBlock<'a>>,
    runs: Vec<PageRun<'a>>,
}

#[derive(Serialize)]
struct PageBlock<'a> {
    role: &'a str,
    tokens: u64,
    preview: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PageRun<'a> {
    engine: usize,
    transcript: usize,
    window: u64,
    calls: Vec<PageCall<'a>>,
}

/// One call in the page, in short keys (a long transcript has thousands per engine): `cv`
/// conversation, `t` turn, `n` input tokens, `ca` cached tokens, `fb` a fallback, `cp`
/// compacted, `br` the break's cause, `k` leading blocks shared with the previous call's
/// context, `a` the indices of the blocks after them. The script computes costs from `prices`.
#[derive(Serialize)]
struct PageCall<'a> {
    cv: u32,
    t: u32,
    n: u64,
    ca: u64,
    #[serde(skip_serializing_if = "is_false")]
    fb: bool,
    #[serde(skip_serializing_if = "is_false")]
    cp: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    br: Option<&'a str>,
    k: usize,
    a: Vec<u32>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

const STYLE: &str = include_str!("compare.css");
const SCRIPT: &str = include_str!("compare.js");

/// Renders the comparison as one self-contained page; `rows` must carry their call logs.
pub fn render(meta: &CompareMeta, rows: &[Row], totals: &[Total]) -> String {
    let data = page_data(meta, rows);
    let mut h = String::with_capacity(64 * 1024);
    page_head(&mut h, "ctxhost compare", STYLE);
    h.push_str("<header class=\"top\">\n<div class=\"brand\">ctxhost compare report</div>\n");
    let _ = writeln!(
        h,
        "<h1>{} engines × {} transcripts × {} windows</h1>",
        meta.engines.len(),
        meta.transcripts.len(),
        meta.windows.len()
    );
    h.push_str("<dl class=\"meta\">\n");
    let windows: Vec<String> = meta.windows.iter().map(|w| group(*w)).collect();
    for (k, v) in [
        ("model", meta.model.clone()),
        (
            "prices",
            format!(
                "${} / ${} / ${} per million input / cached / output tokens",
                meta.prices.input, meta.prices.cached_input, meta.prices.output
            ),
        ),
        ("windows", format!("{} tokens", windows.join(", "))),
        (
            "cache break",
            format!("below {:.0}% reuse", meta.break_share * 100.0),
        ),
    ] {
        let _ = writeln!(
            h,
            "<div><dt>{k}</dt><dd data-meta=\"{k}\">{}</dd></div>",
            escape(&v)
        );
    }
    h.push_str("</dl>\n</header>\n<section class=\"stats\">\n");
    let calls: u64 = rows.iter().map(|r| r.figures.calls).sum();
    stat(&mut h, "replays", &group(rows.len() as u64), "", "replays");
    stat(&mut h, "model calls", &group(calls), "", "calls");
    h.push_str("</section>\n");
    totals_table(&mut h, totals);
    h.push_str(
        "<section class=\"card\">\n<h2>Per transcript and window</h2>\n\
         <p class=\"hint\">Each chart has one series per engine and one point per model call: \
         the input's cost so far (output is the same for every engine), and the share of the \
         call's input the prompt cache could serve. <span class=\"o-summary\">▼</span> marks a \
         call after which the engine's session held a new summary. Click a point to open that \
         call below.</p>\n<div class=\"legend\" id=\"engine-legend\"></div>\n\
         <div id=\"runs\"></div>\n\
         <noscript><p class=\"alert\">The charts are drawn by the page's inline script; enable \
         JavaScript to see them.</p></noscript>\n</section>\n",
    );
    h.push_str(
        "<section class=\"card\" id=\"drill\">\n<h2>One model call, two engines</h2>\n\
         <div class=\"toolbar drill-controls\">\n\
         <label class=\"picker\">transcript <select id=\"drill-group\"></select></label>\n\
         <label class=\"picker\">left <select id=\"drill-left\"></select></label>\n\
         <label class=\"picker\">right <select id=\"drill-right\"></select></label>\n\
         <span class=\"calls\"><button type=\"button\" id=\"drill-prev\">←</button>\
         <label class=\"picker\">call <input id=\"drill-call\" type=\"number\" min=\"1\" value=\"1\"></label>\
         <button type=\"button\" id=\"drill-next\">→</button></span>\n</div>\n\
         <p class=\"hint\" id=\"drill-summary\"></p>\n\
         <div class=\"sides\"><div class=\"side\" id=\"side-left\"></div>\
         <div class=\"side\" id=\"side-right\"></div></div>\n</section>\n",
    );
    page_tail(&mut h, "compare-data", &data, SCRIPT);
    h
}

/// The totals per engine and window, as the table of `compare` prints them.
fn totals_table(h: &mut String, totals: &[Total]) {
    h.push_str(
        "<section class=\"card\">\n<h2>Totals</h2>\n<div class=\"table-wrap\"><table id=\"totals\">\
         <thead><tr><th>engine</th><th>window</th><th>calls</th><th>input tokens</th>\
         <th>cache hit</th><th>cost $</th><th>cache breaks</th><th>compactions</th>\
         <th>summarizer calls</th><th>re-references in context</th><th>one search away</th>\
         </tr></thead><tbody>\n",
    );
    for t in totals {
        let f = &t.figures;
        let share = |rate: f64| {
            if f.rerefs == 0 {
                "-".to_owned()
            } else {
                format!("{:.1}%", rate * 100.0)
            }
        };
        let _ = writeln!(
            h,
            "<tr data-total=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}%</td>\
             <td>{:.4}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&t.engine),
            escape(&t.engine),
            group(t.window),
            group(f.calls),
            group(f.input_tokens),
            f.cache_hit_rate * 100.0,
            f.cost,
            group(f.cache_breaks),
            group(f.compactions),
            group(f.summarizer_calls),
            share(f.reref_rate),
            share(f.reref_search_rate)
        );
    }
    h.push_str("</tbody></table></div>\n</section>\n");
}

/// The page's data: the blocks of every row merged by digest, each call's context as a delta
/// of the call before.
fn page_data<'a>(meta: &'a CompareMeta, rows: &'a [Row]) -> PageData<'a> {
    let mut blocks = Vec::new();
    let mut by_digest: HashMap<&str, u32> = HashMap::new();
    let mut runs = Vec::new();
    for r in rows {
        let Some(log) = &r.call_log else { continue };
        let local: Vec<u32> = log
            .blocks
            .iter()
            .map(|b| {
                *by_digest.entry(b.digest.as_str()).or_insert_with(|| {
                    blocks.push(PageBlock {
                        role: &b.role,
                        tokens: b.tokens,
                        preview: &b.preview,
                    });
                    u32::try_from(blocks.len() - 1).unwrap_or(u32::MAX)
                })
            })
            .collect();
        runs.push(PageRun {
            engine: position(&meta.engines, &r.engine),
            transcript: meta
                .transcripts
                .iter()
                .position(|t| *t == r.transcript)
                .unwrap_or(0),
            window: r.window,
            calls: page_calls(log, &local),
        });
    }
    PageData {
        engines: &meta.engines,
        transcripts: meta.transcripts.iter().map(|t| file_name(t)).collect(),
        windows: &meta.windows,
        prices: meta.prices,
        blocks,
        runs,
    }
}

fn page_calls<'a>(log: &'a CallLog, local: &[u32]) -> Vec<PageCall<'a>> {
    let mut previous: Vec<u32> = Vec::new();
    let mut out = Vec::with_capacity(log.calls.len());
    for c in &log.calls {
        let context: Vec<u32> = c
            .context
            .iter()
            .map(|&i| local.get(i as usize).copied().unwrap_or(0))
            .collect();
        let keep = previous
            .iter()
            .zip(&context)
            .take_while(|(a, b)| a == b)
            .count();
        out.push(PageCall {
            cv: c.conversation,
            t: c.turn,
            n: c.input_tokens,
            ca: c.cached_tokens,
            fb: c.fallback,
            cp: c.compacted,
            br: c.break_cause.as_deref(),
            k: keep,
            a: context[keep..].to_vec(),
        });
        previous = context;
    }
    out
}

fn position(engines: &[String], engine: &str) -> usize {
    engines.iter().position(|e| e == engine).unwrap_or(0)
}

fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

#[cfg(test)]
#[path = "compare_tests.rs"]
mod tests;
