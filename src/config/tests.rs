use super::*;

fn err(text: &str) -> String {
    Config::parse(text, "cfg.json5")
        .expect_err("should fail")
        .to_string()
}

#[test]
fn a_misspelt_key_names_line_column_and_the_closest_key() {
    let e = err("{\n  host: {\n    limts: {},\n  },\n}");
    assert!(e.starts_with("config cfg.json5:3:"), "{e}");
    assert!(
        e.contains("unknown key `limts` (did you mean `limits`?)"),
        "{e}"
    );
    let e = err("{ plugins: { slot: {} } }");
    assert!(
        e.contains("unknown key `slot` (did you mean `slots`?)"),
        "{e}"
    );
}

#[test]
fn broken_json5_names_line_and_column() {
    let e = err("{\n  host: { window: 8000,, }\n}");
    assert!(e.starts_with("config cfg.json5:2:"), "{e}");
}

#[test]
fn wrong_types_and_enums_are_errors() {
    assert!(err("{ host: { window: \"big\" } }").contains("cfg.json5:1:"));
    assert!(err("{ host: { failurePolicy: \"lenient\" } }").contains("lenient"));
    assert!(err("{ host: { tokenizer: \"gpt2\" } }").contains("gpt2"));
}

#[test]
fn openclaw_shape_with_comments_parses() {
    let cfg = Config::parse(
        r#"{
          // OpenClaw's shape
          plugins: {
            slots: { contextEngine: "recent" },
            entries: { recent: { enabled: true, path: "e/recent.lua", config: { k: 1 } } },
          },
          host: { failurePolicy: "strict", tokenizer: "o200k", window: 16000,
                  limits: { deadlineMs: 250 }, watch: { debounceMs: 100 } },
        }"#,
        "x",
    )
    .expect("parse");
    let (id, entry) = cfg.engine_entry().expect("entry");
    assert_eq!(id, "recent");
    assert_eq!(entry.config["k"], 1);
    assert_eq!(cfg.host.window, 16_000);
    assert_eq!(cfg.host.limits.script.deadline_ms, 250);
    assert_eq!(cfg.host.watch.debounce_ms, 100);
}

#[test]
fn slot_naming_legacy_or_a_missing_entry_is_no_engine() {
    let legacy =
        Config::parse("{ plugins: { slots: { contextEngine: \"legacy\" } } }", "x").unwrap();
    assert!(legacy.engine_entry().is_none());
    let missing =
        Config::parse("{ plugins: { slots: { contextEngine: \"gone\" } } }", "x").unwrap();
    assert!(missing.engine_entry().is_none());
}

#[test]
fn an_explicit_config_file_must_exist() {
    let e = discover(Some(Path::new("/nonexistent/ctxhost.json5"))).expect_err("missing");
    assert!(e.to_string().contains("/nonexistent/ctxhost.json5"), "{e}");
}

#[test]
fn llm_summarizer_section_parses_with_defaults_and_refuses_unknown_keys() {
    use crate::services::llm::SummarizerSettings;
    let cfg = Config::parse("{}", "t").unwrap();
    assert_eq!(cfg.host.summarizer, SummarizerSettings::Builtin);
    let cfg = Config::parse(r#"{host: {summarizer: {kind: "builtin"}}}"#, "t").unwrap();
    assert_eq!(cfg.host.summarizer, SummarizerSettings::Builtin);
    let cfg = Config::parse(
        r#"{host: {summarizer: {kind: "llm", baseUrl: "http://127.0.0.1:8080/v1", model: "qwen", apiKeyEnv: "KEY", maxCallsPerTurn: 2}}}"#,
        "t",
    )
    .unwrap();
    let SummarizerSettings::Llm(llm) = &cfg.host.summarizer else {
        panic!("{:?}", cfg.host.summarizer)
    };
    assert_eq!(llm.model, "qwen");
    assert_eq!(llm.api_key_env.as_deref(), Some("KEY"));
    assert_eq!(llm.max_calls_per_turn, 2);
    assert_eq!(llm.timeout_ms, 60_000);
    let err = Config::parse(
        r#"{host: {summarizer: {kind: "llm", baseUrl: "http://x", model: "m", modle: "x"}}}"#,
        "t",
    )
    .unwrap_err();
    assert!(err.to_string().contains("modle"), "{err}");
    let err = Config::parse(r#"{host: {summarizer: {kind: "gpt"}}}"#, "t").unwrap_err();
    assert!(err.to_string().contains("gpt"), "{err}");
}

#[test]
fn host_limits_keys_map_to_the_shared_and_the_rhai_limits() {
    let cfg = Config::parse(
        r#"{ host: { limits: { deadlineMs: 20, graceMs: 30, memoryBytes: 1024,
             results: { maxTextBytes: 10 }, maxOperations: 5, maxCallLevels: 6,
             maxExprDepth: 7 } } }"#,
        "x",
    )
    .expect("parse");
    let l = &cfg.host.limits;
    assert_eq!(
        (
            l.script.deadline_ms,
            l.script.grace_ms,
            l.script.memory_bytes
        ),
        (20, 30, 1024)
    );
    assert_eq!(l.script.results.max_text_bytes, 10);
    assert_eq!(
        (
            l.rhai.max_operations,
            l.rhai.max_call_levels,
            l.rhai.max_expr_depth
        ),
        (5, 6, 7)
    );
    // Unset keys keep their defaults; the map writes back flat, as it was read.
    let cfg = Config::parse("{ host: { limits: { maxOperations: 5 } } }", "x").expect("parse");
    assert_eq!(
        cfg.host.limits.script,
        crate::contract::limits::Limits::default()
    );
    let json = serde_json::to_value(&cfg.host.limits).expect("serialize");
    assert_eq!(json["maxOperations"], 5);
    assert_eq!(json["deadlineMs"], 500);
    let e = err("{ host: { limits: { maxOperation: 5 } } }");
    assert!(
        e.contains("unknown key `maxOperation` (did you mean `maxOperations`?)"),
        "{e}"
    );
}

#[test]
fn postgres_lease_settings_parse_default_and_are_bounded() {
    let pg = |text: &str| match Config::parse(text, "cfg.json5").unwrap().host.store {
        StoreSettings::Postgres(p) => p,
        other => panic!("{other:?}"),
    };
    let p = pg("{ host: { store: { kind: \"postgres\", url: \"host=/tmp\" } } }");
    assert_eq!(p.lease_and_wait_ms(), (10_000, 12_000));
    let p = pg("{ host: { store: { kind: \"postgres\", url: \"host=/tmp\", leaseMs: 3000 } } }");
    assert_eq!(p.lease_and_wait_ms(), (3_000, 5_000));
    let p = pg(
        "{ host: { store: { kind: \"postgres\", url: \"host=/tmp\", leaseMs: 3000, leaseWaitMs: 9000 } } }",
    );
    assert_eq!(p.lease_and_wait_ms(), (3_000, 9_000));

    let e = err("{ host: { store: { kind: \"postgres\", url: \"host=/tmp\", leaseMs: 10 } } }");
    assert!(e.contains("host.store.leaseMs"), "{e}");
    assert!(e.contains("outside 1000..=3600000"), "{e}");
    let e = err(
        "{ host: { store: { kind: \"postgres\", url: \"host=/tmp\", leaseMs: 5000, leaseWaitMs: 1000 } } }",
    );
    assert!(e.contains("host.store.leaseWaitMs"), "{e}");
    let e = err("{ host: { store: { kind: \"postgres\", url: \"host=/tmp\", lease: 5000 } } }");
    assert!(e.contains("did you mean `leaseMs`"), "{e}");
}
