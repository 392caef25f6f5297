//! Diagnostic output of the quality example: a line per model call without history
//! (`--detail`) and the summaries that lost span identifiers where they fit (`--lost N`), so a
//! case can be read and reduced to a test.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ctxhost::contract::message::Message;
use ctxhost::services::summarize::{IdKind, Summary};
use ctxhost::services::tokens::TokenCounter;
use ctxhost::session::Session;

/// How many more summaries that lost span identifiers where they fit to print.
static LOST: AtomicUsize = AtomicUsize::new(0);

/// Print the next `n` summaries that lose span identifiers where they fit.
pub fn print_lost(n: usize) {
    LOST.store(n, Ordering::Relaxed);
}

/// Prints `summary` with the span identifiers (`own`, `own_tokens` of them) it lost, while
/// `--lost` asks for more.
pub fn lost(
    own: &[(IdKind, String)],
    own_tokens: u64,
    span_tokens: u64,
    max_tokens: u64,
    summary: &Summary,
) {
    let lost: Vec<String> = own
        .iter()
        .filter(|(_, id)| !summary.text.contains(id.as_str()))
        .map(|(k, id)| format!("{}:{id}", k.name()))
        .collect();
    if lost.is_empty()
        || LOST
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_err()
    {
        return;
    }
    println!(
        "---- lost {lost:?} of {} span ids ({own_tokens} tokens) in a summary of {} / {max_tokens} tokens of a {span_tokens}-token span:\n{}\n----",
        own.len(),
        summary.tokens,
        summary.text
    );
}

/// One line on a call without history (`--detail`): where it is, what it sent, and the sizes of
/// its turn and of the newest earlier messages, so the case can be read and reduced.
pub fn no_history(
    transcript: &Path,
    conversation: usize,
    session: &Session,
    a: &ctxhost::session::Assembly,
) -> String {
    use ctxhost::services::tokens::Estimate;
    let context = session.context();
    let name = transcript
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let at = session
        .current_request()
        .and_then(|r| context.iter().position(|m| m.id == r.id));
    let size = |ms: &[Arc<Message>]| -> u64 { ms.iter().map(|m| Estimate.count_message(m)).sum() };
    let describe = |ms: &[Arc<Message>]| -> String {
        ms.iter()
            .map(|m| format!("{}:{}", m.role().as_str(), Estimate.count_message(m)))
            .collect::<Vec<_>>()
            .join(",")
    };
    let (earlier, turn) = context.split_at(at.unwrap_or(context.len()));
    let newest_earlier = earlier.len().saturating_sub(4);
    format!(
        "  no history: {name} #{conversation} budget {} request at {:?} of {} | sent {} msgs {} tok [{}] | turn {} msgs {} tok | newest earlier [{}]",
        a.token_budget,
        at,
        context.len(),
        a.messages.len(),
        size(&a.messages),
        describe(&a.messages),
        turn.len(),
        size(turn),
        describe(&earlier[newest_earlier..]),
    )
}
