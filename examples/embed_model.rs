//! Embedding ctxhost with your own model client: one async [`ModelClient`] serves both the
//! compaction summaries (through [`LlmSummarizer::with_client`], the offline summarizer as
//! its fallback) and the engine's `host.complete` calls, within the budgets of
//! `host.complete`. The host never sees how the client reaches its model (keys, URLs, SDKs).
//!
//! Run with `cargo run --example embed_model`. The "model" here is a stand-in that answers
//! after a short async wait (longer than the script's deadline, which a model wait does not
//! count against), so the example runs offline; a real one would call an SDK or HTTP API.

use std::sync::Arc;
use std::time::Duration;

use ctxhost::config::{Config, Entry};
use ctxhost::llm::{
    LlmError, LlmSummarizer, ModelAnswer, ModelClient, ModelFuture, ModelRequest, Usage,
};
use ctxhost::message::Message;
use ctxhost::runtime::{Host, SessionSpec};
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let engine = dir.path().join("focus.lua");
    std::fs::write(&engine, ENGINE)?;
    let mut config = Config::default();
    config.host.limits.script.deadline_ms = 200; // the model's 600 ms do not count against it
    config.host.complete.max_calls_per_turn = 2;
    config.plugins.slots.context_engine = Some("focus".into());
    config.plugins.entries.insert(
        "focus".into(),
        Entry {
            path: Some(engine),
            ..Entry::default()
        },
    );

    let model: Arc<dyn ModelClient> = Arc::new(CannedModel);
    let summarizer = Arc::new(LlmSummarizer::with_client(
        Arc::clone(&model),
        config.host.complete,
    )?);
    let host =
        tokio::task::spawn_blocking(move || Host::with_parts(config, summarizer, Some(model)))
            .await??;
    let session = host
        .create_session(SessionSpec::new("demo", dir.path().join("demo.jsonl")))
        .await?;
    for turn in 0..3 {
        let user = Message::user(format!("step {turn}: tidy up the build script"));
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
        session.end_turn(vec![Message::assistant("done")]).await?;
    }
    session.close().await?;
    Ok(())
}
