//! Folding in a previous summary (ours or an LLM's): its sections, its file lists, and any
//! unsectioned text, so that nothing it said is silently lost.

use crate::contract::message::COMPACTION_SUMMARY_PREFIX;

use super::sections::{NSEC, Sec};
use super::text::{collapse, item, strip_markers};

/// A previous summary split into section items and file lists.
#[derive(Debug, Default)]
pub(super) struct Parsed {
    pub(super) secs: [Vec<String>; NSEC],
    pub(super) read: Vec<String>,
    pub(super) modified: Vec<String>,
}

/// Splits a previous summary into sections by `## ` heading; text outside known sections
/// becomes "Earlier context" items so that nothing is silently lost.
pub(super) fn parse_previous(text: &str) -> Parsed {
    let mut parsed = Parsed::default();
    let mut current: Option<Sec> = None;
    let mut prefix: Option<String> = None;
    let mut paragraph: Vec<&str> = Vec::new();
    let mut file_tag: Option<bool> = None;
    let earlier = Sec::Earlier.idx();
    let flush = |paragraph: &mut Vec<&str>, parsed: &mut Parsed| {
        if !paragraph.is_empty() {
            parsed.secs[earlier].push(item(&paragraph.join(" "), 240));
            paragraph.clear();
        }
    };
    for raw in text.lines() {
        let line = raw.trim();
        if let Some(modified) = file_tag {
            if line.starts_with("</") {
                file_tag = None;
            } else if !line.is_empty() {
                let list = if modified {
                    &mut parsed.modified
                } else {
                    &mut parsed.read
                };
                list.push(line.to_string());
            }
            continue;
        }
        match line {
            "<read-files>" => file_tag = Some(false),
            "<modified-files>" => file_tag = Some(true),
            _ => {}
        }
        if file_tag.is_some()
            || line.starts_with(COMPACTION_SUMMARY_PREFIX)
            || line.starts_with("The following is a summary of a branch")
            || matches!(line, "<summary>" | "</summary>")
        {
            continue;
        }
        if let Some(heading) = line.strip_prefix("## ").or_else(|| line.strip_prefix("# ")) {
            flush(&mut paragraph, &mut parsed);
            match Sec::from_heading(heading) {
                Some(sec) => {
                    current = Some(sec);
                    prefix = None;
                }
                None => {
                    current = Some(Sec::Earlier);
                    prefix = Some(collapse(heading));
                }
            }
            continue;
        }
        if line.is_empty() {
            flush(&mut paragraph, &mut parsed);
            continue;
        }
        // What a fitted summary says it left out is not content to carry.
        if line.starts_with("(+") && line.contains("omitted") {
            continue;
        }
        let Some(sec) = current else {
            if !line.starts_with("Focus:") {
                paragraph.push(line);
            }
            continue;
        };
        let body = strip_markers(line);
        if body.is_empty() || body == "(none)" {
            continue;
        }
        match sec {
            Sec::Files => {
                if let Some(p) = body.strip_prefix("modified: ") {
                    parsed.modified.push(p.trim().to_string());
                } else {
                    let p = body.strip_prefix("read: ").unwrap_or(body);
                    parsed.read.push(p.trim().to_string());
                }
            }
            Sec::Identifiers => {
                // Our own items are bare; an LLM's are often `quoted`.
                let id = line.trim_start_matches("- ").trim().trim_matches('`');
                if !id.is_empty() {
                    parsed.secs[sec.idx()].push(id.to_string());
                }
            }
            _ => {
                let text = match &prefix {
                    Some(p) => format!("{p}: {body}"),
                    None => body.to_string(),
                };
                let max = sec.base_clip().unwrap_or(240);
                parsed.secs[sec.idx()].push(item(&text, max));
            }
        }
    }
    flush(&mut paragraph, &mut parsed);
    parsed
}

#[cfg(test)]
#[path = "previous_tests.rs"]
mod tests;
