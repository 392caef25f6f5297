//! `docs/writing-engines.md` cannot drift from the host: every fenced `lua` and `rhai` block in
//! it must be preceded by a line naming a file of its language under `docs/examples/` and equal
//! that file's content; every example file must appear in the guide, every Lua example with a
//! Rhai twin shown right after it; and every example engine is loaded through the real adapter
//! of its language and run (ingest, assemble at several budgets, compact on an over-budget session)
//! with the budget (messages plus `systemPromptAddition`) and tool pairing checked.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use crate::sessions;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use ctxhost::HostCall;
use ctxhost::contract::Method;
use ctxhost::contract::message::Message;
use ctxhost::contract::{
    AssembleParams, CommitStatus, CommitTurnParams, CompactParams, CompactionTarget, IngestParams,
    ResultLimits,
};
use ctxhost::engine::InstanceContext;
use ctxhost::engine::LoadOptions;
use ctxhost::services::compaction::CompactionSettings;
use ctxhost::services::summarize::BuiltinSummarizer;
use ctxhost::services::tokens::{Estimate, TokenCache, TokenCounter};
use ctxhost::testing::SessionServices;
use ctxhost::testing::lua;
use ctxhost::testing::pairing;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `(file named before the block, block content)` for every ```lang block of the guide.
fn blocks(guide: &str, lang: &str) -> Vec<(String, String)> {
    let fence = format!("```{lang}");
    let suffix = format!(".{lang}");
    let lines: Vec<&str> = guide.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_end() == fence {
            let named = lines[..i]
                .iter()
                .rev()
                .find(|l| !l.trim().is_empty())
                .copied()
                .unwrap_or("");
            let file = named
                .split('`')
                .find(|part| part.starts_with("docs/examples/") && part.ends_with(&suffix))
                .unwrap_or_else(|| {
                    panic!(
                        "line {}: a {lang} block must follow a line naming its docs/examples/ file, found {named:?}",
                        i + 1
                    )
                })
                .to_owned();
            let mut body = String::new();
            i += 1;
            while i < lines.len() && lines[i].trim_end() != "```" {
                body.push_str(lines[i]);
                body.push('\n');
                i += 1;
            }
            out.push((file, body));
        }
        i += 1;
    }
    out
}

fn examples(ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("docs/examples"))
        .expect("docs/examples")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    files.sort();
    files
}

fn check_blocks(guide: &str, lang: &str) -> Vec<(String, String)> {
    let blocks = blocks(guide, lang);
    assert!(blocks.len() >= 5, "the guide shows its {lang} examples");
    for (file, body) in &blocks {
        let on_disk = std::fs::read_to_string(root().join(file))
            .unwrap_or_else(|e| panic!("{file} named in the guide: {e}"));
        assert_eq!(
            body, &on_disk,
            "{file}: the guide's copy differs from the file"
        );
    }
    for path in examples(lang) {
        let rel = format!(
            "docs/examples/{}",
            path.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
        );
        assert!(
            blocks.iter().any(|(f, _)| *f == rel),
            "{rel} is not shown in the guide"
        );
    }
    blocks
}

#[test]
fn every_lua_block_in_the_guide_is_the_named_example_file() {
    let guide = std::fs::read_to_string(root().join("docs/writing-engines.md")).expect("guide");
    check_blocks(&guide, "lua");
}

#[test]
fn every_rhai_block_in_the_guide_is_the_named_example_file_and_follows_its_lua_twin() {
    let guide = std::fs::read_to_string(root().join("docs/writing-engines.md")).expect("guide");
    let lua = check_blocks(&guide, "lua");
    let rhai = check_blocks(&guide, "rhai");
    let lua_files: Vec<String> = lua.iter().map(|(f, _)| f.clone()).collect();
    let twins: Vec<String> = rhai
        .iter()
        .map(|(f, _)| f.replace(".rhai", ".lua"))
        .collect();
    assert_eq!(
        lua_files, twins,
        "each Lua example is followed by its Rhai twin"
    );
    // In the text, each Rhai block comes right after its Lua block.
    for (file, _) in &rhai {
        let lua_at = guide
            .find(&format!("`{}`", file.replace(".rhai", ".lua")))
            .expect("the Lua twin is named");
        let rhai_at = guide.find(&format!("`{file}`")).expect("named");
        let between = &guide[lua_at..rhai_at];
        assert_eq!(
            between.matches("```").count(),
            2,
            "{file}: only its Lua twin's block comes between"
        );
    }
}

#[test]
fn the_block_parser_rejects_an_unnamed_block() {
    let bad = "Some text\n\n```lua\nreturn {}\n```\n";
    let r = std::panic::catch_unwind(|| blocks(bad, "lua"));
    assert!(r.is_err());
    let good = "File: [`docs/examples/x.lua`](examples/x.lua)\n\n```lua\nreturn {}\n```\n";
    assert_eq!(
        blocks(good, "lua"),
        vec![("docs/examples/x.lua".to_owned(), "return {}\n".to_owned())]
    );
    // A rhai block must name a .rhai file.
    let wrong = "File: [`docs/examples/x.lua`](examples/x.lua)\n\n```rhai\nfn info() {}\n```\n";
    assert!(std::panic::catch_unwind(|| blocks(wrong, "rhai")).is_err());
}

fn services() -> Arc<SessionServices> {
    Arc::new(SessionServices {
        tokens: TokenCache::new(Arc::new(Estimate)),
        summarizer: Arc::new(BuiltinSummarizer::new()),
        compaction: CompactionSettings::default(),
        limits: ResultLimits::default(),
        model: Default::default(),
        host_times: Default::default(),
        cancel: Default::default(),
    })
}

fn call(services: &Arc<SessionServices>, context: &[Arc<Message>], budget: u64) -> HostCall {
    HostCall::new(
        Arc::from("example"),
        Arc::from("s"),
        Arc::new(context.to_vec()),
        Arc::clone(services),
        Arc::new(json!({"mode": "test"})),
        budget,
    )
}

fn tokens(ms: &[Arc<Message>]) -> u64 {
    ms.iter().map(|m| Estimate.count_message(m)).sum()
}

fn run_example(path: &Path) {
    let name = path.display().to_string();
    let opts = LoadOptions {
        config: Arc::new(json!({"keepRatio": 0.8})),
        ..LoadOptions::default()
    };
    let factory = if path.extension().is_some_and(|x| x == "rhai") {
        ctxhost::testing::rhai::load(path, &opts, &Default::default())
    } else {
        lua::load(path, &opts)
    }
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut engine = factory
        .instantiate(&InstanceContext::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let services = services();
    let mut session = sessions::session(60);
    // Between turns (index 2 starts turn 1), so the session stays well paired.
    session.insert(
        2,
        sessions::user("u-pin", "[pin] the release branch is rel/2026-12"),
    );
    let messages: Vec<Arc<Message>> = session
        .into_iter()
        .map(|j| Arc::new(serde_json::from_value::<Message>(j).expect("message")))
        .collect();
    for (i, m) in messages.iter().enumerate() {
        let c = call(&services, &messages[..=i], 8_000);
        let p = IngestParams {
            session_id: "s".into(),
            session_key: None,
            message: Arc::clone(m),
            is_heartbeat: false,
        };
        engine
            .ingest(&c, &p)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    for budget in [300u64, 2_000, 8_000, 40_000, 1_000_000] {
        let c = call(&services, &messages, budget);
        let p = AssembleParams {
            session_id: "s".into(),
            session_key: None,
            token_budget: budget,
            prompt: None,
            model: None,
            available_tools: None,
            runtime_settings: None,
        };
        let r = engine
            .assemble(&c, &p)
            .unwrap_or_else(|e| panic!("{name} at {budget}: {e}"));
        let add = r
            .system_prompt_addition
            .as_deref()
            .map(|a| Estimate.count_text(a))
            .unwrap_or(0);
        let measured = tokens(&r.messages) + add;
        assert!(
            measured <= budget,
            "{name}: {measured} tokens > budget {budget}"
        );
        assert!(
            pairing::is_well_paired(&r.messages),
            "{name} at {budget}: pairing"
        );
        assert!(!r.messages.is_empty(), "{name} at {budget}: empty context");
    }
    let before = tokens(&messages);
    let c = call(&services, &messages, 8_000);
    let p = CompactParams {
        session_id: "s".into(),
        session_key: None,
        token_budget: 8_000,
        force: true,
        current_token_count: before,
        compaction_target: CompactionTarget::Threshold,
        custom_instructions: None,
        runtime_settings: None,
    };
    let r = engine
        .compact(&c, &p)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(r.ok && r.compacted, "{name}: compact freed nothing: {r:?}");
    if engine.defines(Method::CommitTurn) {
        let p = CommitTurnParams {
            session_id: "s".into(),
            session_key: None,
            advancement_key: "turn-1".into(),
            messages: messages[..2].to_vec(),
        };
        let first = engine.commit_turn(&c, &p).expect("commit");
        let second = engine.commit_turn(&c, &p).expect("commit");
        assert_eq!(first.map(|r| r.status), Some(CommitStatus::Committed));
        assert_eq!(second.map(|r| r.status), Some(CommitStatus::Duplicate));
    }
}

#[test]
fn every_example_engine_loads_through_the_adapter_and_holds_the_budget() {
    let mut files = examples("lua");
    files.extend(examples("rhai"));
    assert!(files.len() >= 10, "every example in both languages");
    for path in files {
        run_example(&path);
    }
}
