//! The wire corpus kept in the repository (`tests/fixtures/corpus/wire/frames.jsonl`): frames
//! at the edges of JSON-RPC and of what real clients send, each with what the server owes it (an
//! answer with its id, an answer with `id: null`, or nothing). Replayed before and after
//! `initialize`; the generated frames of [`super::fuzz`] cover the space around them, and its
//! mutations of these frames the space near them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::collections::BTreeMap;

use serde_json::Value;

use super::*;

/// Each case: its name, the frame's text, and the id it is owed an answer with (`None`: owed
/// nothing). [`super::fuzz`] mutates them too.
pub(super) fn corpus() -> Vec<(String, String, Option<Value>)> {
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus/wire/frames.jsonl");
    let cases: Vec<_> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let owes = match &v["owes"] {
                Value::String(s) if s == "nothing" => None,
                other => Some(other.clone()),
            };
            (
                v["case"].as_str().unwrap().to_owned(),
                v["frame"].as_str().unwrap().to_owned(),
                owes,
            )
        })
        .collect();
    assert!(
        cases.len() >= 20,
        "the wire corpus is missing: {}",
        file.display()
    );
    cases
}

/// How many answers each id is owed, as text (ids of any type, `null` among them).
pub(super) fn tally(ids: impl IntoIterator<Item = Value>) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for id in ids {
        *out.entry(id.to_string()).or_insert(0) += 1;
    }
    out
}

async fn replay_corpus(initialized: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _) = if initialized {
        let (c, engine) = Client::on(dir.path(), &window_engine("v1", 2, true)).await;
        (c, Some(engine))
    } else {
        (Client::start(&dir.path().join("state")), None)
    };
    let cases = corpus();
    for (_, frame, _) in &cases {
        c.send_raw(frame).await;
    }
    let owed = tally(cases.iter().filter_map(|(_, _, o)| o.clone()));
    let total: usize = owed.values().sum();
    let mut answered = Vec::new();
    while answered.len() < total {
        answered.push(c.recv().await["id"].clone());
    }
    // Nothing more: the next answer is the sentinel's.
    c.send_raw(r#"{"jsonrpc":"2.0","id":"sentinel","method":"info"}"#)
        .await;
    let next = c.recv().await;
    assert_eq!(next["id"], "sentinel", "an answer nothing was owed: {next}");
    assert_eq!(
        tally(answered),
        owed,
        "cases: {:#?}",
        cases.iter().map(|(n, _, o)| (n, o)).collect::<Vec<_>>()
    );
    c.close().await;
}

#[tokio::test]
async fn every_corpus_frame_gets_what_it_is_owed_before_initialize() {
    replay_corpus(false).await;
}

#[tokio::test]
async fn every_corpus_frame_gets_what_it_is_owed_once_serving() {
    replay_corpus(true).await;
}
