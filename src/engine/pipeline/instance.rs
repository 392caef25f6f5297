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
    let by_id: std::collections::HashMap<&str, &Arc<Message>> = given
        .iter()
        .filter(|m| !m.id.is_empty())
        .map(|m| (m.id.as_str(), m))
        .collect();
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let id = item.get("id").and_then(Json::as_str).unwrap_or_default();
            if let Some(m) = by_id.get(id)
                && serde_json::to_value(&***m).is_ok_and(|g| same_but_nulls(&g, item))
            {
                return Ok(Arc::clone(m));
            }
            serde_json::from_value::<Message>(item.clone())
                .map(Arc::new)
                .map_err(|e| format!("messages[{}]: {e}", i + 1))
        })
        .collect()
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
