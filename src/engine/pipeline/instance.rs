//! One pipeline instance: an instance per hook, each hook run and quarantined alone, and each
//! following a reload of its own hook at the next turn without touching the others.

use std::sync::Arc;

use serde_json::{Map, Value as Json};

use crate::contract::message::Message;
use crate::contract::{EngineInfo, Method};
use crate::engine::InstanceContext;
use crate::engine::api::HostCall;
use crate::engine::legacy::Legacy;
use crate::error::{EngineError, EngineErrorKind};

use super::cell::HookCell;
use super::hook::Hook;

/// One hook of one pipeline instance.
pub(super) struct Slot {
    pub(super) cell: Arc<HookCell>,
    /// The generation of the hook this instance runs.
    pub(super) generation: u64,
    /// The hook's entry config, as its instance was made with.
    pub(super) config: Arc<Json>,
    pub(super) vm: Option<Box<dyn Hook>>,
    /// Why this hook no longer runs in this instance (its first failure).
    pub(super) quarantined: Option<String>,
}

impl Slot {
    /// A fresh instance of the cell's current version (quarantined when it cannot start).
    pub(super) fn start(cell: &Arc<HookCell>, cx: &InstanceContext) -> Slot {
        let version = cell.current();
        let hcx = InstanceContext {
            config: Arc::clone(&version.config),
            ..cx.clone()
        };
        let (vm, quarantined) = match version.source.instantiate(&hcx) {
            Ok(vm) => {
                let defines: Vec<Method> = Method::HOOKS
                    .into_iter()
                    .filter(|m| vm.defines(*m))
                    .collect();
                cell.started(&defines);
                (Some(vm), None)
            }
            Err(e) => {
                tracing::warn!(hook = cell.id, "pipeline: hook quarantined: {e}");
                cell.failed(&e.to_string());
                (None, Some(e.to_string()))
            }
        };
        Slot {
            cell: Arc::clone(cell),
            generation: version.generation,
            config: version.config,
            vm,
            quarantined,
        }
    }

    /// The hook's id.
    pub(super) fn id(&self) -> &str {
        &self.cell.id
    }

    /// Whether the hook runs and defines `method`.
    pub(super) fn runs(&self, method: Method) -> bool {
        self.vm.as_ref().is_some_and(|vm| vm.defines(method))
    }

    /// Calls `method` with `context` as `p.messages`; `each` gets the result and may refuse it
    /// (an invalid result). A failure quarantines this hook alone, for this instance.
    pub(super) fn call(
        &mut self,
        call: &HostCall,
        context: &Arc<Vec<Arc<Message>>>,
        method: Method,
        fields: &Map<String, Json>,
        each: &mut dyn FnMut(&str, Json) -> Result<(), String>,
    ) {
        let Some(vm) = &mut self.vm else { return };
        if !vm.defines(method) {
            return;
        }
        let id = &self.cell.id;
        let hcall = call.for_hook(id, Arc::clone(&self.config), Arc::clone(context));
        let out = vm.call_hook(&hcall, method, fields).and_then(|r| {
            each(id, r.unwrap_or(Json::Null))
                .map_err(|m| EngineError::new(method, id, EngineErrorKind::InvalidResult, m))
        });
        match out {
            Ok(()) => self.cell.called(method),
            Err(e) => {
                tracing::warn!(hook = id, "pipeline: hook failed and is quarantined: {e}");
                self.cell.failed(&e.to_string());
                self.quarantined = Some(e.to_string());
                self.vm = None;
            }
        }
    }
}

/// One pipeline instance serving one session: one instance per hook.
pub struct Pipeline {
    pub(super) info: EngineInfo,
    pub(super) hooks: Vec<Slot>,
    pub(super) share: f64,
    pub(super) cx: InstanceContext,
    pub(super) legacy: Legacy,
    pub(super) plugin_data: Map<String, Json>,
    /// The hook whose `prune` returned `compactionHandled` on this call.
    pub(super) compaction_handled: Option<String>,
    /// What each compaction since the last `assemble` summarized and who did, for its report.
    pub(super) compactions: Vec<Json>,
}

impl Pipeline {
    /// Hook ids that failed and no longer run, with their first failure.
    pub fn quarantined(&self) -> Vec<(&str, &str)> {
        self.hooks
            .iter()
            .filter_map(|h| h.quarantined.as_deref().map(|q| (h.id(), q)))
            .collect()
    }

    /// Runs `method` on every live hook defining it, in order, each seeing the session context;
    /// `each` gets the hook id and its result and may reject it (an invalid result).
    pub(super) fn run(
        &mut self,
        call: &HostCall,
        method: Method,
        fields: &Map<String, Json>,
        mut each: impl FnMut(&str, Json) -> Result<(), String>,
    ) {
        let context = Arc::clone(call.context());
        for slot in &mut self.hooks {
            slot.call(call, &context, method, fields, &mut each);
        }
    }

    /// Follows the reloads of single hooks (at a turn boundary): a hook whose generation moved
    /// gets a fresh instance with its state carried over and its quarantine lifted; the other
    /// hooks' instances are not touched.
    pub(super) fn follow_reloads(&mut self, call: &HostCall) {
        let mut moved = false;
        for slot in &mut self.hooks {
            if slot.cell.generation() == slot.generation {
                continue;
            }
            let id = &slot.cell.id;
            let state = slot.vm.as_mut().map(|vm| {
                let state = vm.save_state();
                if let Err(e) = vm.dispose(call) {
                    tracing::warn!(hook = id, "pipeline: dispose failed: {e}");
                }
                state
            });
            let mut fresh = Slot::start(&slot.cell, &self.cx);
            if let (Some(vm), Some(Ok(state))) = (&mut fresh.vm, state)
                && let Err(e) = vm.restore_state(state)
            {
                tracing::warn!(hook = fresh.id(), "pipeline: hook quarantined: {e}");
                fresh.cell.failed(&format!("restore state: {e}"));
                fresh.quarantined = Some(e.to_string());
                fresh.vm = None;
            }
            tracing::info!(
                hook = fresh.id(),
                generation = fresh.generation,
                "pipeline: hook reloaded"
            );
            *slot = fresh;
            moved = true;
        }
        if moved {
            order(&mut self.hooks);
        }
    }
}

/// Sorts hooks into the order they run: priority descending, configured order among equals.
pub(super) fn order(hooks: &mut [Slot]) {
    hooks.sort_by(|a, b| {
        b.cell
            .priority()
            .total_cmp(&a.cell.priority())
            .then(a.cell.index.cmp(&b.cell.index))
    });
}

pub(super) fn fields(pairs: impl IntoIterator<Item = (&'static str, Json)>) -> Map<String, Json> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// The messages a hook returned. One equal to a message it was `given` (same id, same fields
/// once the nulls a script cannot hold are left out) is that very message, so an unchanged
/// message stays the session's (its cached token count, its exact fields).
pub(super) fn messages_of(v: &Json, given: &[Arc<Message>]) -> Result<Vec<Arc<Message>>, String> {
    let Json::Array(items) = v else {
        return Err(format!(
            "messages must be a list, got {}",
            crate::engine::script::result::json_type(v)
        ));
    };
    let mut given_at = GivenIds::new(given);
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let id = item.get("id").and_then(Json::as_str).unwrap_or_default();
            if let Some(m) = given_at.find(id)
                && serde_json::to_value(&**m).is_ok_and(|g| same_but_nulls(&g, item))
            {
                return Ok(Arc::clone(m));
            }
            serde_json::from_value::<Message>(item.clone())
                .map(Arc::new)
                .map_err(|e| format!("messages[{}]: {e}", i + 1))
        })
        .collect()
}

/// Finds given messages by id for a hook's returned list, which is nearly always a run of the
/// given list in its order (a suffix, a window, the whole): each id is looked for just after
/// the previous one's place, the first from the end backwards, and a map of every id is built
/// only when a hook returns them out of order. The cost follows what the hook returned, not
/// the length of the session.
struct GivenIds<'a> {
    given: &'a [Arc<Message>],
    /// Where the next id is expected, after the last one found.
    next: Option<usize>,
    /// Whether the one backward scan was made (every later miss uses the map).
    scanned: bool,
    by_id: Option<std::collections::HashMap<&'a str, usize, rustc_hash::FxBuildHasher>>,
}

impl<'a> GivenIds<'a> {
    fn new(given: &'a [Arc<Message>]) -> Self {
        GivenIds {
            given,
            next: None,
            scanned: false,
            by_id: None,
        }
    }

    fn find(&mut self, id: &str) -> Option<&'a Arc<Message>> {
        if id.is_empty() {
            return None;
        }
        let at = match self.next {
            Some(n) if self.given.get(n).is_some_and(|m| m.id == id) => Some(n),
            None if !self.scanned => {
                self.scanned = true;
                self.given.iter().rposition(|m| m.id == id)
            }
            _ => self.map().get(id).copied(),
        };
        if let Some(i) = at {
            self.next = Some(i + 1);
        }
        at.map(|i| &self.given[i])
    }

    fn map(&mut self) -> &std::collections::HashMap<&'a str, usize, rustc_hash::FxBuildHasher> {
        let given = self.given;
        self.by_id.get_or_insert_with(|| {
            given
                .iter()
                .enumerate()
                .filter(|(_, m)| !m.id.is_empty())
                .map(|(i, m)| (m.id.as_str(), i))
                .collect()
        })
    }
}

/// Whether two JSON values are equal once object fields holding null are left out.
fn same_but_nulls(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Object(x), Json::Object(y)) => {
            let set = |m: &'_ Map<String, Json>| m.iter().filter(|(_, v)| !v.is_null()).count();
            set(x) == set(y)
                && x.iter()
                    .filter(|(_, v)| !v.is_null())
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_but_nulls(v, w)))
        }
        (Json::Array(x), Json::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same_but_nulls(v, w))
        }
        (Json::Number(x), Json::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

pub(super) fn only_keys(v: &Json, keys: &[&str], hook: Method) -> Result<(), String> {
    match v {
        Json::Null => Ok(()),
        Json::Object(m) => match m.keys().find(|k| !keys.contains(&k.as_str())) {
            Some(k) => Err(format!("{hook} returned an unknown field `{k}`")),
            None => Ok(()),
        },
        _ => Err(format!("{hook} must return a map or nothing")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a panic is the failure report

    use super::*;
    use serde_json::json;

    fn given(n: usize) -> Vec<Arc<Message>> {
        (0..n)
            .map(|i| {
                let mut m = Message::user(format!("message {i}"));
                m.id = format!("{i:08x}");
                Arc::new(m)
            })
            .collect()
    }

    fn returned(given: &[Arc<Message>], at: &[usize]) -> Json {
        Json::Array(
            at.iter()
                .map(|&i| serde_json::to_value(&*given[i]).unwrap())
                .collect(),
        )
    }

    /// Which returned messages are the given ones (the same `Arc`), by position in `given`.
    fn same(given: &[Arc<Message>], out: &[Arc<Message>]) -> Vec<Option<usize>> {
        out.iter()
            .map(|m| given.iter().position(|g| Arc::ptr_eq(g, m)))
            .collect()
    }

    #[test]
    fn returned_messages_are_the_given_ones_in_any_order() {
        let g = given(50);
        for order in [
            vec![40, 41, 42, 49],
            vec![0, 1, 2, 3],
            vec![49, 3, 17, 3, 48],
            vec![10, 9, 8],
            (0..50).collect(),
        ] {
            let out = messages_of(&returned(&g, &order), &g).unwrap();
            let want: Vec<Option<usize>> = order.iter().map(|&i| Some(i)).collect();
            assert_eq!(same(&g, &out), want, "{order:?}");
        }
    }

    #[test]
    fn new_and_changed_messages_are_new() {
        let g = given(20);
        let mut items = returned(&g, &[5, 6, 7]);
        let Json::Array(list) = &mut items else {
            unreachable!()
        };
        // a message the hook made, an unknown id, and a known id with other content
        let mut made = serde_json::to_value(Message::assistant("made here")).unwrap();
        made["id"] = json!("");
        list.insert(0, made);
        let mut unknown = serde_json::to_value(&*g[1]).unwrap();
        unknown["id"] = json!("nope");
        list.insert(2, unknown);
        list[3]["content"] = json!("changed");
        let out = messages_of(&items, &g).unwrap();
        assert_eq!(same(&g, &out), [None, Some(5), None, None, Some(7)]);
        assert_eq!(out[3].id, g[6].id, "a changed message keeps its id");
        assert_ne!(out[3].body, g[6].body);
    }
}
