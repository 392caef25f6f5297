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
use ctxhost::contract::Method;
use ctxhost::error::EngineErrorKind;
use ctxhost::sandbox::Limits;
use serde_json::json;

const LANG: Lang = Lang::Lua;

// ---------------------------------------------------------------------------------------------
// Loading and validation

#[test]
fn loads_a_table_engine() {
    engine::loads_a_table_engine(LANG);
}

#[test]
fn loads_a_factory_engine_with_its_ctx() {
    let config = json!({"id": "from-config"});
    let mut e = LANG.instance("factory_engine", config.clone());
    assert_eq!(e.info().id, "from-config");
    assert!(!e.defines(Method::Bootstrap) || e.defines(Method::Bootstrap));
    let ctx = session();
    let r = e
        .assemble(&host_call(&ctx, config), &assemble_params())
        .unwrap();
    assert_eq!(r.system_prompt_addition.as_deref(), Some("/agent|/work"));
    assert_eq!(r.messages.len(), 5);
}

#[test]
fn missing_file_is_missing_file() {
    engine::missing_file_is_missing_file(LANG);
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

#[test]
fn missing_compact_is_a_contract_error() {
    engine::missing_compact_is_a_contract_error(LANG);
}

#[test]
fn afterturn_typo_is_a_warning_with_the_suggestion_and_line() {
    engine::afterturn_typo_is_a_warning_with_the_suggestion_and_line(LANG);
}

#[test]
fn bad_enum_is_a_contract_error_naming_the_field() {
    engine::bad_enum_is_a_contract_error_naming_the_field(LANG);
}

#[test]
fn configured_id_mismatch_warns_and_strict_fails() {
    engine::configured_id_mismatch_warns_and_strict_fails(LANG);
}

// ---------------------------------------------------------------------------------------------
// Lifecycle, state and the host API

#[test]
fn every_lifecycle_method_runs_and_state_persists_across_calls() {
    engine::every_lifecycle_method_runs_and_state_persists_across_calls(LANG);
}

#[test]
fn state_survives_save_new_instance_restore() {
    engine::state_survives_save_new_instance_restore(LANG);
}

#[test]
fn resident_messages_map_back_to_the_same_arcs() {
    engine::resident_messages_map_back_to_the_same_arcs(LANG);
}

#[test]
fn copies_and_new_messages_are_converted() {
    engine::copies_and_new_messages_are_converted(LANG);
}

#[test]
fn host_repair_pairing_and_summarize_work_from_scripts() {
    engine::host_repair_pairing_and_summarize_work_from_scripts(LANG);
}

#[test]
fn a_long_multibyte_log_line_is_cut_not_a_panic() {
    engine::a_long_multibyte_log_line_is_cut_not_a_panic(LANG);
}

#[test]
fn host_api_edge_cases_read_the_same_in_both_languages() {
    assert_eq!(engine::host_edges(LANG), engine::HOST_EDGES);
}

#[test]
fn a_failing_summarizer_is_a_host_fault() {
    engine::a_failing_summarizer_is_a_host_fault(LANG);
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
        "readonly",
    );
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
fn cancellation_is_cancelled_not_a_quarantine() {
    engine::cancellation_is_cancelled_not_a_quarantine(LANG);
}

#[test]
fn a_stopped_vm_is_still_usable_and_other_instances_are_unaffected() {
    engine::a_stopped_engine_is_still_usable_and_other_instances_are_unaffected(LANG);
}
