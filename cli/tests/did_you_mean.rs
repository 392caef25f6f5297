//! Errors a new author meets name what they most likely meant: a misspelled required method,
//! a result field of the wrong type, a result key that is no field, in both languages.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::bin::ctxhost;

fn check(ext: &str, source: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let engine = dir.path().join(format!("typo.{ext}"));
    std::fs::write(&engine, source).unwrap();
    let out = ctxhost(&["check", engine.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{ext}: not sound");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_misspelled_required_method_is_named() {
    let lua = r#"
local M = { info = { id = "typo", name = "Typo" } }
function M.ingest(p) return { ingested = false } end
function M.assembel(p) return { messages = p.messages, estimatedTokens = 0 } end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#;
    let rhai = r#"
fn info() { #{ id: "typo", name: "Typo" } }
fn ingest(p) { #{ ingested: false } }
fn assmble(p) { #{ messages: p.messages, estimatedTokens: 0 } }
fn compact(p) { host::delegateCompaction(p) }
"#;
    let out = check("lua", lua);
    assert!(
        out.contains("required function `assemble` is missing; did you mean `assembel`?"),
        "{out}"
    );
    let out = check("rhai", rhai);
    assert!(
        out.contains("required function `assemble` is missing; did you mean `assmble`?"),
        "{out}"
    );
}

#[test]
fn result_errors_speak_the_scripts_terms() {
    let lua = r#"
local M = { info = { id = "typo", name = "Typo" } }
function M.ingest(p) return { ingested = false } end
function M.assemble(p) return { messages = p.messages, estimatedTokens = "lots" } end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#;
    let rhai = r#"
fn info() { #{ id: "typo", name: "Typo" } }
fn ingest(p) { #{ ingested: false } }
fn assemble(p) { #{ messages: p.messages, estimatedTokens: "lots" } }
fn compact(p) { host::delegateCompaction(p) }
"#;
    for (ext, src) in [("lua", lua), ("rhai", rhai)] {
        let out = check(ext, src);
        assert!(
            out.contains("`estimatedTokens` must be a number, got the string \"lots\""),
            "{ext}: {out}"
        );
    }
    let lua = r#"
local M = { info = { id = "typo", name = "Typo" } }
function M.ingest(p) return { ingested = false } end
function M.assemble(p) return { msgs = p.messages, estimatedTokens = 0 } end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#;
    let rhai = r#"
fn info() { #{ id: "typo", name: "Typo" } }
fn ingest(p) { #{ ingested: false } }
fn assemble(p) { #{ msgs: p.messages, estimatedTokens: 0 } }
fn compact(p) { host::delegateCompaction(p) }
"#;
    for (ext, src) in [("lua", lua), ("rhai", rhai)] {
        let out = check(ext, src);
        assert!(
            out.contains("missing field `messages`; the result has unknown keys: `msgs`"),
            "{ext}: {out}"
        );
    }
}
