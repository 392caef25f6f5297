//! The `host` API that scripts see (contract §5), written once in Rust.
//!
//! [`API`] is the table of every `host` function: its path under `host`, its parameters and a
//! Rust function over plain values ([`HostValue`] in, [`HostOut`] back). The Lua and Rhai
//! adapters only register each entry under the name scripts use (`host.tokens` /
//! `host::tokens`) and convert values to and from their VM; every behaviour lives here, one
//! module per surface: [`tokens`], [`fit`], [`summarize`], [`complete`], [`compaction`], [`pairing`],
//! [`recall`], [`log`](mod@log) and [`clock`]. `host.config` is a value, not a function: each
//! adapter installs the entry config
//! ([`HostCall::config`]) as its language shows a map.
//!
//! A [`HostCall`] is made for each lifecycle call and owns (cheap `Arc`s of) everything the call
//! may touch; the VM's [`HostScope`] holds it for the duration of the call.
//!
//! (The table's names are checked by the unit test `the_table_names_each_function`.)

pub(crate) mod clock;
pub(crate) mod compaction;
pub(crate) mod complete;
pub(crate) mod fit;
pub(crate) mod forward;
pub(crate) mod log;
pub(crate) mod pairing;
pub(crate) mod recall;
pub(crate) mod summarize;
pub(crate) mod table;
pub(crate) mod timing;
pub(crate) mod tokens;
pub(crate) mod value;

use std::sync::Arc;

use serde_json::Value;

use crate::contract::message::Message;
use crate::contract::{Method, ResultLimits};
use crate::services::compaction::CompactionSettings;
use crate::services::recall::RecallIndex;
use crate::services::summarize::Summarizer;
use crate::services::tokens::TokenCache;

pub(crate) use compaction::{ClientCompaction, ClientCompactor};
pub use complete::{Completions, SessionModel};
pub(crate) use forward::HostForward;
pub(crate) use log::{LOG_CAP, LOG_NOTE_ROOM, LogLevel, cut_log_line, cut_log_text_beyond, log};
pub use summarize::SummarizeOptions;
pub use table::HostScope;
pub(crate) use table::{API, Args, HostFn, MAX_PARAMS, Param};
pub(crate) use timing::CallTimes;
pub use timing::MethodTimes;
pub use tokens::HeldMessage;
pub use value::{HostError, HostOut, HostValue};
pub(crate) use value::{Kept, message_from_json};

/// What a session shares with every call into its engine.
#[derive(Debug)]
pub struct SessionServices {
    /// Token counts, cached per message.
    pub tokens: TokenCache,
    /// The summarizer behind `host.summarize` and built-in compaction.
    pub summarizer: Arc<dyn Summarizer>,
    /// Built-in compaction settings.
    pub compaction: CompactionSettings,
    /// Caps on engine results.
    pub limits: ResultLimits,
    /// The model behind `host.complete` and its budgets (none by default).
    pub model: SessionModel,
    /// Where scripts' `host.*` calls spent their time (`host.summarize`, `host.tokens`, ...),
    /// per function, for replay and `watch` reports.
    pub host_times: parking_lot::Mutex<CallTimes>,
    /// The session's cancel flag (`$/cancelRequest` in `serve`): a summary the host waits on
    /// (built-in compaction, `delegateCompaction`) is dropped when it is set.
    pub cancel: Arc<std::sync::atomic::AtomicBool>,
}

/// Everything one lifecycle call may use: the session context and the host services.
#[derive(Clone, Debug)]
pub struct HostCall {
    engine_id: Arc<str>,
    session_id: Arc<str>,
    context: Arc<Vec<Arc<Message>>>,
    services: Arc<SessionServices>,
    config: Arc<Value>,
    token_budget: u64,
    client_compaction: Option<ClientCompaction>,
    client_params: Option<Arc<ClientParams>>,
    recall: Option<Arc<RecallIndex>>,
    forward: Option<Arc<dyn HostForward>>,
    storage: Option<Arc<CallStorage>>,
}

/// Where a call's session stands in its store (the lifecycle context's `storageCursor`,
/// `turnNumber` and `sessionCreatedAt`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallStorage {
    /// The store's cursor after what the session holds now.
    pub cursor: crate::contract::StorageCursor,
    /// When the session was created and how many turns it committed, where the store knows.
    pub meta: crate::contract::SessionMeta,
}

/// The host params a client (`ctxhost serve`) passed with the lifecycle call it is being
/// served, which the engine receives as the client sent them (`runtimeContext`,
/// `sessionTarget`), unless its `acceptedHostParams` leaves them out.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientParams {
    /// The lifecycle method the client called: only that method's `p` carries them.
    pub method: Method,
    /// The params, by their OpenClaw names.
    pub fields: serde_json::Map<String, Value>,
}

impl HostCall {
    /// A call context for one lifecycle call.
    pub fn new(
        engine_id: Arc<str>,
        session_id: Arc<str>,
        context: Arc<Vec<Arc<Message>>>,
        services: Arc<SessionServices>,
        config: Arc<Value>,
        token_budget: u64,
    ) -> Self {
        HostCall {
            engine_id,
            session_id,
            context,
            services,
            config,
            token_budget,
            client_compaction: None,
            client_params: None,
            recall: None,
            forward: None,
            storage: None,
        }
    }

    /// Whether `other` is this very call (the same shared parts, by address, and the same
    /// budget): a worker thread that holds it already is not sent it again, which would move
    /// each of its reference counts between the caller's core and the worker's.
    pub fn is_same(&self, other: &HostCall) -> bool {
        fn same<T: ?Sized>(a: &Arc<T>, b: &Arc<T>) -> bool {
            std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
        }
        fn same_opt<T: ?Sized>(a: Option<&Arc<T>>, b: Option<&Arc<T>>) -> bool {
            match (a, b) {
                (None, None) => true,
                (Some(a), Some(b)) => same(a, b),
                _ => false,
            }
        }
        same(&self.engine_id, &other.engine_id)
            && same(&self.session_id, &other.session_id)
            && same(&self.context, &other.context)
            && same(&self.services, &other.services)
            && same(&self.config, &other.config)
            && self.token_budget == other.token_budget
            && match (&self.client_compaction, &other.client_compaction) {
                (None, None) => true,
                (Some(a), Some(b)) => a.is_same(b),
                _ => false,
            }
            && same_opt(self.client_params.as_ref(), other.client_params.as_ref())
            && same_opt(self.recall.as_ref(), other.recall.as_ref())
            && same_opt(self.forward.as_ref(), other.forward.as_ref())
            && same_opt(self.storage.as_ref(), other.storage.as_ref())
    }

    /// The same call as pipeline hook `hook` sees it: its id (for `host.log` and errors), its
    /// entry config and `context` as `p.messages` (the previous `prune` hook's result, say).
    pub fn for_hook(
        &self,
        hook: &str,
        config: Arc<Value>,
        context: Arc<Vec<Arc<Message>>>,
    ) -> Self {
        HostCall {
            engine_id: Arc::from(hook),
            config,
            context,
            ..self.clone()
        }
    }

    /// The call with where its session stands in its store.
    pub fn with_storage(mut self, storage: CallStorage) -> Self {
        self.storage = Some(Arc::new(storage));
        self
    }

    /// Where the call's session stands in its store, when the call was made by a session.
    pub fn storage(&self) -> Option<&CallStorage> {
        self.storage.as_deref()
    }

    /// The call with `forward` deciding which `host` functions run elsewhere (a child-process
    /// VM sends them to its parent).
    pub fn with_forward(mut self, forward: Arc<dyn HostForward>) -> Self {
        self.forward = Some(forward);
        self
    }

    /// Where chosen `host` functions of this call run instead of here, if anywhere.
    pub fn forward(&self) -> Option<&Arc<dyn HostForward>> {
        self.forward.as_ref()
    }

    /// The call with `client` as what `host.delegateCompaction(p)` runs (instead of the
    /// built-in compaction), when there is one.
    pub fn with_client_compaction(mut self, client: Option<ClientCompaction>) -> Self {
        self.client_compaction = client;
        self
    }

    /// The call with the host params the client passed with the call it is being served.
    pub fn with_client_params(mut self, params: Option<Arc<ClientParams>>) -> Self {
        self.client_params = params;
        self
    }

    /// The host params the client passed for `method`, when this call serves that method.
    pub fn client_params(&self, method: Method) -> Option<&serde_json::Map<String, Value>> {
        self.client_params
            .as_deref()
            .filter(|p| p.method == method)
            .map(|p| &p.fields)
    }

    /// The client compaction `host.delegateCompaction(p)` runs in this call, if any.
    pub fn client_compaction(&self) -> Option<&ClientCompaction> {
        self.client_compaction.as_ref()
    }

    /// The same call with the session's stored messages behind `host.search` and `host.fetch`
    /// (without them, both find nothing).
    pub fn with_recall(mut self, recall: Arc<RecallIndex>) -> Self {
        self.recall = Some(recall);
        self
    }

    /// The session's stored messages, when the call has them.
    pub fn recall(&self) -> Option<&Arc<RecallIndex>> {
        self.recall.as_ref()
    }

    /// The engine this call is for.
    pub fn engine_id(&self) -> &str {
        &self.engine_id
    }

    /// The session this call is for.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The session's context (what `assemble` and `afterTurn` receive as `messages`).
    pub fn context(&self) -> &Arc<Vec<Arc<Message>>> {
        &self.context
    }

    /// The session services.
    pub fn services(&self) -> &SessionServices {
        &self.services
    }

    /// `host.config`: the engine's entry config.
    pub fn config(&self) -> &Value {
        &self.config
    }

    /// The current turn's token budget.
    pub fn token_budget(&self) -> u64 {
        self.token_budget
    }
}

// The module docs' example, moved here when the module became crate-private.
#[cfg(test)]
mod table_example {
    use crate::engine::api::API;

    #[test]
    fn the_table_names_each_function() {
        let names: Vec<String> = API.iter().map(|f| f.path.join(".")).collect();
        assert!(names.contains(&"tokens".to_string()));
        assert!(names.contains(&"log.info".to_string()));
    }
}
