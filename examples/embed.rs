//! Embedding ctxhost in an agent loop: the host owns the transcript and decides what the model
//! sees; the agent sends the assembled context to its model, runs the tools the model asks
//! for, and hands every message back.
//!
//! One turn is: `begin_turn` (the user's message in, the first context out) → model → for each
//! round of tool calls `continue_turn` (the calls and their results in, the next context out) →
//! model → … → `end_turn` with the final answer.
//!
//! Run with `cargo run --example embed`. The "model" is a stand-in that asks for a tool once or
//! twice and then answers, so the example runs offline.

use std::path::Path;
use std::sync::Arc;

use ctxhost::config::{Config, Entry};
use ctxhost::contract::message::{Content, Message, MessageBody, ToolResultMessage};
use ctxhost::runtime::{Host, SessionHandle, SessionSpec};
use ctxhost::session::{Assembly, TurnInput};
use serde_json::json;

/// Model calls one turn may make before the agent gives up on it.
const MAX_MODEL_CALLS: usize = 8;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut config = Config::default();
    config.host.window = 4_000; // small, so compaction shows up quickly
    // A script engine from this repository; without these lines the built-in `legacy` runs.
    let engine = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/recent_turns.lua");
    config.plugins.slots.context_engine = Some("recent-turns".into());
    config.plugins.entries.insert(
        "recent-turns".into(),
        Entry {
            path: Some(engine),
            ..Entry::default()
        },
    );
    // Building a host reads BPE tables and boots the engine's VM: `start` does it off the
    // async threads.
    let host = Host::start(config).await?;
    let dir = tempfile::tempdir()?;
    let session = host
        .create_session(SessionSpec::new("demo", dir.path().join("demo.jsonl")))
        .await?;

    let prompts = [
        "list the files",
        "read src/main.rs",
        "summarize what you saw",
    ];
    for (turn, prompt) in prompts.iter().cycle().take(12).enumerate() {
        let user = Message::user(format!("{prompt} (turn {turn})"));
        match run_turn(&session, turn, user).await {
            Ok(calls) => println!("turn {turn:>2}: {calls} model calls"),
            // An engine error reaches the agent only under `failurePolicy: "strict"` or for an
            // operation the engine refuses (unmet hostRequirements); by default a failing
            // script is quarantined and `legacy` answers, which `Assembly::fallback` shows.
            Err(ctxhost::Error::Engine(e)) => {
                eprintln!("turn {turn}: the engine refused: {e}");
            }
            // The host itself failed (a full disk, a host bug): nothing was blamed on the
            // engine and nothing stored was lost. A real agent would retry or stop here.
            Err(e) => {
                eprintln!("turn {turn}: host error, stopping: {e}");
                break;
            }
        }
    }
    session.close().await?;
    println!("transcript: {}", session.file().display());
    Ok(())
}

/// One user turn through the tool loop; returns how many model calls it took.
async fn run_turn(session: &SessionHandle, turn: usize, user: Message) -> ctxhost::Result<usize> {
    let mut ctx = session
        .begin_turn(TurnInput {
            user,
            is_heartbeat: false,
        })
        .await?;
    for call in 1..=MAX_MODEL_CALLS {
        show(turn, call, &ctx);
        match fake_model(turn, call, &ctx.messages) {
            Reply::ToolCalls(assistant, calls) => {
                // Run the tools, then hand the calls and their results back: the host stores
                // them, lets the engine ingest them, and assembles the next model call.
                let mut messages = vec![assistant];
                messages.extend(calls.iter().map(|(id, command)| run_tool(id, command)));
                ctx = session.continue_turn(messages).await?;
            }
            Reply::Final(answer) => {
                let stats = session.end_turn(vec![answer]).await?;
                if stats.compactions > 0 {
                    println!("          ({} compactions this turn)", stats.compactions);
                }
                return Ok(call);
            }
        }
    }
    // The model never finished: close the turn so the transcript stays well-formed.
    session
        .end_turn(vec![Message::assistant("(stopped: too many tool calls)")])
        .await?;
    Ok(MAX_MODEL_CALLS)
}

fn show(turn: usize, call: usize, ctx: &Assembly) {
    println!(
        "turn {turn:>2}.{call}: model sees {:>3} messages, {:>5} / {} tokens (engine {}{})",
        ctx.messages.len(),
        ctx.assembled_tokens,
        ctx.token_budget,
        ctx.engine,
        if ctx.fallback { ", fallback" } else { "" }
    );
}

/// What the stand-in model answers.
enum Reply {
    /// An assistant message asking for tools, with each call's id and command.
    ToolCalls(Message, Vec<(String, String)>),
    /// The final answer of the turn.
    Final(Message),
}

/// A stand-in for an LLM call: on the first calls of a turn it asks for a tool, then answers.
fn fake_model(turn: usize, call: usize, _context: &[Arc<Message>]) -> Reply {
    if call > 1 + turn % 2 {
        return Reply::Final(Message::assistant(format!("Done with turn {turn}.")));
    }
    let id = format!("call_{turn}_{call}");
    let command = "ls -la".to_owned();
    match serde_json::from_value(json!({"role": "assistant", "content": [
        {"type": "toolCall", "id": id, "name": "bash", "arguments": {"command": command}}]}))
    {
        Ok(message) => Reply::ToolCalls(message, vec![(id, command)]),
        Err(e) => Reply::Final(Message::assistant(format!("(model error: {e})"))),
    }
}

/// A stand-in tool: a long listing, as real tool output often is.
fn run_tool(id: &str, _command: &str) -> Message {
    Message::new(MessageBody::ToolResult(ToolResultMessage {
        tool_call_id: id.to_owned(),
        tool_name: "bash".into(),
        content: Content::Text("drwxr-xr-x src\n".repeat(60)),
        is_error: false,
        extra: Default::default(),
    }))
}
