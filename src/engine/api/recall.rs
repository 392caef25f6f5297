//! `host.search(query, opts)` and `host.fetch(ids)`: recall of the session's stored messages,
//! compacted ones included, over the session's [`RecallIndex`](crate::services::recall::RecallIndex).

use serde::Deserialize;
use serde_json::{Value, json};

use super::table::{Args, Ctx};
use super::value::{HostError, HostOut, HostValue, Kept};
use crate::contract::message::Role;
use crate::contract::opt_count;
use crate::services::recall::SearchFilter;

/// The longest query read, in bytes; a longer one is cut (at a character boundary), so a
/// script may pass a whole user message.
pub(crate) const MAX_QUERY_BYTES: usize = 4096;
/// The results a search gives by default.
pub(crate) const DEFAULT_SEARCH_LIMIT: u64 = 5;
/// The most results a search gives; a larger `limit` gives this many.
pub(crate) const MAX_SEARCH_LIMIT: u64 = 50;
/// The most ids one `host.fetch` takes.
pub(crate) const MAX_FETCH_IDS: usize = 64;
/// The longest id (and `before`) read, in bytes; transcript ids are 8 hex digits.
pub(crate) const MAX_ID_BYTES: usize = 256;

/// Options of `host.search(query, opts)`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct SearchOptions {
    /// How many results at most (default [`DEFAULT_SEARCH_LIMIT`], at most [`MAX_SEARCH_LIMIT`]).
    #[serde(default, deserialize_with = "opt_count")]
    pub limit: Option<u64>,
    /// Only messages of these roles (`user`, `assistant`, `toolResult`, ...).
    #[serde(default)]
    pub roles: Option<Vec<Role>>,
    /// Only messages stored before the message with this id.
    #[serde(default)]
    pub before: Option<String>,
}

/// `host.search(query, opts)` → a list of `{id, role, score, position, matched}`, best first.
pub(super) fn search(cx: &Ctx<'_>, [query, opts, _]: Args) -> Result<HostOut, HostError> {
    let HostValue::Text(mut query) = query else {
        return Err(cx.script_error(format!("query must be a string, got {}", query.describe())));
    };
    cut(&mut query, MAX_QUERY_BYTES);
    let opts: SearchOptions = match opts.into_json() {
        None => return Err(cx.script_error("opts must be a map")),
        Some(Value::Null) => SearchOptions::default(),
        // Lua cannot tell an empty map from an empty list.
        Some(Value::Array(a)) if a.is_empty() => SearchOptions::default(),
        Some(v) => serde_json::from_value(v).map_err(|e| cx.script_error(format!("opts: {e}")))?,
    };
    if let Some(before) = &opts.before
        && before.len() > MAX_ID_BYTES
    {
        return Err(cx.script_error(format!("opts: before is longer than {MAX_ID_BYTES} bytes")));
    }
    let limit = opts
        .limit
        .unwrap_or(DEFAULT_SEARCH_LIMIT)
        .min(MAX_SEARCH_LIMIT);
    let filter = SearchFilter {
        roles: opts.roles.unwrap_or_default(),
        before: opts.before,
    };
    let call = cx.call()?;
    let Some(index) = call.recall() else {
        // A call outside a session (a test harness) has no stored messages.
        return Ok(HostOut::Data(json!([])));
    };
    let hits = index
        .try_search(
            &query,
            &filter,
            usize::try_from(limit).unwrap_or(usize::MAX),
        )
        .map_err(|e| cx.script_error(format!("opts: {e}")))?;
    Ok(HostOut::Data(Value::Array(
        hits.into_iter()
            .map(|h| {
                json!({
                    "id": h.id,
                    "role": h.role.as_str(),
                    "score": h.score,
                    "position": h.position,
                    "matched": h.matched,
                })
            })
            .collect(),
    )))
}

/// `host.fetch(ids)` → the stored messages with these ids, in the order asked (ids that name no
/// stored message are left out), as read-only messages.
pub(super) fn fetch(cx: &Ctx<'_>, [ids, ..]: Args) -> Result<HostOut, HostError> {
    let items = match ids {
        HostValue::List(items) => items,
        HostValue::Map(m) if m.is_empty() => Vec::new(),
        other => {
            return Err(cx.script_error(format!(
                "ids must be a list of message ids, got {}",
                other.describe()
            )));
        }
    };
    if items.len() > MAX_FETCH_IDS {
        return Err(cx.script_error(format!(
            "{} ids exceed the limit of {MAX_FETCH_IDS}",
            items.len()
        )));
    }
    let mut wanted = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        match item {
            HostValue::Text(id) if id.len() <= MAX_ID_BYTES => wanted.push(id),
            HostValue::Text(_) => {
                return Err(cx.script_error(format!(
                    "ids[{}] is longer than {MAX_ID_BYTES} bytes",
                    i + 1
                )));
            }
            other => {
                return Err(cx.script_error(format!(
                    "ids[{}] must be a string, got {}",
                    i + 1,
                    other.describe()
                )));
            }
        }
    }
    let call = cx.call()?;
    let found = call.recall().map(|r| r.fetch(&wanted)).unwrap_or_default();
    Ok(HostOut::Messages(
        found.into_iter().map(Kept::New).collect(),
    ))
}

/// Cuts `s` to at most `max` bytes, at a character boundary.
fn cut(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}
