//! The pipeline behind the [`Engine`] trait: its hooks mapped onto the lifecycle.

use serde_json::{Map, Value as Json, json};

use crate::contract::message::{Message, MessageBody, Role};
use crate::contract::{
    AssembleParams, AssembleResult, CompactParams, CompactResult, EngineInfo, IngestBatchParams,
    IngestBatchResult, IngestParams, IngestResult, Method,
};
use crate::engine::Engine;
use crate::engine::api::HostCall;
use crate::error::EngineError;

use super::context::{CallFacts, lifecycle};
use super::instance::{Pipeline, fields, only_keys};

impl Pipeline {
    /// Tells the observers what was stored; a stored user message starts a turn, the boundary
    /// where single-hook reloads are followed.
    fn appended(&mut self, call: &HostCall, messages: &[std::sync::Arc<Message>]) {
        if messages
            .iter()
            .any(|m| matches!(m.body, MessageBody::User(_)))
        {
            self.follow_reloads(call);
        }
        let entries: Vec<Json> = messages
            .iter()
            .map(|m| serde_json::to_value(&**m).unwrap_or(Json::Null))
            .collect();
        let f = fields([("entries", Json::Array(entries))]);
        self.run(call, Method::AfterAppend, &f, |_, _| Ok(()));
    }
}

impl Engine for Pipeline {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn defines(&self, method: Method) -> bool {
        method.required() || method == Method::IngestBatch
    }

    fn plans_compaction(&self) -> bool {
        self.hooks.iter().any(|h| h.runs(Method::CompactionPlan))
    }

    fn ingest(
        &mut self,
        call: &HostCall,
        params: &IngestParams,
    ) -> Result<IngestResult, EngineError> {
        self.appended(call, std::slice::from_ref(&params.message));
        Ok(IngestResult { ingested: true })
    }

    fn ingest_batch(
        &mut self,
        call: &HostCall,
        params: &IngestBatchParams,
    ) -> Result<IngestBatchResult, EngineError> {
        self.appended(call, &params.messages);
        Ok(IngestBatchResult::all_of(params))
    }

    fn assemble(
        &mut self,
        call: &HostCall,
        params: &AssembleParams,
    ) -> Result<AssembleResult, EngineError> {
        super::assemble::assemble(self, call, params)
    }

    fn compact(
        &mut self,
        call: &HostCall,
        params: &CompactParams,
    ) -> Result<CompactResult, EngineError> {
        if let Some(hook) = self.compaction_handled.take()
            && !params.force
        {
            return Ok(CompactResult {
                ok: true,
                compacted: false,
                reason: Some(format!(
                    "compaction handled by the prune of hook \"{hook}\""
                )),
                result: None,
            });
        }
        let tokens = &call.services().tokens;
        let observed = fields([
            ("messageCount", json!(call.context().len())),
            ("tokenCount", json!(tokens.messages(call.context()))),
        ]);
        self.run(call, Method::BeforeCompaction, &observed, |_, _| Ok(()));
        let facts = CallFacts {
            method: Method::Compact,
            session_key: params.session_key.as_deref(),
            model: None,
            settings: params.runtime_settings.as_ref(),
            budget: params.token_budget,
            trigger: "internal",
        };
        let lifecycle = lifecycle(call, &facts);
        let mut f = fields([
            ("lifecycle", lifecycle.clone()),
            ("tokenWindow", lifecycle["tokenWindow"].clone()),
            ("storageCursor", lifecycle["storageCursor"].clone()),
            ("currentTokenCount", json!(params.current_token_count)),
            ("force", json!(params.force)),
        ]);
        if let Some(i) = &params.custom_instructions {
            f.insert("customInstructions".into(), json!(i));
        }
        let mut plan: Option<(String, CompactResult)> = None;
        let limits = call.services().limits.clone();
        self.run(call, Method::CompactionPlan, &f, |hook, r| {
            only_keys(
                &r,
                &["plan", "messages", "contribution"],
                Method::CompactionPlan,
            )?;
            if plan.is_some() {
                return Ok(());
            }
            if let Some(p) = r.get("plan").filter(|p| !p.is_null()) {
                let out: CompactResult =
                    serde_json::from_value(p.clone()).map_err(|e| format!("plan: {e}"))?;
                crate::contract::check_compact(&out, &limits)?;
                plan = Some((hook.to_owned(), out));
            }
            Ok(())
        });
        let (by, mut out) = match plan {
            Some((hook, p)) => (hook, p),
            None => ("built-in".to_owned(), self.legacy.compact(call, params)?),
        };
        if out.compacted {
            let record = summarized(call, &by, &out);
            if let Some(result) = &mut out.result {
                let details = result.details.get_or_insert_with(|| json!({}));
                if let Json::Object(d) = details {
                    d.insert("pipeline".into(), record.clone());
                }
            }
            self.compactions.push(record);
        }
        let after = fields([
            ("messageCount", json!(call.context().len())),
            ("compacted", json!(out.compacted)),
        ]);
        self.run(call, Method::AfterCompaction, &after, |_, _| Ok(()));
        Ok(out)
    }

    fn dispose(&mut self, call: &HostCall) -> Result<(), EngineError> {
        for slot in &mut self.hooks {
            if let Some(vm) = &mut slot.vm
                && let Err(e) = vm.dispose(call)
            {
                tracing::warn!(hook = slot.cell.id, "pipeline: dispose failed: {e}");
            }
        }
        Ok(())
    }

    fn save_state(&mut self) -> Result<Json, EngineError> {
        let mut hooks = Map::new();
        for slot in &mut self.hooks {
            if let Some(vm) = &mut slot.vm {
                hooks.insert(slot.cell.id.clone(), vm.save_state()?);
            }
        }
        Ok(json!({"hooks": hooks, "pluginData": self.plugin_data}))
    }

    fn restore_state(&mut self, state: Json) -> Result<(), EngineError> {
        if let Some(Json::Object(d)) = state.get("pluginData") {
            self.plugin_data = d.clone();
        }
        for slot in &mut self.hooks {
            if let Some(vm) = &mut slot.vm
                && let Some(s) = state
                    .get("hooks")
                    .and_then(|h| h.get(slot.cell.id.as_str()))
            {
                vm.restore_state(s.clone())?;
            }
        }
        Ok(())
    }
}

/// Which hook summarized what: the messages before the kept one (after an earlier summary),
/// and the tokens before and after.
fn summarized(call: &HostCall, by: &str, out: &CompactResult) -> Json {
    let context = call.context();
    let start = usize::from(
        context
            .first()
            .is_some_and(|m| m.role() == Role::CompactionSummary),
    );
    let first_kept = out
        .result
        .as_ref()
        .and_then(|r| r.first_kept_entry_id.as_deref());
    let upto = first_kept
        .and_then(|id| context.iter().position(|m| m.id == id))
        .unwrap_or(context.len());
    let result = out.result.as_ref();
    json!({
        "summarizedBy": by,
        "summarizedMessages": upto.saturating_sub(start),
        "firstKeptEntryId": first_kept,
        "tokensBefore": result.map(|r| r.tokens_before),
        "tokensAfter": result.and_then(|r| r.tokens_after),
    })
}
