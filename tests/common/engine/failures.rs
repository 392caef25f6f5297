//! Failure kinds, the same in both languages: runtime errors in each lifecycle method, the
//! hostile fixtures' attacks, bad and oversized results, cancellation.
#![allow(dead_code)]

use super::*;

/// Every lifecycle method, as `factory_engine.<ext>` names it in `throwIn`.
pub const LIFECYCLE_METHODS: [&str; 12] = [
    "bootstrap",
    "ingest",
    "ingestBatch",
    "assemble",
    "compact",
    "afterTurn",
    "commitTurn",
    "maintain",
    "prepareSubagentSpawn",
    "rollback",
    "onSubagentEnded",
    "dispose",
];

/// The error of `method` on a `factory_engine.<ext>` told to throw in it.
pub fn runtime_failure(lang: Lang, method: &str) -> EngineError {
    let config = json!({"throwIn": method});
    let mut e = lang.instance("factory_engine", config.clone());
    let ctx = session();
    let call = host_call(&ctx, config);
    let out = match method {
        "bootstrap" => e
            .bootstrap(
                &call,
                &BootstrapParams {
                    session_id: "s1".into(),
                    session_key: None,
                    session_file: "f".into(),
                    runtime_settings: None,
                },
            )
            .map(|_| ()),
        "ingest" => e.ingest(&call, &ingest_params(&ctx[0])).map(|_| ()),
        "ingestBatch" => e
            .ingest_batch(
                &call,
                &IngestBatchParams {
                    session_id: "s1".into(),
                    session_key: None,
                    messages: ctx.clone(),
                    is_heartbeat: false,
                },
            )
            .map(|_| ()),
        "assemble" => e.assemble(&call, &assemble_params()).map(|_| ()),
        "compact" => e.compact(&call, &compact_params()).map(|_| ()),
        "afterTurn" => e.after_turn(
            &call,
            &AfterTurnParams {
                session_id: "s1".into(),
                session_key: None,
                pre_prompt_message_count: 1,
                token_budget: 8000,
                is_heartbeat: false,
                runtime_settings: None,
            },
        ),
        "commitTurn" => e
            .commit_turn(
                &call,
                &CommitTurnParams {
                    session_id: "s1".into(),
                    session_key: None,
                    advancement_key: "k".into(),
                    messages: ctx.clone(),
                },
            )
            .map(|_| ()),
        "maintain" => e
            .maintain(
                &call,
                &MaintainParams {
                    session_id: "s1".into(),
                    session_key: None,
                    reason: MaintainReason::Bootstrap,
                    runtime_settings: None,
                },
            )
            .map(|_| ()),
        "prepareSubagentSpawn" | "rollback" => {
            let p = SubagentSpawnParams {
                session_id: "s1".into(),
                parent_session_key: "p".into(),
                child_session_key: "c".into(),
                context_mode: ContextMode::Fork,
                ttl_ms: Some(1000),
            };
            e.prepare_subagent_spawn(&call, &p).and_then(|h| {
                let h = h.expect("handle");
                e.rollback_subagent_spawn(&call, h)
            })
        }
        "onSubagentEnded" => e.on_subagent_ended(
            &call,
            &SubagentEndedParams {
                session_id: "s1".into(),
                child_session_key: "c".into(),
                reason: SubagentEndReason::Swept,
            },
        ),
        "dispose" => e.dispose(&call),
        other => panic!("unknown method {other}"),
    };
    out.expect_err(method)
}

/// A throw in each lifecycle method is a quarantining runtime error at `expected_line` of
/// `factory_engine.<ext>`; the errors by method, for more checks.
pub fn runtime_error_in_each_lifecycle_method_is_runtime_with_line(
    lang: Lang,
    expected_line: u32,
) -> Vec<(&'static str, EngineError)> {
    let factory_file = lang.file("factory_engine");
    let mut errors = Vec::new();
    for method in LIFECYCLE_METHODS {
        let e = runtime_failure(lang, method);
        assert_eq!(e.kind, EngineErrorKind::Runtime, "{method}: {e}");
        assert_eq!(e.disposition(), Disposition::Quarantine);
        assert!(
            e.message.contains(&format!("boom in {method}")),
            "{method}: {e}"
        );
        assert!(file_name(&e).ends_with(&factory_file), "{method}: {e}");
        assert_eq!(line(&e), Some(expected_line), "{method}: {e}");
        errors.push((method, e));
    }
    errors
}

/// `assemble` of `hostile.<ext>` running the attack `name` under `limits`, its result held to
/// the contract as the session holds it.
pub fn attack_with(lang: Lang, name: &str, limits: Limits) -> Result<AssembleResult, EngineError> {
    attack_under(lang, name, limits, &RhaiLimits::default())
}

/// [`attack_with`], with Rhai's own limits too.
pub fn attack_under(
    lang: Lang,
    name: &str,
    limits: Limits,
    rhai: &RhaiLimits,
) -> Result<AssembleResult, EngineError> {
    let config = json!({"attack": name});
    let mut o = opts(config.clone());
    o.limits = limits;
    let f = lang
        .load_with(&lang.fixture("hostile"), &o, rhai)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut e = f.instantiate(&cx(config.clone())).unwrap();
    let ctx = session();
    let r = e.assemble(&host_call(&ctx, config), &assemble_params())?;
    ctxhost::testing::check_assemble(e.as_ref(), &r, &o.limits.results)?;
    Ok(r)
}

/// The error of the attack `name` under the test limits.
pub fn attack(lang: Lang, name: &str) -> EngineError {
    attack_with(lang, name, test_limits()).expect_err(name)
}

/// The error of the attack `name`, checked to be of `kind` and located in `hostile.<ext>`.
pub fn assert_kind(lang: Lang, name: &str, kind: EngineErrorKind) -> EngineError {
    let e = attack(lang, name);
    assert_eq!(e.kind, kind, "{name}: {e}");
    assert!(
        file_name(&e).ends_with(&lang.file("hostile")),
        "{name}: {e}"
    );
    e
}

pub fn cpu_attacks_hit_the_deadline(lang: Lang, names: &[&str]) {
    for &name in names {
        let e = assert_kind(lang, name, EngineErrorKind::Deadline);
        assert_eq!(e.disposition(), Disposition::Quarantine);
        assert!(e.message.contains("deadline"), "{name}: {e}");
        assert!(line(&e).is_some(), "{name}: {e}");
    }
}

/// Each attack in `names` writes to the host's messages: a runtime error whose message contains
/// `needle`, and the host's view is unchanged.
pub fn changing_input_messages_fails_and_leaves_the_host_view_intact(
    lang: Lang,
    names: &[&str],
    needle: &str,
) {
    let before: Vec<Message> = session().iter().map(|m| (**m).clone()).collect();
    for &name in names {
        let e = assert_kind(lang, name, EngineErrorKind::Runtime);
        assert!(e.message.contains(needle), "{name}: {e}");
    }
    let after: Vec<Message> = session().iter().map(|m| (**m).clone()).collect();
    assert_eq!(before, after);
}

/// Each `(attack, needle)` returns a bad result: an invalid result naming `needle`, at a line.
pub fn bad_results_are_invalid_results_naming_the_field(lang: Lang, cases: &[(&str, &str)]) {
    for &(name, needle) in cases {
        let e = assert_kind(lang, name, EngineErrorKind::InvalidResult);
        assert!(e.message.contains(needle), "{name}: {e}");
        assert!(line(&e).is_some(), "{name}: the line of assemble: {e}");
    }
}

pub fn oversized_results_are_capped(lang: Lang, names: &[&str]) {
    for &name in names {
        let mut limits = test_limits();
        limits.results.max_result_bytes = 1 << 20;
        let err = attack_with(lang, name, limits).expect_err(name);
        assert_eq!(err.kind, EngineErrorKind::InvalidResult, "{name}: {err}");
        assert!(err.message.contains("bytes"), "{name}: {err}");
    }
}

pub fn cancellation_is_cancelled_not_a_quarantine(lang: Lang) {
    let config = json!({"attack": "loop"});
    let mut o = opts(config.clone());
    o.limits.deadline_ms = 20_000;
    let path = lang.fixture("hostile");
    match lang {
        Lang::Lua => {
            let f = LuaFactory::load(&path, &o, ()).unwrap();
            cancelled(f.instantiate_typed(&cx(config.clone())).unwrap(), config);
        }
        Lang::Rhai => {
            let f = RhaiFactory::load(&path, &o, RhaiLimits::default()).unwrap();
            cancelled(f.instantiate_typed(&cx(config.clone())).unwrap(), config);
        }
    }
}

/// Sets `e`'s cancel flag while it runs an endless `assemble`: cancelled, not abandoned.
fn cancelled<V: ScriptVm>(mut e: ScriptInstance<V>, config: Value) {
    let flag = e.cancel_flag();
    let setter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        flag.store(true, Ordering::Relaxed);
    });
    let err = e
        .assemble(&host_call(&session(), config), &assemble_params())
        .unwrap_err();
    setter.join().unwrap();
    assert_eq!(err.kind, EngineErrorKind::Cancelled, "{err}");
    assert_eq!(err.disposition(), Disposition::Cancelled);
    assert!(!e.is_abandoned());
}

pub fn a_stopped_engine_is_still_usable_and_other_instances_are_unaffected(lang: Lang) {
    let config = json!({"attack": "loop"});
    let mut e = lang.instance("hostile", config.clone());
    let ctx = session();
    let err = e
        .assemble(&host_call(&ctx, config.clone()), &assemble_params())
        .unwrap_err();
    assert_eq!(err.kind, EngineErrorKind::Deadline);
    // The interrupt stopped it in time: the engine is not abandoned and answers the next call.
    assert!(
        e.ingest(&host_call(&ctx, config), &ingest_params(&ctx[0]))
            .unwrap()
            .ingested
    );
    let mut other = lang.instance("table_engine", json!({}));
    assert!(
        other
            .assemble(&host_call(&ctx, json!({})), &assemble_params())
            .is_ok()
    );
}
