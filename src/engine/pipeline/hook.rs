//! What the pipeline needs of a hook: a [`HookSource`] (a loaded hook file of either language,
//! in this process or in a child, or a built-in hook) makes one [`Hook`] instance per session.

use std::fmt::Debug;
use std::path::Path;

use serde_json::{Map, Value as Json};

use crate::contract::{EngineInfo, Method};
use crate::engine::api::HostCall;
use crate::engine::instance::{Connect, Factory, Instance, Transport};
use crate::engine::{Engine, EngineFactory, InstanceContext};
use crate::error::EngineError;

/// One hook instance serving one session.
pub(crate) trait Hook: Send {
    /// Whether the hook defines `method` (one of [`Method::HOOKS`]).
    fn defines(&self, method: Method) -> bool;
    /// Calls `method` with `p` = `fields` + `call.context()` as `p.messages`; its result as
    /// JSON, `None` when the hook does not define it.
    fn call_hook(
        &mut self,
        call: &HostCall,
        method: Method,
        fields: &Map<String, Json>,
    ) -> Result<Option<Json>, EngineError>;
    /// The instance retires.
    fn dispose(&mut self, call: &HostCall) -> Result<(), EngineError>;
    /// The per-session state, to be saved with the session.
    fn save_state(&mut self) -> Result<Json, EngineError>;
    /// Restores state saved by [`Hook::save_state`].
    fn restore_state(&mut self, state: Json) -> Result<(), EngineError>;
}

impl<T: Transport> Hook for Instance<T> {
    fn defines(&self, method: Method) -> bool {
        Engine::defines(self, method)
    }

    fn call_hook(
        &mut self,
        call: &HostCall,
        method: Method,
        fields: &Map<String, Json>,
    ) -> Result<Option<Json>, EngineError> {
        self.hook(call, method, fields)
    }

    fn dispose(&mut self, call: &HostCall) -> Result<(), EngineError> {
        Engine::dispose(self, call)
    }

    fn save_state(&mut self) -> Result<Json, EngineError> {
        Engine::save_state(self)
    }

    fn restore_state(&mut self, state: Json) -> Result<(), EngineError> {
        Engine::restore_state(self, state)
    }
}

/// A loaded hook: makes its instances.
pub(crate) trait HookSource: Send + Sync + Debug {
    /// The hook's `info` (`priority` and `ownsCompaction` among its fields).
    fn info(&self) -> &EngineInfo;
    /// Warnings found at load.
    fn warnings(&self) -> &[String];
    /// The hook file; `None` for a built-in hook.
    fn file(&self) -> Option<&Path>;
    /// A fresh instance for one session.
    fn instantiate(&self, cx: &InstanceContext) -> Result<Box<dyn Hook>, EngineError>;
}

impl<C: Connect> HookSource for Factory<C> {
    fn info(&self) -> &EngineInfo {
        EngineFactory::info(self)
    }

    fn warnings(&self) -> &[String] {
        EngineFactory::warnings(self)
    }

    fn file(&self) -> Option<&Path> {
        EngineFactory::source(self)
    }

    fn instantiate(&self, cx: &InstanceContext) -> Result<Box<dyn Hook>, EngineError> {
        Ok(Box::new(self.instantiate_typed(cx)?))
    }
}

/// The `priority` a hook's `info` declares (0 when none): higher runs first.
pub(crate) fn priority_of(info: &EngineInfo) -> f64 {
    info.extra
        .get("priority")
        .and_then(Json::as_f64)
        .filter(|p| p.is_finite())
        .unwrap_or(0.0)
}
