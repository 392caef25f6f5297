//! The load checks (shape, typos, id mismatch), unmet host requirements, and the result checks.

use serde_json::{Value, json};

use super::*;

fn info(v: Value) -> EngineInfo {
    serde_json::from_value(v).expect("info")
}

fn members(names: &[&str]) -> Vec<(String, bool)> {
    names.iter().map(|n| (n.to_string(), true)).collect()
}

#[test]
fn a_typo_gets_the_closest_member() {
    let i = info(json!({"id":"x","name":"X"}));
    let f = check_engine_shape(
        &i,
        &members(&["info", "ingest", "assemble", "compact", "afterturn"]),
        None,
        false,
    );
    assert_eq!(
        f,
        vec![LoadFinding {
            severity: Severity::Warning,
            message: "unknown member `afterturn` (did you mean `afterTurn`?)".into()
        }]
    );
}

#[test]
fn a_misspelled_required_method_is_named_with_the_error() {
    let i = info(json!({"id":"x","name":"X"}));
    let f = check_engine_shape(
        &i,
        &members(&["info", "ingest", "assembel", "compact"]),
        None,
        false,
    );
    let msgs: Vec<_> = f.iter().map(|x| (x.severity, x.message.as_str())).collect();
    assert_eq!(
        msgs,
        vec![
            (
                Severity::Error,
                "required function `assemble` is missing; did you mean `assembel`? (it is defined, misspelled)"
            ),
            (
                Severity::Warning,
                "unknown member `assembel` (did you mean `assemble`?)"
            ),
        ]
    );
}

#[test]
fn missing_required_and_non_function_members_are_errors() {
    let i = info(json!({"id":"","name":"X","ownsCompation":true}));
    let mut m = members(&["info", "ingest", "assemble"]);
    m.push(("afterTurn".into(), false));
    let f = check_engine_shape(&i, &m, Some("y"), false);
    let msgs: Vec<_> = f.iter().map(|x| (x.severity, x.message.as_str())).collect();
    assert_eq!(
        msgs,
        vec![
            (Severity::Error, "info.id must be a non-empty string"),
            (
                Severity::Warning,
                "unknown info field `ownsCompation` (did you mean `ownsCompaction`?)"
            ),
            (Severity::Error, "required function `compact` is missing"),
            (Severity::Error, "`afterTurn` must be a function"),
        ]
    );
}

#[test]
fn id_mismatch_is_a_warning_or_a_strict_error() {
    let i = info(json!({"id":"a","name":"A"}));
    let m = members(&["ingest", "assemble", "compact"]);
    assert_eq!(
        check_engine_shape(&i, &m, Some("b"), false)[0].severity,
        Severity::Warning
    );
    assert_eq!(
        check_engine_shape(&i, &m, Some("b"), true)[0].severity,
        Severity::Error
    );
}

#[test]
fn unmet_host_requirements_name_the_missing_capability() {
    let i = info(json!({"id":"a","name":"A","hostRequirements":{
        "agent-run":{"requiredCapabilities":["assemble-before-prompt","runtime-llm-complete"],
                     "unsupportedMessage":"Needs an LLM."}}}));
    let msg = unmet_requirements(&i, Operation::AgentRun).unwrap();
    assert!(msg.contains("Missing host capabilities: runtime-llm-complete."));
    assert!(msg.ends_with("Needs an LLM."));
    assert_eq!(unmet_requirements(&i, Operation::ManualCompact), None);
}

#[test]
fn assemble_checks_reject_nan_and_oversize() {
    let r = AssembleResult {
        messages: vec![],
        estimated_tokens: f64::NAN,
        system_prompt_addition: None,
        prompt_authority: None,
        context_projection: None,
    };
    assert!(check_assemble(&r, &ResultLimits::default()).is_err());
    let r = AssembleResult {
        estimated_tokens: 1.0,
        system_prompt_addition: Some("x".repeat(20)),
        ..r
    };
    let limits = ResultLimits {
        max_text_bytes: 10,
        ..ResultLimits::default()
    };
    assert!(check_assemble(&r, &limits).is_err());
}

#[test]
fn compacted_but_not_ok_is_invalid() {
    let r: CompactResult = serde_json::from_value(json!({"ok":false,"compacted":true})).unwrap();
    assert!(check_compact(&r, &ResultLimits::default()).is_err());
}
