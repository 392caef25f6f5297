//! Embedding ctxhost in an agent loop: the host owns the transcript and decides what the model
//! sees; the agent only sends the assembled context to its model and hands back the reply.
//!
//! Run with `cargo run --example embed`. The "model" here is a stand-in that answers with a
//! tool call and then a summary line, so the example runs offline.

#![allow(clippy::expect_used)] // an example: a panic is the clearest failure

use ctxhost::config::Config;
use ctxhost::message::{Content, Message, MessageBody, ToolResultMessage};
use ctxhost::runtime::{Host, SessionSpec};
use ctxhost::session::TurnInput;
use serde_json::json;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut config = Config::default();
    config.host.window = 4_000; // small, so compaction shows up quickly
    // To run a script engine instead of `legacy`:
    // config.plugins.slots.context_engine = Some("recent-turns".into());
    // config.plugins.entries.insert("recent-turns".into(), ctxhost::config::Entry {
    //     path: Some("scripts/recent_turns.lua".into()), ..Default::default() });
    let host = Host::new(config)?;
    let dir = tempfile::tempdir()?;
    let session = host
        .create_session(SessionSpec::new("demo", dir.path().join("demo.jsonl")))
        .await?;

    for (turn, prompt) in [
        "list the files",
        "read src/main.rs",
        "summarize what you saw",
    ]
    .iter()
    .cycle()
    .take(12)
    .enumerate()
    {
        let user = Message::user(format!("{prompt} (turn {turn})"));
        let ctx = session
            .begin_turn(TurnInput {
                user,
                is_heartbeat: false,
            })
            .await?;
        println!(
            "turn {turn:>2}: model sees {:>3} messages, {:>5} / {} tokens (engine {})",
            ctx.messages.len(),
            ctx.assembled_tokens,
            ctx.token_budget,
            ctx.engine
        );
        let replies = fake_model(turn, &ctx.messages);
        session.end_turn(replies).await?;
    }
    session.close().await?;
    println!("transcript: {}", session.file().display());
    Ok(())
}

/// A stand-in for an LLM call: one tool call, its (long) result, and a final answer.
fn fake_model(turn: usize, _context: &[std::sync::Arc<Message>]) -> Vec<Message> {
    let id = format!("call_{turn}");
    let call: Message = serde_json::from_value(json!({"role": "assistant", "content": [
        {"type": "toolCall", "id": id, "name": "bash", "arguments": {"command": "ls -la"}}]}))
    .expect("a valid assistant message");
    let result = Message::new(MessageBody::ToolResult(ToolResultMessage {
        tool_call_id: id,
        tool_name: "bash".into(),
        content: Content::Text("drwxr-xr-x src\n".repeat(60)),
        is_error: false,
        extra: Default::default(),
    }));
    vec![
        call,
        result,
        Message::assistant(format!("Done with turn {turn}.")),
    ]
}
