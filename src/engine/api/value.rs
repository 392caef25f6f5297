//! The plain values that cross between a VM and the host API: [`HostValue`] in (what a script
//! passed, as its adapter converted it), [`HostOut`] back, [`HostError`] when a call fails.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value as Json};

use super::tokens::HeldMessage;
use crate::contract::message::Message;

/// A value a script passed to `host.*`, as its adapter converted it.
#[derive(Clone, Debug, Default)]
pub enum HostValue {
    /// Nothing (`nil`, `()`, a missing argument).
    #[default]
    Nil,
    /// A string.
    Text(String),
    /// A message the VM holds for the host (a resident message): its identity and token count.
    Message(Arc<HeldMessage>),
    /// A list (a Lua array, a Rhai array or message list).
    List(Vec<HostValue>),
    /// A list of resident messages the VM keeps as a whole (its context list, `p.messages`),
    /// shared rather than converted item by item: `host.fit(p.messages, …)` at 10,000 messages
    /// reads a hundred of them.
    Resident(Arc<Vec<Arc<HeldMessage>>>),
    /// Named fields (a Lua table with string keys, a Rhai map), as JSON. Lua cannot tell an
    /// empty list from an empty map, so where a list is expected an empty map is an empty list.
    /// (Boxed, like `Data`, to keep the value small: `host.tokens` is called per message.)
    Map(Box<Map<String, Json>>),
    /// A number or a boolean.
    Data(Box<Json>),
    /// A value with no plain form (a function, a foreign handle), by its language's type name.
    Other(&'static str),
}

impl HostValue {
    /// What the value is, for errors: `a string`, `a list`, `nothing`, ...
    pub fn describe(&self) -> String {
        match self {
            HostValue::Nil => "nothing".into(),
            HostValue::Text(_) => "a string".into(),
            HostValue::Message(_) => "a message".into(),
            HostValue::List(_) | HostValue::Resident(_) => "a list".into(),
            HostValue::Map(_) => "a map".into(),
            HostValue::Data(j) if j.is_boolean() => "a boolean".into(),
            HostValue::Data(_) => "a number".into(),
            HostValue::Other(name) => format!("a {name}"),
        }
    }

    /// The value as JSON (options, params); `None` for one with no plain form.
    pub fn into_json(self) -> Option<Json> {
        Some(match self {
            HostValue::Nil => Json::Null,
            HostValue::Text(s) => Json::String(s),
            HostValue::Message(m) => serde_json::to_value(&**m.message()).ok()?,
            HostValue::List(items) => Json::Array(
                items
                    .into_iter()
                    .map(HostValue::into_json)
                    .collect::<Option<_>>()?,
            ),
            HostValue::Resident(list) => Json::Array(
                list.iter()
                    .map(|m| serde_json::to_value(&**m.message()).ok())
                    .collect::<Option<_>>()?,
            ),
            HostValue::Map(m) => Json::Object(*m),
            HostValue::Data(j) => *j,
            HostValue::Other(_) => return None,
        })
    }

    /// The value as one host message: the very message for a resident one, else a new message
    /// converted (and validated) from its fields.
    pub fn into_message(self) -> Result<Arc<Message>, String> {
        match self {
            HostValue::Message(m) => Ok(m.message().clone()),
            HostValue::Map(m) => message_from_json(Json::Object(*m)),
            other => Err(format!("expected a message, got {}", other.describe())),
        }
    }

    /// The items of a list of messages (an empty map counts as an empty list).
    pub fn into_items(self) -> Result<Vec<HostValue>, String> {
        match self {
            HostValue::List(items) => Ok(items),
            HostValue::Resident(list) => Ok(list.iter().cloned().map(HostValue::Message).collect()),
            HostValue::Map(m) if m.is_empty() => Ok(Vec::new()),
            HostValue::Map(_) | HostValue::Message(_) => {
                Err("expected a list of messages, got one message".into())
            }
            other => Err(format!(
                "expected a list of messages, got {}",
                other.describe()
            )),
        }
    }

    /// The value as a list of at most `max` host messages, each with its position in the list
    /// (`[i]` in errors is 1-based, as scripts count).
    pub fn into_messages(self, max: usize) -> Result<Vec<Arc<Message>>, String> {
        let items = self.into_items()?;
        if items.len() > max {
            return Err(format!(
                "{} messages exceed the limit of {max}",
                items.len()
            ));
        }
        items
            .into_iter()
            .enumerate()
            .map(|(i, item)| item.into_message().map_err(|e| format!("[{}] {e}", i + 1)))
            .collect()
    }
}

/// Converts a script value that should be a message (already JSON) into a host message.
pub(crate) fn message_from_json(v: Json) -> Result<Arc<Message>, String> {
    serde_json::from_value::<Message>(v)
        .map(Arc::new)
        .map_err(|e| format!("not a valid message: {e}"))
}

/// One message of a list a `host` function returns.
#[derive(Clone, Debug)]
pub enum Kept {
    /// The item at this index of the list the script passed as the first argument: the adapter
    /// hands back that very value, so unchanged messages keep their identity in the VM.
    Given(usize),
    /// A message the script did not pass (a repaired copy).
    New(Arc<Message>),
}

/// Each output message as [`Kept::Given`] when it is one of `input` (by identity), else
/// [`Kept::New`].
pub(crate) fn kept(input: &[Arc<Message>], output: Vec<Arc<Message>>) -> Vec<Kept> {
    let given: HashMap<*const Message, usize> = input
        .iter()
        .enumerate()
        .map(|(i, m)| (Arc::as_ptr(m), i))
        .collect();
    output
        .into_iter()
        .map(|m| match given.get(&Arc::as_ptr(&m)) {
            Some(&i) => Kept::Given(i),
            None => Kept::New(m),
        })
        .collect()
}

/// What a `host` function gives back: plain values each adapter turns into its own.
#[derive(Clone, Debug)]
pub enum HostOut {
    /// Nothing.
    Nil,
    /// A count (tokens), an integer in every language.
    Count(u64),
    /// A number (`host.now()`).
    Number(f64),
    /// Data: `host.summarize`'s `{text, tokens}`, a `CompactResult`.
    Data(Json),
    /// A list of messages.
    Messages(Vec<Kept>),
    /// Several values (`host.repairPairing`: the list and the number of repairs); a language
    /// whose functions return one value returns the first.
    Many(Vec<HostOut>),
    /// Named values (`host.fit`: `kept` and `tokens`): Lua returns them in order, as several
    /// values; Rhai, whose functions return one value, a map of them.
    Record(Vec<(&'static str, HostOut)>),
}

/// A failed `host` call: the message the script sees, and whose fault it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostError {
    message: String,
    host_fault: bool,
}

impl HostError {
    /// The script passed something wrong (or called outside a lifecycle call): a script error,
    /// classified like any other throw.
    pub fn script(message: impl Into<String>) -> Self {
        HostError {
            message: message.into(),
            host_fault: false,
        }
    }

    /// The host itself failed (e.g. the summarizer service): the adapter marks the error so
    /// that the call fails with [`EngineErrorKind::Host`](crate::error::EngineErrorKind::Host),
    /// which never quarantines the engine.
    pub fn host(message: impl Into<String>) -> Self {
        HostError {
            message: message.into(),
            host_fault: true,
        }
    }

    /// Whether the host, not the script, is at fault.
    pub fn is_host_fault(&self) -> bool {
        self.host_fault
    }

    /// The message, as the script sees it.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HostError {}
