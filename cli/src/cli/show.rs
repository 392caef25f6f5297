//! `replay --show TURN[..TURN]`: the context each model call of those turns assembled, message
//! by message, with where each message came from and what changed against the call before.

use std::io::Write;

use ctxhost::tools::replay::{CallReport, ContextView, GoneMessage, TurnReport};

use crate::report::group;

/// Lines of an engine's text printed before the rest is cut (without `--full`).
const BODY_LINES: usize = 40;
/// Characters of one such line printed before the rest is cut (without `--full`).
const LINE_CHARS: usize = 300;

/// Every model call of `t` whose context was recorded; `full`: engine text is never cut.
pub(crate) fn write_turn(out: &mut dyn Write, t: &TurnReport, full: bool) -> anyhow::Result<()> {
    for c in &t.calls {
        if let Some(view) = &c.context {
            write_call(out, t, c, view, full)?;
        }
    }
    Ok(())
}

/// `text` indented under its heading, cut after [`BODY_LINES`] lines unless `full`.
fn write_body(out: &mut dyn Write, text: &str, full: bool) -> anyhow::Result<()> {
    let lines: Vec<&str> = text.lines().collect();
    let shown = if full {
        lines.len()
    } else {
        lines.len().min(BODY_LINES)
    };
    for line in &lines[..shown] {
        if full || line.chars().count() <= LINE_CHARS {
            writeln!(out, "    | {line}")?;
        } else {
            let cut: String = line.chars().take(LINE_CHARS).collect();
            writeln!(out, "    | {cut}…")?;
        }
    }
    if shown < lines.len() {
        writeln!(
            out,
            "    | … {} more lines (--full prints them)",
            lines.len() - shown
        )?;
    }
    Ok(())
}

fn write_call(
    out: &mut dyn Write,
    t: &TurnReport,
    c: &CallReport,
    v: &ContextView,
    full: bool,
) -> anyhow::Result<()> {
    let origins: Vec<String> = v
        .origin_counts()
        .into_iter()
        .map(|(o, n)| format!("{n} {}", o.as_str()))
        .collect();
    writeln!(out)?;
    writeln!(
        out,
        "turn {} call {} of {} ({}{}): {} messages, {} / {} tokens ({})",
        t.turn,
        c.call,
        t.model_calls,
        c.engine,
        if c.fallback { ", fallback" } else { "" },
        c.assembled_messages,
        group(c.assembled_tokens),
        group(c.token_budget),
        if origins.is_empty() {
            "empty".to_owned()
        } else {
            origins.join(", ")
        }
    )?;
    match &v.system_prompt_addition {
        None => writeln!(out, "  systemPromptAddition: none")?,
        Some(a) => {
            writeln!(
                out,
                "  systemPromptAddition ({} tokens):",
                group(v.system_prompt_tokens)
            )?;
            write_body(out, a, full)?;
        }
    }
    writeln!(
        out,
        "  {:>1} {:>4}  {:<17} {:<13} {:>7}  first line",
        "", "#", "role", "origin", "tokens"
    )?;
    for m in &v.messages {
        writeln!(
            out,
            "  {:>1} {:>4}  {:<17} {:<13} {:>7}  {}",
            if m.new { "+" } else { "" },
            m.index,
            m.role,
            m.origin.as_str(),
            group(m.tokens),
            m.first_line
        )?;
        if let Some(text) = &m.engine_text {
            write_body(out, text, full)?;
        }
    }
    writeln!(
        out,
        "  against the previous call: {} kept, {} new, {} dropped, {} summarized",
        v.kept,
        v.new,
        v.dropped.len(),
        v.summarized.len()
    )?;
    write_gone(out, "dropped", &v.dropped)?;
    write_gone(out, "summarized", &v.summarized)?;
    Ok(())
}

fn write_gone(out: &mut dyn Write, what: &str, gone: &[GoneMessage]) -> anyhow::Result<()> {
    for g in gone {
        writeln!(
            out,
            "  - {:<10} {:<17} {:>7}  {}",
            what,
            g.role,
            group(g.tokens),
            g.first_line
        )?;
    }
    Ok(())
}
