//! Prefix reuse: a model call as the blocks a provider's prompt cache sees, what of it the
//! previous call shared, and why a prefix broke (see [`super`]).

use std::sync::Arc;

use crate::contract::message::{Message, Role};
use crate::services::tokens::TokenCache;
use crate::session::Assembly;

/// One block of a model call, as the prompt cache sees it.
#[derive(Clone, Debug)]
pub enum Block {
    /// The engine's `systemPromptAddition`.
    Addition(String),
    /// One assembled message.
    Message(Arc<Message>),
}

impl PartialEq for Block {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Block::Addition(a), Block::Addition(b)) => a == b,
            (Block::Message(a), Block::Message(b)) => Arc::ptr_eq(a, b) || **a == **b,
            _ => false,
        }
    }
}

/// A model call's blocks, each with its host-counted tokens.
pub type Shape = Vec<(Block, u64)>;

/// The blocks of an assembly, counted with `tokens`.
pub fn shape(assembly: &Assembly, tokens: &TokenCache) -> Shape {
    let mut out = Vec::with_capacity(assembly.messages.len() + 1);
    if let Some(a) = &assembly.system_prompt_addition {
        out.push((Block::Addition(a.clone()), tokens.text(a)));
    }
    for m in &assembly.messages {
        out.push((Block::Message(Arc::clone(m)), tokens.message(m)));
    }
    out
}

/// Tokens of the longest run of leading blocks `now` shares with `previous`, and the index of
/// the first block that differs (`now.len()` when all of `now` is shared).
pub fn shared_prefix(previous: &[(Block, u64)], now: &[(Block, u64)]) -> (u64, usize) {
    let mut tokens = 0;
    for (i, (b, t)) in now.iter().enumerate() {
        match previous.get(i) {
            Some((p, _)) if p == b => tokens += t,
            _ => return (tokens, i),
        }
    }
    (tokens, now.len())
}

/// Why a call's prefix broke, given what changed (see the module docs for the order).
pub fn break_cause(
    previous: &[(Block, u64)],
    now: &[(Block, u64)],
    first_diff: usize,
    compacted: bool,
    engine_changed: bool,
) -> &'static str {
    if compacted {
        return "compaction";
    }
    if engine_changed {
        return "fallback";
    }
    let addition = |s: &[(Block, u64)]| match s.first() {
        Some((Block::Addition(a), _)) => Some(a.clone()),
        _ => None,
    };
    if addition(previous) != addition(now) {
        return "system-prompt-addition";
    }
    if let Some((Block::Message(p), _)) = previous.get(first_diff)
        && p.role() == Role::ToolResult
    {
        let sent_same = now
            .iter()
            .any(|(b, _)| matches!(b, Block::Message(m) if m.id == p.id && **m == **p));
        if !sent_same {
            return "pruned-tool-result";
        }
    }
    "engine-cut"
}
