use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;

use super::*;
use crate::contract::message::COMPACTION_SUMMARY_PREFIX;

fn msg(v: serde_json::Value) -> Message {
    serde_json::from_value(v).unwrap()
}

fn stored(id: &str, m: Message) -> Arc<Message> {
    Arc::new(Message { id: id.into(), ..m })
}

/// Wraps a counter and records how often it was asked to count.
#[derive(Debug, Default)]
struct Counting {
    messages: AtomicUsize,
    texts: AtomicUsize,
}

impl Counting {
    fn calls(&self) -> (usize, usize) {
        (
            self.messages.load(Ordering::SeqCst),
            self.texts.load(Ordering::SeqCst),
        )
    }
}

impl TokenCounter for Counting {
    fn name(&self) -> &'static str {
        "counting"
    }

    fn count_text(&self, text: &str) -> u64 {
        self.texts.fetch_add(1, Ordering::SeqCst);
        Estimate.count_text(text)
    }

    fn count_message(&self, message: &Message) -> u64 {
        self.messages.fetch_add(1, Ordering::SeqCst);
        message_tokens(|t| Estimate.count_text(t), message)
    }
}

#[test]
fn estimate_ascii_is_chars_over_four_rounded_up() {
    assert_eq!(Estimate.count_text(""), 0);
    assert_eq!(Estimate.count_text("a"), 1);
    assert_eq!(Estimate.count_text("abcd"), 1);
    assert_eq!(Estimate.count_text("abcde"), 2);
    assert_eq!(Estimate.count_text("abcdefgh"), 2);
    assert_eq!(Estimate.count_text(&"x".repeat(401)), 101);
}

#[test]
fn estimate_weights_cjk_as_a_token_each() {
    assert_eq!(Estimate.count_text("你好世界"), 4);
    assert_eq!(Estimate.count_text("こんにちは"), 5);
    assert_eq!(Estimate.count_text("안녕"), 2);
    // 4 CJK chars (16) + "hi " (3) = 19 -> 5.
    assert_eq!(Estimate.count_text("hi 你好世界"), 5);
    // Non-CJK non-ASCII counts by chars, not bytes: "é" is 2 bytes but 1 char.
    assert_eq!(Estimate.count_text("éééé"), 1);
    // 2 CJK (8) + "ab" (2) + "é" (1) = 11 -> 3.
    assert_eq!(Estimate.count_text("ab你é好"), 3);
}

#[test]
fn image_block_counts_image_tokens() {
    let m = msg(json!({"role":"user","content":[
        {"type":"image","data":"AAAA","mimeType":"image/png"}]}));
    assert_eq!(Estimate.count_message(&m), 2_000);
    assert_eq!(IMAGE_TOKENS, 2_000);
    let m = msg(json!({"role":"user","content":[
        {"type":"text","text":"abcd"},
        {"type":"image","data":"","mimeType":"image/png"}]}));
    assert_eq!(Estimate.count_message(&m), 2_001);
    // Exact counters count images the same way.
    let o200k = counter(Tokenizer::O200k).unwrap();
    assert_eq!(o200k.count_message(&m), 2_000 + o200k.count_text("abcd"));
}

#[test]
fn tool_call_counts_name_and_json_arguments() {
    let m = msg(json!({"role":"assistant","content":[
        {"type":"toolCall","id":"c1","name":"read","arguments":{"path":"/a/b.rs"}}]}));
    let args = r#"{"path":"/a/b.rs"}"#;
    assert_eq!(args.len(), 18);
    // "read" = 1, args 18 chars = 5.
    assert_eq!(Estimate.count_message(&m), 1 + 5);
    let m = msg(json!({"role":"assistant","content":[
        {"type":"thinking","thinking":"abcdefgh"},
        {"type":"text","text":"abcd"},
        {"type":"toolCall","id":"c1","name":"read","arguments":{"path":"/a/b.rs"}}]}));
    assert_eq!(Estimate.count_message(&m), 2 + 1 + 1 + 5);
}

#[test]
fn excluded_custom_messages_count_zero() {
    let text = "x".repeat(100);
    let excluded = msg(json!({"role":"custom","customType":"bashExecution",
        "content":text,"excludeFromContext":true}));
    assert_eq!(Estimate.count_message(&excluded), 0);
    let included = msg(json!({"role":"custom","customType":"bashExecution","content":text}));
    assert_eq!(Estimate.count_message(&included), 25);
}

#[test]
fn summaries_count_with_their_wrapper_text() {
    let m = msg(json!({"role":"compactionSummary","summary":"GOAL: ship it","tokensBefore":10}));
    let wrapped = format!("{COMPACTION_SUMMARY_PREFIX}\n<summary>\nGOAL: ship it\n</summary>");
    let n = Estimate.count_message(&m);
    assert_eq!(n, Estimate.count_text(&wrapped));
    assert!(n > Estimate.count_text("GOAL: ship it") + 20, "{n}");
    let b = msg(json!({"role":"branchSummary","summary":"tried X","fromId":"a"}));
    assert!(Estimate.count_message(&b) > Estimate.count_text("tried X") + 10);
}

#[test]
fn cache_counts_each_stored_message_once_as_the_session_grows() {
    let counting = Arc::new(Counting::default());
    let cache = TokenCache::new(counting.clone());
    let mut session: Vec<Arc<Message>> = Vec::new();
    let mut expected = 0;
    for i in 0..20 {
        let m = if i % 2 == 0 {
            Message::user(format!("question {i}"))
        } else {
            Message::assistant(format!("answer number {i}"))
        };
        expected += Estimate.count_message(&m);
        session.push(stored(&format!("{i:08}"), m));
        assert_eq!(cache.messages(&session), expected);
        // Only the new message was counted on each turn.
        assert_eq!(counting.calls(), (i + 1, 0));
    }
    assert_eq!(cache.text("abcdefgh"), 2);
    assert_eq!(counting.calls(), (20, 1));
    assert_eq!(cache.counter().name(), "counting");
}

#[test]
fn cache_counts_a_modified_copy_afresh_without_evicting_the_stored_message() {
    let counting = Arc::new(Counting::default());
    let cache = TokenCache::new(counting.clone());
    let original = stored("00000001", Message::user("abcd"));
    assert_eq!(cache.message(&original), 1);
    assert_eq!(cache.message(&original), 1);
    assert_eq!(counting.calls().0, 1);

    // Same id, different content: never served the stale count.
    let copy = stored("00000001", Message::user("abcdefghijkl"));
    assert_eq!(cache.message(&copy), 3);
    assert_eq!(cache.message(&copy), 3);
    assert_eq!(counting.calls().0, 3, "a copy is counted every time");

    // The stored message is still a hit.
    assert_eq!(cache.message(&original), 1);
    assert_eq!(counting.calls().0, 3);

    // An identical but separate copy is also counted afresh (identity, not equality).
    let clone = Arc::new((*original).clone());
    assert_eq!(cache.message(&clone), 1);
    assert_eq!(counting.calls().0, 4);

    // Messages without an id are never cached.
    let made_up = Arc::new(Message::user("abcd"));
    cache.message(&made_up);
    cache.message(&made_up);
    assert_eq!(counting.calls().0, 6);
}

#[test]
fn cache_replaces_an_entry_whose_message_was_dropped_and_prunes_dead_entries() {
    let counting = Arc::new(Counting::default());
    let cache = TokenCache::new(counting.clone());
    let first = stored("00000001", Message::user("abcd"));
    cache.message(&first);
    drop(first);
    // The store reloaded the entry: the new message is cached, not counted on every call.
    let reloaded = stored("00000001", Message::user("abcdefgh"));
    assert_eq!(cache.message(&reloaded), 2);
    assert_eq!(cache.message(&reloaded), 2);
    assert_eq!(counting.calls().0, 2);

    // Many short-lived messages do not pile up in the map.
    for i in 0..2_000 {
        cache.message(&stored(&format!("x{i}"), Message::user("a")));
    }
    let len = cache.state.lock().entries.len();
    assert!(len <= MIN_PRUNE_AT + 1, "{len} entries kept");
    assert_eq!(cache.message(&reloaded), 2);
    assert_eq!(counting.calls().0, 2 + 2_000);
}

#[test]
fn tokenizer_names_parse_display_and_serde() {
    for (s, t) in [
        ("estimate", Tokenizer::Estimate),
        ("o200k", Tokenizer::O200k),
        ("o200k_base", Tokenizer::O200k),
        ("cl100k", Tokenizer::Cl100k),
        ("cl100k_base", Tokenizer::Cl100k),
    ] {
        assert_eq!(s.parse::<Tokenizer>().unwrap(), t);
    }
    for t in Tokenizer::ALL {
        assert_eq!(t.to_string().parse::<Tokenizer>().unwrap(), t);
        assert_eq!(serde_json::to_value(t).unwrap(), json!(t.name()));
        assert_eq!(
            serde_json::from_value::<Tokenizer>(json!(t.name())).unwrap(),
            t
        );
        assert_eq!(counter(t).unwrap().name(), t.name());
    }
    assert_eq!(
        serde_json::from_value::<Tokenizer>(json!("o200k_base")).unwrap(),
        Tokenizer::O200k
    );
    assert!(serde_json::from_value::<Tokenizer>(json!("O200K")).is_err());
}

#[test]
fn unknown_tokenizer_is_an_error_listing_the_valid_names() {
    for bad in ["", "gpt2", "O200k", "p50k_base", "o200k "] {
        let err = bad.parse::<Tokenizer>().unwrap_err();
        assert!(matches!(&err, Error::Tokenizer { name, .. } if name == bad));
        let msg = err.to_string();
        for valid in ["estimate", "o200k", "o200k_base", "cl100k", "cl100k_base"] {
            assert!(msg.contains(valid), "{msg:?} lacks {valid}");
        }
    }
}

#[test]
fn bpe_counters_are_built_once_and_shared() {
    let a = counter(Tokenizer::O200k).unwrap();
    let b = counter(Tokenizer::O200k).unwrap();
    assert!(std::ptr::addr_eq(Arc::as_ptr(&a), Arc::as_ptr(&b)));
    let c = counter(Tokenizer::Cl100k).unwrap();
    assert!(!std::ptr::addr_eq(Arc::as_ptr(&a), Arc::as_ptr(&c)));
}

const VARIED: &[&str] = &[
    "",
    "Hello, world!",
    "fn main() {\n    let x: Vec<u8> = vec![1, 2, 3];\n    println!(\"{x:?}\");\n}\n",
    r#"{"role":"assistant","content":[{"type":"toolCall","name":"bash","arguments":{"cmd":"ls -la /tmp"}}]}"#,
    "你好世界，这是一个测试。日本語のテキストも。한국어 문장.",
    "emoji 🎉🚀 👨‍👩‍👧‍👦 flags 🇯🇵 and ZWJ",
    "   leading spaces\n\n\ttabs\r\n trailing   ",
    "numbers 1234567890 3.14159 -42 1e10",
    "it's they're we'll I'd you've SHOUTING'S camelCaseIdentifier snake_case_name",
    "special text <|endoftext|> <|im_start|> stays ordinary",
];

#[test]
fn o200k_matches_tiktoken() {
    let ours = counter(Tokenizer::O200k).unwrap();
    let theirs = tiktoken_rs::o200k_base_singleton();
    for s in VARIED {
        assert_eq!(
            ours.count_text(s),
            theirs.encode_ordinary(s).len() as u64,
            "{s:?}"
        );
    }
    // A known count, so that both agreeing on a wrong table would still fail.
    assert_eq!(ours.count_text("Hello, world!"), 4);
}

#[test]
fn cl100k_matches_tiktoken() {
    let ours = counter(Tokenizer::Cl100k).unwrap();
    let theirs = tiktoken_rs::cl100k_base_singleton();
    for s in VARIED {
        assert_eq!(
            ours.count_text(s),
            theirs.encode_ordinary(s).len() as u64,
            "{s:?}"
        );
    }
    assert_eq!(ours.count_text("Hello, world!"), 4);
    // The two tables differ, so the test would notice a swapped table.
    let o200k = counter(Tokenizer::O200k).unwrap();
    let cjk = VARIED[4];
    assert_ne!(ours.count_text(cjk), o200k.count_text(cjk));
}

fn shared_transcripts() -> Vec<PathBuf> {
    let shared = match std::env::var_os("CTXHOST_SHARED") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"),
    };
    let dir = shared.join("data/transcripts");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()) != Some("SOURCES.md"))
        .collect();
    files.sort();
    files
}

/// The issue's figure holds as stated: 2,766,682 o200k tokens over the raw text of the seven
/// transcripts (SOURCES.md, 4,577 more, left out). Checked while writing this test: counting the
/// files one by one or concatenated gives the same number (every file ends in a newline, and no
/// BPE piece merged across a boundary), and no file contains special-token text, so tiktoken's
/// `encode_ordinary` and `encode_with_special_tokens` agree too.
#[test]
fn o200k_over_all_shared_transcripts_matches_the_issue() {
    let o200k = counter(Tokenizer::O200k).unwrap();
    let files = shared_transcripts();
    assert_eq!(files.len(), 7, "{files:?}");
    let total: u64 = files
        .iter()
        .map(|f| o200k.count_text(&std::fs::read_to_string(f).unwrap()))
        .sum();
    assert_eq!(total, 2_766_682);
}

/// The same corpus in cl100k: the issue's 2,770,901 tokens.
#[test]
fn cl100k_over_all_shared_transcripts_matches_the_issue() {
    let cl100k = counter(Tokenizer::Cl100k).unwrap();
    let total: u64 = shared_transcripts()
        .iter()
        .map(|f| cl100k.count_text(&std::fs::read_to_string(f).unwrap()))
        .sum();
    assert_eq!(total, 2_770_901);
}

/// Every piece of text the host counts, on every message of every shared transcript as the
/// importers read it (text, thinking, tool names, JSON arguments, summaries), counts what
/// tiktoken counts, in both encodings.
#[test]
fn every_message_of_every_shared_transcript_counts_as_tiktoken_does() {
    let encodings = [
        (Tokenizer::O200k, tiktoken_rs::o200k_base_singleton()),
        (Tokenizer::Cl100k, tiktoken_rs::cl100k_base_singleton()),
    ];
    let files = shared_transcripts();
    assert_eq!(files.len(), 7, "{files:?}");
    for (tokenizer, theirs) in encodings {
        let ours = counter(tokenizer).unwrap();
        let (mut messages, pieces, mut total) = (0usize, std::cell::Cell::new(0usize), 0u64);
        for file in &files {
            let import = crate::transcript::import::import(file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            for session in &import.sessions {
                for m in &session.messages {
                    let expected = message_tokens(
                        |t| {
                            let (a, b) = (ours.count_text(t), theirs.encode_ordinary(t).len());
                            assert_eq!(a, b as u64, "{tokenizer} in {}: {t:?}", file.display());
                            pieces.set(pieces.get() + 1);
                            a
                        },
                        m,
                    );
                    assert_eq!(ours.count_message(m), expected);
                    messages += 1;
                    total += expected;
                }
            }
        }
        // The corpus really was read: thousands of messages, millions of tokens.
        assert!(messages > 5_000, "{tokenizer}: {messages} messages");
        let pieces = pieces.get();
        assert!(pieces > messages, "{tokenizer}: {pieces} pieces");
        assert!(total > 1_000_000, "{tokenizer}: {total} tokens");
        eprintln!("{tokenizer}: {messages} messages, {pieces} texts, {total} tokens");
    }
}

#[test]
fn a_contexts_remembered_total_is_never_another_contexts() {
    let cache = TokenCache::new(Arc::new(Estimate));
    let text = |t: &str| msg(json!({"role": "user", "content": t, "timestamp": 1}));
    let a = Arc::new(vec![
        stored("00000001", text("one two three four")),
        stored("00000002", text("five six")),
    ]);
    let total = cache.messages(&a);
    assert_eq!(cache.context(&a), total);
    assert_eq!(cache.context(&a), total, "asked again");
    // Another context, the same messages and one more, has its own total.
    let mut longer = a.to_vec();
    longer.push(stored("00000003", text("seven eight nine ten eleven")));
    let b = Arc::new(longer);
    assert_eq!(cache.context(&b), cache.messages(&b));
    assert!(cache.context(&b) > total);
    assert_eq!(cache.context(&a), total, "back to the first");
    // A context made after the remembered one is gone (its address free again).
    drop(a);
    drop(b);
    let c = Arc::new(vec![stored("00000009", text("x"))]);
    assert_eq!(cache.context(&c), cache.messages(&c));
}
