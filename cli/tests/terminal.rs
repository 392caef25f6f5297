//! Text an engine wrote is inert on a terminal: an engine whose `systemPromptAddition`, engine-
//! made message and log lines carry ESC (a CSI clear-screen and an OSC title), CR, NUL and
//! U+202E shows them escaped in `replay --show`, in the summary and on stderr; an engine whose
//! `hostRequirements` cannot be met fails closed with the missing names escaped. In both
//! languages and both isolation modes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::{Path, PathBuf};
use std::process::Command;

const LUA: &str = r#"
local fit = require("fit")
local M = { info = { id = "hostile-text", name = "Hostile text", ownsCompaction = false } }
local evil = "A\27[2J\27]0;owned\7B\rC\0D\u{202E}E"
function M.ingest(p) return { ingested = false } end
function M.assemble(p)
  host.log.warn("log " .. evil)
  local kept, tokens = fit.newest_first(p.messages, p.tokenBudget - 200)
  table.insert(kept, 1, { role = "user", content = "note " .. evil })
  return { messages = kept, estimatedTokens = tokens, systemPromptAddition = "add " .. evil }
end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#;

const RHAI: &str = r#"
import "fit" as fit;
fn info() { #{ id: "hostile-text", name: "Hostile text", ownsCompaction: false } }
fn evil() { "A\x1b[2J\x1b]0;owned\x07B\rC\x00D\u202EE" }
fn ingest(p) { #{ ingested: false } }
fn assemble(p) {
    host::log::warn("log " + evil());
    let r = fit::newest_first(p.messages, p.tokenBudget - 200);
    let kept = [#{ role: "user", content: "note " + evil() }];
    kept += r.kept;
    #{ messages: kept, estimatedTokens: r.tokens, systemPromptAddition: "add " + evil() }
}
fn compact(p) { host::delegateCompaction(p) }
"#;

fn conversation(dir: &Path) -> PathBuf {
    let mut messages = Vec::new();
    for t in 1..=3 {
        messages.push(serde_json::json!({"role": "user", "content": format!("question {t}")}));
        messages.push(serde_json::json!({"role": "assistant", "content": format!("answer {t}")}));
    }
    let path = dir.join("chat.json");
    std::fs::write(&path, serde_json::to_string(&messages).unwrap()).unwrap();
    path
}

fn assert_inert(what: &str, text: &[u8]) {
    for (byte, name) in [(0x1b, "ESC"), (b'\r', "CR"), (0, "NUL"), (0x07, "BEL")] {
        assert!(
            !text.contains(&byte),
            "{what} carries a raw {name}:\n{}",
            String::from_utf8_lossy(text)
        );
    }
    let s = String::from_utf8_lossy(text);
    assert!(!s.contains('\u{202e}'), "{what} carries a raw U+202E:\n{s}");
}

#[test]
fn engine_text_is_escaped_in_human_output_and_logs() {
    for (ext, source) in [("lua", LUA), ("rhai", RHAI)] {
        for mode in ["thread", "process"] {
            text_is_escaped(ext, source, mode);
        }
    }
}

fn text_is_escaped(ext: &str, source: &str, mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let engine = dir.path().join(format!("hostile_text.{ext}"));
    std::fs::write(&engine, source).unwrap();
    let chat = conversation(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_ctxhost"))
        .args(["replay", chat.to_str().unwrap(), "--engine"])
        .arg(&engine)
        .args(["--show", "2", "--strict", "--isolation", mode])
        .env("CTXHOST_LOG", "warn")
        .env_remove("CTXHOST_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/ctxhost-test-config")
        .env("OPENCLAW_CONFIG_PATH", "/nonexistent/openclaw.json")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ext = format!("{ext} {mode}");
    assert_eq!(out.status.code(), Some(0), "{ext}: {stdout}");
    assert_inert(&format!("{ext} stdout"), &out.stdout);
    assert_inert(&format!("{ext} stderr"), &out.stderr);
    // What the engine wrote is all there, escaped: the addition whole, the note it made.
    let shown = "A\\u001b[2J\\u001b]0;owned\\u0007B\\rC\\u0000D\\u202eE";
    assert!(
        stdout.contains(&format!("| add {shown}")),
        "{ext}: {stdout}"
    );
    assert!(
        stdout.contains(&format!("| note {shown}")),
        "{ext}: {stdout}"
    );
    // The log line is there, escaped (the library's log escapes ESC and BEL itself).
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("log A") && stderr.contains("\\u0000D\\u202eE"),
        "{ext}: {stderr}"
    );
    // Only the turn asked for is printed.
    assert!(stdout.contains("turn 2 call 1 of 1"), "{ext}: {stdout}");
    assert!(!stdout.contains("turn 1 call 1 of"), "{ext}: {stdout}");
    assert!(!stdout.contains("turn 3 call 1 of"), "{ext}: {stdout}");
}

/// Needs a capability named with a CSI clear-screen, and says so with an OSC title.
const NEEDS_LUA: &str = r#"
return { info = { id = "needs", name = "Needs",
           hostRequirements = { ["agent-run"] = {
             requiredCapabilities = { "evil\27[2Jcap", "runtime-llm-complete" },
             unsupportedMessage = "Run it \27]0;owned\7elsewhere." } } },
         ingest = function(p) return { ingested = true } end,
         assemble = function(p) return { messages = p.messages, estimatedTokens = 0 } end,
         compact = function(p) return host.delegateCompaction(p) end }
"#;

const NEEDS_RHAI: &str = r#"
fn info() {
    #{ id: "needs", name: "Needs",
       hostRequirements: #{ "agent-run": #{
           requiredCapabilities: ["evil\x1b[2Jcap", "runtime-llm-complete"],
           unsupportedMessage: "Run it \x1b]0;owned\x07elsewhere." } } }
}
fn ingest(p) { #{ ingested: true } }
fn assemble(p) { #{ messages: p.messages, estimatedTokens: 0 } }
fn compact(p) { host::delegateCompaction(p) }
"#;

/// An engine whose `hostRequirements` cannot be met fails closed before its first turn (the
/// contract, §8: never quarantined, `legacy` does not answer in its place), and the message
/// naming the missing capabilities reaches stderr with the engine's control characters escaped.
#[test]
fn unmet_host_requirements_fail_closed_naming_the_capabilities_escaped() {
    for (ext, source) in [("lua", NEEDS_LUA), ("rhai", NEEDS_RHAI)] {
        for mode in ["thread", "process"] {
            let dir = tempfile::tempdir().unwrap();
            let engine = dir.path().join(format!("needs.{ext}"));
            std::fs::write(&engine, source).unwrap();
            let chat = conversation(dir.path());
            let out = Command::new(env!("CARGO_BIN_EXE_ctxhost"))
                .args(["replay", chat.to_str().unwrap(), "--engine"])
                .arg(&engine)
                .args(["--isolation", mode])
                .env("CTXHOST_LOG", "warn")
                .env_remove("CTXHOST_CONFIG")
                .env("XDG_CONFIG_HOME", "/nonexistent/ctxhost-test-config")
                .env("OPENCLAW_CONFIG_PATH", "/nonexistent/openclaw.json")
                .output()
                .unwrap();
            let what = format!("{ext} {mode}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
            assert_inert(&format!("{what} stdout"), &out.stdout);
            assert_inert(&format!("{what} stderr"), &out.stderr);
            assert!(
                stderr.contains(
                    "Missing host capabilities: evil\\u001b[2Jcap, runtime-llm-complete."
                ),
                "{what}: {stderr}"
            );
            assert!(
                stderr.contains("Run it \\u001b]0;owned\\u0007elsewhere."),
                "{what}: {stderr}"
            );
        }
    }
}
