//! Tool pairing repair: a context sent to a model never holds a tool call without its result,
//! or a result without its call (contract §1). The host runs this after every `assemble` and
//! `compact` and reports each repair.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::Serialize;

use crate::contract::message::{ContentBlock, Message, MessageBody};

/// One change the repair made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Repair {
    /// A result whose call is not in the context was dropped.
    DroppedOrphanResult {
        /// The result's `toolCallId`.
        tool_call_id: String,
    },
    /// A second result for the same call was dropped.
    DroppedDuplicateResult {
        /// The call id.
        tool_call_id: String,
    },
    /// A result that stood apart from its call was moved right behind it.
    MovedResult {
        /// The call id.
        tool_call_id: String,
    },
    /// A call whose result is not in the context was removed from its assistant message.
    DroppedOrphanCall {
        /// The call id.
        tool_call_id: String,
    },
}

/// Messages after repair, with what changed.
#[derive(Clone, Debug, Default)]
pub struct Repaired {
    /// The repaired messages.
    pub messages: Vec<Arc<Message>>,
    /// Each change, in order.
    pub repairs: Vec<Repair>,
}

/// Repairs tool pairing. Unchanged messages keep their `Arc` (no copy); an assistant message
/// that loses a call is copied with the same id. Repair never adds tokens: it drops orphans
/// rather than synthesizing results, so a context within budget stays within budget.
pub fn repair(messages: Vec<Arc<Message>>) -> Repaired {
    // Fast path: already well paired (the common case for a sane engine).
    if is_well_paired(&messages) {
        return Repaired {
            messages,
            repairs: Vec::new(),
        };
    }
    let mut repairs = Vec::new();

    // Which calls have a result anywhere after them, and which results have a call before them.
    let mut call_index: HashMap<&str, usize> = HashMap::new();
    let mut answered: HashSet<&str> = HashSet::new();
    let mut keep_result = vec![true; messages.len()];
    for (i, m) in messages.iter().enumerate() {
        for c in m.tool_calls() {
            call_index.entry(c.id.as_str()).or_insert(i);
        }
        if let Some(id) = m.tool_call_id() {
            if !call_index.contains_key(id) {
                repairs.push(Repair::DroppedOrphanResult {
                    tool_call_id: id.to_owned(),
                });
                keep_result[i] = false;
            } else if !answered.insert(id) {
                repairs.push(Repair::DroppedDuplicateResult {
                    tool_call_id: id.to_owned(),
                });
                keep_result[i] = false;
            }
        }
    }

    // Rebuild: each assistant message is followed directly by the results of its calls.
    let mut results_by_call: HashMap<&str, &Arc<Message>> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        if let Some(id) = m.tool_call_id()
            && keep_result[i]
        {
            results_by_call.insert(id, m);
        }
    }
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        if m.tool_call_id().is_some() {
            continue; // placed behind its call below
        }
        let calls: Vec<&str> = m.tool_calls().map(|c| c.id.as_str()).collect();
        if calls.is_empty() {
            out.push(Arc::clone(m));
            continue;
        }
        let orphans: HashSet<&str> = calls
            .iter()
            .copied()
            .filter(|id| !results_by_call.contains_key(id))
            .collect();
        if orphans.is_empty() {
            out.push(Arc::clone(m));
        } else {
            // Reported in call order (a set has none).
            for id in calls.iter().filter(|id| orphans.contains(*id)) {
                repairs.push(Repair::DroppedOrphanCall {
                    tool_call_id: (*id).to_owned(),
                });
            }
            if let Some(stripped) = without_calls(m, &orphans) {
                out.push(Arc::new(stripped));
            }
        }
        // The results of this message's calls, in call order, right behind it.
        let mut next = i + 1;
        for id in calls.iter().filter(|id| !orphans.contains(*id)) {
            let Some(result) = results_by_call.get(id) else {
                continue;
            };
            let in_place = messages.get(next).is_some_and(|n| Arc::ptr_eq(n, result));
            if in_place {
                next += 1;
            } else {
                repairs.push(Repair::MovedResult {
                    tool_call_id: (*id).to_owned(),
                });
            }
            out.push(Arc::clone(result));
        }
    }
    Repaired {
        messages: out,
        repairs,
    }
}

/// Whether every call is followed directly by exactly its results and every result has a call.
pub fn is_well_paired(messages: &[Arc<Message>]) -> bool {
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        if m.tool_call_id().is_some() {
            return false; // a result not directly behind its call
        }
        let mut pending = Pending::of(m);
        i += 1;
        while !pending.is_empty() {
            let Some(id) = messages.get(i).and_then(|n| n.tool_call_id()) else {
                return false;
            };
            if !pending.take(id) {
                return false;
            }
            i += 1;
        }
    }
    true
}

/// The calls of one message still waiting for their results. A message with many calls (an
/// engine can return tens of thousands) is looked up by hash, so the check stays linear.
enum Pending<'a> {
    Few(Vec<&'a str>),
    Many(HashMap<&'a str, usize>, usize),
}

impl<'a> Pending<'a> {
    /// Past this many calls a linear scan per result costs more than hashing.
    const FEW: usize = 16;

    fn of(m: &'a Message) -> Self {
        let calls: Vec<&str> = m.tool_calls().map(|c| c.id.as_str()).collect();
        if calls.len() <= Self::FEW {
            return Pending::Few(calls);
        }
        let left = calls.len();
        let mut counts = HashMap::with_capacity(left);
        for id in calls {
            *counts.entry(id).or_insert(0) += 1;
        }
        Pending::Many(counts, left)
    }

    fn is_empty(&self) -> bool {
        match self {
            Pending::Few(calls) => calls.is_empty(),
            Pending::Many(_, left) => *left == 0,
        }
    }

    /// Marks one result for `id` as seen; false when no call is waiting for it.
    fn take(&mut self, id: &str) -> bool {
        match self {
            Pending::Few(calls) => match calls.iter().position(|p| *p == id) {
                Some(pos) => {
                    calls.swap_remove(pos);
                    true
                }
                None => false,
            },
            Pending::Many(counts, left) => match counts.get_mut(id) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    *left -= 1;
                    true
                }
                _ => false,
            },
        }
    }
}

/// A copy of an assistant message without the given calls; `None` when nothing would remain.
fn without_calls(m: &Message, drop: &HashSet<&str>) -> Option<Message> {
    let MessageBody::Assistant(a) = &m.body else {
        return Some(m.clone());
    };
    let mut a = a.clone();
    a.content
        .retain(|b| !matches!(b, ContentBlock::ToolCall(c) if drop.contains(c.id.as_str())));
    if a.content.is_empty() {
        return None;
    }
    Some(Message {
        id: m.id.clone(),
        body: MessageBody::Assistant(a),
    })
}

#[cfg(test)]
#[path = "pairing_tests.rs"]
mod tests;
