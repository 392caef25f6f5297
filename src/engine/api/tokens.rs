//! `host.tokens(x)`: tokens of a string, a message or a list of them, by the session's counter.
//! Counts are cached per stored message by the session ([`TokenCache`](crate::services::tokens::TokenCache))
//! and per resident message by the VM ([`HeldMessage`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::HostCall;
use super::table::{Args, Ctx};
use super::value::{HostError, HostOut, HostValue};
use crate::contract::message::Message;

/// A host message a VM holds for its scripts (a resident message), with its token count once
/// counted: a message never changes, nor does the session's counter, so the count stays good.
#[derive(Debug)]
pub struct HeldMessage {
    message: Arc<Message>,
    /// `u64::MAX`: not counted yet.
    tokens: AtomicU64,
    /// Its tokens by the keep-recent workload's rule (`host.fit`'s `count = "textChars/4"`);
    /// `u64::MAX`: not counted yet.
    text_chars4: AtomicU64,
}

impl HeldMessage {
    /// Holds `message`, not counted yet.
    pub fn new(message: Arc<Message>) -> Self {
        HeldMessage {
            message,
            tokens: AtomicU64::new(u64::MAX),
            text_chars4: AtomicU64::new(u64::MAX),
        }
    }

    /// The host's message.
    pub fn message(&self) -> &Arc<Message> {
        &self.message
    }

    /// Its token count, counted by `count` the first time.
    pub fn tokens(&self, count: impl FnOnce(&Arc<Message>) -> u64) -> u64 {
        match self.tokens.load(Ordering::Relaxed) {
            u64::MAX => {
                let n = count(&self.message);
                self.tokens.store(n, Ordering::Relaxed);
                n
            }
            n => n,
        }
    }

    /// Its tokens by the workload's rule (see [`text_chars4`](super::fit::text_chars4)),
    /// counted by `count` the first time.
    pub fn text_chars4(&self, count: impl FnOnce(&Message) -> u64) -> u64 {
        match self.text_chars4.load(Ordering::Relaxed) {
            u64::MAX => {
                let n = count(&self.message);
                self.text_chars4.store(n, Ordering::Relaxed);
                n
            }
            n => n,
        }
    }
}

impl HostCall {
    /// Tokens of a piece of text.
    pub fn tokens_text(&self, text: &str) -> u64 {
        self.services.tokens.text(text)
    }

    /// Tokens of a message: cached for stored messages.
    pub fn tokens_message(&self, message: &Arc<Message>) -> u64 {
        self.services.tokens.message(message)
    }

    /// Tokens of a list of messages.
    pub fn tokens_messages(&self, messages: &[Arc<Message>]) -> u64 {
        self.services.tokens.messages(messages)
    }
}

/// `host.tokens(x)`: `x` a string, a message or a list of them; nothing counts 0.
pub(super) fn tokens(cx: &Ctx<'_>, [x, ..]: Args) -> Result<HostOut, HostError> {
    let call = cx.call()?;
    let n = match x {
        HostValue::Nil => 0,
        HostValue::List(_) | HostValue::Resident(_) | HostValue::Map(_) if is_list(&x) => {
            let mut total = 0u64;
            for (i, item) in x
                .into_items()
                .map_err(|e| cx.script_error(e))?
                .into_iter()
                .enumerate()
            {
                if !is_one(&item) {
                    return Err(cx.script_error(format!(
                        "item {} is {}, expected a message",
                        i + 1,
                        item.describe()
                    )));
                }
                let n = one(call, item).map_err(|e| cx.script_error(format!("[{}] {e}", i + 1)))?;
                total = total.saturating_add(n);
            }
            total
        }
        x if is_one(&x) => one(call, x).map_err(|e| cx.script_error(e))?,
        other => {
            return Err(HostError::script(format!(
                "{} expects a string, a message or a list of messages, got {}",
                cx.name(),
                other.describe()
            )));
        }
    };
    Ok(HostOut::Count(n))
}

/// A list, or an empty map (which in Lua is also an empty list).
fn is_list(v: &HostValue) -> bool {
    matches!(v, HostValue::List(_) | HostValue::Resident(_))
        || matches!(v, HostValue::Map(m) if m.is_empty())
}

/// A string or one message.
fn is_one(v: &HostValue) -> bool {
    matches!(
        v,
        HostValue::Text(_) | HostValue::Message(_) | HostValue::Map(_)
    )
}

/// The longest text one `host.tokens` counts: counting (BPE) is one native step with no
/// interrupt, so its input bounds how long it can outlive the call's deadline.
pub(crate) const MAX_TOKENS_TEXT: usize = 8 << 20;

/// Tokens of a string or one message.
fn one(call: &HostCall, v: HostValue) -> Result<u64, String> {
    match v {
        HostValue::Text(s) if s.len() > MAX_TOKENS_TEXT => Err(format!(
            "a text of {} bytes is over the {} MiB one count may take (counting cannot be interrupted); count it in pieces",
            s.len(),
            MAX_TOKENS_TEXT >> 20
        )),
        HostValue::Text(s) => Ok(call.tokens_text(&s)),
        HostValue::Message(m) => Ok(m.tokens(|m| call.tokens_message(m))),
        other => Ok(call.tokens_message(&other.into_message()?)),
    }
}
