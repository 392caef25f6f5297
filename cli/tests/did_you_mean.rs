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

/// A Lua and a Rhai engine alike but for their `assemble` (each given as a whole function
/// definition in its language).
fn twins(lua_assemble: &str, rhai_assemble: &str) -> [(&'static str, String); 2] {
    let lua = format!(
        r#"
local M = {{ info = {{ id = "typo", name = "Typo" }} }}
function M.ingest(p) return {{ ingested = false }} end
{lua_assemble}
function M.compact(p) return host.delegateCompaction(p) end
return M
"#
    );
    let rhai = format!(
        r#"
fn info() {{ #{{ id: "typo", name: "Typo" }} }}
fn ingest(p) {{ #{{ ingested: false }} }}
{rhai_assemble}
fn compact(p) {{ host::delegateCompaction(p) }}
"#
    );
    [("lua", lua), ("rhai", rhai)]
}

#[test]
fn a_misspelled_required_method_is_named() {
    let [(_, lua), (_, rhai)] = twins(
        "function M.assembel(p) return { messages = p.messages, estimatedTokens = 0 } end",
        "fn assmble(p) { #{ messages: p.messages, estimatedTokens: 0 } }",
    );
    let out = check("lua", &lua);
    assert!(
        out.contains("required function `assemble` is missing; did you mean `assembel`?"),
        "{out}"
    );
    let out = check("rhai", &rhai);
    assert!(
        out.contains("required function `assemble` is missing; did you mean `assmble`?"),
        "{out}"
    );
}

#[test]
fn result_errors_speak_the_scripts_terms() {
    for (ext, src) in twins(
        r#"function M.assemble(p) return { messages = p.messages, estimatedTokens = "lots" } end"#,
        r#"fn assemble(p) { #{ messages: p.messages, estimatedTokens: "lots" } }"#,
    ) {
        let out = check(ext, &src);
        assert!(
            out.contains("`estimatedTokens` must be a number, got the string \"lots\""),
            "{ext}: {out}"
        );
    }
    for (ext, src) in twins(
        "function M.assemble(p) return { msgs = p.messages, estimatedTokens = 0 } end",
        "fn assemble(p) { #{ msgs: p.messages, estimatedTokens: 0 } }",
    ) {
        let out = check(ext, &src);
        assert!(
            out.contains("missing field `messages`; the result has unknown keys: `msgs`"),
            "{ext}: {out}"
        );
    }
}
