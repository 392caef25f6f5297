//! The Rhai adapter from outside: real scripts under `tests/fixtures/rhai/`, driven through the
//! `EngineFactory` / `Engine` traits with a `HostCall` over a small real session. The same cases
//! as `tests/lua_engine.rs` (the harness and the shared cases are in `tests/common/engine.rs`),
//! plus what is particular to Rhai (operation budget, `eval`, memory bombs without engine size
//! limits, in-place edits of read-only messages).

// Test helpers outside `#[test]` functions may unwrap: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::PathBuf;
use std::sync::Arc;

use common::engine::{
    self, Lang, assemble_params, assert_kind, attack_under, column, cx, host_call, line, opts,
    session, test_limits,
};
use ctxhost::EngineErrorKind;
use ctxhost::contract::limits::{Limits, RhaiLimits};
use serde_json::json;

const LANG: Lang = Lang::Rhai;

// ---------------------------------------------------------------------------------------------
// Loading and validation

#[test]
fn loads_a_factory_engine_with_its_ctx() {
    let config = json!({"id": "from-config"});
    let mut e = LANG.instance("factory_engine", config.clone());
    assert_eq!(e.info().id, "from-config");
    assert_eq!(e.info().name, "Factory engine in /agent|/work");
    let ctx = session();
    let r = e
        .assemble(&host_call(&ctx, config), &assemble_params())
        .unwrap();
    assert_eq!(r.system_prompt_addition.as_deref(), Some("factory"));
    assert_eq!(r.messages.len(), 5);
}

#[test]
fn syntax_error_names_file_line_and_column() {
    let e = engine::syntax_error_names_file_and_line(LANG);
    assert!(column(&e).is_some(), "{e}");
    assert!(e.to_string().contains("syntax_error.rhai:4:"), "{e}");
}

#[test]
fn runtime_error_at_load_names_file_line_and_column() {
    let e = engine::runtime_error_at_load_names_file_and_line(LANG, "load refuses");
    assert_eq!(column(&e), Some(1), "{e}");
}

#[test]
fn factory_throw_is_factory() {
    let e = engine::factory_throw_is_factory(LANG);
    assert_eq!(line(&e), Some(4), "{e}");
}

#[test]
fn eval_is_disabled_at_compile_time() {
    let e = LANG.load_fixture("eval", &opts(json!({}))).unwrap_err();
    assert_eq!(e.kind, EngineErrorKind::Syntax, "{e}");
    assert_eq!(line(&e), Some(4), "{e}");
    assert!(e.message.contains("eval"), "{e}");
}

#[test]
fn a_lifecycle_function_with_the_wrong_arity_is_a_contract_error() {
    let e = LANG
        .load_fixture("wrong_arity", &opts(json!({})))
        .unwrap_err();
    assert_eq!(e.kind, EngineErrorKind::Contract, "{e}");
    assert!(
        e.message.contains("`assemble` must take 1 parameter"),
        "{e}"
    );
    assert_eq!(line(&e), Some(4), "{e}");
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
    for (method, e) in engine::runtime_error_in_each_lifecycle_method_is_runtime_with_line(LANG, 10)
    {
        assert!(column(&e).is_some(), "{method}: {e}");
    }
}

#[test]
fn cpu_attacks_hit_the_deadline() {
    engine::cpu_attacks_hit_the_deadline(LANG, &["loop", "try_loop", "while_true"]);
}

#[test]
fn the_operation_budget_stops_a_loop_before_the_deadline() {
    let limits = Limits {
        deadline_ms: 20_000,
        ..test_limits()
    };
    let rhai = RhaiLimits {
        max_operations: 200_000,
        ..RhaiLimits::default()
    };
    for name in ["loop", "try_loop"] {
        let e = attack_under(LANG, name, limits.clone(), &rhai).expect_err(name);
        assert_eq!(e.kind, EngineErrorKind::Limit, "{name}: {e}");
        assert!(e.message.contains("200000 operations"), "{name}: {e}");
        assert!(line(&e).is_some(), "{name}: {e}");
    }
}

#[test]
fn runaway_recursion_is_a_limit() {
    let e = assert_kind(LANG, "recursion", EngineErrorKind::Limit);
    assert!(e.message.contains("stack overflow"), "{e}");
    // Rhai reports no position for limit errors: the line is the lifecycle function's.
    assert_eq!(line(&e), Some(19), "the line of assemble: {e}");
}

#[test]
fn memory_bombs_are_stopped_by_the_memory_cap() {
    // Rhai's own size limits stay off (they make container building O(N^2)); the VM's memory
    // meter stops each growing step before it allocates past `memoryBytes`. A deadline far
    // away, so the cap, not the clock, is what stops them on any machine.
    let limits = Limits {
        deadline_ms: 20_000,
        ..test_limits()
    };
    for name in [
        "string_doubling",
        "array_growth",
        "array_doubling",
        "map_bomb",
    ] {
        let e = attack_under(LANG, name, limits.clone(), &RhaiLimits::default()).expect_err(name);
        assert_eq!(e.kind, EngineErrorKind::Memory, "{name}: {e}");
        assert!(line(&e).is_some(), "{name}: {e}");
    }
}

#[test]
fn memory_bombs_are_stopped_by_the_operation_budget() {
    let limits = Limits {
        deadline_ms: 20_000,
        ..test_limits()
    };
    let rhai = RhaiLimits {
        max_operations: 1_000_000,
        ..RhaiLimits::default()
    };
    for name in ["array_growth", "map_bomb"] {
        let e = attack_under(LANG, name, limits.clone(), &rhai).expect_err(name);
        assert_eq!(e.kind, EngineErrorKind::Limit, "{name}: {e}");
    }
}

#[test]
fn imports_resolve_only_the_stdlib_and_eval_is_gone() {
    for name in ["import_path", "import_unknown"] {
        let e = assert_kind(LANG, name, EngineErrorKind::Runtime);
        assert!(e.message.contains("known modules: msg"), "{name}: {e}");
        assert!(line(&e).is_some(), "{name}: {e}");
    }
    for name in ["eval_fn", "eval_call"] {
        let e = assert_kind(LANG, name, EngineErrorKind::Runtime);
        assert!(e.message.contains("eval"), "{name}: {e}");
        assert!(line(&e).is_some(), "{name}: {e}");
    }
}

#[test]
fn a_misspelt_stdlib_function_is_named_with_its_closest_match() {
    for (attack, called) in [("stdlib_typo", "fit"), ("stdlib_typo_alias", "f")] {
        let e = assert_kind(LANG, attack, EngineErrorKind::Runtime);
        assert_eq!(
            e.message,
            format!(
                "`{called}::newest_frist` is not a function of `{called}`; did you mean `newest_first`?"
            ),
            "{attack}"
        );
        assert!(line(&e).is_some(), "{attack}: {e}");
    }
}

#[test]
fn changing_input_messages_fails_and_leaves_the_host_view_intact() {
    engine::changing_input_messages_fails_and_leaves_the_host_view_intact(
        LANG,
        &[
            "overwrite_message",
            "overwrite_block",
            "overwrite_list",
            "overwrite_copy_of_list",
            "clear_message",
        ],
        "read-only",
    );
}

#[test]
fn a_key_added_in_place_fails_and_a_changed_copy_is_a_new_message() {
    let ctx = session();
    // Adding a key to a host message is a write like any other: the call fails, naming the
    // way out, and the host's message is untouched.
    let e = assert_kind(LANG, "add_key", EngineErrorKind::Runtime);
    assert!(e.message.contains("to_map()"), "{e}");
    assert!(
        !serde_json::to_string(&*ctx[0])
            .unwrap()
            .contains("added in place")
    );

    let config = json!({"attack": "copy_changed"});
    let mut e = LANG.instance("hostile", config.clone());
    let r = e
        .assemble(&host_call(&ctx, config), &assemble_params())
        .unwrap();
    assert!(!Arc::ptr_eq(&r.messages[0], &ctx[0]));
    assert_eq!(r.messages[0].text(), "changed copy");
    assert_eq!(ctx[0].text(), "Please read /etc/hosts");
    assert!(Arc::ptr_eq(&r.messages[1], &ctx[1]));
}

#[test]
fn bad_results_are_invalid_results_naming_the_field() {
    engine::bad_results_are_invalid_results_naming_the_field(
        LANG,
        &[
            ("malformed", "messages"),
            ("not_a_map", "must return a map"),
            ("missing_messages", "messages"),
            ("bad_message", "content"),
            ("one_message", "got one message"),
            ("deep", "deeper than 128"),
            ("wrong_type", "estimatedTokens"),
            ("nan", "estimatedTokens"),
            ("infinite", "estimatedTokens"),
            ("negative", "estimatedTokens"),
            ("oversized_text", "systemPromptAddition"),
            ("function_inside", "contextProjection.f"),
            ("unknown_field", "extraField"),
        ],
    );
}

#[test]
fn oversized_results_are_capped() {
    engine::oversized_results_are_capped(LANG, &["oversized_projection", "oversized_messages"]);
}

#[test]
fn thrown_maps_still_classify() {
    let e = assert_kind(LANG, "error_map", EngineErrorKind::Runtime);
    assert!(e.message.contains("code"), "{e}");
}

#[test]
fn a_stopped_engine_is_still_usable_and_other_instances_are_unaffected() {
    engine::a_stopped_engine_is_still_usable_and_other_instances_are_unaffected(LANG);
}

#[test]
fn the_stdlib_imports_and_runs() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let f = LANG
        .load(&root.join("scripts/recent_turns.rhai"), &opts(json!({})))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut e = f.instantiate(&cx(json!({}))).unwrap();
    let ctx = session();
    let r = e
        .assemble(&host_call(&ctx, json!({})), &assemble_params())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.messages.len(), ctx.len());
    assert!(r.messages.iter().zip(&ctx).all(|(a, b)| Arc::ptr_eq(a, b)));
}

#[test]
fn message_handles_read_like_maps_and_arrays_and_refuse_writes() {
    let ctx = session();
    let mut e = LANG.instance("handles", json!({}));
    let r = e
        .assemble(&host_call(&ctx, json!({})), &assemble_params())
        .unwrap();
    let report = r.system_prompt_addition.unwrap();
    let expected = [
        "types=messages,message,array",
        "len=5,false,5",
        "last=m5,m5,true",
        "fields=assistant,toolUse,absent,true,false",
        "block=read,/etc/hosts",
        "for=[\"m1\", \"m2\", \"m3\", \"m4\", \"m5\"]",
        "extract=2,2,2,3,2",
        "filter=2,toolResult,true,false,2,m2",
        "plus=6,array",
        "acc=5,array",
        "keys=true,true,true",
        "copy=map,user,assistant",
        "merged=stop,toolUse",
        "tokens=true,true",
    ];
    assert_eq!(report.lines().collect::<Vec<_>>(), expected);
    // The handles map back to the host's messages; the appended map is a new message.
    assert_eq!(r.messages.len(), 6);
    assert!(
        r.messages[..5]
            .iter()
            .zip(&ctx)
            .all(|(a, b)| Arc::ptr_eq(a, b))
    );
    assert_eq!(r.messages[5].text(), "appended");

    for write in [
        "list_index",
        "list_push",
        "list_sort",
        "message_field",
        "message_nested",
        "message_clear",
        "message_mixin",
    ] {
        let config = json!({ "write": write });
        let mut e = LANG.instance("handles", config.clone());
        let err = e
            .assemble(&host_call(&ctx, config), &assemble_params())
            .expect_err(write);
        assert_eq!(err.kind, EngineErrorKind::Runtime, "{write}: {err}");
        assert!(line(&err).is_some(), "{write}: {err}");
        if write != "list_index" {
            assert!(err.message.contains("read-only"), "{write}: {err}");
        }
    }
    assert_eq!(ctx[1].text(), "Reading it.");
}
