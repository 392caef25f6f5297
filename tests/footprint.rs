//! What a long replay holds per message (issue 23 item 4: a 200,000-message replay under
//! 300 MB): an imported message keeps no room its source JSON left behind, and the recall
//! index keeps its postings compact. Measured with the counting allocator the test binary
//! installs (`ctxhost::sandbox::alloc`), on this thread only, so the figures are exact and
//! the same on every run.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::sync::Arc;

use ctxhost::contract::message::Message;
use ctxhost::sandbox::alloc::thread_net_bytes;
use ctxhost::services::recall::{RecallIndex, SearchFilter};
use ctxhost::transcript::import;

use crate::common::transcript_arg;

/// The τ-bench file: 200 conversations of Chat Completions messages (5,308 messages).
const CHAT: &str = "taubench-gpt-4o-airline.json";

/// Bytes of text a message carries (its text, and its tool calls' names and arguments).
fn text_bytes(m: &Message) -> usize {
    ctxhost::services::recall::searchable_text(m).len()
}

#[test]
fn an_imported_chat_array_holds_about_its_text() {
    assert!(ctxhost::sandbox::alloc::installed() || thread_net_bytes() == 0);
    let path = std::path::PathBuf::from(transcript_arg(CHAT));
    let before = thread_net_bytes();
    let imported = import(&path).unwrap();
    let held = (thread_net_bytes() - before) as usize;
    let messages: Vec<&Message> = imported
        .sessions
        .iter()
        .flat_map(|s| s.messages.iter())
        .collect();
    let text: usize = messages.iter().map(|m| text_bytes(m)).sum();
    let per_message = (held - text) / messages.len();
    eprintln!(
        "{} messages, {text} bytes of text, {held} bytes held: {per_message} bytes a message beyond the text",
        messages.len()
    );
    assert!(
        per_message <= LIMIT_IMPORT,
        "an imported message holds {per_message} bytes beyond its text (at most {LIMIT_IMPORT})"
    );
}

#[test]
fn the_recall_index_holds_a_few_bytes_a_term() {
    let path = std::path::PathBuf::from(transcript_arg(CHAT));
    let imported = import(&path).unwrap();
    let mut stored = Vec::new();
    for (i, m) in imported
        .sessions
        .into_iter()
        .flat_map(|s| s.messages)
        .enumerate()
    {
        let mut m = m;
        m.id = format!("{i:08x}");
        stored.push(Arc::new(m));
    }
    let terms: usize = stored
        .iter()
        .map(|m| {
            ctxhost::services::recall::terms(&ctxhost::services::recall::searchable_text(m)).len()
        })
        .sum();
    let index = RecallIndex::default();
    let before = thread_net_bytes();
    index.add(&stored);
    let held = (thread_net_bytes() - before) as usize;
    eprintln!(
        "{} messages, {terms} term occurrences, {held} bytes of index",
        stored.len()
    );
    assert!(
        held * 10 <= terms * LIMIT_INDEX_TENTHS,
        "the index holds {:.2} bytes a term occurrence (at most {:.1})",
        held as f64 / terms as f64,
        LIMIT_INDEX_TENTHS as f64 / 10.0
    );
    // And it still finds what it holds.
    assert!(
        !index
            .search("reservation", &SearchFilter::default(), 3)
            .is_empty()
    );
}

const LIMIT_IMPORT: usize = 100_000;
const LIMIT_INDEX_TENTHS: usize = 1_000;
