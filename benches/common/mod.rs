//! What the benches share: one `assemble` through the host path (a [`HostCall`] over the
//! session's resident messages, the engines loaded by their adapters' own loaders), and the
//! keep-recent workloads of `shared/data/workloads` ([`workloads`]).
//!
//! Each bench uses a part of it, hence `dead_code` is allowed here.
#![allow(dead_code)]

pub mod flat;
pub mod pipeline;
pub mod store_cases;
pub mod timing;
pub mod workloads;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ctxhost::HostCall;
use ctxhost::contract::message::Message;
use ctxhost::contract::{AssembleParams, ResultLimits};
use ctxhost::engine::{Engine, InstanceContext};
use ctxhost::services::compaction::CompactionSettings;
use ctxhost::services::summarize::BuiltinSummarizer;
use ctxhost::services::tokens::{Estimate, TokenCache};
use ctxhost::testing::SessionServices;
use serde_json::json;

/// `../shared` beside the checkout, or `$CTXHOST_SHARED`.
pub fn shared_dir() -> PathBuf {
    match std::env::var_os("CTXHOST_SHARED") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"),
    }
}

/// A session's services with the default estimate, summarizer, compaction and limits.
pub fn services() -> Arc<SessionServices> {
    Arc::new(SessionServices {
        tokens: TokenCache::new(Arc::new(Estimate)),
        summarizer: Arc::new(BuiltinSummarizer::new()),
        compaction: CompactionSettings::default(),
        limits: ResultLimits::default(),
        model: Default::default(),
        host_times: Default::default(),
        cancel: Default::default(),
    })
}

/// One lifecycle call of engine `bench`, session `s1`, over `ctx`.
pub fn call(ctx: Arc<Vec<Arc<Message>>>, services: &Arc<SessionServices>, budget: u64) -> HostCall {
    HostCall::new(
        "bench".into(),
        "s1".into(),
        ctx,
        services.clone(),
        Arc::new(json!({})),
        budget,
    )
}

/// `assemble`'s params for session `s1`: only the budget.
pub fn params(budget: u64) -> AssembleParams {
    AssembleParams {
        session_id: "s1".into(),
        session_key: None,
        token_budget: budget,
        prompt: None,
        model: None,
        available_tools: None,
        runtime_settings: None,
    }
}

/// Loads a Lua engine file and makes one instance.
pub fn lua_engine(path: &Path) -> Box<dyn Engine> {
    let opts = ctxhost::engine::LoadOptions {
        config: Arc::new(json!({})),
        ..Default::default()
    };
    let f = ctxhost::testing::lua::load(path, &opts).unwrap_or_else(|e| panic!("{e}"));
    f.instantiate(&InstanceContext::default())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Loads a Rhai engine file and makes one instance.
pub fn rhai_engine(path: &Path) -> Box<dyn Engine> {
    let opts = ctxhost::engine::LoadOptions {
        config: Arc::new(json!({})),
        ..Default::default()
    };
    let f = ctxhost::testing::rhai::load(path, &opts, &Default::default())
        .unwrap_or_else(|e| panic!("{e}"));
    f.instantiate(&InstanceContext::default())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Loads an engine file and makes one instance.
pub type EngineFn = fn(&Path) -> Box<dyn Engine>;
