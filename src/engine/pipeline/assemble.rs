//! One model call through the pipeline: `collect` → `project` → the base context → under token
//! pressure `prune` (chained: each hook sees the previous one's messages) → the contributions
//! fitted to their share and placed; with the report of what each hook did.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value as Json, json};

use crate::contract::message::Message;
use crate::contract::{AssembleParams, AssembleResult, Method};
use crate::engine::Engine;
use crate::engine::api::HostCall;
use crate::error::EngineError;
use crate::services::tokens::TokenCache;

use super::context::{CallFacts, lifecycle};
use super::contribution::Contributions;
use super::instance::{Pipeline, fields, messages_of, only_keys};

pub(super) fn assemble(
    p: &mut Pipeline,
    call: &HostCall,
    params: &AssembleParams,
) -> Result<AssembleResult, EngineError> {
    p.compaction_handled = None;
    let tokens = &call.services().tokens;
    let facts = CallFacts {
        method: Method::Assemble,
        session_key: params.session_key.as_deref(),
        model: params.model.as_deref(),
        settings: params.runtime_settings.as_ref(),
        budget: params.token_budget,
        trigger: "user",
    };
    let lifecycle = lifecycle(call, &facts);
    // collect
    let mut contributions = Contributions {
        plugin_data: p.plugin_data.clone(),
        ..Default::default()
    };
    let base = fields([
        ("lifecycle", lifecycle.clone()),
        ("prompt", json!(params.prompt)),
        ("pluginData", Json::Object(p.plugin_data.clone())),
    ]);
    p.run(call, Method::Collect, &base, |hook, r| {
        contributions.add(hook, &r, tokens)
    });
    // project
    let mut messages: Option<Vec<Arc<Message>>> = None;
    let mut projection: Option<Json> = None;
    let mut f = base.clone();
    f.insert("contributions".into(), contributions.as_json());
    p.run(call, Method::Project, &f, |hook, r| {
        only_keys(
            &r,
            &["messages", "projection", "contribution"],
            Method::Project,
        )?;
        if let Some(m) = r.get("messages").filter(|m| !m.is_null()) {
            messages = Some(messages_of(m, call.context())?);
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
    let unfitted = messages.clone();
    let mut list = match messages {
        Some(m) => m,
        None => p.legacy.assemble(call, params)?.messages,
    };
    // prune, only under token pressure (in memory: the transcript is never rewritten)
    let budget = params.token_budget;
    let share = (budget as f64 * p.share) as u64;
    let mut pruned = Vec::new();
    if tokens.messages(&list) + share > budget {
        let mut f = fields([
            ("lifecycle", lifecycle.clone()),
            ("tokenWindow", lifecycle["tokenWindow"].clone()),
        ]);
        f.insert(
            "pluginData".into(),
            Json::Object(contributions.plugin_data.clone()),
        );
        // The chain starts from the whole context (the project's, or the session's) and each
        // hook sees what the one before it left.
        let mut chain: Arc<Vec<Arc<Message>>> = match unfitted {
            Some(m) => Arc::new(m),
            None => Arc::clone(call.context()),
        };
        let mut changed = false;
        let mut handled = None;
        for slot in &mut p.hooks {
            if !slot.runs(Method::Prune) {
                continue;
            }
            let before = Arc::clone(&chain);
            let mut next: Option<Vec<Arc<Message>>> = None;
            let mut reported: Option<Json> = None;
            slot.call(call, &before, Method::Prune, &f, &mut |hook, r| {
                only_keys(
                    &r,
                    &["messages", "dropped", "contribution", "compactionHandled"],
                    Method::Prune,
                )?;
                if let Some(m) = r.get("messages").filter(|m| !m.is_null()) {
                    next = Some(messages_of(m, &before)?);
                }
                reported = r.get("dropped").filter(|d| !d.is_null()).cloned();
                if let Some(c) = r.get("contribution") {
                    contributions.add(hook, c, tokens)?;
                }
                if r.get("compactionHandled") == Some(&Json::Bool(true)) {
                    handled = Some(hook.to_owned());
                }
                Ok(())
            });
            // A hook quarantined by this call changed nothing.
            if slot.quarantined.is_some() {
                continue;
            }
            if let Some(next) = next {
                pruned.push(prune_record(slot.id(), &before, &next, reported, tokens));
                chain = Arc::new(next);
                changed = true;
            }
        }
        if changed {
            list = chain.to_vec();
        }
        p.compaction_handled = handled;
    }
    contributions.fit(share);
    p.plugin_data = contributions.plugin_data.clone();
    let addition = contributions.system_prompt_addition();
    let addition_tokens = addition.as_deref().map_or(0, |a| tokens.text(a));
    let placed = contributions.place(list.clone());
    let extra = (tokens.messages(&placed) + addition_tokens).saturating_sub(tokens.messages(&list));
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
    if let Some(pr) = projection {
        report["projection"] = pr;
    }
    report["pruned"] = Json::Array(pruned);
    report["compactionHandledBy"] = json!(p.compaction_handled);
    report["compactions"] = Json::Array(std::mem::take(&mut p.compactions));
    report["quarantined"] = json!(
        p.quarantined()
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

/// What one `prune` hook did to the list it was given: messages it removed and messages it
/// changed (same id, other content), with the tokens before and after, and what it reported
/// as `dropped` itself.
fn prune_record(
    hook: &str,
    before: &[Arc<Message>],
    after: &[Arc<Message>],
    reported: Option<Json>,
    tokens: &TokenCache,
) -> Json {
    let kept: HashMap<&str, &Arc<Message>> = after
        .iter()
        .filter(|m| !m.id.is_empty())
        .map(|m| (m.id.as_str(), m))
        .collect();
    let mut removed = 0usize;
    let mut changed = 0usize;
    for m in before.iter().filter(|m| !m.id.is_empty()) {
        match kept.get(m.id.as_str()) {
            None => removed += 1,
            Some(k) if !Arc::ptr_eq(k, m) && k.body != m.body => changed += 1,
            Some(_) => {}
        }
    }
    let mut r = json!({
        "hook": hook,
        "removed": removed,
        "changed": changed,
        "tokensBefore": tokens.messages(before),
        "tokensAfter": tokens.messages(after),
    });
    if let Some(d) = reported {
        r["dropped"] = d;
    }
    r
}
