//! `host.fit(messages, budget, opts)`: the newest whole tool groups of a list that fit a token
//! budget. This is stdlib `fit.newest_first` (which now calls it) done once in Rust: nearly every
//! engine fits its newest messages into the budget, and a script loop over the kept messages
//! costs Rhai's interpreter ~85 operations a message (docs/benchmarks.md). Resident messages are
//! read where they are (no conversion), and the kept ones come back as the script's own values.
//!
//! The rule, exactly the stdlib's: walk back from `to`; a `toolResult` belongs to the group of
//! the tool-calling assistant message right before its run of results (a result with no such
//! message stands alone); take each whole group that still fits `budget - reserve`; stop at the
//! first that does not (or, with `gaps`, skip it and keep going); a group that starts before
//! `from` ends the walk. The result lists the kept messages oldest first, and their tokens.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value as Json};

use super::table::{Args, Ctx};
use super::value::{HostError, HostOut, HostValue, Kept};
use super::{HeldMessage, HostCall};
use crate::contract::message::{Content, ContentBlock, Message, MessageBody, Role};
use crate::services::tokens::{TokenCounter, Tokenizer, counter};

/// The options `host.fit` knows, for errors.
const OPTIONS: &str = "reserve, from, to, gaps, count";

/// The values `opts.count` takes, for errors.
const COUNTS: &str = "\"host\", \"o200k_base\", \"cl100k_base\", \"textChars/4\"";

/// How `host.fit` counts a message's tokens (`opts.count`).
enum Count {
    /// `"host"` (the default): as `host.tokens` counts it, cached per message.
    Host,
    /// `"o200k_base"` / `"cl100k_base"`: that exact BPE, whatever the session's counter is.
    Bpe(Arc<dyn TokenCounter>),
    /// `"textChars/4"`: the keep-recent workload's rule, ceil(chars / 4) of the message's text
    /// (its text blocks joined by "\n"; chars in code points), cached per resident message.
    TextChars4,
}

/// `host.fit`'s options, read and checked.
struct Options {
    /// `budget - reserve`: what the kept groups may add up to.
    avail: f64,
    /// `opts.from`, `opts.to`, as the script counts (1-based in Lua, 0-based in Rhai).
    from: Option<i64>,
    to: Option<i64>,
    gaps: bool,
    count: Count,
}

/// `host.fit(messages, budget, opts)` → `kept` (the script's own messages, oldest first) and
/// `tokens` (their total): Lua returns the two values, Rhai a map `#{kept, tokens}`.
pub(super) fn fit(cx: &Ctx<'_>, [messages, budget, opts]: Args) -> Result<HostOut, HostError> {
    let call = cx.call()?;
    let max = cx.scope().limits().max_result_messages;
    // The context list comes shared; any other list item by item.
    let (shared, items) = match messages {
        HostValue::Resident(list) => (list, Vec::new()),
        other => (
            Arc::default(),
            other
                .into_items()
                .map_err(|e| cx.script_error(format!("messages: {e}")))?,
        ),
    };
    // A list the script built is bounded like a result; the context itself is the host's own
    // (a session may hold more messages than one result may carry).
    if items.len() > max {
        return Err(cx.script_error(format!(
            "messages: {} messages exceed the limit of {max}",
            items.len()
        )));
    }
    let n = shared.len().max(items.len());
    let budget = number(&budget).ok_or_else(|| {
        cx.script_error(format!(
            "budget must be a number, got {}",
            budget.describe()
        ))
    })?;
    let opts = Options::read(cx, opts, budget)?;
    let (from, to) = range(cx, &opts, n)?;
    let mut list = Items {
        shared: &shared,
        items: &items,
        call,
        count: &opts.count,
        converted: HashMap::new(),
        orphans_above: None,
    };
    let (picked, used) =
        newest_first(&mut list, from, to, opts.avail, opts.gaps).map_err(|e| cx.script_error(e))?;
    let mut kept = Vec::with_capacity(picked.iter().map(|(a, b)| b + 1 - a).sum());
    for &(first, last) in picked.iter().rev() {
        kept.extend((first..=last).map(Kept::Given));
    }
    Ok(HostOut::Record(vec![
        ("kept", HostOut::Messages(kept)),
        ("tokens", HostOut::Count(used)),
    ]))
}

/// The walk itself, over 0-based `from..=to` (empty when `to < from`): the kept ranges, newest
/// first, and their tokens.
fn newest_first(
    list: &mut Items<'_>,
    from: usize,
    to: Option<usize>,
    avail: f64,
    gaps: bool,
) -> Result<(Vec<(usize, usize)>, u64), String> {
    let mut picked = Vec::new();
    let mut used = 0u64;
    let Some(mut i) = to.filter(|&to| to >= from) else {
        return Ok((picked, used));
    };
    loop {
        let first = if list.role(i)? == Role::ToolResult {
            list.group_start(i)?
        } else {
            i
        };
        if first < from {
            break;
        }
        let mut size = 0u64;
        for j in first..=i {
            size = size.saturating_add(list.tokens(j)?);
        }
        if (used.saturating_add(size)) as f64 <= avail {
            used += size;
            picked.push((first, i));
        } else if !gaps {
            break;
        }
        if first == 0 || first - 1 < from {
            break;
        }
        i = first - 1;
    }
    Ok((picked, used))
}

/// The list `host.fit` walks: resident messages read in place, other items converted when
/// first read.
struct Items<'a> {
    /// The context list, when that is what the script passed (then `items` is empty).
    shared: &'a [Arc<HeldMessage>],
    /// Any other list.
    items: &'a [HostValue],
    call: &'a HostCall,
    count: &'a Count,
    /// Items that were not resident messages, converted (and checked) on first read.
    converted: HashMap<usize, Arc<Message>>,
    /// `Some(j)`: every `toolResult` after `j` up to where the walk is stands alone (its run
    /// does not follow a tool-calling assistant message), so a hostile run of orphan results
    /// is walked once, not once per result.
    orphans_above: Option<usize>,
}

impl Items<'_> {
    /// The resident message at `i` (0-based), if it is one.
    fn held(&self, i: usize) -> Option<&Arc<HeldMessage>> {
        if let Some(m) = self.shared.get(i) {
            return Some(m);
        }
        match self.items.get(i) {
            Some(HostValue::Message(m)) => Some(m),
            _ => None,
        }
    }

    /// The message at `i` (0-based).
    fn message(&mut self, i: usize) -> Result<Arc<Message>, String> {
        if let Some(m) = self.held(i) {
            return Ok(m.message().clone());
        }
        match self.items.get(i) {
            Some(HostValue::Message(m)) => Ok(m.message().clone()),
            Some(other) => {
                if let Some(m) = self.converted.get(&i) {
                    return Ok(m.clone());
                }
                let m = other
                    .clone()
                    .into_message()
                    .map_err(|e| format!("messages[{}]: {e}", i + 1))?;
                self.converted.insert(i, m.clone());
                Ok(m)
            }
            None => Err(format!("messages[{}] is missing", i + 1)),
        }
    }

    fn role(&mut self, i: usize) -> Result<Role, String> {
        if let Some(m) = self.held(i) {
            return Ok(m.message().role());
        }
        Ok(self.message(i)?.role())
    }

    fn calls_tools(&mut self, i: usize) -> Result<bool, String> {
        if let Some(m) = self.held(i) {
            return Ok(m.message().tool_calls().next().is_some());
        }
        Ok(self.message(i)?.tool_calls().next().is_some())
    }

    /// Where the tool group holding the `toolResult` at `i` starts (stdlib
    /// `groups.group_start`).
    fn group_start(&mut self, i: usize) -> Result<usize, String> {
        if self.orphans_above.is_some_and(|j| i > j) {
            return Ok(i);
        }
        let mut j = i;
        while j > 0 && self.role(j)? == Role::ToolResult {
            j -= 1;
        }
        if j < i && !self.calls_tools(j)? {
            // An orphan result, and so is every result of its run up to `i`.
            self.orphans_above = Some(j);
            return Ok(i);
        }
        Ok(j)
    }

    /// The tokens of the message at `i`, by the chosen count.
    fn tokens(&mut self, i: usize) -> Result<u64, String> {
        let call = self.call;
        if let Some(held) = self.held(i) {
            return Ok(match self.count {
                Count::Host => held.tokens(|m| call.tokens_message(m)),
                Count::Bpe(c) => c.count_message(held.message()),
                Count::TextChars4 => held.text_chars4(text_chars4),
            });
        }
        let m = self.message(i)?;
        Ok(match self.count {
            Count::Host => call.tokens_message(&m),
            Count::Bpe(c) => c.count_message(&m),
            Count::TextChars4 => text_chars4(&m),
        })
    }
}

/// The keep-recent workload's token rule: ceil(chars / 4) of the message's text, its text
/// blocks joined by "\n" (thinking, tool calls and images left out; a summary's text is the
/// summary), chars in code points.
pub(crate) fn text_chars4(m: &Message) -> u64 {
    let chars = match &m.body {
        MessageBody::User(u) => content_chars(&u.content),
        MessageBody::Assistant(a) => blocks_chars(&a.content),
        MessageBody::ToolResult(r) => content_chars(&r.content),
        MessageBody::Custom(c) => content_chars(&c.content),
        MessageBody::CompactionSummary(s) => s.summary.chars().count(),
        MessageBody::BranchSummary(s) => s.summary.chars().count(),
    };
    u64::try_from(chars.div_ceil(4)).unwrap_or(u64::MAX)
}

fn content_chars(c: &Content) -> usize {
    match c {
        Content::Text(t) => t.chars().count(),
        Content::Blocks(b) => blocks_chars(b),
    }
}

/// Chars of the text blocks joined by "\n".
fn blocks_chars(blocks: &[ContentBlock]) -> usize {
    let (mut chars, mut parts) = (0usize, 0usize);
    for b in blocks {
        if let ContentBlock::Text(t) = b {
            chars += t.text.chars().count();
            parts += 1;
        }
    }
    chars + parts.saturating_sub(1)
}

/// A script number (an integer, or a float in Lua), as a float.
fn number(v: &HostValue) -> Option<f64> {
    match v {
        HostValue::Data(j) => j.as_f64(),
        _ => None,
    }
}

/// A whole number, as scripts pass indices (Luau's numbers are floats).
fn whole(j: &Json) -> Option<i64> {
    if let Some(i) = j.as_i64() {
        return Some(i);
    }
    let f = j.as_f64()?;
    (f.fract() == 0.0 && f.abs() < 9.0e15).then_some(f as i64)
}

impl Options {
    fn read(cx: &Ctx<'_>, opts: HostValue, budget: f64) -> Result<Self, HostError> {
        let map = match opts {
            HostValue::Nil => Map::new(),
            HostValue::Map(m) => *m,
            HostValue::List(l) if l.is_empty() => Map::new(),
            other => {
                return Err(cx.script_error(format!(
                    "opts must be a map of options ({OPTIONS}), got {}",
                    other.describe()
                )));
            }
        };
        let bad = |key: &str, what: &str, got: &Json| {
            cx.script_error(format!("opts.{key} must be {what}, got {got}"))
        };
        let mut out = Options {
            avail: budget,
            from: None,
            to: None,
            gaps: false,
            count: Count::Host,
        };
        for (key, v) in &map {
            if v.is_null() {
                continue;
            }
            match key.as_str() {
                "reserve" => {
                    let r = v.as_f64().ok_or_else(|| bad(key, "a number", v))?;
                    out.avail = budget - r;
                }
                "from" => out.from = Some(whole(v).ok_or_else(|| bad(key, "a whole number", v))?),
                "to" => out.to = Some(whole(v).ok_or_else(|| bad(key, "a whole number", v))?),
                "gaps" => out.gaps = v.as_bool().ok_or_else(|| bad(key, "a boolean", v))?,
                "count" => {
                    out.count = count(v).ok_or_else(|| bad(key, &format!("one of {COUNTS}"), v))?
                }
                other => {
                    return Err(cx.script_error(format!(
                        "unknown option `{other}` (expected one of {OPTIONS})"
                    )));
                }
            }
        }
        Ok(out)
    }
}

fn count(v: &Json) -> Option<Count> {
    Some(match v.as_str()? {
        "host" => Count::Host,
        "textChars/4" => Count::TextChars4,
        name @ ("o200k_base" | "cl100k_base") => {
            let t: Tokenizer = name.parse().ok()?;
            Count::Bpe(counter(t).ok()?)
        }
        _ => return None,
    })
}

/// `opts.from` and `opts.to` as 0-based positions in a list of `n`: `from`, and `to` (`None`
/// when the range is empty). Indices count as the script's language does; a range that would
/// read past either end of the list is an error, as it is for the stdlib loop.
fn range(cx: &Ctx<'_>, opts: &Options, n: usize) -> Result<(usize, Option<usize>), HostError> {
    let base = cx.first_index();
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    let from = opts.from.unwrap_or(base);
    let to = opts.to.unwrap_or(base + n - 1);
    if to < from {
        return Ok((0, None));
    }
    if from < base {
        return Err(cx.script_error(format!(
            "opts.from = {from} is before the first message (index {base})"
        )));
    }
    if to > base + n - 1 {
        return Err(cx.script_error(format!(
            "opts.to = {to} is past the last of the {n} messages (index {})",
            base + n - 1
        )));
    }
    let at = |i: i64| usize::try_from(i - base).unwrap_or(usize::MAX);
    Ok((at(from), Some(at(to))))
}
