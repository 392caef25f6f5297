//! Property tests over generated frames: objects, arrays, wrong types, unicode, lone
//! surrogates, deep nesting, ids of every type. Every request with a readable id is answered
//! once with that id, every other answer carries `id: null`, notifications and answers are
//! never answered, and the server neither panics nor stops. A second one takes the wire corpus
//! kept in the repository (`tests/fixtures/corpus/wire/frames.jsonl`) as its seeds: frames of
//! it, some with bytes cut, flipped or spliced in; the frames left whole get what the corpus
//! says they are owed, no frame is answered twice, and the server goes on. Both run a fixed
//! number of cases (a bounded time in CI, with `cargo test`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::*;

/// What the server owes a frame.
#[derive(Clone, Debug, PartialEq)]
enum Owed {
    /// An answer with this id.
    Answer(Value),
    /// Nothing (a notification, an answer to ctxhost).
    Nothing,
}

fn id() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        // Fractions that survive a parse exactly (an f64 id is echoed as parsed).
        (-1_000_000i64..1_000_000).prop_map(|n| Value::from(n as f64 / 4.0)),
        ".{0,12}".prop_map(Value::from),
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        Just(json!({"id": 1})),
        Just(json!([1])),
    ]
}

fn method() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "info", "assemble", "ingest", "ingestBatch", "compact", "afterTurn", "commitTurn",
            "maintain", "bootstrap", "dispose", "prepareSubagentSpawn", "onSubagentEnded",
            "rollbackSubagentSpawn", "$/cancelRequest", "assembel", "",
        ])
        .prop_map(Value::from),
        1 => ".{0,10}".prop_map(Value::from),
        1 => any::<i32>().prop_map(Value::from),
        1 => Just(Value::Null),
        1 => Just(json!(["info"])),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1.0e6f64..1.0e6).prop_map(Value::from),
        "\\PC{0,16}".prop_map(Value::from),
    ]
}

fn params() -> impl Strategy<Value = Value> {
    let keys = prop::sample::select(vec![
        "sessionKey",
        "sessionId",
        "messages",
        "message",
        "tokenBudget",
        "prompt",
        "id",
        "advancementKey",
        "childSessionKey",
        "reason",
        "availableTools",
        "isHeartbeat",
    ]);
    let value = leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop_oneof![
        3 => prop::collection::btree_map(keys, value.clone(), 0..5)
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        1 => value,
    ]
}

/// A frame as the generator built it, and what (beyond text tweaks) it owes.
#[derive(Clone, Debug)]
struct Frame {
    value: Value,
    /// A member with a lone surrogate escape is put in the text.
    surrogate: bool,
    /// A member nested this deep is put in the text.
    deep: usize,
    /// The text is cut short (not JSON any more).
    truncate: bool,
}

fn frame() -> impl Strategy<Value = Frame> {
    let member = |s: BoxedStrategy<Value>| prop::option::weighted(0.85, s);
    let object = (
        member(prop_oneof![Just(json!("2.0")), Just(json!("1.0")), leaf()].boxed()),
        member(id().boxed()),
        member(method().boxed()),
        prop::option::weighted(0.7, params()),
        prop::option::weighted(0.1, leaf()),
    )
        .prop_map(|(jsonrpc, id, method, params, result)| {
            let mut o = Map::new();
            let mut put = |k: &str, v: Option<Value>| {
                if let Some(v) = v {
                    o.insert(k.to_owned(), v);
                }
            };
            put("jsonrpc", jsonrpc);
            put("id", id);
            put("method", method);
            put("params", params);
            put("result", result);
            Value::Object(o)
        });
    let value = prop_oneof![
        8 => object,
        1 => prop::collection::vec(leaf(), 0..4).prop_map(Value::from),
        1 => leaf(),
    ];
    (
        value,
        prop::bool::weighted(0.15),
        prop_oneof![6 => Just(0usize), 1 => 100usize..300],
        prop::bool::weighted(0.05),
    )
        .prop_map(|(value, surrogate, deep, truncate)| Frame {
            value,
            surrogate,
            deep,
            truncate,
        })
}

impl Frame {
    fn text(&self) -> String {
        let mut text = self.value.to_string();
        if let Value::Object(_) = &self.value {
            let mut extra = String::new();
            if self.surrogate {
                extra.push_str(r#""note":"cut \ud83d here","#);
            }
            if self.deep > 0 {
                extra.push_str(&format!(
                    r#""deep":{}0{},"#,
                    "[".repeat(self.deep),
                    "]".repeat(self.deep)
                ));
            }
            text.insert_str(1, &extra);
            if text.ends_with(",}") {
                text.replace_range(text.len() - 2.., "}");
            }
        }
        if self.truncate && text.len() > 2 {
            let mut cut = text.len() / 2;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('\u{1}');
        }
        text
    }

    fn owed(&self) -> Owed {
        if self.truncate {
            return Owed::Answer(Value::Null);
        }
        let Value::Object(o) = &self.value else {
            return Owed::Answer(Value::Null);
        };
        let method = o.get("method");
        let id = o.get("id");
        let readable = id.filter(|v| v.is_number() || v.is_string()).cloned();
        if method.is_none() && (o.contains_key("result") || o.contains_key("error")) {
            return Owed::Nothing;
        }
        let Some(id) = id else {
            return match method {
                Some(_) => Owed::Nothing,
                None => Owed::Answer(Value::Null),
            };
        };
        let ok_request =
            o.get("jsonrpc") == Some(&json!("2.0")) && method.is_some_and(Value::is_string);
        match readable {
            Some(_) if ok_request && method == Some(&json!("$/cancelRequest")) => Owed::Nothing,
            Some(id) => Owed::Answer(id),
            None => {
                let _ = id;
                Owed::Answer(Value::Null)
            }
        }
    }
}

async fn run(frames: Vec<Frame>) {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Client::start(&dir.path().join("state"));
    let mut owed = Vec::new();
    for f in &frames {
        c.send_raw(&f.text()).await;
        if let Owed::Answer(id) = f.owed() {
            owed.push(id);
        }
    }
    // Before `initialize` every frame is answered inline, in order; the sentinel comes last.
    c.send_raw(r#"{"jsonrpc":"2.0","id":"sentinel","method":"info"}"#)
        .await;
    let mut answered = Vec::new();
    loop {
        let r = c.recv().await;
        if r["id"] == "sentinel" {
            break;
        }
        assert!(
            r.get("error").is_some(),
            "only errors before initialize: {r}"
        );
        answered.push(r["id"].clone());
    }
    assert_eq!(
        answered,
        owed,
        "frames: {:#?}",
        frames.iter().map(Frame::text).collect::<Vec<_>>()
    );
    c.close().await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_request_is_answered_once_with_its_id_and_no_notification_is(
        frames in prop::collection::vec(frame(), 1..12)
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(run(frames));
    }
}

/// A byte-level change to a corpus frame: cut at, flip at, or splice bytes in at a fraction of
/// its length (never a newline: one frame stays one line).
#[derive(Clone, Debug)]
enum Change {
    Cut(f64),
    Flip(f64, u8),
    Splice(f64, Vec<u8>),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        (0.0..1.0f64).prop_map(Change::Cut),
        (0.0..1.0f64, any::<u8>()).prop_map(|(at, b)| Change::Flip(at, b)),
        (
            0.0..1.0f64,
            prop::collection::vec(
                prop_oneof![
                    any::<u8>(),
                    Just(b'{'),
                    Just(b'"'),
                    Just(b']'),
                    Just(b'\\'),
                    Just(b',')
                ],
                0..8
            )
        )
            .prop_map(|(at, with)| Change::Splice(at, with)),
    ]
}

fn apply(text: &str, change: &Change) -> String {
    let mut bytes = text.as_bytes().to_vec();
    let at = |f: f64, len: usize| ((len as f64 * f) as usize).min(len);
    match change {
        Change::Cut(f) => bytes.truncate(at(*f, bytes.len())),
        Change::Flip(f, b) => {
            let i = at(*f, bytes.len());
            if i < bytes.len() {
                bytes[i] ^= b | 1;
            }
        }
        Change::Splice(f, with) => {
            let i = at(*f, bytes.len());
            bytes.splice(i..i, with.iter().copied());
        }
    }
    for b in &mut bytes {
        if matches!(*b, b'\n' | b'\r') {
            *b = b' ';
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Sends corpus frames (`picks`, each changed or not) before `initialize`, where every answer
/// is written in order, then a sentinel; checks what each frame got.
async fn run_mutated(picks: Vec<(prop::sample::Index, Option<Change>)>) {
    let cases = super::corpus::corpus();
    let dir = tempfile::tempdir().unwrap();
    let mut c = Client::start(&dir.path().join("state"));
    let (mut owed, mut changed, mut sent) = (Vec::new(), 0usize, Vec::new());
    for (pick, change) in &picks {
        let (_, frame, owes) = &cases[pick.index(cases.len())];
        let text = match change {
            Some(change) => {
                changed += 1;
                apply(frame, change)
            }
            None => {
                owed.extend(owes.clone());
                frame.clone()
            }
        };
        c.send_raw(&text).await;
        sent.push(text);
    }
    c.send_raw(r#"{"jsonrpc":"2.0","id":"sentinel","method":"info"}"#)
        .await;
    let mut answered = Vec::new();
    loop {
        let r = c.recv().await;
        if r["id"] == "sentinel" {
            break;
        }
        answered.push(r["id"].clone());
    }
    // The frames left whole got what they are owed (as a multiset: a changed frame may owe an
    // answer with the same id), and no frame got two answers.
    let got = super::corpus::tally(answered.iter().cloned());
    for (id, n) in super::corpus::tally(owed.iter().cloned()) {
        assert!(
            got.get(&id).copied().unwrap_or(0) >= n,
            "{id} owed {n}, got {got:?}; frames: {sent:#?}"
        );
    }
    assert!(
        answered.len() <= owed.len() + changed,
        "{} answers to {} frames owed {} and {changed} changed: {sent:#?}",
        answered.len(),
        sent.len(),
        owed.len()
    );
    c.close().await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn corpus_frames_changed_or_whole_get_what_they_are_owed(
        picks in prop::collection::vec((any::<prop::sample::Index>(), prop::option::weighted(0.6, change())), 1..10)
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(run_mutated(picks));
    }
}
