//! Delta views (protocol version 2): a client that asked for them at `initialize` sends only
//! what changed in its transcript, checked against its rolling hash; `assemble` answers with
//! references to the client's own messages. The property: after every call, whatever the
//! client did to its history (appends, suffix rewrites, truncations, messages brought back,
//! calls re-sent, the server restarted), ctxhost's view is the client's, and nothing is stored
//! twice.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

/// Keeps every message, and names the text of each in the system prompt addition (one a
/// line), so a test sees what the engine was given in each slot of the window.
const KEEP_ALL: &str = r#"local M = { info = { id = "keepall", name = "Keep all", ownsCompaction = true } }
function M.ingest(p) return { ingested = true } end
function M.assemble(p)
  local t = {}
  for i, m in ipairs(p.messages) do t[i] = type(m.content) == "string" and m.content or "?" end
  return { messages = p.messages, estimatedTokens = 1, systemPromptAddition = table.concat(t, "\n") }
end
function M.compact(p) return { ok = true, compacted = false, reason = "keeps all" } end
return M
"#;

/// The client side of delta views, as the plugin keeps it: its view (message texts), and its
/// rolling hash after each message.
#[derive(Clone, Debug, Default)]
struct ClientView {
    texts: Vec<String>,
    hashes: Vec<u64>,
}

fn fnv(bytes: &[u8], mut h: u64) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn hex(h: u64) -> String {
    format!("{h:016x}")
}

impl ClientView {
    fn of(texts: Vec<String>) -> ClientView {
        let mut v = ClientView::default();
        for t in texts {
            v.push(t);
        }
        v
    }

    fn push(&mut self, text: String) {
        let prev = self.hashes.last().copied().unwrap_or(0xcbf2_9ce4_8422_2325);
        self.hashes.push(fnv(text.as_bytes(), prev));
        self.texts.push(text);
    }

    fn hash_at(&self, n: usize) -> Option<String> {
        n.checked_sub(1).map(|i| hex(self.hashes[i]))
    }

    /// A delta from `base` to this view.
    fn delta(&self, base: usize) -> Value {
        json!({
            "base": base,
            "baseHash": self.hash_at(base),
            "append": self.texts[base..].iter().map(|t| user(t)).collect::<Vec<_>>(),
            "hashes": self.hashes[base..].iter().map(|h| hex(*h)).collect::<Vec<_>>(),
        })
    }
}

fn params(id: &str, view: Value) -> Value {
    json!({"sessionId": id, "sessionKey": id, "view": view, "tokenBudget": 10_000_000,
           "prompt": "next"})
}

async fn delta_client(state: &Path, engine: &Path) -> Client {
    let mut c = Client::start(state);
    let r = c
        .ok(
            "initialize",
            json!({"engine": engine, "capabilities": {"deltaViews": true}}),
        )
        .await;
    assert_eq!(r["protocolVersion"], "2");
    assert_eq!(r["views"], "delta");
    c
}

/// The window of a delta `assemble` answer, each slot as a place of the client's view (or
/// `None` for a message sent whole).
fn slots(result: &Value) -> Vec<Option<usize>> {
    let mut out = Vec::new();
    for item in result["window"].as_array().expect("a window") {
        match item {
            Value::Number(n) => out.push(Some(n.as_u64().unwrap() as usize)),
            Value::Array(r) => {
                let (a, b) = (r[0].as_u64().unwrap(), r[1].as_u64().unwrap());
                out.extend((a..b).map(|p| Some(p as usize)));
            }
            Value::Object(_) => out.push(None),
            other => panic!("a window item is {other}"),
        }
    }
    out
}

/// ctxhost's view after a call is the client's: the count and hash it answers are the
/// client's, and (the engine keeps everything) each place of the view is in the window once,
/// given to the engine as the client's message at that place.
fn assert_same_view(result: &Value, client: &ClientView, what: &str) {
    assert_eq!(
        result["view"]["count"],
        client.texts.len(),
        "{what}: {result}"
    );
    assert_eq!(
        result["view"]["hash"],
        json!(client.hash_at(client.texts.len())),
        "{what}: {result}"
    );
    if result.get("window").is_none() {
        return;
    }
    let slots = slots(result);
    let given: Vec<&str> = match result["systemPromptAddition"].as_str() {
        Some("") | None => Vec::new(),
        Some(t) => t.split('\n').collect(),
    };
    assert_eq!(slots.len(), given.len(), "{what}: {result}");
    let mut seen = vec![0; client.texts.len()];
    for (slot, text) in slots.iter().zip(&given) {
        if let Some(p) = slot {
            assert!(
                *p < client.texts.len(),
                "{what}: a place past the view: {result}"
            );
            assert_eq!(*text, client.texts[*p], "{what}: place {p}: {result}");
            seen[*p] += 1;
        }
    }
    assert!(
        seen.iter().all(|n| *n == 1),
        "{what}: every place once: {seen:?} {result}"
    );
}

/// One call of the client: sent from what it believes ctxhost holds; a base ctxhost refuses
/// (the server restarted and knows only its view's end) is sent again from what ctxhost says
/// it holds, when the client agrees there, else from nothing.
async fn sync(c: &mut Client, id: &str, method: &str, base: usize, next: &ClientView) -> Value {
    let r = c.call(method, params(id, next.delta(base))).await;
    if r["error"]["code"] != -32012 {
        assert!(r.get("error").is_none(), "{method}: {r}");
        return r["result"].clone();
    }
    let held = r["error"]["data"]["count"].as_u64().unwrap() as usize;
    let from =
        if held <= next.texts.len() && r["error"]["data"]["hash"] == json!(next.hash_at(held)) {
            held
        } else {
            0
        };
    c.ok(method, params(id, next.delta(from))).await
}

#[derive(Clone, Debug)]
enum Op {
    /// `n` new messages at the end.
    Append(usize),
    /// The messages from `at` (per mille of the view) replaced by `n` new ones.
    Rewrite(u16, usize),
    /// The view cut to `at` (per mille).
    Truncate(u16),
    /// The newest `n` messages cut off earlier are back at the end.
    Restore(usize),
    /// The last call sent again (its answer lost).
    Resend,
    /// A new server process on the same state.
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1usize..4).prop_map(Op::Append),
        2 => (0u16..=1000, 0usize..3).prop_map(|(a, n)| Op::Rewrite(a, n)),
        2 => (0u16..=1000).prop_map(Op::Truncate),
        2 => (1usize..3).prop_map(Op::Restore),
        1 => Just(Op::Resend),
        1 => Just(Op::Restart),
    ]
}

async fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let engine = write_engine(dir.path(), "keepall.lua", KEEP_ALL);
    let mut c = delta_client(&state, &engine).await;
    let id = "s-delta";
    let mut view = ClientView::default();
    let mut cut: Vec<String> = Vec::new();
    let mut fresh = 0;
    let mut new_text = || {
        fresh += 1;
        format!("message {fresh}")
    };
    let mut last: Option<(String, Value)> = None;
    for (i, op) in ops.iter().enumerate() {
        let what = format!("op {i} {op:?} of {ops:?}");
        let mut texts = view.texts.clone();
        match op {
            Op::Append(n) => texts.extend((0..*n).map(|_| new_text())),
            Op::Rewrite(at, n) => {
                let at = texts.len() * usize::from(*at) / 1000;
                cut.extend(texts.drain(at..));
                texts.extend((0..*n).map(|_| new_text()));
            }
            Op::Truncate(at) => {
                let at = texts.len() * usize::from(*at) / 1000;
                cut.extend(texts.drain(at..));
            }
            Op::Restore(n) => {
                let back = cut.len().saturating_sub(*n);
                texts.extend(cut.drain(back..));
            }
            Op::Resend => {
                if let Some((method, p)) = &last {
                    let r = c.call(method, p.clone()).await;
                    if r["error"]["code"] == -32012 {
                        // After a restart ctxhost knows the hash at its view's end only: a
                        // re-sent call from further back is refused, and changes nothing.
                        assert_eq!(
                            r["error"]["data"],
                            json!({"count": view.texts.len(), "hash": view.hash_at(view.texts.len())}),
                            "{what}: {r}"
                        );
                    } else {
                        assert!(r.get("error").is_none(), "{what}: {r}");
                        assert_same_view(&r["result"], &view, &what);
                    }
                }
                continue;
            }
            Op::Restart => {
                c.close().await;
                c = delta_client(&state, &engine).await;
                continue;
            }
        }
        let next = ClientView::of(texts);
        let base = view
            .texts
            .iter()
            .zip(&next.texts)
            .take_while(|(a, b)| a == b)
            .count();
        // Appends go as ingestBatch now and then, and a view as afterTurn: the same view.
        let method = match (op, i % 3) {
            (Op::Append(_), 0) => "ingestBatch",
            (_, 1) => "afterTurn",
            _ => "assemble",
        };
        let r = sync(&mut c, id, method, base, &next).await;
        assert_same_view(&r, &next, &what);
        last = Some((method.to_owned(), params(id, next.delta(base))));
        view = next;
    }
    // A last assemble shows the whole view.
    let r = sync(&mut c, id, "assemble", view.texts.len(), &view).await;
    assert_same_view(&r, &view, "the last assemble");
    c.close().await;
    let transcript = sessions_under(&state)
        .into_iter()
        .next()
        .unwrap()
        .join("transcript.jsonl");
    let stored = durability::stored_texts(&transcript);
    let mut counts = std::collections::BTreeMap::new();
    for t in &stored {
        *counts.entry(t.clone()).or_insert(0) += 1;
    }
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "stored twice {twice:?} after {ops:?}");
    for t in &view.texts {
        assert!(counts.contains_key(t), "{t} never stored after {ops:?}");
    }
}

fn sessions_under(state: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(state.join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn after_every_call_ctxhosts_view_is_the_clients_and_nothing_is_stored_twice(
        ops in prop::collection::vec(op(), 1..18)
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(run(ops));
    }
}

/// Found by the property: messages cut off and brought back in another order than they were
/// stored (`message 2` before `message 1`) are matched, not stored again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_brought_back_in_another_order_are_not_stored_again() {
    use Op::{Append, Restore, Truncate};
    run(vec![
        Append(3),
        Truncate(334),
        Restore(1),
        Truncate(0),
        Restore(1),
        Restore(2),
    ])
    .await;
}

#[tokio::test]
async fn a_base_that_disagrees_is_refused_with_what_ctxhost_holds_and_nothing_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let engine = write_engine(dir.path(), "keepall.lua", KEEP_ALL);
    let mut c = delta_client(&state, &engine).await;
    let v = ClientView::of(vec!["one".into(), "two".into()]);
    let r = c.ok("assemble", params("s", v.delta(0))).await;
    assert_same_view(&r, &v, "first");
    let stored_before =
        durability::stored_texts(&sessions_under(&state)[0].join("transcript.jsonl"));

    // The client believes ctxhost holds something else at place 2.
    let other = ClientView::of(vec!["one".into(), "TWO".into(), "three".into()]);
    let r = c.call("assemble", params("s", other.delta(2))).await;
    assert_eq!(r["error"]["code"], -32012, "{r}");
    assert_eq!(
        r["error"]["data"],
        json!({"count": 2, "hash": v.hash_at(2)}),
        "{r}"
    );
    // A base past what ctxhost holds, and a base with no hash, likewise.
    let longer = ClientView::of(vec!["one".into(), "two".into(), "x".into(), "y".into()]);
    let r = c.call("assemble", params("s", longer.delta(3))).await;
    assert_eq!(r["error"]["code"], -32012, "{r}");
    let mut no_hash = longer.delta(2);
    no_hash["baseHash"] = Value::Null;
    let r = c.call("ingestBatch", params("s", no_hash)).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["error"]["data"]["param"], "view.baseHash", "{r}");
    c.close().await;
    assert_eq!(
        durability::stored_texts(&sessions_under(&state)[0].join("transcript.jsonl")),
        stored_before,
        "nothing of a refused call was stored"
    );
}

#[tokio::test]
async fn a_window_refers_to_the_clients_messages_and_sends_whole_only_what_ctxhost_made() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // Keeps the newest 2 (a summary of the rest once compacted).
    let engine = write_engine(dir.path(), "window.lua", &window_engine("v1", 3, true));
    let mut c = delta_client(&state, &engine).await;
    let v = ClientView::of((0..6).map(|i| format!("m{i}")).collect());
    let r = c.ok("assemble", params("s", v.delta(0))).await;
    assert_eq!(r["window"], json!([[3, 6]]), "{r}");
    assert!(r.get("messages").is_none(), "{r}");
    let r = c
        .ok(
            "compact",
            json!({"sessionId": "s", "sessionKey": "s", "force": true, "tokenBudget": 100}),
        )
        .await;
    assert_eq!(r["compacted"], true, "{r}");
    let r = c.ok("assemble", params("s", v.delta(6))).await;
    let window = r["window"].as_array().unwrap();
    assert_eq!(window.len(), 2, "{r}");
    assert_eq!(
        window[0]["role"], "compactionSummary",
        "made by ctxhost: sent whole: {r}"
    );
    assert_eq!(window[1], json!(5), "{r}");
    // The tool loop's messages after an echoed window: this call's context only, referred
    // to past the view's end.
    let tail = vec![
        json!({"role": "assistant", "content": [{"type": "text", "text": "calling"}], "timestamp": 9}),
    ];
    let mut p = params("s", json!({"base": 6, "baseHash": v.hash_at(6)}));
    p["tail"] = json!(tail);
    let r = c.ok("assemble", p).await;
    assert_eq!(slots(&r).last(), Some(&Some(6)), "{r}");
    assert_eq!(r["view"]["count"], 6, "the tail is not the view: {r}");
    c.close().await;
}

#[tokio::test]
async fn a_connection_that_did_not_ask_for_delta_views_speaks_the_full_form() {
    let dir = tempfile::tempdir().unwrap();
    let engine = write_engine(dir.path(), "keepall.lua", KEEP_ALL);
    let mut c = Client::start(&dir.path().join("state"));
    let r = c.init(&engine).await;
    assert_eq!(r["views"], "full");
    let v = ClientView::of(vec!["one".into()]);
    let r = c.call("assemble", params("s", v.delta(0))).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["error"]["data"]["param"], "view", "{r}");
    let r = c
        .ok(
            "assemble",
            json!({"sessionId": "s", "messages": [user("one")], "tokenBudget": 1000}),
        )
        .await;
    assert!(r["messages"].is_array() && r.get("view").is_none(), "{r}");
    c.close().await;
}

/// Leaves every compaction summary out of its window: the host must put the newest back.
const DROPS_SUMMARIES: &str = r#"local M = { info = { id = "nosummary", name = "No summary", ownsCompaction = true } }
function M.ingest(p) return { ingested = true } end
function M.assemble(p)
  local out = {}
  for _, m in ipairs(p.messages) do
    if m.role ~= "compactionSummary" then out[#out + 1] = m end
  end
  return { messages = out, estimatedTokens = 1 }
end
function M.compact(p) return { ok = true, compacted = false, reason = "never" } end
return M
"#;

/// A compaction summary that arrives inside a delta's appended messages (not first, so the
/// view is not rebased on it) is the context's newest summary from then on: an engine that
/// leaves it out gets it put back (the session keeps where the newest summary is as messages
/// are appended, rather than looking for it on every call).
#[tokio::test]
async fn a_summary_appended_mid_delta_is_put_back_when_the_engine_leaves_it_out() {
    let dir = tempfile::tempdir().unwrap();
    let engine = write_engine(dir.path(), "nosummary.lua", DROPS_SUMMARIES);
    let mut c = delta_client(&dir.path().join("state"), &engine).await;
    let summary = json!({"role": "compactionSummary", "summary": "they talked", "tokensBefore": 900, "timestamp": 7});
    let view = json!({"base": 0, "baseHash": null,
                      "append": [user("q1"), summary, user("q2")],
                      "hashes": ["0000000000000001", "0000000000000002", "0000000000000003"]});
    let r = c.ok("assemble", params("s-sum", view)).await;
    assert_eq!(r["view"]["count"], 3, "{r}");
    assert!(
        slots(&r).contains(&Some(1)),
        "the summary (place 1) is in the window: {r}"
    );
    // And still after more messages are appended behind it.
    let view = json!({"base": 3, "baseHash": "0000000000000003",
                      "append": [user("q3")], "hashes": ["0000000000000004"]});
    let r = c.ok("assemble", params("s-sum", view)).await;
    assert!(slots(&r).contains(&Some(1)), "{r}");
    c.close().await;
}

/// A delta whose messages carry ids: the client's own ids are its messages (mirrored); the
/// session's own entry ids (a window the client sent back whole) are an echo, nothing mirrored
/// and nothing stored. The session answers that from its index of its context's ids, kept up
/// to date with what later calls appended: an entry stored after the first delta that carried
/// ids is recognised too.
#[tokio::test]
async fn a_delta_carrying_ids_is_mirrored_unless_they_are_the_sessions_own_entries() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let engine = write_engine(dir.path(), "keepall.lua", KEEP_ALL);
    let mut c = delta_client(&state, &engine).await;
    let mut v = ClientView::default();
    v.push("a".into());
    let mut delta = v.delta(0);
    delta["append"][0]["id"] = json!("client-a");
    let r = c.ok("assemble", params("s", delta)).await;
    assert_same_view(&r, &v, "a client's own id");
    v.push("b".into());
    let r = c.ok("assemble", params("s", v.delta(1))).await;
    assert_same_view(&r, &v, "no id");
    // The entry id `b` is stored under, as a window sent whole would carry it.
    let transcript = sessions_under(&state).remove(0).join("transcript.jsonl");
    let b = std::fs::read_to_string(&transcript)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["type"] == "message" && e["message"]["content"] == "b")
        .expect("b is stored");
    let b_id = b["id"].as_str().unwrap().to_owned();
    let mut echoed = user("b");
    echoed["id"] = json!(b_id);
    let echo = json!({"base": 2, "baseHash": v.hash_at(2), "append": [echoed, user("c")],
                      "hashes": [hex(1), hex(2)]});
    let r = c.ok("assemble", params("s", echo)).await;
    assert_eq!(r["view"]["count"], 2, "an echo is not mirrored: {r}");
    assert_eq!(
        r["systemPromptAddition"], "a\nb\nc",
        "what follows the echo is this call's context: {r}"
    );
    // The client's view goes on from what ctxhost holds.
    v.push("d".into());
    let r = c.ok("assemble", params("s", v.delta(2))).await;
    assert_same_view(&r, &v, "after the echo");
    c.close().await;
    assert_eq!(
        super::durability::stored_texts(&transcript),
        ["a", "b", "d"],
        "nothing of the echo is stored"
    );
}
