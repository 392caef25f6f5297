//! What the host checks beyond what the types enforce (contract §5, §6): an engine's shape at
//! load (with "did you mean" hints), unmet host requirements per operation, and the limits
//! and consistency of `assemble` and `compact` results.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::info::{EngineInfo, HOST_CAPABILITIES, INFO_FIELDS, Operation};
use super::method::{KNOWN_MEMBERS, Method};
use super::results::{AssembleResult, CompactResult};

/// The closest known member name to a misspelt one, for "did you mean" messages.
pub fn closest_member(name: &str) -> Option<&'static str> {
    let candidates = Method::ALL
        .iter()
        .chain(Method::HOOKS.iter())
        .map(|m| m.as_str())
        .chain(KNOWN_MEMBERS.iter().copied());
    closest(name, candidates)
}

/// The closest of `candidates` to `name` (case-insensitive, Jaro-Winkler ≥ 0.8).
pub fn closest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let lower = name.to_lowercase();
    candidates
        .map(|c| (strsim::jaro_winkler(&lower, &c.to_lowercase()), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// A problem found while checking an engine at load.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LoadFinding {
    /// Errors make the engine unusable; warnings are reported and the engine runs.
    pub severity: Severity,
    /// The message, naming the member.
    pub message: String,
}

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Severity {
    /// The engine cannot be used.
    Error,
    /// Reported; the engine runs.
    Warning,
}

/// Checks an engine at load: `info`, the member list, and the configured id (contract §6).
///
/// `members` are the engine's top-level names with whether each is a function.
pub fn check_engine_shape(
    info: &EngineInfo,
    members: &[(String, bool)],
    configured_id: Option<&str>,
    strict: bool,
) -> Vec<LoadFinding> {
    let mut out = Vec::new();
    let error = |m: String| LoadFinding {
        severity: Severity::Error,
        message: m,
    };
    let warning = |m: String| LoadFinding {
        severity: Severity::Warning,
        message: m,
    };
    if info.id.trim().is_empty() {
        out.push(error("info.id must be a non-empty string".into()));
    }
    if info.name.trim().is_empty() {
        out.push(error("info.name must be a non-empty string".into()));
    }
    for key in info.extra.keys() {
        let hint = closest(key, INFO_FIELDS.iter().copied())
            .map(|c| format!(" (did you mean `{c}`?)"))
            .unwrap_or_default();
        out.push(warning(format!("unknown info field `{key}`{hint}")));
    }
    for method in Method::ALL {
        let found = members.iter().find(|(n, _)| n == method.as_str());
        match found {
            None if method.required() => {
                // A misspelled required method is an unknown member close to its name.
                let typo = members
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .filter(|n| Method::from_name(n).is_none() && !KNOWN_MEMBERS.contains(n))
                    .find(|n| closest_member(n) == Some(method.as_str()));
                let hint = typo
                    .map(|t| format!("; did you mean `{t}`? (it is defined, misspelled)"))
                    .unwrap_or_default();
                out.push(error(format!(
                    "required function `{method}` is missing{hint}"
                )))
            }
            Some((_, false)) => out.push(error(format!("`{method}` must be a function"))),
            _ => {}
        }
    }
    for (name, _) in members {
        if Method::from_name(name).is_some() || KNOWN_MEMBERS.contains(&name.as_str()) {
            continue;
        }
        let hint = closest_member(name)
            .map(|c| format!(" (did you mean `{c}`?)"))
            .unwrap_or_default();
        out.push(warning(format!("unknown member `{name}`{hint}")));
    }
    if let Some(cfg) = configured_id
        && !info.id.is_empty()
        && cfg != info.id
    {
        let m = format!(
            "info.id \"{}\" differs from the configured id \"{cfg}\"; change info.id to \"{cfg}\", or name the file (or the config entry) \"{}\"",
            info.id, info.id
        );
        out.push(if strict { error(m) } else { warning(m) });
    }
    out
}

/// Checks a hook file's shape: `info` with `id` and `name`, at least one hook function, each
/// known member a function; unknown members are warnings naming the closest hook (the
/// `pipeline` engine's files; [`check_engine_shape`] checks an engine's).
pub fn check_hook_shape(info: &EngineInfo, members: &[(String, bool)]) -> Vec<LoadFinding> {
    let finding = |severity, message: String| LoadFinding { severity, message };
    let mut out = Vec::new();
    if info.id.trim().is_empty() {
        out.push(finding(
            Severity::Error,
            "info.id must be a non-empty string".into(),
        ));
    }
    if info.name.trim().is_empty() {
        out.push(finding(
            Severity::Error,
            "info.name must be a non-empty string".into(),
        ));
    }
    for key in info.extra.keys() {
        if key == "priority" {
            if !info.extra[key].is_number() {
                out.push(finding(
                    Severity::Error,
                    "info.priority must be a number".into(),
                ));
            }
            continue;
        }
        let hint = closest(key, INFO_FIELDS.iter().copied().chain(["priority"]))
            .map(|c| format!(" (did you mean `{c}`?)"))
            .unwrap_or_default();
        out.push(finding(
            Severity::Warning,
            format!("unknown info field `{key}`{hint}"),
        ));
    }
    let mut hooks = 0;
    for (name, is_fn) in members {
        if name == "info" {
            continue;
        }
        match Method::HOOKS.iter().find(|m| m.as_str() == name) {
            Some(_) if *is_fn => hooks += 1,
            Some(m) => out.push(finding(
                Severity::Error,
                format!("`{m}` must be a function"),
            )),
            None => {
                let hint = closest(name, Method::HOOKS.iter().map(|m| m.as_str()))
                    .map(|c| format!(" (did you mean `{c}`?)"))
                    .unwrap_or_default();
                out.push(finding(
                    Severity::Warning,
                    format!("unknown hook member `{name}`{hint}"),
                ));
            }
        }
    }
    if hooks == 0 {
        out.push(finding(
            Severity::Error,
            "a hook defines none of collect, project, prune, compactionPlan, beforeCompaction, afterCompaction, afterAppend".into(),
        ));
    }
    out
}

/// The capabilities an operation needs that this host lacks, with the engine's message.
pub fn unmet_requirements(info: &EngineInfo, op: Operation) -> Option<String> {
    let req = info.host_requirements.get(&op)?;
    // The names and the message are the engine's: quoted inert, so an error a terminal or a
    // client shows carries no control sequence (an ESC in a name shows as `\u001b`).
    let missing: Vec<Cow<'_, str>> = req
        .required_capabilities
        .iter()
        .map(String::as_str)
        .filter(|c| !HOST_CAPABILITIES.contains(c))
        .map(super::inert::escape)
        .collect();
    if missing.is_empty() {
        return None;
    }
    let op_name = serde_json::to_value(op)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let mut msg = format!(
        "context engine \"{}\" cannot run operation \"{op_name}\" on ctxhost. Missing host capabilities: {}. Host capabilities: {}.",
        super::inert::escape(&info.id),
        missing.join(", "),
        HOST_CAPABILITIES.join(", ")
    );
    if let Some(extra) = &req.unsupported_message {
        msg.push(' ');
        msg.push_str(&super::inert::escape(extra));
    }
    Some(msg)
}

/// Caps on what an engine may return (contract §5, configurable under `host.limits`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ResultLimits {
    /// Most messages one result may hold. Default 100,000.
    pub max_result_messages: usize,
    /// Most bytes of text in one result (all strings added up, as written: JSON-escaped, a
    /// control character six bytes). Default 64 MiB.
    pub max_result_bytes: usize,
    /// Most bytes in one summary or `systemPromptAddition`. Default 1 MiB.
    pub max_text_bytes: usize,
}

impl Default for ResultLimits {
    fn default() -> Self {
        ResultLimits {
            max_result_messages: 100_000,
            max_result_bytes: 64 << 20,
            max_text_bytes: 1 << 20,
        }
    }
}

/// Checks an `assemble` result's numbers and sizes; returns what is wrong.
pub fn check_assemble(r: &AssembleResult, limits: &ResultLimits) -> Result<(), String> {
    if !r.estimated_tokens.is_finite() || r.estimated_tokens < 0.0 {
        return Err(format!(
            "estimatedTokens must be a finite non-negative number, got {}",
            r.estimated_tokens
        ));
    }
    if r.messages.len() > limits.max_result_messages {
        return Err(format!(
            "{} messages exceed the limit of {}",
            r.messages.len(),
            limits.max_result_messages
        ));
    }
    if let Some(add) = &r.system_prompt_addition
        && add.len() > limits.max_text_bytes
    {
        return Err(format!(
            "systemPromptAddition of {} bytes exceeds the limit of {}",
            add.len(),
            limits.max_text_bytes
        ));
    }
    Ok(())
}

/// Checks a `compact` result for consistency; returns what is wrong.
pub fn check_compact(r: &CompactResult, limits: &ResultLimits) -> Result<(), String> {
    if r.compacted && !r.ok {
        return Err("compacted is true but ok is false".into());
    }
    if let Some(out) = &r.result
        && let Some(s) = &out.summary
        && s.len() > limits.max_text_bytes
    {
        return Err(format!(
            "summary of {} bytes exceeds the limit of {}",
            s.len(),
            limits.max_text_bytes
        ));
    }
    Ok(())
}

#[cfg(test)]
#[path = "checks_tests.rs"]
mod tests;
