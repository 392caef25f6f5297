//! Lifecycle calls, state and the `host` API from scripts, the same in both languages.
#![allow(dead_code)]

use super::*;

pub fn every_lifecycle_method_runs_and_state_persists_across_calls(lang: Lang) {
    let mut e = lang.instance("table_engine", json!({}));
    let ctx = session();
    let call = host_call(&ctx, json!({}));
    let b = e
        .bootstrap(
            &call,
            &BootstrapParams {
                session_id: "s1".into(),
                session_key: None,
                session_file: "/tmp/s1.jsonl".into(),
                runtime_settings: None,
            },
        )
        .unwrap();
    assert!(b.bootstrapped);
    assert!(e.ingest(&call, &ingest_params(&ctx[0])).unwrap().ingested);
    let batch = e
        .ingest_batch(
            &call,
            &IngestBatchParams {
                session_id: "s1".into(),
                session_key: None,
                messages: ctx[1..].to_vec(),
                is_heartbeat: false,
            },
        )
        .unwrap();
    assert_eq!(batch.ingested_count, 4);
    let r = e.assemble(&call, &assemble_params()).unwrap();
    assert_eq!(
        r.system_prompt_addition.as_deref(),
        Some("ingested=5 assembled=1 upper=ABC")
    );
    assert_eq!(r.estimated_tokens as u64, call.tokens_messages(&ctx));
    let r = e.assemble(&call, &assemble_params()).unwrap();
    assert_eq!(
        r.system_prompt_addition.as_deref(),
        Some("ingested=5 assembled=2 upper=ABC")
    );
    let c = e.compact(&call, &compact_params()).unwrap();
    assert!(c.ok);
    e.after_turn(
        &call,
        &AfterTurnParams {
            session_id: "s1".into(),
            session_key: None,
            pre_prompt_message_count: 4,
            token_budget: 8000,
            is_heartbeat: false,
            runtime_settings: None,
        },
    )
    .unwrap();
    let commit = |e: &mut Box<dyn Engine>| {
        e.commit_turn(
            &call,
            &CommitTurnParams {
                session_id: "s1".into(),
                session_key: None,
                advancement_key: "turn-1".into(),
                messages: ctx[4..].to_vec(),
            },
        )
        .unwrap()
        .unwrap()
        .status
    };
    assert_eq!(commit(&mut e), CommitStatus::Committed);
    assert_eq!(commit(&mut e), CommitStatus::Duplicate);
    let m = e
        .maintain(
            &call,
            &MaintainParams {
                session_id: "s1".into(),
                session_key: None,
                reason: MaintainReason::Turn,
                runtime_settings: None,
            },
        )
        .unwrap()
        .unwrap();
    assert_eq!(m.reason.as_deref(), Some("turn"));
    let handle = e
        .prepare_subagent_spawn(
            &call,
            &SubagentSpawnParams {
                session_id: "s1".into(),
                parent_session_key: "parent".into(),
                child_session_key: "child".into(),
                context_mode: ContextMode::Isolated,
                ttl_ms: None,
            },
        )
        .unwrap()
        .expect("a rollback handle");
    e.rollback_subagent_spawn(&call, handle).unwrap();
    e.on_subagent_ended(
        &call,
        &SubagentEndedParams {
            session_id: "s1".into(),
            child_session_key: "child".into(),
            reason: SubagentEndReason::Completed,
        },
    )
    .unwrap();
    e.dispose(&call).unwrap();
    e.dispose(&call).unwrap();
    let state = e.save_state().unwrap();
    assert_eq!(state["bootstrapped"], 1);
    assert_eq!(state["ingested"], 5);
    assert_eq!(state["lastRole"], "user");
    assert_eq!(state["afterTurn"], 5);
    assert_eq!(state["prePrompt"], 4);
    assert_eq!(state["commits"]["turn-1"], 1);
    assert_eq!(state["rolledBack"], "child");
    assert_eq!(state["ended"], "completed");
    assert_eq!(state["disposed"], 1, "dispose runs once");
}

pub fn state_survives_save_new_instance_restore(lang: Lang) {
    let ctx = session();
    let call = host_call(&ctx, json!({}));
    let mut a = lang.instance("table_engine", json!({}));
    a.ingest(&call, &ingest_params(&ctx[0])).unwrap();
    a.ingest(&call, &ingest_params(&ctx[1])).unwrap();
    let saved = a.save_state().unwrap();
    // Through text, as a host restart would.
    let text = serde_json::to_string(&saved).unwrap();
    drop(a);
    let mut b = lang.instance("table_engine", json!({}));
    b.restore_state(serde_json::from_str(&text).unwrap())
        .unwrap();
    let r = b.assemble(&call, &assemble_params()).unwrap();
    assert_eq!(
        r.system_prompt_addition.as_deref(),
        Some("ingested=2 assembled=1 upper=ABC")
    );
}

pub fn resident_messages_map_back_to_the_same_arcs(lang: Lang) {
    let ctx = session();
    let call = host_call(&ctx, json!({}));
    let mut e = lang.instance("table_engine", json!({}));
    let r = e.assemble(&call, &assemble_params()).unwrap();
    assert_eq!(r.messages.len(), ctx.len());
    for (a, b) in r.messages.iter().zip(&ctx) {
        assert!(Arc::ptr_eq(a, b));
    }
    // After appending, the new context maps back too (the resident array grew by diff).
    let mut grown = ctx.clone();
    grown.push(Arc::new(
        serde_json::from_value(
            json!({"id": "m6", "role": "assistant", "content": [{"type": "text", "text": "ok"}]}),
        )
        .unwrap(),
    ));
    let r = e
        .assemble(&host_call(&grown, json!({})), &assemble_params())
        .unwrap();
    assert_eq!(r.messages.len(), 6);
    assert!(
        r.messages
            .iter()
            .zip(&grown)
            .all(|(a, b)| Arc::ptr_eq(a, b))
    );
    // After a compaction-shaped change ([summary, kept…]) the kept ones still map back.
    let summary: Arc<Message> = Arc::new(
        serde_json::from_value(json!({"id": "s", "role": "compactionSummary", "summary": "earlier", "tokensBefore": 10}))
            .unwrap(),
    );
    let compacted = vec![summary.clone(), grown[4].clone(), grown[5].clone()];
    let r = e
        .assemble(&host_call(&compacted, json!({})), &assemble_params())
        .unwrap();
    assert!(
        r.messages
            .iter()
            .zip(&compacted)
            .all(|(a, b)| Arc::ptr_eq(a, b))
    );
}

pub fn copies_and_new_messages_are_converted(lang: Lang) {
    let ctx = session();
    // A copy (a Lua table copy, a Rhai `to_map()`) is converted, even when edited back to the
    // original.
    let mut e = lang.instance("table_engine", json!({"mode": "copy"}));
    let r = e
        .assemble(
            &host_call(&ctx, json!({"mode": "copy"})),
            &assemble_params(),
        )
        .unwrap();
    assert!(!Arc::ptr_eq(&r.messages[0], &ctx[0]));
    assert_eq!(*r.messages[0], *ctx[0]);

    let mut e = lang.instance("table_engine", json!({"mode": "new"}));
    let r = e
        .assemble(&host_call(&ctx, json!({"mode": "new"})), &assemble_params())
        .unwrap();
    assert!(matches!(r.messages[0].body, MessageBody::User(_)));
    assert_eq!(r.messages[0].text(), "made up");

    let mut e = lang.instance("table_engine", json!({"mode": "last2"}));
    let r = e
        .assemble(
            &host_call(&ctx, json!({"mode": "last2"})),
            &assemble_params(),
        )
        .unwrap();
    assert!(Arc::ptr_eq(&r.messages[0], &ctx[3]) && Arc::ptr_eq(&r.messages[1], &ctx[4]));
}

pub fn host_repair_pairing_and_summarize_work_from_scripts(lang: Lang) {
    // Orphan tool result: the repaired list drops it, the rest keep identity.
    let ctx = session();
    let orphaned = vec![ctx[0].clone(), ctx[2].clone(), ctx[3].clone()];
    let mut e = lang.instance("table_engine", json!({"mode": "repair"}));
    let r = e
        .assemble(
            &host_call(&orphaned, json!({"mode": "repair"})),
            &assemble_params(),
        )
        .unwrap();
    assert_eq!(r.messages.len(), 2);
    assert!(Arc::ptr_eq(&r.messages[0], &ctx[0]) && Arc::ptr_eq(&r.messages[1], &ctx[3]));

    let mut e = lang.instance("table_engine", json!({"mode": "summarize"}));
    let c = e
        .compact(
            &host_call(&ctx, json!({"mode": "summarize"})),
            &compact_params(),
        )
        .unwrap();
    assert!(c.reason.unwrap().starts_with("summarized"));
    let state = e.save_state().unwrap();
    assert!(state["summary"].as_str().is_some_and(|s| !s.is_empty()));
}

/// `log_long.<ext>` logs 90 KB of "€" (three bytes each, so the 4 KiB log cap falls inside a
/// character) at load and from `assemble`: the host cuts each line on a character boundary, the
/// calls succeed, and a session on the engine answers from it with nothing quarantined.
pub fn a_long_multibyte_log_line_is_cut_not_a_panic(lang: Lang) {
    let ctx = session();
    let mut e = lang.instance("log_long", json!({}));
    for _ in 0..2 {
        let r = e
            .assemble(&host_call(&ctx, json!({})), &assemble_params())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.messages.len(), ctx.len());
    }

    let mut config = ctxhost::config::Config::default();
    config.plugins.slots.context_engine = Some("log-long".into());
    config.plugins.entries.insert(
        "log-long".into(),
        ctxhost::config::Entry {
            path: Some(lang.fixture("log_long")),
            ..ctxhost::config::Entry::default()
        },
    );
    let host = ctxhost::runtime::Host::new(config).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spec = ctxhost::runtime::SessionSpec::new("s1", dir.path().join("s1.jsonl"));
    let mut s = ctxhost::session::Session::create(host.session_setup(&spec), &spec.file, "/work")
        .unwrap_or_else(|e| panic!("{e}"));
    let user: Message =
        serde_json::from_value(json!({"role": "user", "content": "hi", "timestamp": 1})).unwrap();
    let a = s
        .begin_turn(ctxhost::session::TurnInput {
            user,
            is_heartbeat: false,
        })
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(a.engine, "log-long");
    assert!(!a.fallback);
    assert!(
        host.quarantine().all().is_empty(),
        "{:?}",
        host.quarantine().all()
    );
}

/// What `host_edges.<ext>` reports, line by line: the host API gives both languages the same
/// results and the same errors (function names spelled `host.x` here).
pub const HOST_EDGES: [&str; 15] = [
    "0",
    "0",
    "0",
    "true",
    "true",
    "2",
    "error: host.tokens expects a string, a message or a list of messages, got a boolean",
    "error: host.tokens: item 1 is a number, expected a message",
    "error: host.tokens: not a valid message: missing field `role`",
    "error: host.summarize: messages expected a list of messages, got nothing",
    "true",
    "error: host.summarize: opts: unknown field `bogus`",
    "true",
    "error: host.delegateCompaction: expects p, got nothing",
    "true",
];

/// The lines `host_edges.<ext>` reports, errors cut to the host's message (the language's
/// location and traceback dropped, `host::x` spelled `host.x`).
pub fn host_edges(lang: Lang) -> Vec<String> {
    let ctx = session();
    let mut e = lang.instance("host_edges", json!({}));
    let r = e
        .assemble(&host_call(&ctx, json!({})), &assemble_params())
        .unwrap_or_else(|e| panic!("{e}"));
    let text = r.system_prompt_addition.unwrap_or_default();
    text.lines()
        .map(|l| match l.strip_prefix("error: ") {
            None => l.to_string(),
            Some(rest) => {
                let at = rest.find("host").unwrap_or(0);
                let msg = rest[at..].replace("::", ".");
                let msg = msg.split(", expected one of").next().unwrap_or_default();
                format!("error: {}", msg.split(" (line ").next().unwrap_or_default())
            }
        })
        .collect()
}

/// `host.summarize` on a summarizer that fails: a host fault (`Host`, never a quarantine), not
/// the engine's.
pub fn a_failing_summarizer_is_a_host_fault(lang: Lang) {
    #[derive(Debug)]
    struct Down;
    impl ctxhost::services::summarize::Summarizer for Down {
        fn summarize<'a>(
            &'a self,
            _: ctxhost::services::summarize::SummaryRequest<'a>,
            _: &'a dyn ctxhost::services::tokens::TokenCounter,
        ) -> ctxhost::services::summarize::SummaryFuture<'a> {
            Box::pin(async { Err(ctxhost::Error::Summarize("the endpoint is down".into())) })
        }
    }
    let config = json!({"mode": "summarize"});
    let ctx = session();
    let services = Arc::new(SessionServices {
        tokens: TokenCache::new(Arc::new(Estimate)),
        summarizer: Arc::new(Down),
        compaction: CompactionSettings::default(),
        limits: ResultLimits::default(),
        model: Default::default(),
        host_times: Default::default(),
        cancel: Default::default(),
    });
    let call = HostCall::new(
        "test".into(),
        "s1".into(),
        Arc::new(ctx.clone()),
        services,
        Arc::new(config.clone()),
        8000,
    );
    let mut e = lang.instance("table_engine", config);
    let err = e.compact(&call, &compact_params()).unwrap_err();
    assert_eq!(err.kind, EngineErrorKind::Host, "{err}");
    assert_eq!(err.disposition(), Disposition::HostFault, "{err}");
    assert!(err.message.contains("the endpoint is down"), "{err}");
    assert!(err.message.contains("summarize"), "{err}");
    // The engine is fine: the next call works.
    assert!(e.assemble(&call, &assemble_params()).is_ok());
}

/// Each call's `p` is built from that call's params and context: a script that changes `p`
/// leaves the next call's alone, and a call with other params or a longer context shows them,
/// whether or not the host sent the worker anything new since the last call.
pub fn every_call_gets_a_fresh_p_from_its_own_params(lang: Lang) {
    let mut e = lang.instance("p_fresh", json!({}));
    let ctx = session();
    let call = host_call(&ctx[..4], json!({}));
    let seen = |e: &mut Box<dyn Engine>, call: &HostCall, p: &AssembleParams| {
        e.assemble(call, p)
            .unwrap()
            .system_prompt_addition
            .unwrap_or_default()
    };
    let mut p = assemble_params();
    assert_eq!(seen(&mut e, &call, &p), "Thanks|fresh|4|8000");
    assert_eq!(
        seen(&mut e, &call, &p),
        "Thanks|fresh|4|8000",
        "the same call again"
    );
    p.prompt = Some("Next".into());
    assert_eq!(
        seen(&mut e, &call, &p),
        "Next|fresh|4|8000",
        "another prompt"
    );
    let longer = host_call(&ctx, json!({}));
    assert_eq!(
        seen(&mut e, &longer, &p),
        "Next|fresh|5|8000",
        "a longer context"
    );
    p.token_budget = 6000;
    assert_eq!(
        seen(&mut e, &call, &p),
        "Next|fresh|4|6000",
        "the first call, another budget"
    );
}
