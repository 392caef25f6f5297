//! Prompt contributions (issue 22, item 3): the blocks hooks return, sorted, measured by the
//! host, cut to their share of the budget and mapped onto the contract (`systemPromptAddition`
//! and synthetic messages around the user turn).

use std::sync::Arc;

use serde_json::{Map, Value as Json, json};

use crate::contract::message::{Message, MessageBody};
use crate::engine::script::result::json_type;
use crate::services::tokens::TokenCache;

/// The placement fields that hold lists of blocks, in the order their text is laid out.
pub(crate) const LIST_FIELDS: [&str; 8] = [
    "prependSystemPrompt",
    "appendSystemPrompt",
    "prependBeforeMetadata",
    "metadata",
    "injectAfterMetadata",
    "prependContext",
    "appendAfterUserMessage",
    "appendContext",
];

/// One block a hook contributed, as the host keeps it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Block {
    /// The placement field.
    pub field: &'static str,
    /// The hook that contributed it (for reporting).
    pub source: String,
    /// The block's own id, if it gave one.
    pub id: Option<String>,
    /// The text placed.
    pub text: String,
    /// Higher first within a field.
    pub priority: f64,
    /// Tokens as the host measured them (a `tokenEstimate` is never trusted).
    pub tokens: u64,
    /// The block's `metadata`, kept as given.
    pub metadata: Option<Json>,
}

/// Everything the hooks of one call contributed, in handler order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Contributions {
    /// The blocks, in handler order (sorted only when laid out).
    pub blocks: Vec<Block>,
    /// `systemPrompt`: last writer wins (the hook id and the text).
    pub system_prompt: Option<(String, String)>,
    /// `pluginData`, merged last-writer-wins per key.
    pub plugin_data: Map<String, Json>,
    /// Blocks dropped for the budget.
    pub dropped: Vec<Block>,
}

impl Contributions {
    /// Adds hook `source`'s contribution (a map or nothing); an invalid one is an error naming
    /// the field at fault, and nothing of it is kept.
    pub(crate) fn add(
        &mut self,
        source: &str,
        value: &Json,
        tokens: &TokenCache,
    ) -> Result<(), String> {
        let map = match value {
            Json::Null => return Ok(()),
            Json::Object(m) => m,
            other => {
                return Err(format!(
                    "a contribution must be a map, got {}",
                    json_type(other)
                ));
            }
        };
        let mut blocks = Vec::new();
        let mut system_prompt = None;
        let mut data = None;
        for (key, v) in map {
            match key.as_str() {
                "systemPrompt" => match v {
                    Json::String(s) => system_prompt = Some(s.clone()),
                    Json::Null => {}
                    other => {
                        return Err(format!(
                            "systemPrompt must be a string, got {}",
                            json_type(other)
                        ));
                    }
                },
                "pluginData" => match v {
                    Json::Object(m) => data = Some(m.clone()),
                    Json::Null => {}
                    other => {
                        return Err(format!(
                            "pluginData must be a map, got {}",
                            json_type(other)
                        ));
                    }
                },
                k => {
                    let Some(field) = LIST_FIELDS.iter().copied().find(|f| *f == k) else {
                        let hint = crate::contract::closest(k, LIST_FIELDS.iter().copied())
                            .map(|c| format!(" (did you mean `{c}`?)"))
                            .unwrap_or_default();
                        return Err(format!("unknown contribution field `{k}`{hint}"));
                    };
                    let list = match v {
                        Json::Array(a) => a,
                        Json::Null => continue,
                        other => {
                            return Err(format!(
                                "{k} must be a list of blocks, got {}",
                                json_type(other)
                            ));
                        }
                    };
                    for (i, b) in list.iter().enumerate() {
                        blocks.push(block(field, i, b, source, tokens)?);
                    }
                }
            }
        }
        self.blocks.extend(blocks);
        if let Some(s) = system_prompt {
            self.system_prompt = Some((source.to_owned(), s));
        }
        for (k, v) in data.into_iter().flatten() {
            self.plugin_data.insert(k, v);
        }
        Ok(())
    }

    /// Drops the lowest-priority blocks (the latest contributed first among equals) until the
    /// blocks fit in `budget` tokens.
    pub(crate) fn fit(&mut self, budget: u64) {
        let mut total: u64 = self.blocks.iter().map(|b| b.tokens).sum();
        while total > budget && !self.blocks.is_empty() {
            let mut worst = 0;
            for (i, b) in self.blocks.iter().enumerate() {
                if b.priority <= self.blocks[worst].priority {
                    worst = i;
                }
            }
            let b = self.blocks.remove(worst);
            total -= b.tokens;
            tracing::warn!(
                source = b.source,
                id = b.id.as_deref().unwrap_or(""),
                field = b.field,
                tokens = b.tokens,
                "pipeline: a contribution block was dropped for the budget"
            );
            self.dropped.push(b);
        }
    }

    /// The blocks of one field, priority descending, stable in handler order.
    pub(crate) fn field(&self, field: &str) -> Vec<&Block> {
        let mut out: Vec<&Block> = self.blocks.iter().filter(|b| b.field == field).collect();
        out.sort_by(|a, b| b.priority.total_cmp(&a.priority));
        out
    }

    /// Text of the fields `fields`, blocks joined by blank lines; `None` when empty.
    fn text(&self, fields: &[&str]) -> Option<String> {
        let parts: Vec<&str> = fields
            .iter()
            .flat_map(|f| self.field(f))
            .map(|b| b.text.as_str())
            .collect();
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }

    /// `systemPromptAddition`: the prepended blocks, `systemPrompt`, the appended blocks.
    pub(crate) fn system_prompt_addition(&self) -> Option<String> {
        let parts: Vec<String> = [
            self.text(&["prependSystemPrompt"]),
            self.system_prompt.as_ref().map(|(_, s)| s.clone()),
            self.text(&["appendSystemPrompt"]),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }

    /// `messages` with synthetic user messages before the last user turn (metadata lane and
    /// `prependContext`) and after it (`appendAfterUserMessage`, `appendContext`).
    pub(crate) fn place(&self, messages: Vec<Arc<Message>>) -> Vec<Arc<Message>> {
        let before = self.text(&[
            "prependBeforeMetadata",
            "metadata",
            "injectAfterMetadata",
            "prependContext",
        ]);
        let after = self.text(&["appendAfterUserMessage", "appendContext"]);
        let user = messages
            .iter()
            .rposition(|m| matches!(m.body, MessageBody::User(_)));
        let mut out = messages;
        let at = user.unwrap_or(out.len());
        if let Some(t) = after {
            let after_at = user.map_or(out.len(), |u| u + 1);
            out.insert(after_at, Arc::new(Message::user(t)));
        }
        if let Some(t) = before {
            out.insert(at, Arc::new(Message::user(t)));
        }
        out
    }

    /// The report of this call (what each hook placed where, and what was dropped), for
    /// `contextProjection` and the handlers that come later.
    pub(crate) fn report(&self) -> Json {
        let blocks = |bs: &[Block]| -> Vec<Json> {
            bs.iter()
                .map(|b| {
                    json!({"field": b.field, "source": b.source, "id": b.id,
                           "priority": b.priority, "tokens": b.tokens})
                })
                .collect()
        };
        json!({
            "contributions": blocks(&self.blocks),
            "dropped": blocks(&self.dropped),
            "systemPromptBy": self.system_prompt.as_ref().map(|(s, _)| s),
        })
    }

    /// The contributions as hooks see them (`p.contributions`).
    pub(crate) fn as_json(&self) -> Json {
        let mut m = Map::new();
        for f in LIST_FIELDS {
            let list: Vec<Json> = self
                .field(f)
                .into_iter()
                .map(|b| {
                    json!({"id": b.id, "source": b.source, "text": b.text,
                           "priority": b.priority, "tokenEstimate": b.tokens, "metadata": b.metadata})
                })
                .collect();
            if !list.is_empty() {
                m.insert(f.into(), Json::Array(list));
            }
        }
        if let Some((_, s)) = &self.system_prompt {
            m.insert("systemPrompt".into(), Json::String(s.clone()));
        }
        m.insert("pluginData".into(), Json::Object(self.plugin_data.clone()));
        Json::Object(m)
    }
}

fn block(
    field: &'static str,
    i: usize,
    b: &Json,
    hook: &str,
    tokens: &TokenCache,
) -> Result<Block, String> {
    let at = |m: String| format!("{field}[{}]: {m}", i + 1);
    let Json::Object(m) = b else {
        return Err(at(format!("a block must be a map, got {}", json_type(b))));
    };
    let mut out = Block {
        field,
        source: hook.to_owned(),
        id: None,
        text: String::new(),
        priority: 0.0,
        tokens: 0,
        metadata: None,
    };
    let mut text = None;
    for (k, v) in m {
        match (k.as_str(), v) {
            ("text", Json::String(s)) => text = Some(s.clone()),
            // The host names the source itself: a hook cannot report as another.
            ("source", Json::String(_)) => {}
            ("id", Json::String(s)) => out.id = Some(s.clone()),
            ("priority", Json::Number(n)) => {
                out.priority = n.as_f64().filter(|p| p.is_finite()).unwrap_or(0.0)
            }
            ("tokenEstimate", Json::Number(_)) => {}
            ("metadata", v) => out.metadata = Some(v.clone()),
            (_, Json::Null) => {}
            ("text" | "source" | "id" | "priority" | "tokenEstimate", v) => {
                return Err(at(format!("`{k}` has the wrong type ({})", json_type(v))));
            }
            (k, _) => return Err(at(format!("unknown block field `{k}`"))),
        }
    }
    let Some(text) = text else {
        return Err(at("a block needs a `text` string".into()));
    };
    out.tokens = tokens.text(&text);
    out.text = text;
    Ok(out)
}
