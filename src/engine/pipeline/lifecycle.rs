//! The pipeline behind the [`Engine`] trait: its hooks mapped onto the lifecycle.

use std::sync::Arc;

use serde_json::{Map, Value as Json, json};

use crate::contract::message::Message;
use crate::contract::{
    AssembleParams, AssembleResult, CompactParams, CompactResult, EngineInfo, IngestBatchParams,
    IngestBatchResult, IngestParams, IngestResult, Method,
};
use crate::engine::Engine;
use crate::engine::api::HostCall;
use crate::error::EngineError;

use super::contribution::Contributions;
use super::instance::{Pipeline, fields, messages_of, only_keys};

impl Engine for Pipeline {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn defines(&self, method: Method) -> bool {
        method.required() || method == Method::IngestBatch
    }

    fn ingest(
        &mut self,
        call: &HostCall,
        params: &IngestParams,
    ) -> Result<IngestResult, EngineError> {
        let entry = serde_json::to_value(&*params.message).unwrap_or(Json::Null);
        let f = fields([("entries", json!([entry]))]);
        self.run(call, Method::AfterAppend, &f, |_, _| Ok(()));
        Ok(IngestResult { ingested: true })
    }

    fn ingest_batch(
        &mut self,
        call: &HostCall,
        params: &IngestBatchParams,
    ) -> Result<IngestBatchResult, EngineError> {
        let entries: Vec<Json> = params
            .messages
            .iter()
            .map(|m| serde_json::to_value(&**m).unwrap_or(Json::Null))
            .collect();
        let f = fields([("entries", Json::Array(entries))]);
        self.run(call, Method::AfterAppend, &f, |_, _| Ok(()));
        Ok(IngestBatchResult::all_of(params))
    }

    fn assemble(
        &mut self,
        call: &HostCall,
        params: &AssembleParams,
    ) -> Result<AssembleResult, EngineError> {
        self.compaction_handled = None;
        let tokens = &call.services().tokens;
        let lifecycle = self.lifecycle(
            call,
            params.session_key.as_deref(),
            params.model.as_deref(),
            params.token_budget,
            "user",
        );
        // collect
        let mut contributions = Contributions {
            plugin_data: self.plugin_data.clone(),
            ..Default::default()
        };
        let base = fields([
            ("lifecycle", lifecycle.clone()),
            ("prompt", json!(params.prompt)),
            ("pluginData", Json::Object(self.plugin_data.clone())),
        ]);
        self.run(call, Method::Collect, &base, |hook, r| {
            contributions.add(hook, &r, tokens)
        });
        // project
        let mut messages: Option<Vec<Arc<Message>>> = None;
        let mut projection: Option<Json> = None;
        let mut f = base.clone();
        f.insert("contributions".into(), contributions.as_json());
        self.run(call, Method::Project, &f, |hook, r| {
            only_keys(
                &r,
                &["messages", "projection", "contribution"],
                Method::Project,
            )?;
            if let Some(m) = r.get("messages").filter(|m| !m.is_null()) {
                messages = Some(messages_of(m)?);
            }
            if let Some(p) = r.get("projection").filter(|p| !p.is_null()) {
                projection = Some(p.clone());
            }
            if let Some(c) = r.get("contribution") {
                contributions.add(hook, c, tokens)?;
            }
            Ok(())
        });
        // the base context: legacy's (fitted to the budget), unless a hook replaced it
        let fitted = self.legacy.assemble(call, params)?;
        let mut list = messages.unwrap_or(fitted.messages);
        // prune, only under token pressure (in memory: the transcript is never rewritten)
        let budget = params.token_budget;
        let share = (budget as f64 * self.share) as u64;
        if tokens.messages(&list) + share > budget {
            let mut f = fields([
                ("lifecycle", lifecycle.clone()),
                ("tokenWindow", lifecycle["tokenWindow"].clone()),
            ]);
            f.insert(
                "pluginData".into(),
                Json::Object(contributions.plugin_data.clone()),
            );
            let mut handled = None;
            self.run(call, Method::Prune, &f, |hook, r| {
                only_keys(
                    &r,
                    &["messages", "dropped", "contribution", "compactionHandled"],
                    Method::Prune,
                )?;
                if let Some(m) = r.get("messages").filter(|m| !m.is_null()) {
                    list = messages_of(m)?;
                }
                if let Some(c) = r.get("contribution") {
                    contributions.add(hook, c, tokens)?;
                }
                if r.get("compactionHandled") == Some(&Json::Bool(true)) {
                    handled = Some(hook.to_owned());
                }
                Ok(())
            });
            self.compaction_handled = handled;
        }
        contributions.fit(share);
        self.plugin_data = contributions.plugin_data.clone();
        let addition = contributions.system_prompt_addition();
        let addition_tokens = addition.as_deref().map_or(0, |a| tokens.text(a));
        let placed = contributions.place(list.clone());
        let extra =
            (tokens.messages(&placed) + addition_tokens).saturating_sub(tokens.messages(&list));
        // The contributions are in the budget: the context makes room for them.
        let list = if tokens.messages(&list) + extra > budget {
            let (fitted, _) =
                crate::services::fit::fit_to_budget(&list, budget.saturating_sub(extra), tokens);
            contributions.place(fitted)
        } else {
            placed
        };
        let estimated = tokens.messages(&list) + addition_tokens;
        let mut report = contributions.report();
        if let Some(p) = projection {
            report["projection"] = p;
        }
        report["quarantined"] = json!(
            self.quarantined()
                .into_iter()
                .map(|(h, _)| h)
                .collect::<Vec<_>>()
        );
        Ok(AssembleResult {
            messages: list,
            estimated_tokens: estimated as f64,
            system_prompt_addition: addition,
            prompt_authority: None,
            context_projection: Some(json!({ "pipeline": report })),
        })
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
        let lifecycle = self.lifecycle(
            call,
            params.session_key.as_deref(),
            None,
            params.token_budget,
            "internal",
        );
        let f = fields([
            ("lifecycle", lifecycle.clone()),
            ("tokenWindow", lifecycle["tokenWindow"].clone()),
            ("storageCursor", lifecycle["storageCursor"].clone()),
            ("currentTokenCount", json!(params.current_token_count)),
            ("force", json!(params.force)),
        ]);
        let mut plan: Option<CompactResult> = None;
        let limits = crate::contract::limits::Limits::default().results;
        self.run(call, Method::CompactionPlan, &f, |_, r| {
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
                plan = Some(out);
            }
            Ok(())
        });
        let out = match plan {
            Some(p) => p,
            None => self.legacy.compact(call, params)?,
        };
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
                tracing::warn!(hook = slot.id, "pipeline: dispose failed: {e}");
            }
        }
        Ok(())
    }

    fn save_state(&mut self) -> Result<Json, EngineError> {
        let mut hooks = Map::new();
        for slot in &mut self.hooks {
            if let Some(vm) = &mut slot.vm {
                hooks.insert(slot.id.clone(), vm.save_state()?);
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
                && let Some(s) = state.get("hooks").and_then(|h| h.get(&slot.id))
            {
                vm.restore_state(s.clone())?;
            }
        }
        Ok(())
    }
}
