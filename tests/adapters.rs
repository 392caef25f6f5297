//! The cases every script adapter must pass, run on both languages by `both_languages!`
//! (`tests/common`): the same body, one `#[test]` per language, so a case cannot be added for
//! one language and forgotten for the other. Language-specific cases stay in `lua_engine.rs` and
//! `rhai_engine.rs`; the case bodies are in `common/engine.rs`.

use crate::common::engine;

both_languages! {
    a_failing_summarizer_is_a_host_fault => engine::a_failing_summarizer_is_a_host_fault;
    a_long_multibyte_log_line_is_cut_not_a_panic => engine::a_long_multibyte_log_line_is_cut_not_a_panic;
    afterturn_typo_is_a_warning_with_the_suggestion_and_line => engine::afterturn_typo_is_a_warning_with_the_suggestion_and_line;
    bad_enum_is_a_contract_error_naming_the_field => engine::bad_enum_is_a_contract_error_naming_the_field;
    cancellation_is_cancelled_not_a_quarantine => engine::cancellation_is_cancelled_not_a_quarantine;
    configured_id_mismatch_warns_and_strict_fails => engine::configured_id_mismatch_warns_and_strict_fails;
    copies_and_new_messages_are_converted => engine::copies_and_new_messages_are_converted;
    every_call_gets_a_fresh_p_from_its_own_params => engine::every_call_gets_a_fresh_p_from_its_own_params;
    every_lifecycle_method_runs_and_state_persists_across_calls => engine::every_lifecycle_method_runs_and_state_persists_across_calls;
    host_repair_pairing_and_summarize_work_from_scripts => engine::host_repair_pairing_and_summarize_work_from_scripts;
    loads_a_table_engine => engine::loads_a_table_engine;
    missing_compact_is_a_contract_error => engine::missing_compact_is_a_contract_error;
    missing_file_is_missing_file => engine::missing_file_is_missing_file;
    resident_messages_map_back_to_the_same_arcs => engine::resident_messages_map_back_to_the_same_arcs;
    state_survives_save_new_instance_restore => engine::state_survives_save_new_instance_restore;
}
