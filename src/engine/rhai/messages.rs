//! The two types a Rhai script gets for the host's messages: `message` and `messages`.
//!
//! Rhai passes values by copy, and it copies a shared array or map whenever one is passed to a
//! function. With `p.messages` as an array of maps, each call of a stdlib helper with the list
//! copied 10,000 entries, and each `host::tokens(m)` copied the message (then compared it with
//! the stored one): `recent_turns.rhai` took ~30 ms per assemble. These types are handles
//! instead: copying one copies a pointer, and a handle maps back to the host's very message
//! with no check, because nothing can change it.
//!
//! - [`ScriptMessage`] (`type_of` = `"message"`): reads like a read-only map (`m.role`,
//!   `m["content"]`, `m.x ?? d`, `"x" in m`, `m.keys()`, `m.values()`, `m.len()`); setting a
//!   field fails; `m.to_map()` gives an editable copy (a plain map, a new message when returned).
//! - [`MessageList`] (`type_of` = `"messages"`): reads like a read-only array (`ms[i]`, negative
//!   `i` from the end, `ms.len()`, `for m in ms`, `ms.extract(…)`, `ms + array`,
//!   `array.append(ms)` (not `array += ms`: Rhai's built-in `+=` pushes one item), and the
//!   non-mutating array methods: `filter`, `map`, `some`, `all`, `find`, `find_map`, `index_of`,
//!   `contains`, `reduce`, `reduce_rev`, `for_each`); `ms.to_array()` gives an editable array of
//!   the same handles. Mutating methods fail with a message saying so.

use std::sync::Arc;

use rhai::{Array, Dynamic, EvalAltResult, INT, Map, Module, NativeCallContext, Shared};

use crate::contract::message::Message;
use crate::engine::api::HeldMessage;

/// One host message as a script sees it.
#[derive(Clone)]
pub(crate) struct ScriptMessage(Arc<HostMessage>);

/// What a [`ScriptMessage`] points at: the host's message (with its token count once counted)
/// and its map view, built once.
pub(crate) struct HostMessage {
    held: Arc<HeldMessage>,
    map: Map,
}

impl std::fmt::Debug for ScriptMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ScriptMessage").field(&self.0.map).finish()
    }
}

impl ScriptMessage {
    /// A handle on `m` (its map view built now).
    pub(crate) fn new(m: &Arc<Message>) -> Result<Self, String> {
        let map = rhai::serde::to_dynamic(&**m)
            .map_err(|e| e.to_string())?
            .try_cast::<Map>()
            .ok_or_else(|| "a message did not become a map".to_string())?;
        Ok(ScriptMessage(Arc::new(HostMessage {
            held: Arc::new(HeldMessage::new(m.clone())),
            map,
        })))
    }

    /// The host's message behind the handle.
    pub(crate) fn message(&self) -> &Arc<Message> {
        self.0.held.message()
    }

    /// The message as the host API holds it (identity and token count).
    pub(crate) fn held(&self) -> &Arc<HeldMessage> {
        &self.0.held
    }

    fn field(&self, key: &str) -> Dynamic {
        self.0.map.get(key).cloned().unwrap_or(Dynamic::UNIT)
    }
}

/// A list of host messages as a script sees it (`p.messages`).
#[derive(Clone, Debug)]
pub(crate) struct MessageList(pub Arc<Vec<Dynamic>>);

impl MessageList {
    fn at(&self, i: INT) -> Result<Dynamic, Box<EvalAltResult>> {
        let n = self.0.len();
        index(n, i)
            .and_then(|i| self.0.get(i).cloned())
            .ok_or_else(|| EvalAltResult::ErrorArrayBounds(n, i, rhai::Position::NONE).into())
    }

    fn array(&self) -> Array {
        self.0.iter().cloned().collect()
    }
}

/// A Rhai index (negative: from the end) as a position in a list of `n`.
fn index(n: usize, i: INT) -> Option<usize> {
    if i >= 0 {
        usize::try_from(i).ok().filter(|i| *i < n)
    } else {
        let back = usize::try_from(i.unsigned_abs()).ok()?;
        n.checked_sub(back)
    }
}

/// Iterates a [`MessageList`] (`for m in p.messages`).
pub(crate) struct ListIter {
    list: Arc<Vec<Dynamic>>,
    next: usize,
}

impl Iterator for ListIter {
    type Item = Dynamic;
    fn next(&mut self) -> Option<Dynamic> {
        let v = self.list.get(self.next).cloned();
        self.next += 1;
        v
    }
}

impl IntoIterator for MessageList {
    type Item = Dynamic;
    type IntoIter = ListIter;
    fn into_iter(self) -> ListIter {
        ListIter {
            list: self.0,
            next: 0,
        }
    }
}

type Out<T> = Result<T, Box<EvalAltResult>>;

fn read_only(what: &str, how: &str) -> Box<EvalAltResult> {
    format!("{what} from the host is read-only; {how}").into()
}

/// The message fields of the contract (OpenClaw's `AgentMessage` shapes).
const FIELDS: [&str; 18] = [
    "id",
    "role",
    "content",
    "timestamp",
    "stopReason",
    "toolCallId",
    "toolName",
    "isError",
    "summary",
    "tokensBefore",
    "tokensAfter",
    "firstKeptEntryId",
    "fromId",
    "customType",
    "excludeFromContext",
    "usage",
    "model",
    "details",
];

/// Array methods that do not change the array: a list answers them on an array of its
/// handles.
const READING: [&str; 11] = [
    "filter",
    "map",
    "some",
    "all",
    "find",
    "find_map",
    "index_of",
    "contains",
    "reduce",
    "reduce_rev",
    "for_each",
];

/// Array methods that change the array: a list refuses them.
const WRITING: [&str; 17] = [
    "push", "append", "insert", "pop", "shift", "remove", "clear", "truncate", "chop", "pad",
    "sort", "reverse", "retain", "drain", "splice", "dedup", "set",
];

/// Registers both types and their functions; every engine gets it (the stdlib runs on them).
pub(crate) fn module() -> Shared<Module> {
    let mut m = Module::new();
    m.set_custom_type::<ScriptMessage>("message");
    m.set_custom_type::<MessageList>("messages");

    // message
    m.set_indexer_get_fn(|x: &mut ScriptMessage, key: &str| -> Out<Dynamic> { Ok(x.field(key)) });
    // The contract's fields as property getters: Rhai tries a getter before falling back to the
    // indexer, and a failed lookup costs more than the read itself.
    for name in FIELDS {
        m.set_getter_fn(name, move |x: &mut ScriptMessage| -> Out<Dynamic> {
            Ok(x.field(name))
        });
    }
    m.set_indexer_set_fn(|_: &mut ScriptMessage, key: &str, _: Dynamic| -> Out<()> {
        Err(read_only(
            "a message",
            &format!("to change `{key}`, edit a copy: `let c = m.to_map(); c.{key} = …;`"),
        ))
    });
    refuse_writes::<ScriptMessage>(
        &mut m,
        &[
            "clear",
            "remove",
            "mixin",
            "fill_with",
            "retain",
            "drain",
            "+=",
        ],
        "a message",
        "let c = m.to_map();",
    );
    m.set_native_fn("to_map", |x: &mut ScriptMessage| -> Out<Map> {
        Ok(x.0.map.clone())
    });
    m.set_native_fn("keys", |x: &mut ScriptMessage| -> Out<Array> {
        Ok(x.0.map.keys().map(|k| Dynamic::from(k.clone())).collect())
    });
    m.set_native_fn("values", |x: &mut ScriptMessage| -> Out<Array> {
        Ok(x.0.map.values().cloned().collect())
    });
    m.set_native_fn("len", |x: &mut ScriptMessage| -> Out<INT> {
        Ok(INT::try_from(x.0.map.len()).unwrap_or(INT::MAX))
    });
    m.set_native_fn("is_empty", |x: &mut ScriptMessage| -> Out<bool> {
        Ok(x.0.map.is_empty())
    });
    m.set_native_fn(
        "contains",
        |x: &mut ScriptMessage, key: &str| -> Out<bool> { Ok(x.0.map.contains_key(key)) },
    );
    m.set_native_fn("get", |x: &mut ScriptMessage, key: &str| -> Out<Dynamic> {
        Ok(x.field(key))
    });
    m.set_native_fn("+", |x: &mut ScriptMessage, more: Map| -> Out<Map> {
        let mut out = x.0.map.clone();
        out.extend(more);
        Ok(out)
    });
    m.set_native_fn(
        "==",
        |x: &mut ScriptMessage, y: ScriptMessage| -> Out<bool> {
            Ok(Arc::ptr_eq(x.message(), y.message()))
        },
    );
    m.set_native_fn(
        "!=",
        |x: &mut ScriptMessage, y: ScriptMessage| -> Out<bool> {
            Ok(!Arc::ptr_eq(x.message(), y.message()))
        },
    );
    for name in ["to_string", "to_debug"] {
        m.set_native_fn(name, |x: &mut ScriptMessage| -> Out<String> {
            Ok(format!("{:?}", x.0.map))
        });
    }

    // messages
    m.set_iterable::<MessageList>();
    m.set_indexer_get_fn(|l: &mut MessageList, i: INT| l.at(i));
    // No index setter: `ms[i] = x` fails as for any value that cannot be indexed for writing,
    // and Rhai then also skips writing back `ms[i]` after a method call (`ms[0].to_map()`).
    m.set_native_fn("len", |l: &mut MessageList| -> Out<INT> {
        Ok(INT::try_from(l.0.len()).unwrap_or(INT::MAX))
    });
    m.set_native_fn("is_empty", |l: &mut MessageList| -> Out<bool> {
        Ok(l.0.is_empty())
    });
    m.set_native_fn("get", |l: &mut MessageList, i: INT| -> Out<Dynamic> {
        Ok(index(l.0.len(), i)
            .and_then(|i| l.0.get(i).cloned())
            .unwrap_or(Dynamic::UNIT))
    });
    m.set_native_fn("to_array", |l: &mut MessageList| -> Out<Array> {
        Ok(l.array())
    });
    m.set_native_fn("extract", |l: &mut MessageList, start: INT| -> Out<Array> {
        Ok(extract(l, start, INT::MAX))
    });
    m.set_native_fn(
        "extract",
        |l: &mut MessageList, start: INT, len: INT| -> Out<Array> { Ok(extract(l, start, len)) },
    );
    m.set_native_fn(
        "extract",
        |l: &mut MessageList, r: std::ops::Range<INT>| -> Out<Array> {
            Ok(extract(l, r.start, r.end.saturating_sub(r.start)))
        },
    );
    m.set_native_fn(
        "extract",
        |l: &mut MessageList, r: std::ops::RangeInclusive<INT>| -> Out<Array> {
            let (a, b) = (*r.start(), *r.end());
            Ok(extract(l, a, b.saturating_sub(a).saturating_add(1)))
        },
    );
    m.set_native_fn("+", |l: &mut MessageList, more: Array| -> Out<Array> {
        let mut out = l.array();
        out.extend(more);
        Ok(out)
    });
    m.set_native_fn(
        "+",
        |l: &mut MessageList, more: MessageList| -> Out<Array> {
            let mut out = l.array();
            out.extend(more.0.iter().cloned());
            Ok(out)
        },
    );
    m.set_native_fn("+", |a: &mut Array, l: MessageList| -> Out<Array> {
        let mut out = std::mem::take(a);
        out.extend(l.0.iter().cloned());
        Ok(out)
    });
    m.set_native_fn("append", |a: &mut Array, l: MessageList| -> Out<()> {
        a.extend(l.0.iter().cloned());
        Ok(())
    });
    for name in ["to_string", "to_debug"] {
        m.set_native_fn(name, |l: &mut MessageList| -> Out<String> {
            Ok(format!("[{} messages]", l.0.len()))
        });
    }
    for name in READING {
        m.set_native_fn(
            name,
            move |ctx: NativeCallContext, l: &mut MessageList, arg: Dynamic| -> Out<Dynamic> {
                ctx.call_native_fn::<Dynamic>(name, (l.array(), arg))
            },
        );
        m.set_native_fn(
            name,
            move |ctx: NativeCallContext,
                  l: &mut MessageList,
                  arg: Dynamic,
                  more: Dynamic|
                  -> Out<Dynamic> {
                ctx.call_native_fn::<Dynamic>(name, (l.array(), arg, more))
            },
        );
    }
    refuse_writes::<MessageList>(
        &mut m,
        &WRITING,
        "the message list",
        "let ms = p.messages.to_array();",
    );
    m.into()
}

/// Registers `names` on `T` (with 0 to 3 further arguments) as functions that fail, saying
/// that `what` is read-only and how to copy it.
fn refuse_writes<T: Clone + Send + Sync + 'static>(
    m: &mut Module,
    names: &[&'static str],
    what: &'static str,
    copy: &'static str,
) {
    for &name in names {
        let refuse = move || -> Box<EvalAltResult> {
            read_only(what, &format!("`{name}` needs an editable copy: `{copy}`"))
        };
        m.set_native_fn(name, move |_: &mut T| -> Out<()> { Err(refuse()) });
        m.set_native_fn(name, move |_: &mut T, _: Dynamic| -> Out<()> {
            Err(refuse())
        });
        m.set_native_fn(name, move |_: &mut T, _: Dynamic, _: Dynamic| -> Out<()> {
            Err(refuse())
        });
        m.set_native_fn(
            name,
            move |_: &mut T, _: Dynamic, _: Dynamic, _: Dynamic| -> Out<()> { Err(refuse()) },
        );
    }
}

/// `list.extract(start, len)` with Rhai's array semantics (negative start from the end,
/// clamped).
fn extract(l: &MessageList, start: INT, len: INT) -> Array {
    let n = l.0.len();
    let start = if start < 0 {
        n.saturating_sub(usize::try_from(start.unsigned_abs()).unwrap_or(usize::MAX))
    } else {
        usize::try_from(start).unwrap_or(usize::MAX).min(n)
    };
    let len = usize::try_from(len.max(0)).unwrap_or(usize::MAX);
    let end = start.saturating_add(len).min(n);
    l.0.get(start..end)
        .map(<[Dynamic]>::to_vec)
        .unwrap_or_default()
}
