//! Property tests: input a user or a script controls never panics the host, and pairing repair
//! always gives a well-paired context.
//!
//! - transcript import over arbitrary bytes and over real transcript lines with bytes cut,
//!   flipped or spliced, in every format;
//! - config parsing over arbitrary text and over a real config with bytes changed;
//! - result validation over arbitrary JSON as an `assemble` or `compact` result, a message and
//!   an `info` record;
//! - pairing repair over arbitrary sequences of calls and results.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use proptest::prelude::*;
use serde_json::{Value as Json, json};

use ctxhost::config::Config;
use ctxhost::contract::message::Message;
use ctxhost::contract::{
    AssembleResult, CompactResult, ResultLimits, check_assemble, check_compact,
};
use ctxhost::testing::info_from_json;
use ctxhost::testing::pairing;
use ctxhost::transcript::import::{Format, import_bytes};

/// The fuzz corpus kept in the repository: small inputs at the edges of each format (a lone
/// surrogate escape, deep nesting, a BOM and CRLF, numbers past f64, wrong types, truncated
/// lines, an empty file), imported as they are and used as mutation seeds.
fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus/import");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 5, "the import corpus is missing");
    files
}

#[test]
fn every_corpus_input_imports_or_fails_naming_the_file_in_every_format() {
    for file in corpus() {
        let bytes = std::fs::read(&file).unwrap();
        for format in Format::ALL {
            if let Err(e) = import_bytes(&file, &bytes, format) {
                let name = file.file_name().unwrap().to_string_lossy().into_owned();
                assert!(e.to_string().contains(&name), "{format}: {e}");
            }
        }
    }
}

/// Lines of real transcripts, one per format (the first lines, where headers and first
/// messages are), and of the corpus, to mutate.
fn real_lines() -> &'static [String] {
    static LINES: OnceLock<Vec<String>> = OnceLock::new();
    LINES.get_or_init(|| {
        let mut lines = Vec::new();
        for file in common::shared_transcripts().into_iter().chain(corpus()) {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            lines.extend(text.lines().take(40).map(|l| {
                // Keep lines short enough that a case stays cheap.
                let mut end = l.len().min(4_000);
                while !l.is_char_boundary(end) {
                    end -= 1;
                }
                l[..end].to_owned()
            }));
        }
        lines
    })
}

const CONFIG: &str = r#"{
  // a config as a user writes one
  host: { window: 8000, failurePolicy: "fallback", limits: { deadlineMs: 500 } },
  plugins: {
    slots: { contextEngine: "mine" },
    entries: { mine: { path: "engines/mine.lua", config: { keep: [1, 2, 3] } } },
  },
}"#;

/// A byte-level change: cut at, flip at, or splice `with` in at a fraction of the length.
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
                prop_oneof![any::<u8>(), Just(b'{'), Just(b'"'), Just(b']'), Just(b'\n')],
                0..12
            )
        )
            .prop_map(|(at, with)| Change::Splice(at, with)),
    ]
}

fn apply(bytes: &mut Vec<u8>, change: &Change) {
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
}

/// JSON of any shape, with the field names results and messages use, so deserializing gets
/// past the first field more often than random names would.
fn json_value() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::from),
        any::<i64>().prop_map(Json::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Json::Null, Json::Number)),
        "[a-z\u{e9}\u{1F600}]{0,8}".prop_map(Json::from),
        prop_oneof![
            Just("user"),
            Just("assistant"),
            Just("toolResult"),
            Just("compactionSummary"),
            Just("text"),
            Just("toolCall"),
        ]
        .prop_map(Json::from),
    ];
    let key = prop_oneof![
        Just("messages"),
        Just("estimatedTokens"),
        Just("systemPromptAddition"),
        Just("ok"),
        Just("compacted"),
        Just("result"),
        Just("summary"),
        Just("firstKeptEntryId"),
        Just("tokensBefore"),
        Just("role"),
        Just("content"),
        Just("id"),
        Just("type"),
        Just("text"),
        Just("toolCallId"),
        Just("arguments"),
        Just("name"),
        Just("ownsCompaction"),
        Just("version"),
    ]
    .prop_map(String::from);
    leaf.prop_recursive(5, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Json::Array),
            prop::collection::btree_map(key.clone(), inner, 0..6)
                .prop_map(|m| Json::Object(m.into_iter().collect())),
        ]
    })
}

/// One message of a tool-using conversation, over a few call ids so calls and results meet.
fn message() -> impl Strategy<Value = Json> {
    let call = "c[0-4]";
    prop_oneof![
        Just(json!({"role": "user", "content": "go on"})),
        Just(json!({"role": "assistant", "content": [{"type": "text", "text": "ok"}]})),
        prop::collection::vec(call, 1..3).prop_map(|ids| {
            let blocks: Vec<Json> = ids
                .iter()
                .map(|c| json!({"type": "toolCall", "id": c, "name": "read", "arguments": {}}))
                .collect();
            json!({"role": "assistant", "content": blocks})
        }),
        call.prop_map(
            |c| json!({"role": "toolResult", "toolCallId": c, "toolName": "read",
            "content": [{"type": "text", "text": "out"}], "isError": false})
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn import_never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2_000)) {
        for format in Format::ALL {
            let _ = import_bytes(Path::new("fuzz.jsonl"), &bytes, format);
        }
    }

    #[test]
    fn import_never_panics_on_damaged_real_lines(
        picks in prop::collection::vec(any::<prop::sample::Index>(), 1..8),
        changes in prop::collection::vec(change(), 1..4),
    ) {
        let lines = real_lines();
        prop_assume!(!lines.is_empty());
        let mut bytes = picks
            .iter()
            .map(|i| lines[i.index(lines.len())].as_str())
            .collect::<Vec<_>>()
            .join("\n")
            .into_bytes();
        for c in &changes {
            apply(&mut bytes, c);
        }
        for format in Format::ALL {
            let _ = import_bytes(Path::new("fuzz.jsonl"), &bytes, format);
        }
    }

    #[test]
    fn config_parsing_never_panics(text in "\\PC{0,300}", changes in prop::collection::vec(change(), 0..4)) {
        let _ = Config::parse(&text, "fuzz.json5");
        let mut bytes = CONFIG.as_bytes().to_vec();
        for c in &changes {
            apply(&mut bytes, c);
        }
        let _ = Config::parse(&String::from_utf8_lossy(&bytes), "fuzz.json5");
    }

    #[test]
    fn result_validation_never_panics(value in json_value()) {
        let limits = ResultLimits::default();
        if let Ok(r) = serde_json::from_value::<AssembleResult>(value.clone()) {
            let _ = check_assemble(&r, &limits);
        }
        if let Ok(r) = serde_json::from_value::<CompactResult>(value.clone()) {
            let _ = check_compact(&r, &limits);
        }
        let _ = serde_json::from_value::<Message>(value.clone());
        let _ = info_from_json(value, "table");
    }

    #[test]
    fn pairing_repair_always_gives_a_well_paired_context(seq in prop::collection::vec(message(), 0..16)) {
        let messages: Vec<Arc<Message>> = seq
            .iter()
            .enumerate()
            .map(|(i, j)| {
                let mut j = j.clone();
                j["id"] = json!(format!("m{i}"));
                Arc::new(serde_json::from_value::<Message>(j).expect("message"))
            })
            .collect();
        let users = messages.iter().filter(|m| m.role().as_str() == "user").count();
        let was_paired = pairing::is_well_paired(&messages);
        let repaired = pairing::repair(messages.clone());
        prop_assert!(pairing::is_well_paired(&repaired.messages));
        prop_assert_eq!(
            repaired.messages.iter().filter(|m| m.role().as_str() == "user").count(),
            users,
            "repair never drops a user message"
        );
        if was_paired {
            prop_assert!(repaired.repairs.is_empty());
            prop_assert_eq!(repaired.messages.len(), messages.len());
        }
    }
}
