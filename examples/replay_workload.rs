//! Makes large synthetic transcripts for timing `ctxhost replay`: the 10,000-message keep-recent
//! workload of `shared/data/workloads` repeated, each text cut to 1,500 characters, written as
//! OpenAI Chat Completions arrays of 20,000 and 200,000 messages (`chat-20k.json`,
//! `chat-200k.json`). Tool-call ids get a `#x<k>` suffix from the second repetition on, so that
//! every call is answered once.
//!
//! ```text
//! cargo run --release --example replay_workload -- OUT_DIR [SIZE...]
//! /usr/bin/time -v target/release/ctxhost replay OUT_DIR/chat-200k.json > /dev/null
//! ```
//!
//! SIZE is a message count (default: 20000 200000). The workload is built by
//! `python3 build_workload.py` into a temporary directory; set `CTXHOST_SHARED` when
//! `../shared` is elsewhere. Nothing is written into the repository.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

/// Characters (code points) a message's text is cut to.
const MAX_CHARS: usize = 1_500;

#[allow(dead_code)] // the example reads the workload, nothing else of it
#[path = "../benches/common/flat.rs"]
mod flat;

use flat::Flat;

fn shared_dir() -> PathBuf {
    match std::env::var_os("CTXHOST_SHARED") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"),
    }
}

/// The 10k workload, built into a temporary directory.
fn workload() -> Result<Vec<Flat>> {
    let script = shared_dir().join("data/workloads/build_workload.py");
    let tmp = tempfile::tempdir()?;
    flat::build(&script, tmp.path()).map_err(anyhow::Error::msg)?;
    flat::read(&tmp.path().join("workload-10k.json")).map_err(anyhow::Error::msg)
}

/// `text` cut to at most [`MAX_CHARS`] characters.
fn cut(text: &str) -> &str {
    match text.char_indices().nth(MAX_CHARS) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// One workload message as a Chat Completions message, ids suffixed for repetition `k`.
fn chat(m: &Flat, k: usize) -> Result<Value> {
    let id = |id: &str| {
        if k == 0 {
            id.to_owned()
        } else {
            format!("{id}#x{k}")
        }
    };
    let text = cut(&m.text);
    Ok(match m.role.as_str() {
        "user" => json!({"role": "user", "content": text}),
        "assistant" if m.tool_calls.is_empty() => json!({"role": "assistant", "content": text}),
        "assistant" => {
            let calls: Vec<Value> = m
                .tool_calls
                .iter()
                .map(|c| {
                    json!({"id": id(&c.id), "type": "function",
                           "function": {"name": c.name, "arguments": "{}"}})
                })
                .collect();
            json!({"role": "assistant", "content": text, "tool_calls": calls})
        }
        "toolResult" => {
            let call = m
                .tool_call_id
                .as_deref()
                .context("a toolResult without a call id")?;
            json!({"role": "tool", "tool_call_id": id(call), "content": text})
        }
        other => bail!("unknown role {other:?}"),
    })
}

/// Writes the first `n` messages of the repeated workload to `path`, one message a line.
fn write(base: &[Flat], n: usize, path: &Path) -> Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    out.write_all(b"[\n")?;
    for i in 0..n {
        let m = chat(&base[i % base.len()], i / base.len())?;
        if i > 0 {
            out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut out, &m)?;
    }
    out.write_all(b"\n]\n")?;
    out.flush()?;
    Ok(())
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let out = PathBuf::from(
        args.next()
            .context("usage: replay_workload OUT_DIR [SIZE...]")?,
    );
    let mut sizes: Vec<usize> = args
        .map(|a| a.parse().with_context(|| format!("SIZE {a:?}")))
        .collect::<Result<_>>()?;
    if sizes.is_empty() {
        sizes = vec![20_000, 200_000];
    }
    std::fs::create_dir_all(&out)?;
    let base = workload()?;
    for n in sizes {
        let name = if n % 1_000 == 0 {
            format!("chat-{}k.json", n / 1_000)
        } else {
            format!("chat-{n}.json")
        };
        let path = out.join(name);
        write(&base, n, &path)?;
        let bytes = std::fs::metadata(&path)?.len();
        println!("{}: {n} messages, {bytes} bytes", path.display());
    }
    Ok(())
}
