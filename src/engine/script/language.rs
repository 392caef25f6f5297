//! What a language adapter implements: [`Language`] (compile a file, boot a VM) and
//! [`ScriptVm`] (call one lifecycle function), and the values that pass between them and the
//! shared layer.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};

use crate::contract::limits::Limits;
use crate::contract::message::Message;
use crate::contract::{EngineInfo, Method};
use crate::engine::api::HostCall;
use crate::error::EngineError;
use crate::sandbox::StopSignals;

/// What a VM is booted from (the compiled program aside).
#[derive(Clone, Debug)]
pub struct Boot {
    /// The script path as shown in errors.
    pub file: String,
    /// The engine's entry config (`host.config`, `ctx.config`).
    pub config: Arc<Json>,
    /// `ctx.agentDir`.
    pub agent_dir: String,
    /// `ctx.workspaceDir`.
    pub workspace_dir: String,
    /// Budgets.
    pub limits: Limits,
    /// The engine's name in errors before `info` is known.
    pub label: String,
    /// The flags the VM's interrupt reads.
    pub signals: Arc<StopSignals>,
}

/// What booting a VM found, for validation.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// `info`, converted.
    pub info: EngineInfo,
    /// Top-level members and whether each is a function.
    pub members: Vec<(String, bool)>,
    /// The line where each function member is defined.
    pub lines: HashMap<String, u32>,
}

/// A script language: how a file becomes a program and a program a VM.
pub trait Language: Send + Sync + std::fmt::Debug + 'static {
    /// One live VM.
    type Vm: ScriptVm;
    /// A compiled engine file, shared by every instance.
    type Program: Send + Sync + std::fmt::Debug + 'static;
    /// Budgets only this language has (Rhai's operation and nesting limits), given at load;
    /// `()` when it has none.
    type Limits: Clone + Default + Send + Sync + std::fmt::Debug + 'static;
    /// Worker thread name.
    const THREAD: &'static str;
    /// Compiles the file once (a syntax error is reported here when the language can); the
    /// program keeps the language's own `lang` limits for its VMs.
    fn compile(
        file: &str,
        source: &str,
        label: &str,
        limits: &Limits,
        lang: &Self::Limits,
    ) -> Result<Self::Program, EngineError>;
    /// Builds a VM for one instance: runs the file (and factory) and reads the engine's members.
    fn boot(program: &Arc<Self::Program>, boot: &Boot) -> Result<(Self::Vm, Loaded), EngineError>;
}

/// What goes under `p.message` / `p.messages` besides the params' own fields.
#[derive(Clone, Debug)]
pub enum Feed {
    /// Nothing.
    Nothing,
    /// `p.message`: one host message.
    One(Arc<Message>),
    /// `p.messages`: a list of host messages (a batch, a turn).
    List(Vec<Arc<Message>>),
    /// `p.messages`: the session context (`call.context()`), kept resident in the VM.
    Context,
}

/// What the host wants back from a call, so the adapter converts only that.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Expect {
    /// The result is ignored (`afterTurn`, `onSubagentEnded`, `dispose`, a rollback).
    Nothing,
    /// The result as JSON (nil / `()` becomes `null`).
    Json,
    /// `assemble`: the fields as JSON except `messages`, which map back to host messages.
    Assembled,
    /// `prepareSubagentSpawn`: nothing, or a map holding only a `rollback` function.
    Rollback,
}

/// A message of an `assemble` result: a position in the call's context (the very message the
/// caller holds, which it takes from its own copy of the context), or a message the engine
/// made. Naming a context message by position keeps its reference count on the caller's core:
/// a clone made on the worker's and dropped on the caller's moved that line between the two
/// cores for every message kept, at every call.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageRef {
    /// The context message at this position.
    Context(usize),
    /// `len` context messages in order from position `start` (a kept tail is one of these).
    Run(usize, usize),
    /// A new message.
    New(Arc<Message>),
}

impl MessageRef {
    /// Appends `r` to `refs`, extending the last context position or run it continues.
    pub(crate) fn push(refs: &mut Vec<MessageRef>, r: MessageRef) {
        let next = match (refs.last(), &r) {
            (Some(MessageRef::Context(j)), MessageRef::Context(i)) if j + 1 == *i => {
                Some(MessageRef::Run(*j, 2))
            }
            (Some(MessageRef::Run(s, l)), MessageRef::Context(i)) if s + l == *i => {
                Some(MessageRef::Run(*s, l + 1))
            }
            _ => None,
        };
        match (next, refs.last_mut()) {
            (Some(run), Some(last)) => *last = run,
            _ => refs.push(r),
        }
    }

    /// The position past the context messages this names (none for a new message).
    pub(crate) fn context_end(&self) -> Option<usize> {
        match self {
            MessageRef::Context(i) => Some(i + 1),
            MessageRef::Run(s, l) => Some(s + l),
            MessageRef::New(_) => None,
        }
    }

    /// Appends the messages this names to `out`, taken from `context` for positions; the
    /// position past `context`'s end when it has no such message.
    pub(crate) fn resolve_into(
        self,
        context: &[Arc<Message>],
        out: &mut Vec<Arc<Message>>,
    ) -> Result<(), usize> {
        match self {
            MessageRef::Context(i) => out.push(context.get(i).cloned().ok_or(i)?),
            MessageRef::Run(s, l) => {
                let end = s.checked_add(l).ok_or(usize::MAX)?;
                let run = context.get(s..end).ok_or_else(|| end.saturating_sub(1))?;
                out.extend_from_slice(run);
            }
            MessageRef::New(m) => out.push(m),
        }
        Ok(())
    }
}

/// The fields of `assemble`'s result the contract names besides `messages`.
const ASSEMBLE_FIELDS: [&str; 4] = [
    "estimatedTokens",
    "systemPromptAddition",
    "promptAuthority",
    "contextProjection",
];

/// `assemble`'s fields besides `messages`: the contract's own in place, any other in a map
/// (empty, so unallocated, for a valid result). A map of them all was allocated on the
/// worker's core and freed on the caller's at every call, moving its lines and the allocator's
/// between the two.
#[derive(Debug, Default)]
pub struct AssembledFields {
    known: [Option<Json>; ASSEMBLE_FIELDS.len()],
    other: Map<String, Json>,
}

impl AssembledFields {
    /// Sets field `key` (a later value for the same key replaces the earlier).
    pub(crate) fn insert(&mut self, key: &str, value: Json) {
        match ASSEMBLE_FIELDS.iter().position(|k| *k == key) {
            Some(i) => self.known[i] = Some(value),
            None => {
                self.other.insert(key.to_owned(), value);
            }
        }
    }

    /// The names of the fields set.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> {
        ASSEMBLE_FIELDS
            .iter()
            .zip(&self.known)
            .filter(|(_, v)| v.is_some())
            .map(|(k, _)| *k)
            .chain(self.other.keys().map(String::as_str))
    }

    /// The fields as a map (the contract's own first).
    pub(crate) fn into_map(self) -> Map<String, Json> {
        let mut map: Map<String, Json> = ASSEMBLE_FIELDS
            .iter()
            .zip(self.known)
            .filter_map(|(k, v)| Some(((*k).to_owned(), v?)))
            .collect();
        map.extend(self.other);
        map
    }
}

impl From<Map<String, Json>> for AssembledFields {
    /// A map made on the caller's thread (the isolation wire's) is kept whole: `into_map` gives
    /// it back as it came, with no keys dropped and made again.
    fn from(map: Map<String, Json>) -> Self {
        AssembledFields {
            known: Default::default(),
            other: map,
        }
    }
}

/// A script's result, converted.
// `Assembled` is large on purpose: boxed, its fields would be one more allocation made on the
// worker's core and freed on the caller's at every call (see `AssembledFields`).
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Returned {
    /// Ignored, or nil / `()`.
    Nothing,
    /// The whole result.
    Json(Json),
    /// `assemble`: the other fields, and the messages.
    Assembled(AssembledFields, Vec<MessageRef>),
    /// `prepareSubagentSpawn`: the VM's handle of the rollback function, if one was returned.
    Rollback(Option<u64>),
}

/// One call's outcome from the VM: the converted result, or what is wrong with it (a message
/// naming the field at fault; the instance locates it at the function's line).
pub(crate) type Reply = Result<Returned, String>;

/// One live VM of some language, driven by `WorkerVm` on its worker thread.
pub trait ScriptVm: Send + 'static {
    /// What the language calls a map of fields (`table`, `map`), in result errors.
    const NOUN: &'static str;
    /// Calls `method` with `p` = `fields` + `feed` + per-session state. `Ok(None)` when the
    /// script does not define it; `Err` for a failed call (thrown, stopped, limit).
    fn invoke(
        &mut self,
        call: &HostCall,
        method: Method,
        fields: &Map<String, Json>,
        feed: Feed,
        expect: Expect,
    ) -> Result<Option<Reply>, EngineError>;
    /// Calls and forgets the rollback function behind `handle`.
    fn rollback(&mut self, call: &HostCall, handle: u64) -> Result<(), EngineError>;
    /// The per-session state as JSON.
    fn save_state(&self) -> Result<Json, EngineError>;
    /// Replaces the per-session state with saved JSON (`null` gives an empty state).
    fn restore_state(&mut self, state: &Json) -> Result<(), EngineError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::message::Message;

    fn context(n: usize) -> Vec<Arc<Message>> {
        (0..n)
            .map(|i| {
                let m: Message = serde_json::from_value(serde_json::json!({
                    "id": format!("m{i}"), "role": "user", "content": format!("text {i}"), "timestamp": i
                }))
                .unwrap();
                Arc::new(m)
            })
            .collect()
    }

    #[test]
    fn consecutive_positions_become_one_run_and_resolve_to_the_same_messages() {
        let ctx = context(6);
        let own = Arc::clone(&context(1)[0]);
        let mut refs = Vec::new();
        for r in [
            MessageRef::Context(4),
            MessageRef::Context(0),
            MessageRef::Context(1),
            MessageRef::Context(2),
            MessageRef::New(Arc::clone(&own)),
            MessageRef::Context(3),
        ] {
            MessageRef::push(&mut refs, r);
        }
        assert_eq!(refs.len(), 4, "{refs:?}");
        assert!(matches!(refs[1], MessageRef::Run(0, 3)), "{refs:?}");
        let mut out = Vec::new();
        for r in refs {
            r.resolve_into(&ctx, &mut out).unwrap();
        }
        let want = [&ctx[4], &ctx[0], &ctx[1], &ctx[2], &own, &ctx[3]];
        assert_eq!(out.len(), want.len());
        for (got, want) in out.iter().zip(want) {
            assert!(Arc::ptr_eq(got, want));
        }
    }

    #[test]
    fn a_position_past_the_context_is_named_not_a_panic() {
        let ctx = context(3);
        let mut out = Vec::new();
        assert_eq!(MessageRef::Context(3).resolve_into(&ctx, &mut out), Err(3));
        assert_eq!(MessageRef::Run(2, 4).resolve_into(&ctx, &mut out), Err(5));
        assert_eq!(MessageRef::Run(0, 0).resolve_into(&ctx, &mut out), Ok(()));
        assert_eq!(
            MessageRef::Run(usize::MAX, 2).resolve_into(&ctx, &mut out),
            Err(usize::MAX)
        );
        assert!(out.is_empty());
    }
}
