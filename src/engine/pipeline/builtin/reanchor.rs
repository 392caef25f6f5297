//! `builtin:agents-reanchor`: after a compaction, the workspace `AGENTS.md`'s critical
//! sections are placed before the user turn of every model call again, so the rules survive
//! summarization (the design's post-compaction context refresh). A section starts at a line
//! equal, byte for byte, to one of `headings` and runs to the next heading of its level or
//! higher; a heading that differs by a byte (`## Red lines`) is not that section.
//!
//! Settings (all optional): `file` (default `AGENTS.md`, relative to the workspace directory,
//! else to the config file's folder), `headings` (default `["## Session Startup",
//! "## Red Lines"]`), `priority` (default 100: kept over lower blocks when contributions exceed
//! their share). The file is read again after each compaction, so an edit is picked up then.

use std::path::PathBuf;

use serde_json::{Map, Value as Json, json};

use crate::contract::Method;
use crate::contract::message::Role;
use crate::engine::InstanceContext;
use crate::engine::api::HostCall;

use super::{Builtin, known, number, string};
use crate::engine::pipeline::spec::PipelineSpec;

/// The headings re-anchored by default.
pub(crate) const HEADINGS: [&str; 2] = ["## Session Startup", "## Red Lines"];

/// The line the re-anchored text starts with.
pub(crate) const MARKER: &str = "[Post-compaction context refresh]";

/// The hook, its settings and (per instance) the sections read after the newest compaction.
#[derive(Clone, Debug)]
pub(crate) struct Reanchor {
    file: PathBuf,
    /// `file` as configured: when relative, the instance's workspace directory comes first.
    configured: PathBuf,
    headings: Vec<String>,
    priority: f64,
    /// The summary the sections were read after, and the text (`None`: nothing to place).
    read: Option<(String, Option<String>)>,
}

impl Reanchor {
    /// Reads the settings; an error names the setting.
    pub(super) fn from_config(
        spec: &PipelineSpec,
        settings: &Json,
    ) -> Result<Self, (&'static str, String)> {
        known(settings, &["file", "headings", "priority"])?;
        let file = PathBuf::from(string(settings, "file")?.unwrap_or_else(|| "AGENTS.md".into()));
        let headings = match settings.get("headings") {
            None | Some(Json::Null) => HEADINGS.iter().map(|h| (*h).to_owned()).collect(),
            Some(Json::Array(a)) => a
                .iter()
                .map(|h| match h {
                    Json::String(s) if s.starts_with('#') => Ok(s.clone()),
                    _ => Err((
                        "headings",
                        "must be a list of Markdown heading lines (`## ...`)".to_owned(),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(_) => {
                return Err((
                    "headings",
                    "must be a list of Markdown heading lines".into(),
                ));
            }
        };
        Ok(Reanchor {
            file: spec.resolve(&file),
            configured: file,
            headings,
            priority: number(settings, "priority")?.unwrap_or(100.0),
            read: None,
        })
    }

    fn read_sections(&self) -> Option<String> {
        let text = match std::fs::read_to_string(&self.file) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(file = %self.file.display(), "builtin:agents-reanchor: cannot read the file: {e}");
                return None;
            }
        };
        let parts: Vec<String> = self
            .headings
            .iter()
            .filter_map(|h| section(&text, h))
            .collect();
        (!parts.is_empty()).then(|| format!("{MARKER}\n\n{}", parts.join("\n\n")))
    }
}

/// The section of `text` under the line equal to `heading`, that line included, up to the
/// next heading of its level or higher; trailing blank lines left out.
pub(crate) fn section(text: &str, heading: &str) -> Option<String> {
    let level = heading.bytes().take_while(|b| *b == b'#').count();
    let mut lines = text.lines();
    lines.by_ref().find(|l| *l == heading)?;
    let mut out = vec![heading];
    for l in lines {
        let hashes = l.bytes().take_while(|b| *b == b'#').count();
        if hashes > 0 && hashes <= level && l[hashes..].starts_with(' ') {
            break;
        }
        out.push(l);
    }
    while out.last().is_some_and(|l| l.trim().is_empty()) {
        out.pop();
    }
    Some(out.join("\n"))
}

impl Builtin for Reanchor {
    const METHODS: &'static [Method] = &[Method::Collect];

    fn start(&self, cx: &InstanceContext) -> Self {
        let mut out = self.clone();
        if self.configured.is_relative() && !cx.workspace_dir.is_empty() {
            out.file = PathBuf::from(&cx.workspace_dir).join(&self.configured);
        }
        out
    }

    fn call(
        &mut self,
        call: &HostCall,
        _method: Method,
        _fields: &Map<String, Json>,
    ) -> Result<Json, String> {
        let newest = call
            .context()
            .iter()
            .rev()
            .find(|m| m.role() == Role::CompactionSummary);
        let Some(summary) = newest else {
            return Ok(Json::Null);
        };
        if self.read.as_ref().map(|(id, _)| id) != Some(&summary.id) {
            self.read = Some((summary.id.clone(), self.read_sections()));
        }
        Ok(match self.read.as_ref().and_then(|(_, t)| t.as_ref()) {
            Some(text) => json!({"prependContext": [
                {"id": "agents-md", "text": text, "priority": self.priority}
            ]}),
            None => Json::Null,
        })
    }
}
