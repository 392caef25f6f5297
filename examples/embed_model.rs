//! Embedding ctxhost with your own async parts: a [`ModelClient`] answers the engine's
//! `host.complete` calls (within the budgets of `host.complete`), and a [`Summarizer`] of your
//! own writes the summaries (built-in compaction, `host.summarize`). Both are async: each
//! returns a boxed future, which the host polls inside a Tokio runtime context and drops when
//! the turn is cancelled. Here the summarizer asks the same model and falls back to the offline
//! [`BuiltinSummarizer`]; [`LlmSummarizer::with_client`] is the ready-made version of it (with
//! the identifier audit and budgets). The host never sees how your parts reach the model
//! (keys, URLs, SDKs).
//!
//! Run with `cargo run --example embed_model`. The "model" here is a stand-in that answers
//! after a short async wait (longer than the script's deadline, which a model wait does not
//! count against), so the example runs offline; a real one would call an SDK or HTTP API.

use std::sync::Arc;
use std::time::Duration;

use ctxhost::config::{Config, Entry};
use ctxhost::contract::message::Message;
use ctxhost::runtime::{Host, SessionSpec};
use ctxhost::services::llm::{
    ChatMessage, LlmError, ModelAnswer, ModelClient, ModelFuture, ModelRequest, Usage,
};
use ctxhost::services::summarize::{
    BuiltinSummarizer, Summarizer, Summary, SummaryFuture, SummaryRequest,
};
use ctxhost::services::tokens::TokenCounter;
use ctxhost::session::TurnInput;

/// An engine that asks the model for a one-line focus on every `assemble` and puts it in the
/// system prompt; without a model (or over budget) it says why and carries on.
const ENGINE: &str = r#"local M = { info = { id = "focus", name = "Focus" } }
function M.ingest(p) return { ingested = true } end
function M.assemble(p)
  local last = p.messages[#p.messages]
  local r = host.complete({
    system = "Answer with one short line.",
    prompt = "What should the agent focus on next? Last message: " .. tostring(last and last.content),
    maxTokens = 40,
  })
  local focus = r.error and ("(no focus: " .. r.reason .. ")") or r.text
  return { messages = p.messages, estimatedTokens = host.tokens(p.messages),
           systemPromptAddition = "Focus: " .. focus }
end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#;

/// A stand-in for an async model SDK.
#[derive(Debug)]
struct CannedModel;

impl ModelClient for CannedModel {
    fn name(&self) -> &str {
        "canned-1"
    }

    fn complete(&self, request: ModelRequest) -> ModelFuture {
        Box::pin(async move {
            // A real client would await its HTTP call here, within `request.timeout`.
            tokio::time::sleep(Duration::from_millis(600)).await;
            let prompt = request
                .messages
                .last()
                .map(|m| m.content.as_str())
                .unwrap_or("");
            if prompt.is_empty() {
                return Err(LlmError::Empty {
                    endpoint: "canned".into(),
                });
            }
            let words = prompt.split_whitespace().count() as u64;
            Ok(ModelAnswer {
                text: format!("finish the task in the last message ({words} words in)"),
                usage: Some(Usage {
                    input: words,
                    output: 10,
                }),
                model: "canned-1".into(),
            })
        })
    }
}

/// An embedder's own async summarizer: it asks `model` for a one-paragraph summary of the
/// span and, when the model cannot answer, lets the offline summarizer write it. A real one
/// would also check the identifiers and keep a budget, as [`LlmSummarizer`] does.
///
/// [`LlmSummarizer`]: ctxhost::services::llm::LlmSummarizer
#[derive(Debug)]
struct AskTheModel {
    model: Arc<dyn ModelClient>,
}

impl Summarizer for AskTheModel {
    fn summarize<'a>(
        &'a self,
        request: SummaryRequest<'a>,
        counter: &'a dyn TokenCounter,
    ) -> SummaryFuture<'a> {
        Box::pin(async move {
            let span: Vec<String> = request.messages.iter().map(|m| m.text()).collect();
            let ask = ModelRequest {
                messages: vec![
                    ChatMessage::new("system", "Summarize this conversation in one paragraph."),
                    ChatMessage::new("user", span.join("\n")),
                ],
                max_tokens: request.max_tokens,
                temperature: Some(0.2),
                response_format: None,
                session: None,
                timeout: Duration::from_secs(30),
            };
            // Awaited, not blocked on: the host drops this future when the turn is cancelled.
            match self.model.complete(ask).await {
                Ok(answer) if counter.count_text(&answer.text) <= request.max_tokens => {
                    let offline = BuiltinSummarizer.summarize_now(&request, counter)?;
                    Ok(Summary {
                        tokens: counter.count_text(&answer.text),
                        text: answer.text,
                        summarizer: format!("embedder:{}", answer.model),
                        // What the offline extraction found, for the compaction entry.
                        identifiers_kept: 0,
                        carried_kept: 0,
                        ..offline
                    })
                }
                _ => BuiltinSummarizer.summarize_now(&request, counter),
            }
        })
    }

    fn calls_a_model(&self) -> bool {
        true
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let engine = dir.path().join("focus.lua");
    std::fs::write(&engine, ENGINE)?;
    let mut config = Config::default();
    config.host.limits.script.deadline_ms = 200; // the model's 600 ms do not count against it
    config.host.complete.max_calls_per_turn = 2;
    config.host.compaction.keep_recent_tokens = 40; // so that `/compact` below has a span
    config.plugins.slots.context_engine = Some("focus".into());
    config.plugins.entries.insert(
        "focus".into(),
        Entry {
            path: Some(engine),
            ..Entry::default()
        },
    );

    let model: Arc<dyn ModelClient> = Arc::new(CannedModel);
    let summarizer = Arc::new(AskTheModel {
        model: Arc::clone(&model),
    });
    let host =
        tokio::task::spawn_blocking(move || Host::with_parts(config, summarizer, Some(model)))
            .await??;
    let session = host
        .create_session(SessionSpec::new("demo", dir.path().join("demo.jsonl")))
        .await?;
    for turn in 0..3 {
        let user = Message::user(format!(
            "step {turn}: tidy up the build script. {}",
            "Pin the toolchain, cache the dependencies, run the tests before packaging. ".repeat(6)
        ));
        let a = session
            .begin_turn(TurnInput {
                user,
                is_heartbeat: false,
            })
            .await?;
        println!(
            "turn {turn}: engine {} (fallback {}): {}",
            a.engine,
            a.fallback,
            a.system_prompt_addition.unwrap_or_default()
        );
        let reply = format!(
            "done: the build script of step {turn} now runs its tests first, then lints, then packages"
        );
        session.end_turn(vec![Message::assistant(reply)]).await?;
    }
    // `/compact`: built-in compaction, whose summary our async summarizer writes.
    let compacted = session.compact(None).await?;
    match compacted.result.filter(|_| compacted.compacted) {
        Some(outcome) => println!(
            "compacted {} -> {} tokens by {}: {}",
            outcome.tokens_before,
            outcome.tokens_after.unwrap_or_default(),
            outcome
                .details
                .as_ref()
                .and_then(|d| d["summarizer"].as_str())
                .unwrap_or("?"),
            outcome.summary.unwrap_or_default()
        ),
        None => println!("not compacted: {}", compacted.reason.unwrap_or_default()),
    }
    session.close().await?;
    Ok(())
}
