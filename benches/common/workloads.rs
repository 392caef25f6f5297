//! The keep-recent workloads of `shared/data/workloads`, which other systems (LangChain's
//! `trim_messages`, plain Python, plain JavaScript: `benches/peers/`) run too, as host sessions; the
//! "keep-recent fit" policy as a native [`Engine`]; and the check of an engine's result against
//! the reference outputs.
//!
//! The policy (budget 32,000 tokens): tokens = ceil(chars / 4) per message, chars in Unicode code
//! points of the message's text; walk back from the newest message in units (a `toolResult`
//! joins the unit of the assistant message whose tool call it answers, so a unit grows backwards
//! until every pending call id has met its call); keep each unit that still fits, stop at the
//! first that does not. The result is the newest contiguous suffix.
//!
//! Used by `benches/workloads.rs` and `tests/workloads.rs`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ctxhost::EngineError;
use ctxhost::HostCall;
use ctxhost::contract::message::{
    AssistantMessage, Content, ContentBlock, Extra, Message, MessageBody, ToolCallBlock,
    ToolResultMessage, UserMessage,
};
use ctxhost::contract::{
    AssembleParams, AssembleResult, CompactParams, CompactResult, EngineInfo, IngestParams,
    IngestResult, Method,
};
use ctxhost::engine::Engine;

use super::flat::Flat;

/// The policy's budget, in the workload's tokens.
pub const BUDGET: u64 = 32_000;

/// What a correct keep-recent fit of a workload keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Messages kept.
    pub kept: usize,
    /// Index (0-based) of the first kept message in the workload.
    pub first: usize,
    /// Tokens kept, by the workload's rule.
    pub tokens: u64,
}

/// One workload: its name (`1k`), file and reference outcome.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// `1k` or `10k`.
    pub name: &'static str,
    /// The file `build_workload.py` writes.
    pub file: &'static str,
    /// Messages in it.
    pub len: usize,
    /// The reference output (the policy in Python and in Node agree).
    pub reference: Outcome,
}

/// The two workloads and their reference outputs (`shared/data/workloads/README.md`).
pub const SPECS: [Spec; 2] = [
    Spec {
        name: "1k",
        file: "workload-1k.json",
        len: 1_000,
        reference: Outcome {
            kept: 96,
            first: 904,
            tokens: 31_766,
        },
    },
    Spec {
        name: "10k",
        file: "workload-10k.json",
        len: 10_000,
        reference: Outcome {
            kept: 22,
            first: 9_978,
            tokens: 23_946,
        },
    },
];

/// A workload as a session: its spec and the host's messages.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Which workload.
    pub spec: Spec,
    /// The messages, ids `00000000`, `00000001`, ...
    pub messages: Arc<Vec<Arc<Message>>>,
}

/// The workloads directory under the shared dir.
pub fn workloads_dir(shared: &Path) -> PathBuf {
    shared.join("data/workloads")
}

/// Runs `python3 build_workload.py <out>` and loads both workloads from `out`.
pub fn generate(shared: &Path, out: &Path) -> Result<Vec<Workload>, String> {
    let script = workloads_dir(shared).join("build_workload.py");
    if !script.is_file() {
        return Err(format!("no {}", script.display()));
    }
    super::flat::build(&script, out)?;
    SPECS.iter().map(|s| load(*s, &out.join(s.file))).collect()
}

/// Reads a workload file into host messages.
pub fn load(spec: Spec, path: &Path) -> Result<Workload, String> {
    let flat = super::flat::read(path)?;
    if flat.len() != spec.len {
        return Err(format!(
            "{}: {} messages, expected {}",
            path.display(),
            flat.len(),
            spec.len
        ));
    }
    let messages = flat
        .into_iter()
        .enumerate()
        .map(|(i, f)| message(i, f).map(Arc::new))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Workload {
        spec,
        messages: Arc::new(messages),
    })
}

/// A flat message as the host's: `user` with string content; `assistant` with one text block
/// (the flat text, which already renders each call as `name JSON(arguments)`) followed by one
/// `toolCall` block per call (id and name; the arguments live only in the text, so `{}`);
/// `toolResult` with one text block. Each message's text (text blocks joined by "\n") is thus
/// exactly the workload's `text`.
fn message(i: usize, f: Flat) -> Result<Message, String> {
    let body = match f.role.as_str() {
        "user" => MessageBody::User(UserMessage {
            content: Content::Text(f.text),
            extra: Extra::new(),
        }),
        "assistant" => {
            let mut content = vec![ContentBlock::text(f.text)];
            content.extend(f.tool_calls.into_iter().map(|c| {
                ContentBlock::ToolCall(Box::new(ToolCallBlock {
                    id: c.id,
                    name: c.name,
                    arguments: serde_json::json!({}),
                    extra: Extra::new(),
                }))
            }));
            let stop = if content.len() > 1 { "toolUse" } else { "stop" };
            MessageBody::Assistant(AssistantMessage {
                content,
                stop_reason: Some(stop.into()),
                extra: Extra::new(),
            })
        }
        "toolResult" => MessageBody::ToolResult(ToolResultMessage {
            tool_call_id: f
                .tool_call_id
                .ok_or_else(|| format!("message {i}: toolResult without tool_call_id"))?,
            tool_name: f.tool_name.unwrap_or_default(),
            content: Content::Blocks(vec![ContentBlock::text(f.text)]),
            is_error: false,
            extra: Extra::new(),
        }),
        other => return Err(format!("message {i}: unknown role {other:?}")),
    };
    Ok(Message {
        id: format!("{i:08x}"),
        body,
    })
}

/// The workload's token rule: ceil(chars / 4), chars in Unicode code points.
pub fn tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// [`tokens`] of a message's text (its text blocks joined by "\n"), without building the string.
pub fn message_tokens(m: &Message) -> u64 {
    let (blocks, plain): (&[ContentBlock], Option<&str>) = match &m.body {
        MessageBody::User(u) => match &u.content {
            Content::Text(t) => (&[], Some(t)),
            Content::Blocks(b) => (b, None),
        },
        MessageBody::Assistant(a) => (&a.content, None),
        MessageBody::ToolResult(r) => match &r.content {
            Content::Text(t) => (&[], Some(t)),
            Content::Blocks(b) => (b, None),
        },
        _ => return tokens(&m.text()),
    };
    if let Some(t) = plain {
        return tokens(t);
    }
    let mut chars = 0u64;
    let mut parts = 0u64;
    for b in blocks {
        if let ContentBlock::Text(t) = b {
            chars += t.text.chars().count() as u64;
            parts += 1;
        }
    }
    (chars + parts.saturating_sub(1)).div_ceil(4)
}

/// The keep-recent fit as a native engine, with the token counts cached per message id (as the
/// Lua and Rhai engines do).
#[derive(Debug)]
pub struct KeepRecent {
    info: EngineInfo,
    tokens: HashMap<String, u64>,
}

impl Default for KeepRecent {
    fn default() -> Self {
        KeepRecent {
            info: EngineInfo {
                id: "keep-recent".into(),
                name: "Keep recent (workload fit)".into(),
                version: None,
                owns_compaction: Some(false),
                host_requirements: Default::default(),
                turn_maintenance_mode: None,
                accepted_host_params: None,
                transcript_semantics: None,
                extra: Default::default(),
            },
            tokens: HashMap::new(),
        }
    }
}

impl KeepRecent {
    fn tokens(&mut self, m: &Message) -> u64 {
        if m.id.is_empty() {
            return message_tokens(m);
        }
        if let Some(&t) = self.tokens.get(&m.id) {
            return t;
        }
        let t = message_tokens(m);
        self.tokens.insert(m.id.clone(), t);
        t
    }
}

impl Engine for KeepRecent {
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
        let msgs = call.context();
        let budget = params.token_budget;
        let mut used = 0u64;
        let mut first = msgs.len();
        // Call ids of the unit's results whose call has not been met yet.
        let mut pending: Vec<&str> = Vec::new();
        while first > 0 {
            let mut j = first;
            let mut unit = 0u64;
            pending.clear();
            loop {
                j -= 1;
                let m = &msgs[j];
                unit += self.tokens(m);
                if let Some(id) = m.tool_call_id() {
                    pending.push(id);
                }
                if !pending.is_empty() {
                    for c in m.tool_calls() {
                        pending.retain(|p| *p != c.id);
                    }
                }
                if pending.is_empty() || j == 0 {
                    break;
                }
            }
            if used + unit > budget {
                break;
            }
            used += unit;
            first = j;
        }
        Ok(AssembleResult {
            messages: msgs[first..].to_vec(),
            estimated_tokens: used as f64,
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

/// What an engine's `assemble` result kept of `ctx`: it must be the newest contiguous suffix, as
/// the host's own messages (the same `Arc`s, not copies), and its `estimatedTokens` the
/// workload's count of them.
pub fn outcome(ctx: &[Arc<Message>], r: &AssembleResult) -> Result<Outcome, String> {
    let got = kept_suffix(ctx, &r.messages)?;
    let t = r.estimated_tokens;
    if t.fract() != 0.0 || t < 0.0 {
        return Err(format!("estimatedTokens {t} is not a whole number"));
    }
    // The engine's count must also be the workload's count of what it kept.
    if got.tokens != t as u64 {
        return Err(format!(
            "estimatedTokens {t}, but the kept messages hold {} tokens",
            got.tokens
        ));
    }
    Ok(got)
}

/// What `messages` keep of `ctx`, which they must be the newest contiguous suffix of, as the
/// host's own messages (the same `Arc`s, not copies); tokens by the workload's rule.
pub fn kept_suffix(ctx: &[Arc<Message>], messages: &[Arc<Message>]) -> Result<Outcome, String> {
    let kept = messages.len();
    if kept > ctx.len() {
        return Err(format!("{kept} messages returned of {}", ctx.len()));
    }
    let first = ctx.len() - kept;
    if let Some(k) = messages
        .iter()
        .zip(&ctx[first..])
        .position(|(m, c)| !Arc::ptr_eq(m, c))
    {
        return Err(format!(
            "not the newest {kept} messages: result[{k}] is not message {} of the session",
            first + k
        ));
    }
    let counted: u64 = messages.iter().map(|m| message_tokens(m)).sum();
    Ok(Outcome {
        kept,
        first,
        tokens: counted,
    })
}

/// `Ok` when `r` is the reference outcome of workload `w`, else what differs, naming `engine`.
pub fn check(engine: &str, w: &Workload, r: &AssembleResult) -> Result<Outcome, String> {
    let what = format!("keep_recent [{engine}, {}]", w.spec.name);
    let got = outcome(&w.messages, r).map_err(|e| format!("{what}: {e}"))?;
    reference(&what, w, got)
}

/// `Ok(got)` when `got` is workload `w`'s reference outcome, else what differs, naming `what`.
pub fn reference(what: &str, w: &Workload, got: Outcome) -> Result<Outcome, String> {
    if got != w.spec.reference {
        return Err(format!(
            "{what} kept {} messages from index {} ({} tokens); the reference is {} from index {} \
             ({} tokens)",
            got.kept,
            got.first,
            got.tokens,
            w.spec.reference.kept,
            w.spec.reference.first,
            w.spec.reference.tokens
        ));
    }
    Ok(got)
}

/// Makes one engine instance, given the crate root.
pub type MakeEngine = fn(&Path) -> Box<dyn Engine>;

/// The implementations: name and how to make an instance. `lua` and `rhai` walk the messages
/// in a script loop; `lua host.fit` and `rhai host::fit` are the same policy by the host's fit
/// primitive (`benches/engines/keep_recent_fit.*`).
pub fn implementations() -> [(&'static str, MakeEngine); 5] {
    [
        ("lua", |root| {
            super::lua_engine(&root.join("benches/engines/keep_recent.lua"))
        }),
        ("rhai", |root| {
            super::rhai_engine(&root.join("benches/engines/keep_recent.rhai"))
        }),
        ("rust", |_| Box::new(KeepRecent::default())),
        ("lua host.fit", |root| {
            super::lua_engine(&root.join("benches/engines/keep_recent_fit.lua"))
        }),
        ("rhai host::fit", |root| {
            super::rhai_engine(&root.join("benches/engines/keep_recent_fit.rhai"))
        }),
    ]
}
