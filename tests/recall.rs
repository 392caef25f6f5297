//! Recall of compacted history: `host.search` / `host.fetch` from scripts in both languages,
//! their limits, and `scripts/recall.{lua,rhai}` bringing an identifier's original message
//! back into the context after it was compacted away, through the real host.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::engine::{assemble_params, host_call, instance_of, session};
use ctxhost::contract::message::Message;
use ctxhost::runtime::SessionSpec;
use ctxhost::session::{Assembly, TurnInput};
use ctxhost::testing::RecallIndex;
use serde_json::{Value, json};

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(name)
}

/// A probe engine: `assemble` runs `host.search(config.query, config.opts)`, fetches the hits
/// and reports `id:role:matched` of each hit and the ids fetched in `systemPromptAddition`.
const PROBE_LUA: &str = r#"
return {
  info = { id = "probe", name = "probe", version = "1" },
  ingest = function(p) return { ingested = false } end,
  compact = function(p) return { ok = true, compacted = false } end,
  assemble = function(p)
    local hits = host.search(host.config.query, host.config.opts)
    local ids, parts = {}, {}
    for _, h in ipairs(hits) do
      ids[#ids + 1] = h.id
      parts[#parts + 1] = h.id .. ":" .. h.role .. ":" .. table.concat(h.matched, ",")
    end
    local fetched = {}
    for _, m in ipairs(host.fetch(ids)) do
      fetched[#fetched + 1] = m.id .. "=" .. m.role
    end
    return { messages = p.messages, estimatedTokens = 0,
      systemPromptAddition = table.concat(parts, " ") .. " | " .. table.concat(fetched, " ") }
  end,
}
"#;

const PROBE_RHAI: &str = r#"
fn info() { #{ id: "probe", name: "probe", version: "1" } }
fn ingest(p) { #{ ingested: false } }
fn compact(p) { #{ ok: true, compacted: false } }
fn assemble(p) {
    let hits = host::search(host::config.query, host::config.opts);
    let ids = [];
    let parts = [];
    for h in hits {
        ids.push(h.id);
        parts.push(h.id + ":" + h.role + ":" + h.matched.reduce(|acc, t| if acc == "" { t } else { acc + "," + t }, ""));
    }
    let fetched = [];
    for m in host::fetch(ids) {
        fetched.push(m.id + "=" + m.role);
    }
    #{ messages: p.messages, estimatedTokens: 0,
       systemPromptAddition: parts.reduce(|acc, t| if acc == "" { t } else { acc + " " + t }, "")
           + " | " + fetched.reduce(|acc, t| if acc == "" { t } else { acc + " " + t }, "") }
}
"#;

/// What the probe reports in each language for `config`, over the small shared session.
fn probe(config: Value) -> Vec<Result<String, String>> {
    let dir = tempfile::tempdir().expect("tempdir");
    let messages = session();
    let index = Arc::new(RecallIndex::default());
    index.add(&messages);
    let mut out = Vec::new();
    for (file, text) in [("probe.lua", PROBE_LUA), ("probe.rhai", PROBE_RHAI)] {
        let path = dir.path().join(file);
        std::fs::write(&path, text).expect("write probe");
        let mut engine = instance_of(&path, &config);
        let call = host_call(&messages, config.clone()).with_recall(Arc::clone(&index));
        out.push(
            engine
                .assemble(&call, &assemble_params())
                .map(|r| r.system_prompt_addition.unwrap_or_default())
                .map_err(|e| e.message),
        );
    }
    out
}

#[test]
fn scripts_search_and_fetch_stored_messages_in_both_languages() {
    let got = probe(json!({"query": "what was in /etc/hosts?", "opts": {"limit": 2}}));
    // The path is one term and its parts; the user's request and the tool call (its arguments)
    // name it, the shorter message first; the result only says `localhost`.
    let want =
        "m1:user:etc/hosts,etc,hosts m2:assistant:etc/hosts,etc,hosts | m1=user m2=assistant";
    assert_eq!(got, [Ok(want.to_owned()), Ok(want.to_owned())]);
    // Roles and `before` narrow it; the fetched messages are the stored ones.
    let got = probe(
        json!({"query": "etc/hosts localhost", "opts": {"roles": ["toolResult", "user"], "before": "m3"}}),
    );
    let want = "m1:user:etc/hosts,etc,hosts | m1=user";
    assert_eq!(got, [Ok(want.to_owned()), Ok(want.to_owned())]);
    // A query of common words only finds nothing.
    let got = probe(json!({"query": "what was it", "opts": {}}));
    assert_eq!(got, [Ok(" | ".to_owned()), Ok(" | ".to_owned())]);
}

#[test]
fn search_and_fetch_arguments_are_bounded_and_checked() {
    let limit = probe(
        json!({"query": "localhost hosts read summarize thanks", "opts": {"limit": 1_000_000}}),
    );
    for r in &limit {
        // At most MAX_SEARCH_LIMIT hits (here: every message that matches).
        assert!(
            r.as_ref().is_ok_and(|s| s
                .split(" | ")
                .next()
                .is_some_and(|h| h.split(' ').count() <= 50)),
            "{r:?}"
        );
    }
    for bad in [
        json!({"query": "x", "opts": {"roles": ["wizard"]}}),
        json!({"query": "x", "opts": {"before": "no-such-id"}}),
        json!({"query": "x", "opts": {"limt": 3}}),
        json!({"query": 42, "opts": {}}),
    ] {
        for r in probe(bad.clone()) {
            assert!(r.is_err(), "{bad}: {r:?}");
        }
    }
    // A long query is cut, not refused.
    let long = "etc/hosts ".repeat(2_000);
    for r in probe(json!({"query": long, "opts": {}})) {
        assert!(r.is_ok_and(|s| s.starts_with("m1:")));
    }
    // More ids than host.fetch takes.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("many.lua");
    std::fs::write(
        &path,
        r#"return { info = { id = "many", name = "many", version = "1" },
          ingest = function() return { ingested = false } end,
          compact = function() return { ok = true, compacted = false } end,
          assemble = function(p)
            local ids = {}
            for i = 1, 65 do ids[i] = "m1" end
            host.fetch(ids)
            return { messages = p.messages, estimatedTokens = 0 }
          end }"#,
    )
    .expect("write");
    let mut engine = instance_of(&path, &json!({}));
    let err = engine
        .assemble(&host_call(&session(), json!({})), &assemble_params())
        .unwrap_err();
    assert!(
        err.message.contains("65 ids exceed the limit of 64"),
        "{err}"
    );
}

/// A conversation through the real host with `engine` at a 4,000-token window: an early turn
/// names an order, a file and an error code; `filler` turns with large tool results push it out
/// of the context, and a manual compaction follows; the last turn asks `last`. Returns every assembly and the transcript text.
async fn converse(engine: &Path, filler: usize, last: &str) -> (Vec<Assembly>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = common::replay::host(4_000, Some(engine));
    let s = host
        .create_session(SessionSpec::new("t", dir.path().join("t.jsonl")))
        .await
        .expect("session");
    let mut calls = Vec::new();
    let turn = |user: String, replies: Vec<Value>| {
        let s = &s;
        async move {
            let a = s
                .begin_turn(TurnInput {
                    user: Message::user(user),
                    is_heartbeat: false,
                })
                .await
                .expect("turn");
            let replies = replies
                .into_iter()
                .map(|v| serde_json::from_value(v).expect("message"))
                .collect();
            s.end_turn(replies).await.expect("end turn");
            a
        }
    };
    calls.push(
        turn(
            "Order mia_li_3668 failed to settle; I think the bug is in src/billing/ledger.rs."
                .into(),
            vec![
                json!({"role": "assistant", "content": [{"type": "text", "text":
                "Found it: src/billing/ledger.rs raises ERR_LEDGER_LOCKED when two settlements \
                 of mia_li_3668 race; the lock is taken in settle_batch before the retry loop."}]}),
            ],
        )
        .await,
    );
    for t in 0..filler {
        let call = format!("c{t}");
        calls.push(
            turn(
                format!("next step {t}"),
                vec![
                    json!({"role": "assistant", "content": [{"type": "toolCall", "id": call,
                        "name": "read", "arguments": {"path": format!("docs/notes{t}.md")}}]}),
                    json!({"role": "toolResult", "toolCallId": call, "toolName": "read",
                        "content": [{"type": "text", "text": format!("note {t}: nothing to see here.\n").repeat(60)}]}),
                    json!({"role": "assistant", "content": [{"type": "text", "text": format!("Notes {t} read.")}]}),
                ],
            )
            .await,
        );
    }
    // A manual compaction (`/compact`): the session's context shrinks to the engine's summary
    // and its fresh tail; the transcript keeps every original message.
    let compacted = s.compact(None).await.expect("compact");
    assert!(compacted.compacted, "{compacted:?}");
    calls.push(turn(last.to_owned(), Vec::new()).await);
    s.close().await.expect("close");
    assert!(host.quarantine().all().is_empty());
    for a in &calls {
        assert!(!a.fallback && a.assembled_tokens <= a.token_budget, "{a:?}");
    }
    let transcript = std::fs::read_to_string(dir.path().join("t.jsonl")).expect("transcript");
    (calls, transcript)
}

const ORIGINAL: &str = "the lock is taken in settle_batch before the retry loop";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identifier_named_again_brings_its_compacted_message_back_in_both_languages() {
    let mut additions = Vec::new();
    for engine in ["recall.lua", "recall.rhai"] {
        let (calls, transcript) = converse(
            &script(engine),
            30,
            "Back to mia_li_3668: is it settled now?",
        )
        .await;
        assert!(
            transcript.contains("\"type\":\"compaction\""),
            "{engine}: the session never compacted"
        );
        let last = calls.last().expect("calls");
        // The early reply is no longer among the messages sent...
        assert!(
            !last.messages.iter().any(|m| m.text().contains(ORIGINAL)),
            "{engine}: the early reply was never compacted"
        );
        // ... but it is recalled, verbatim, because the request names the order again.
        let addition = last.system_prompt_addition.clone().unwrap_or_default();
        let recalled = addition
            .split_once("<recalled id=")
            .map(|(_, r)| r)
            .unwrap_or_default();
        assert!(recalled.contains(ORIGINAL), "{engine}: {addition}");
        // The turns in between named nothing from it: nothing was recalled for them.
        let middle = &calls[calls.len() - 2];
        let mid_addition = middle.system_prompt_addition.as_deref().unwrap_or_default();
        assert!(
            !mid_addition.contains("<recalled"),
            "{engine}: {mid_addition}"
        );
        additions.push(addition);
    }
    assert_eq!(additions[0], additions[1], "the twins recall differently");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_naming_nothing_recalls_nothing() {
    let (calls, _) = converse(&script("recall.lua"), 30, "Is it settled now?").await;
    let addition = calls
        .last()
        .and_then(|a| a.system_prompt_addition.clone())
        .unwrap_or_default();
    assert!(!addition.contains("<recalled"), "{addition}");
    assert!(addition.starts_with("Condensed history: "), "{addition}");
}
