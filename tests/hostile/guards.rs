//! Native-step guards (issue 10, item 3), host-call size guards and limit ceilings (item 7):
//! no single builtin or host call outlives the deadline by much, and no limit can be raised
//! past what the worker's stack holds.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use ctxhost::EngineErrorKind;
use ctxhost::config::{Config, Entry};
use ctxhost::contract::limits::Isolation;
use ctxhost::contract::message::Message;
use ctxhost::runtime::SessionSpec;
use ctxhost::session::TurnInput;

/// Runs one turn of an engine written inline (`file` names its language) under `limits`;
/// returns the engine's failure, if any.
fn one_turn(
    file: &str,
    source: &str,
    limits: impl FnOnce(&mut ctxhost::contract::limits::HostLimits),
) -> Option<ctxhost::EngineError> {
    one_turn_in(file, source, limits, Isolation::Thread)
}

/// [`one_turn`] with the engine in `mode`.
fn one_turn_in(
    file: &str,
    source: &str,
    limits: impl FnOnce(&mut ctxhost::contract::limits::HostLimits),
    mode: Isolation,
) -> Option<ctxhost::EngineError> {
    use ctxhost::session::Session;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file);
    std::fs::write(&path, source).unwrap();
    let mut config = Config::default();
    limits(&mut config.host.limits);
    config.plugins.slots.context_engine = Some("guarded".into());
    config.plugins.entries.insert(
        "guarded".into(),
        Entry {
            path: Some(path),
            ..Entry::default()
        },
    );
    let host = crate::modes::host_in(config, mode);
    let spec = SessionSpec::new("s", dir.path().join("s.jsonl"));
    let mut s = Session::create(host.session_setup(&spec), &spec.file, "").unwrap();
    s.begin_turn(TurnInput {
        user: Message::user("go"),
        is_heartbeat: false,
    })
    .unwrap();
    s.end_turn(vec![Message::assistant("ok")]).unwrap();
    host.engine_failure()
}

/// A Lua engine whose `assemble` runs `body` (which may `error(...)` to report).
fn lua_engine(body: &str) -> String {
    format!(
        "local M = {{ info = {{ id = \"guarded\", name = \"Guarded\" }} }}
function M.ingest(p) return {{ ingested = true }} end
function M.assemble(p)
{body}
  return {{ messages = p.messages, estimatedTokens = 0 }}
end
function M.compact(p) return host.delegateCompaction(p) end
return M
"
    )
}

/// Native-step guards (issue 10, item 3): no single builtin outlives the deadline by much.
mod native_guards {
    use super::*;

    #[test]
    fn a_plain_find_over_a_huge_haystack_finishes_and_finds_the_same() {
        // Naively 20M x 1001 byte comparisons (minutes, no interrupt); guarded, milliseconds.
        let body = r#"  local s = string.rep("a", 20000000) .. "b"
  local i, j = string.find(s, string.rep("a", 1000) .. "b", 1, true)
  if i ~= 20000000 - 1000 + 1 or j ~= 20000001 then error("wrong: " .. tostring(i)) end
  local k = s:find(string.rep("a", 1000) .. "c", 5, true)
  if k ~= nil then error("found what is not there") end
  if s:find("b", -1, true) ~= 20000001 then error("negative init") end"#;
        let failure = one_turn("find.lua", &lua_engine(body), |l| {
            l.script.deadline_ms = 2_000;
            l.script.grace_ms = 60_000;
        });
        assert_eq!(failure, None);
    }

    #[test]
    fn a_native_sort_of_a_huge_table_is_stopped_by_the_deadline() {
        let body = r#"  local t = {}
  for i = 1, 3000000 do t[i] = (i * 7919) % 3000017 end
  table.sort(t)
  table.sort(t)"#;
        let failure = one_turn("sort.lua", &lua_engine(body), |l| {
            l.script.deadline_ms = 300;
            l.script.grace_ms = 60_000;
        })
        .expect("the sort overruns the deadline");
        assert_eq!(failure.kind, EngineErrorKind::Deadline, "{failure}");
        // Stopped by the interrupt, not abandoned after deadline + grace.
        assert!(!failure.to_string().contains("abandoned"), "{failure}");
    }

    #[test]
    fn a_small_sort_keeps_its_order_and_errors() {
        let body = r#"  local t = {}
  for i = 1, 70000 do t[i] = (i * 7919) % 70001 end
  table.sort(t)
  for i = 2, #t do if t[i - 1] > t[i] then error("unsorted at " .. i) end end
  local u = {3, 1, 2}
  table.sort(u, function(a, b) return a > b end)
  if u[1] ~= 3 or u[3] ~= 1 then error("comparator ignored") end"#;
        let failure = one_turn("order.lua", &lua_engine(body), |l| {
            l.script.deadline_ms = 5_000;
        });
        assert_eq!(failure, None);
    }

    #[test]
    fn string_rep_past_the_cap_is_refused_as_memory() {
        let body = r#"  local s = string.rep("x", 200000000)"#;
        let failure = one_turn("rep.lua", &lua_engine(body), |l| {
            l.script.memory_bytes = 64 << 20;
        })
        .expect("refused");
        assert_eq!(failure.kind, EngineErrorKind::Memory, "{failure}");
    }

    #[test]
    fn abandoned_workers_are_counted_and_refuse_new_engines_past_the_limit() {
        use ctxhost::{
            abandoned_workers,
            testing::{Worker, admit_worker},
        };
        use std::time::Duration;
        let before = abandoned_workers();
        let w = Worker::spawn("stuck", 1 << 20, ()).unwrap();
        let out = w.call(Duration::from_millis(20), |_| {
            std::thread::sleep(Duration::from_millis(600))
        });
        assert!(out.is_err(), "the call overran");
        assert!(w.is_abandoned());
        let during = abandoned_workers();
        assert!(during >= 1, "counted while its thread runs");
        let e = admit_worker(during - 1).expect_err("refused past the limit");
        assert!(e.contains("maxAbandonedWorkers"), "{e}");
        assert!(admit_worker(during + 100).is_ok());
        // Its thread ends with the stuck step and is no longer counted.
        let mut left = during;
        for _ in 0..100 {
            std::thread::sleep(Duration::from_millis(20));
            left = abandoned_workers();
            if left < during {
                break;
            }
        }
        assert!(left < during.max(before + 1), "{before} {during} {left}");
    }
}

/// Ceilings on Rhai's limits (issue 10, item 7): raising them is a config error naming the key,
/// never a stack overflow that aborts the host.
mod limit_ceilings {
    use super::*;
    use ctxhost::contract::limits::{MAX_CALL_LEVELS_CEILING, MAX_EXPR_DEPTH_CEILING};

    fn refused(limits: &str) -> String {
        let text = format!("{{ host: {{ limits: {limits} }} }}");
        Config::parse(&text, "test.json5")
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn limits_past_their_ceiling_are_refused_naming_the_key() {
        let e = refused("{ maxCallLevels: 100000 }");
        assert!(e.contains("host.limits.maxCallLevels"), "{e}");
        assert!(e.contains(&MAX_CALL_LEVELS_CEILING.to_string()), "{e}");
        let e = refused("{ maxExprDepth: 100000 }");
        assert!(e.contains("host.limits.maxExprDepth"), "{e}");
        assert!(e.contains(&MAX_EXPR_DEPTH_CEILING.to_string()), "{e}");
        let e = refused("{ maxExprDepth: 0 }");
        assert!(e.contains("host.limits.maxExprDepth"), "{e}");
        let e = refused("{ maxOperations: 0 }");
        assert!(e.contains("host.limits.maxOperations"), "{e}");
        let e = refused(&format!(
            "{{ maxCallLevels: {MAX_CALL_LEVELS_CEILING}, maxExprDepth: {MAX_EXPR_DEPTH_CEILING} }}"
        ));
        assert!(e.contains("worker stack"), "{e}");
        assert!(Config::parse("{ host: { limits: { maxCallLevels: 100 } } }", "t").is_ok());
    }

    #[test]
    fn the_deepest_accepted_limits_end_in_a_limit_error_not_an_abort() {
        // The most call levels the config accepts with the default expression depth, each level
        // holding a deeply nested expression: Rhai's own limit must stop it first.
        let mut levels = MAX_CALL_LEVELS_CEILING;
        let depth = 60;
        let mut limits = ctxhost::contract::limits::RhaiLimits {
            max_call_levels: levels,
            max_expr_depth: depth + 4,
            ..Default::default()
        };
        while limits.check().is_err() {
            levels -= 1;
            limits.max_call_levels = levels;
        }
        let nested = format!("{}n{}", "(".repeat(depth / 4), ")".repeat(depth / 4));
        let source = format!(
            "fn info() {{ #{{ id: \"guarded\", name: \"Deep\" }} }}
fn ingest(p) {{ #{{ ingested: true }} }}
fn down(n) {{ let x = {nested}; 1 + down(x + 1) }}
fn assemble(p) {{ down(0); #{{ messages: p.messages, estimatedTokens: 0 }} }}
fn compact(p) {{ host::delegateCompaction(p) }}
"
        );
        let failure = one_turn("deep.rhai", &source, |l| l.rhai = limits.clone())
            .expect("the recursion is stopped");
        assert_eq!(failure.kind, EngineErrorKind::Limit, "{failure}");
    }
}

/// A Rhai engine whose `assemble` runs `body` (which may `throw` to report).
fn rhai_engine(body: &str) -> String {
    format!(
        "fn info() {{ #{{ id: \"guarded\", name: \"Guarded\" }} }}
fn ingest(p) {{ #{{ ingested: true }} }}
fn assemble(p) {{
{body}
    #{{ messages: p.messages, estimatedTokens: 0 }}
}}
fn compact(p) {{ host::delegateCompaction(p) }}
"
    )
}

/// Host calls whose cost a script controls are refused past a size, in both languages and
/// both isolation modes (a child runs `host.tokens` and the built-in `host.summarize` itself).
mod host_call_guards {
    use super::*;

    fn refused(file: &str, source: &str, says: &str) {
        for mode in [Isolation::Thread, Isolation::Process] {
            // A long deadline: building the input is not what is tested.
            let failure = one_turn_in(file, source, |l| l.script.deadline_ms = 30_000, mode)
                .unwrap_or_else(|| panic!("{mode:?}: refused"));
            assert_eq!(
                failure.kind,
                EngineErrorKind::Runtime,
                "{mode:?}: {failure}"
            );
            assert!(failure.to_string().contains(says), "{mode:?}: {failure}");
        }
    }

    #[test]
    fn tokens_of_a_huge_text_is_refused_lua() {
        let body = r#"  host.tokens(string.rep("x", 9000000))"#;
        refused("tokens.lua", &lua_engine(body), "one count may take");
    }

    #[test]
    fn tokens_of_a_huge_text_is_refused_rhai() {
        let body = r#"    let s = "x"; s.pad(9000000, "x"); host::tokens(s);"#;
        refused("tokens.rhai", &rhai_engine(body), "one count may take");
    }

    #[test]
    fn summarize_of_a_huge_input_is_refused_lua() {
        let body = r#"  local ms = {}
  for i = 1, 20 do ms[i] = { role = "user", content = string.rep("x", 1000000) } end
  host.summarize(ms, nil)"#;
        refused("summarize.lua", &lua_engine(body), "one summary may read");
    }

    #[test]
    fn summarize_of_a_huge_input_is_refused_rhai() {
        let body = r#"    let ms = [];
    for i in 0..20 { let c = "x"; c.pad(1000000, "x"); ms.push(#{ role: "user", content: c }); }
    host::summarize(ms, ());"#;
        refused("summarize.rhai", &rhai_engine(body), "one summary may read");
    }

    #[test]
    fn summarize_counts_the_previous_summary_lua() {
        let body = r#"  host.summarize({ { role = "user", content = "hi" } },
    { previousSummary = string.rep("p", 17000000) })"#;
        refused("previous.lua", &lua_engine(body), "one summary may read");
    }

    #[test]
    fn summarize_counts_the_previous_summary_rhai() {
        let body = r#"    let p = "p"; p.pad(17000000, "p");
    host::summarize([#{ role: "user", content: "hi" }], #{ previousSummary: p });"#;
        refused("previous.rhai", &rhai_engine(body), "one summary may read");
    }

    #[test]
    fn summarize_counts_tool_call_arguments_lua() {
        let body = r#"  local ms = {}
  for i = 1, 20 do
    ms[i] = { role = "assistant", content = { { type = "toolCall", id = "c" .. i,
      name = "write", arguments = { text = string.rep("a", 1000000) } } } }
  end
  host.summarize(ms, nil)"#;
        refused("arguments.lua", &lua_engine(body), "one summary may read");
    }

    #[test]
    fn summarize_counts_tool_call_arguments_rhai() {
        let body = r#"    let ms = [];
    for i in 0..20 {
        let a = "a"; a.pad(1000000, "a");
        ms.push(#{ role: "assistant", content: [#{ type: "toolCall", id: `c${i}`,
            name: "write", arguments: #{ text: a } }] });
    }
    host::summarize(ms, ());"#;
        refused("arguments.rhai", &rhai_engine(body), "one summary may read");
    }
}

/// Rhai's sort with a comparer calls it O(n log n) times in one native step and ignores its
/// errors: the guarded sort ends at the comparer's first error, so the deadline stops it.
#[test]
fn a_rhai_sort_with_a_slow_comparer_is_stopped_by_the_deadline() {
    let body = r#"    let a = [];
    for i in 0..200000 { a.push((i * 7919) % 200003); }
    a.sort(|x, y| { let k = 0; while k < 100 { k += 1; } x - y });"#;
    let failure = one_turn("sort.rhai", &rhai_engine(body), |l| {
        l.script.deadline_ms = 1_500;
        l.script.grace_ms = 1_500;
        l.rhai.max_operations = u64::MAX;
    })
    .expect("the sort overruns the deadline");
    assert_eq!(failure.kind, EngineErrorKind::Deadline, "{failure}");
    assert!(!failure.to_string().contains("abandoned"), "{failure}");
}
