//! The built-in `legacy` engine (contract §9): `ingest` is a no-op, `assemble` passes the session
//! context through (fitted to the budget only when it does not fit), and `compact` is the
//! built-in compaction. It is just another engine behind the same trait, and the one every
//! failure falls back to.

use std::path::Path;

use crate::contract::{
    AssembleParams, AssembleResult, CompactParams, CompactResult, EngineInfo, IngestParams,
    IngestResult, Method,
};
use crate::engine::api::HostCall;
use crate::engine::{Engine, EngineFactory, InstanceContext};
use crate::error::EngineError;
use crate::services::fit::fit_to_budget;

pub(crate) use crate::contract::LEGACY_ID;

/// `legacy`'s `info`, as OpenClaw declares it.
pub(crate) fn legacy_info() -> EngineInfo {
    EngineInfo {
        id: LEGACY_ID.into(),
        name: "Legacy Context Engine".into(),
        version: Some("1.0.0".into()),
        owns_compaction: Some(false),
        host_requirements: Default::default(),
        turn_maintenance_mode: None,
        accepted_host_params: None,
        transcript_semantics: None,
        extra: Default::default(),
    }
}

/// Makes `legacy` instances.
#[derive(Debug)]
pub struct LegacyFactory {
    info: EngineInfo,
}

impl Default for LegacyFactory {
    fn default() -> Self {
        LegacyFactory {
            info: legacy_info(),
        }
    }
}

impl EngineFactory for LegacyFactory {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn source(&self) -> Option<&Path> {
        None
    }

    fn instantiate(&self, _cx: &InstanceContext) -> Result<Box<dyn Engine>, EngineError> {
        Ok(Box::new(Legacy::default()))
    }
}

/// One `legacy` instance. It holds no state: everything it needs is in the [`HostCall`].
#[derive(Debug)]
pub struct Legacy {
    info: EngineInfo,
}

impl Default for Legacy {
    fn default() -> Self {
        Legacy {
            info: legacy_info(),
        }
    }
}

impl Engine for Legacy {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn defines(&self, method: Method) -> bool {
        method.required()
    }

    fn ingest(&mut self, _call: &HostCall, _p: &IngestParams) -> Result<IngestResult, EngineError> {
        Ok(IngestResult { ingested: false })
    }

    fn assemble(
        &mut self,
        call: &HostCall,
        params: &AssembleParams,
    ) -> Result<AssembleResult, EngineError> {
        let tokens = &call.services().tokens;
        let (messages, report) = fit_to_budget(call.context(), params.token_budget, tokens);
        if report != Default::default() {
            tracing::debug!(
                session = call.session_id(),
                ?report,
                "legacy fitted an oversized context"
            );
        }
        let estimated = tokens.messages(&messages) as f64;
        Ok(AssembleResult {
            messages,
            estimated_tokens: estimated,
            system_prompt_addition: None,
            prompt_authority: None,
            context_projection: None,
        })
    }

    fn compact(
        &mut self,
        call: &HostCall,
        params: &CompactParams,
    ) -> Result<CompactResult, EngineError> {
        Ok(call.delegate_compaction(params))
    }
}
