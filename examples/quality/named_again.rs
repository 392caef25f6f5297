//! Identifiers a request names again: does the model call carry them, and the line they first
//! appeared in? What `scripts/recall.lua` is for, measured on every engine alike.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ctxhost::contract::message::Message;
use ctxhost::services::summarize::find_identifiers;
use ctxhost::session::{Assembly, Session};

/// The longest original line looked for, in bytes.
const MAX_LINE: usize = 160;

/// What one replay has seen so far, and the counts.
#[derive(Debug, Default)]
pub struct NamedAgain {
    /// Messages already read.
    read: HashSet<String>,
    /// Each identifier, with the line it first appeared in.
    first_line: HashMap<String, String>,
    /// The request last measured (each turn is measured at its first model call).
    last_request: Option<String>,
    /// Identifiers requests named again (seen before the request).
    pub named: u64,
    /// Of them, present in the model call besides the request.
    pub in_call: u64,
    /// Of them, with the line they first appeared in present in the model call.
    pub with_line: u64,
}

impl NamedAgain {
    /// Measures the first model call of each turn, then reads what the session holds.
    pub fn observe(
        &mut self,
        session: &Session,
        request: Option<&Arc<Message>>,
        a: &Assembly,
        text_of: fn(&Message) -> String,
    ) {
        if let Some(request) = request
            && self.last_request.as_deref() != Some(request.id.as_str())
        {
            self.last_request = Some(request.id.clone());
            let mut call: String = a
                .messages
                .iter()
                .filter(|m| m.id != request.id)
                .map(|m| text_of(m))
                .collect::<Vec<_>>()
                .join("\n");
            call.push_str(a.system_prompt_addition.as_deref().unwrap_or_default());
            let mut asked = HashSet::new();
            for (_, id) in find_identifiers(&request.text()) {
                if !asked.insert(id) {
                    continue;
                }
                let Some(line) = self.first_line.get(id) else {
                    continue;
                };
                self.named += 1;
                self.in_call += u64::from(call.contains(id));
                self.with_line += u64::from(call.contains(line.as_str()));
            }
        }
        for m in session.context() {
            if self.read.insert(m.id.clone())
                && !m
                    .role()
                    .eq(&ctxhost::contract::message::Role::CompactionSummary)
            {
                let text = text_of(m);
                for line in text.lines() {
                    for (_, id) in find_identifiers(line) {
                        if !self.first_line.contains_key(id) {
                            self.first_line.insert(id.to_owned(), cut(line.trim()));
                        }
                    }
                }
            }
        }
    }
}

fn cut(line: &str) -> String {
    let mut end = line.len().min(MAX_LINE);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_owned()
}
