//! One pipeline instance: a VM per hook, each hook run and quarantined alone.

use std::sync::Arc;

use serde_json::{Map, Value as Json, json};

use crate::contract::message::Message;
use crate::contract::{EngineInfo, Method};
use crate::engine::Engine;
use crate::engine::api::HostCall;
use crate::engine::legacy::Legacy;
use crate::engine::script::{ScriptInstance, ScriptVm};
use crate::error::{EngineError, EngineErrorKind};

/// What the pipeline needs of a hook instance (a script instance of either language).
pub(super) trait Hook: Engine {
    fn call_hook(
        &mut self,
        call: &HostCall,
        method: Method,
        fields: &Map<String, Json>,
    ) -> Result<Option<Json>, EngineError>;
}

impl<V: ScriptVm> Hook for ScriptInstance<V> {
    fn call_hook(
        &mut self,
        call: &HostCall,
        method: Method,
        fields: &Map<String, Json>,
    ) -> Result<Option<Json>, EngineError> {
        self.hook(call, method, fields)
    }
}

pub(super) struct Slot {
    pub(super) id: String,
    pub(super) vm: Option<Box<dyn Hook>>,
    /// Why this hook no longer runs in this instance (its first failure).
    pub(super) quarantined: Option<String>,
}

/// One pipeline instance serving one session: one VM per hook.
pub struct Pipeline {
    pub(super) info: EngineInfo,
    pub(super) hooks: Vec<Slot>,
    pub(super) share: f64,
    pub(super) legacy: Legacy,
    pub(super) plugin_data: Map<String, Json>,
    /// The hook whose `prune` returned `compactionHandled` on this call.
    pub(super) compaction_handled: Option<String>,
}

impl Pipeline {
    /// Hook ids that failed and no longer run, with their first failure.
    pub fn quarantined(&self) -> Vec<(&str, &str)> {
        self.hooks
            .iter()
            .filter_map(|h| h.quarantined.as_deref().map(|q| (h.id.as_str(), q)))
            .collect()
    }

    /// Runs `method` on every live hook defining it, in order; `each` gets the hook id and its
    /// result and may reject it (an invalid result). A failure quarantines that hook alone.
    pub(super) fn run(
        &mut self,
        call: &HostCall,
        method: Method,
        fields: &Map<String, Json>,
        mut each: impl FnMut(&str, Json) -> Result<(), String>,
    ) {
        for slot in &mut self.hooks {
            let Some(vm) = &mut slot.vm else { continue };
            if !vm.defines(method) {
                continue;
            }
            let out = vm.call_hook(call, method, fields).and_then(|r| {
                each(&slot.id, r.unwrap_or(Json::Null)).map_err(|m| {
                    EngineError::new(method, &slot.id, EngineErrorKind::InvalidResult, m)
                })
            });
            if let Err(e) = out {
                tracing::warn!(
                    hook = slot.id,
                    "pipeline: hook failed and is quarantined: {e}"
                );
                slot.quarantined = Some(e.to_string());
                slot.vm = None;
            }
        }
    }

    pub(super) fn lifecycle(
        &self,
        call: &HostCall,
        session_key: Option<&str>,
        model: Option<&str>,
        budget: u64,
        trigger: &str,
    ) -> Json {
        let mut l = Map::new();
        l.insert("sessionId".into(), json!(call.session_id()));
        if let Some(k) = session_key {
            l.insert("sessionKey".into(), json!(k));
        }
        l.insert("trigger".into(), json!(trigger));
        if let Some(m) = model {
            l.insert("modelId".into(), json!(m));
        }
        let estimated = call.services().tokens.messages(call.context());
        l.insert(
            "tokenWindow".into(),
            json!({"contextWindowTokens": budget, "estimatedInputTokens": estimated}),
        );
        l.insert(
            "storageCursor".into(),
            json!({"backend": "fs-jsonl", "sessionId": call.session_id(),
                   "seq": call.context().len(),
                   "entryId": call.context().last().map(|m| m.id.clone())}),
        );
        Json::Object(l)
    }
}

pub(super) fn fields(pairs: impl IntoIterator<Item = (&'static str, Json)>) -> Map<String, Json> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

pub(super) fn messages_of(v: &Json) -> Result<Vec<Arc<Message>>, String> {
    serde_json::from_value::<Vec<Message>>(v.clone())
        .map(|ms| ms.into_iter().map(Arc::new).collect())
        .map_err(|e| format!("messages: {e}"))
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
