//! A hook file's shape, checked when it loads.

use crate::contract::{EngineInfo, INFO_FIELDS, Method, closest};
use crate::contract::{LoadFinding, Severity};

/// Checks a hook file's shape: `info` with `id` and `name`, at least one hook function, each
/// known member a function; unknown members are warnings naming the closest hook.
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
