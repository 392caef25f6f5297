//! The Lua adapter from outside: real scripts under `tests/fixtures/lua/`, driven through the
//! `EngineFactory` / `Engine` traits with a `HostCall` over a small real session. The harness and
//! the cases shared with `tests/rhai_engine.rs` are in `tests/common/engine.rs`.

// Test helpers outside `#[test]` functions may unwrap: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::engine::{
    self, Lang, assemble_params, assert_kind, attack, attack_with, host_call, line, session,
    test_limits,
};
use std::sync::Arc;

use ctxhost::EngineErrorKind;
use ctxhost::contract::Method;
use ctxhost::contract::limits::Limits;
use ctxhost::contract::message::Message;
use serde_json::json;

const LANG: Lang = Lang::Lua;

// ---------------------------------------------------------------------------------------------
// Loading and validation

#[test]
fn loads_a_factory_engine_with_its_ctx() {
    let config = json!({"id": "from-config"});
    let mut e = LANG.instance("factory_engine", config.clone());
    assert_eq!(e.info().id, "from-config");
    assert!(
        e.defines(Method::Bootstrap),
        "the factory's engine defines bootstrap"
    );
    let ctx = session();
    let r = e
        .assemble(&host_call(&ctx, config), &assemble_params())
        .unwrap();
    assert_eq!(r.system_prompt_addition.as_deref(), Some("/agent|/work"));
    assert_eq!(r.messages.len(), 5);
}

#[test]
fn syntax_error_names_file_and_line() {
    engine::syntax_error_names_file_and_line(LANG);
}

#[test]
fn runtime_error_at_load_names_file_and_line() {
    engine::runtime_error_at_load_names_file_and_line(LANG, "attempt to index nil");
}

#[test]
fn factory_throw_is_factory() {
    let e = engine::factory_throw_is_factory(LANG);
    assert!(line(&e).is_some(), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Lifecycle, state and the host API

#[test]
fn host_api_edge_cases_read_the_same_in_both_languages() {
    assert_eq!(engine::host_edges(LANG), engine::HOST_EDGES);
}

// ---------------------------------------------------------------------------------------------
// Failure kinds

#[test]
fn runtime_error_in_each_lifecycle_method_is_runtime_with_line() {
    engine::runtime_error_in_each_lifecycle_method_is_runtime_with_line(LANG, 9);
}

#[test]
fn cpu_attacks_hit_the_deadline() {
    engine::cpu_attacks_hit_the_deadline(
        LANG,
        &[
            "loop",
            "pcall_loop",
            "coroutine_wrap",
            "coroutine_resume",
            "pattern_bomb",
            "tostring_loop",
        ],
    );
}

#[test]
fn runaway_recursion_is_a_limit() {
    // Luau has no proper tail calls, so tail recursion overflows the stack too.
    for name in ["recursion", "tail_recursion"] {
        let e = assert_kind(LANG, name, EngineErrorKind::Limit);
        assert!(e.message.contains("stack overflow"), "{name}: {e}");
        assert!(line(&e).is_some(), "{name}: {e}");
    }
}

#[test]
fn memory_bombs_hit_the_memory_cap() {
    // A generous deadline, so that the cap (not the clock) is what stops them.
    let limits = Limits {
        deadline_ms: 5000,
        memory_bytes: 16 << 20,
        ..test_limits()
    };
    for name in ["memory", "string_doubling"] {
        let e = attack_with(LANG, name, limits.clone()).expect_err(name);
        assert_eq!(e.kind, EngineErrorKind::Memory, "{name}: {e}");
        assert!(e.message.contains("memory cap"), "{name}: {e}");
    }
}

#[test]
fn sandbox_escapes_are_runtime_errors() {
    for name in [
        "io",
        "os_execute",
        "os_getenv",
        "require_path",
        "loadstring",
        "load",
        "getfenv",
        "setfenv",
        "dofile",
    ] {
        let e = assert_kind(LANG, name, EngineErrorKind::Runtime);
        assert!(line(&e).is_some(), "{name}: {e}");
    }
    let e = attack(LANG, "require_path");
    assert!(e.message.contains("known modules: msg"), "{e}");
}

#[test]
fn poisoned_string_metatable_is_refused_and_does_not_leak() {
    let e = assert_kind(LANG, "poison_string", EngineErrorKind::Runtime);
    assert!(e.message.contains("readonly"), "{e}");
    let ctx = session();
    let mut p = LANG.instance("poison_string", json!({}));
    let r = p
        .assemble(&host_call(&ctx, json!({})), &assemble_params())
        .unwrap();
    assert_eq!(r.system_prompt_addition.as_deref(), Some("ABC refused"));
    // Another instance and another engine still see the real string library.
    let mut q = LANG.instance("table_engine", json!({}));
    let r = q
        .assemble(&host_call(&ctx, json!({})), &assemble_params())
        .unwrap();
    assert!(r.system_prompt_addition.unwrap().ends_with("upper=ABC"));
}

#[test]
fn overwriting_input_messages_fails_and_leaves_the_host_view_intact() {
    engine::changing_input_messages_fails_and_leaves_the_host_view_intact(
        LANG,
        &[
            "overwrite_message",
            "overwrite_block",
            "overwrite_list",
            "rawset_message",
        ],
        "read-only",
    );
    // The error names the way out, like the Rhai adapter's.
    let e = attack(LANG, "overwrite_message");
    assert!(e.message.contains("msg.copy(m)"), "{e}");
    assert!(line(&e).is_some(), "{e}");
}

#[test]
fn a_misspelt_stdlib_function_is_named_with_its_closest_match() {
    let e = assert_kind(LANG, "stdlib_typo", EngineErrorKind::Runtime);
    assert_eq!(
        e.message,
        "`fit.newest_frist` is not a function of `fit`; did you mean `newest_first`?"
    );
    assert!(line(&e).is_some(), "{e}");
}

#[test]
fn bad_results_are_invalid_results_naming_the_field() {
    engine::bad_results_are_invalid_results_naming_the_field(
        LANG,
        &[
            ("malformed", "messages"),
            ("not_a_table", "must return a table"),
            ("missing_messages", "messages"),
            ("bad_message", "content"),
            ("one_message", "got one message"),
            ("cyclic", "contextProjection"),
            ("deep", "deeper than 128"),
            ("wrong_type", "estimatedTokens"),
            ("nan", "estimatedTokens"),
            ("negative", "estimatedTokens"),
            ("non_utf8", "systemPromptAddition"),
            ("non_utf8_message", "UTF-8"),
            ("oversized_text", "systemPromptAddition"),
            ("function_inside", "contextProjection.f"),
            ("unknown_field", "extraField"),
        ],
    );
}

#[test]
fn oversized_results_are_capped() {
    engine::oversized_results_are_capped(LANG, &["oversized_projection"]);
}

#[test]
fn error_objects_that_are_tables_still_classify() {
    let e = assert_kind(LANG, "error_table", EngineErrorKind::Runtime);
    assert!(!e.message.is_empty());
}

#[test]
fn a_stopped_vm_is_still_usable_and_other_instances_are_unaffected() {
    engine::a_stopped_engine_is_still_usable_and_other_instances_are_unaffected(LANG);
}

// ---------------------------------------------------------------------------------------------
// Results mapped back to the host's messages

/// Where each returned message is in `ctx`, by identity (`None`: a new message).
fn positions(ctx: &[Arc<Message>], got: &[Arc<Message>]) -> Vec<Option<usize>> {
    got.iter()
        .map(|m| ctx.iter().position(|c| Arc::ptr_eq(c, m)))
        .collect()
}

#[test]
fn result_lists_map_back_to_the_hosts_messages_in_every_shape() {
    // The session plus a message whose content is an empty array (copies keep it an array).
    let mut ctx = session();
    ctx.push(Arc::new(
        serde_json::from_value::<Message>(json!({"id": "m6", "role": "assistant",
            "content": [], "stopReason": "stop", "timestamp": 6}))
        .unwrap(),
    ));
    let all: Vec<Option<usize>> = (0..ctx.len()).map(Some).collect();
    let cases: Vec<(&str, Vec<Option<usize>>)> = vec![
        ("context", all.clone()),
        ("newest", (2..6).map(Some).collect()),
        ("clone", all.clone()),
        ("middle", vec![Some(1), Some(2)]),
        ("first_and_newest", vec![Some(0), Some(4), Some(5)]),
        ("newest_twice", vec![Some(5), Some(5)]),
        ("reversed", vec![Some(5), Some(4)]),
        ("newest_behind_a_metatable", vec![Some(4), Some(5)]),
        ("new_then_newest", vec![None, Some(5)]),
        ("copies", vec![None; 6]),
        ("empty", vec![]),
    ];
    for (shape, want) in cases {
        let config = json!({ "shape": shape });
        let mut e = LANG.instance("list_shapes", config.clone());
        let r = e
            .assemble(&host_call(&ctx, config.clone()), &assemble_params())
            .unwrap_or_else(|e| panic!("{shape}: {e}"));
        assert_eq!(positions(&ctx, &r.messages), want, "{shape}");
        if shape == "copies" {
            for (copy, m) in r.messages.iter().zip(&ctx) {
                assert_eq!(
                    serde_json::to_value(&**copy).unwrap(),
                    serde_json::to_value(&**m).unwrap(),
                    "a copy reads back as the message it copies"
                );
            }
        }
        if shape == "new_then_newest" {
            assert_eq!(r.messages[0].text(), "new");
        }
        // The next call's context has one more message (appended, not rebuilt): the newest run
        // is found against the grown context.
        let mut grown = ctx.clone();
        grown.push(Arc::new(
            serde_json::from_value::<Message>(
                json!({"id": "m7", "role": "user", "content": "and then?", "timestamp": 7}),
            )
            .unwrap(),
        ));
        let r = e
            .assemble(&host_call(&grown, config), &assemble_params())
            .unwrap_or_else(|e| panic!("{shape}, grown: {e}"));
        let got = positions(&grown, &r.messages);
        match shape {
            "newest" => assert_eq!(got, (2..7).map(Some).collect::<Vec<_>>()),
            "context" | "clone" => assert_eq!(got, (0..7).map(Some).collect::<Vec<_>>()),
            "newest_twice" => assert_eq!(got, vec![Some(6), Some(6)]),
            _ => {}
        }
    }
}

#[test]
fn a_result_list_with_other_keys_is_refused_even_when_its_items_are_the_newest() {
    let config = json!({ "shape": "newest_and_a_key" });
    let mut e = LANG.instance("list_shapes", config.clone());
    let err = e
        .assemble(&host_call(&session(), config), &assemble_params())
        .unwrap_err();
    assert_eq!(err.kind, EngineErrorKind::InvalidResult, "{err}");
    assert!(err.message.contains("other keys or holes"), "{err}");
}
