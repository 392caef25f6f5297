//! Under `serve` a slow engine stops by default: over its turn budget `strikes` turns in a
//! row, it is quarantined and `legacy` answers (`onExceed: "quarantine"` is the serve default),
//! unless the config says `report`. In both languages, the engine in this process or in a
//! child process of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use ctxhost::contract::limits::Isolation;
use serde_json::json;

use super::*;

/// Spins 60 ms in every assemble (a turn budget of 20 ms is then exceeded every turn, well
/// under the call deadline) and names itself in the system prompt addition.
fn slow(lang: &str) -> (&'static str, &'static str) {
    match lang {
        "lua" => (
            "slow.lua",
            r#"local M = { info = { id = "slow", name = "Slow", ownsCompaction = true } }
local function spin() local t = os.clock(); while os.clock() - t < 0.06 do end end
function M.ingest(p) return { ingested = true } end
function M.assemble(p) spin(); return { messages = p.messages, estimatedTokens = 1, systemPromptAddition = "slow engine" } end
function M.compact(p) return { ok = true, compacted = false, reason = "no" } end
function M.commitTurn(p) return { status = "committed" } end
return M
"#,
        ),
        _ => (
            "slow.rhai",
            r#"fn info() { #{ id: "slow", name: "Slow", ownsCompaction: true } }
fn spin() { let t = timestamp(); while t.elapsed < 0.06 {} }
fn ingest(p) { #{ ingested: true } }
fn assemble(p) { spin(); #{ messages: p.messages, estimatedTokens: 1, systemPromptAddition: "slow engine" } }
fn compact(p) { #{ ok: true, compacted: false, reason: "no" } }
fn commitTurn(p) { #{ status: "committed" } }
"#,
        ),
    }
}

/// Runs four turns (assemble, commitTurn) with the engine in `mode` and returns each
/// assemble's addition.
async fn four_turns(dir: &Path, lang: &str, mode: Isolation, config: &str) -> Vec<Value> {
    let (file, source) = slow(lang);
    let engine = write_engine(dir, file, source);
    let config_file = dir.join("ctxhost.json5");
    std::fs::write(&config_file, config).unwrap();
    let mut options = ServeOptions::new(dir.join("state"));
    options.config = Some(config_file);
    options.isolation = Some(mode);
    options.child_command = Some(crate::modes::engine_child());
    let mut c = Client::start_with(options);
    c.init(&engine).await;
    let mut additions = Vec::new();
    for turn in 0..4 {
        let a = c
            .ok("assemble", assemble_params(&history(turn + 1), 10_000))
            .await;
        additions.push(a["systemPromptAddition"].clone());
        let commit = json!({"sessionId": "s-1", "sessionKey": "agent:main:main",
                            "advancementKey": format!("turn-{turn}"),
                            "messages": [user("q"), assistant("a")]});
        c.ok("commitTurn", commit).await;
    }
    c.close().await;
    additions
}

#[tokio::test]
async fn a_slow_engine_is_quarantined_after_three_slow_turns_under_serve() {
    for lang in ["lua", "rhai"] {
        for mode in [Isolation::Thread, Isolation::Process] {
            let dir = tempfile::tempdir().unwrap();
            let config = "{host: {turnBudget: {engineMs: 20}}}";
            let additions = four_turns(dir.path(), lang, mode, config).await;
            assert_eq!(
                additions,
                [
                    json!("slow engine"),
                    json!("slow engine"),
                    json!("slow engine"),
                    Value::Null
                ],
                "{lang} {mode:?}: three slow turns, then legacy answers"
            );
        }
    }
}

#[tokio::test]
async fn a_config_that_says_report_keeps_a_slow_engine_serving() {
    for lang in ["lua", "rhai"] {
        for mode in [Isolation::Thread, Isolation::Process] {
            let dir = tempfile::tempdir().unwrap();
            let config = r#"{host: {turnBudget: {engineMs: 20, onExceed: "report"}}}"#;
            let additions = four_turns(dir.path(), lang, mode, config).await;
            assert_eq!(additions, vec![json!("slow engine"); 4], "{lang} {mode:?}");
        }
    }
}
