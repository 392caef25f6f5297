//! What a hostile engine can make a gateway keep on disk is bounded, through `serve`: a state
//! of control characters whose escaped copy is six times its text is refused at the state cap
//! as written (nothing over it reaches the state directory), and a 1 MiB summary forced on
//! every compaction is refused as one that could never be sent (`legacy` compacts; the session
//! does not grow by a megabyte a compaction). Every request is still answered, by `legacy`. In
//! Lua and Rhai, in thread and process isolation.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use ctxhost::contract::limits::Isolation;
use serde_json::json;

use super::*;
use crate::common::engine::Lang;

/// Keeps 300 KB of control characters in its state (1.8 MB as written) when `HOARD` is
/// `state`, answers every `compact` with a 1 MiB summary when it is `summary`.
const LUA: &str = r#"local M = { info = { id = "hoarder", name = "Hoarder", ownsCompaction = true } }
function M.ingest(p)
  if "HOARD" == "state" then p.state.s = ("\1"):rep(300000) end
  return { ingested = true }
end
function M.assemble(p) return { messages = p.messages, estimatedTokens = 1, systemPromptAddition = "hoarder" } end
function M.compact(p)
  if "HOARD" ~= "summary" then return { ok = true, compacted = false, reason = "no" } end
  return { ok = true, compacted = true, result = { summary = ("word "):rep(210000),
    tokensBefore = 1, firstKeptEntryId = p.messages[#p.messages].id } }
end
return M
"#;

const RHAI: &str = r#"fn info() { #{ id: "hoarder", name: "Hoarder", ownsCompaction: true } }
fn ingest(p) {
    if "HOARD" == "state" { let s = ""; s.pad(300000, "\x01"); this.s = s; }
    #{ ingested: true }
}
fn assemble(p) { #{ messages: p.messages, estimatedTokens: 1, systemPromptAddition: "hoarder" } }
fn compact(p) {
    if "HOARD" != "summary" { return #{ ok: true, compacted: false, reason: "no" }; }
    let s = ""; s.pad(1050000, "word ");
    #{ ok: true, compacted: true, result: #{ summary: s, tokensBefore: 1,
       firstKeptEntryId: p.messages[p.messages.len() - 1].id } }
}
"#;

/// Every file under `dir`, with its size.
fn files(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            out.extend(files(&entry.path()));
        } else {
            out.push((entry.path(), meta.len()));
        }
    }
    out
}

/// Serves three turns (ingest, assemble, a forced compact) of a hoarder of `hoard`; returns
/// whether each turn's assemble was the engine's, and the files of the state directory.
async fn serve_hoarder(
    dir: &Path,
    lang: Lang,
    mode: Isolation,
    hoard: &str,
) -> (Vec<bool>, Vec<(PathBuf, u64)>) {
    let source = if lang == Lang::Lua { LUA } else { RHAI }.replace("HOARD", hoard);
    let engine = write_engine(dir, &format!("hoarder.{lang}"), &source);
    let config = dir.join("ctxhost.json5");
    std::fs::write(
        &config,
        "{ host: { limits: { results: { maxResultBytes: 1048576 } } } }",
    )
    .unwrap();
    let mut options = ServeOptions::new(dir.join("state"));
    options.config = Some(config);
    options.isolation = Some(mode);
    options.child_command = Some(crate::modes::engine_child());
    let mut c = Client::start_with(options);
    c.init(&engine).await;
    let what = format!("{lang} {mode:?} {hoard}");
    let mut engines = Vec::new();
    for turn in 0..3 {
        c.ok(
            "ingest",
            json!({"sessionId": "s-1", "sessionKey": "agent:main:main",
                   "message": user(&format!("question {turn}"))}),
        )
        .await;
        let a = c
            .ok("assemble", assemble_params(&history(turn + 1), 10_000))
            .await;
        engines.push(a.get("systemPromptAddition").is_some());
        let r = c
            .ok(
                "compact",
                json!({"sessionId": "s-1", "sessionKey": "agent:main:main",
                       "tokenBudget": 2000, "force": true}),
            )
            .await;
        assert_eq!(r["ok"], true, "{what}: compacted: {r}");
    }
    c.close().await;
    (engines, files(&dir.join("state")))
}

async fn what_a_hoarding_engine_stores_is_bounded(lang: Lang, mode: Isolation) {
    for (hoard, expected) in [
        // The first state over the cap quarantines the engine: legacy answers from then on.
        ("state", [false, false, false]),
        // The first summary over the whole budget does: the turn after it is legacy's.
        ("summary", [true, false, false]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let what = format!("{lang} {mode:?} {hoard}");
        let (engines, stored) = serve_hoarder(dir.path(), lang, mode, hoard).await;
        assert_eq!(engines, expected, "{what}: which turns the engine answered");
        assert!(!stored.is_empty(), "{what}: the session was kept");
        for (path, len) in &stored {
            assert!(*len < 1 << 20, "{what}: {} is {len} bytes", path.display());
        }
        let total: u64 = stored.iter().map(|(_, n)| n).sum();
        assert!(total < 2 << 20, "{what}: {total} bytes kept: {stored:?}");
    }
}

each_language_and_mode! { async:
    a_hoarding_engine_cannot_fill_the_state_directory => what_a_hoarding_engine_stores_is_bounded;
}
