//! What tool calls say about the span: which files they read or modify (from their arguments,
//! shell command lines and patches) and which todo items they leave open.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::text::{EXT_RE, item, re};

static PATCH_FILE_RE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?m)^(?:\*\*\* (?:Add|Update|Delete) File: |\*\*\* Move to: |\+\+\+ (?:b/)?)(\S[^\r\n]*?)\s*$",
    )
});

/// A line that names a failure outright: `Error: …`, `error[E0502]: …`, `TypeError`, a panic,
/// `FAILED`, `fatal:`, an errno name.
static STRONG_ERROR_RE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?:\b[A-Z][A-Za-z]*(?:Error|Exception)\b|\b(?:error|Error|ERROR)(?:\[[A-Z]?\d+\])?:|\bpanicked at\b|\bFAIL(?:ED)?\b|\bfatal:|\bERR!|\*\*\*|\bE(?:NOENT|ACCES|PERM|EXIST|ADDRINUSE|CONNREFUSED|TIMEDOUT)\b|Traceback \(most recent)",
    )
});
/// A line that mentions failing.
static WEAK_ERROR_RE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)\b(?:error|errors|failed|failure|cannot|can't|could not|couldn't|not found|no such|denied|refused|invalid|undefined|unexpected|timed out|exit code [1-9]|non-zero)\b",
    )
});

/// The most telling line of a tool's output: for a failure, the line that names the error
/// (not a banner or a progress line before it), else its first line; otherwise the first line.
pub fn telling_line(text: &str, is_error: bool) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let pick = if is_error {
        lines
            .iter()
            .find(|l| STRONG_ERROR_RE.is_match(l))
            .or_else(|| lines.iter().find(|l| WEAK_ERROR_RE.is_match(l)))
            .or(lines.first())
    } else {
        lines.first()
    };
    pick.map_or_else(|| "(no output)".to_owned(), |l| item(l, 400))
}

/// Calls `f` on every string inside a JSON value, in document order.
pub(super) fn walk_strings<'v>(value: &'v Value, f: &mut impl FnMut(Option<&str>, &'v str)) {
    fn go<'v>(value: &'v Value, key: Option<&str>, f: &mut impl FnMut(Option<&str>, &'v str)) {
        match value {
            Value::String(s) => f(key, s),
            Value::Array(items) => items.iter().for_each(|v| go(v, key, f)),
            Value::Object(map) => map.iter().for_each(|(k, v)| go(v, Some(k), f)),
            _ => {}
        }
    }
    go(value, None, f);
}

/// Argument keys whose string values are file paths.
const PATH_KEYS: &[&str] = &[
    "path",
    "file_path",
    "filePath",
    "filename",
    "file",
    "notebook_path",
    "target_file",
    "paths",
    "files",
];

fn plausible_path_value(s: &str) -> bool {
    !matches!(s, "" | "." | ".." | "./" | "/")
        && s.len() <= 512
        && !s.contains('\n')
        && !s.starts_with('{')
}

/// The paths a tool call names in its path-like arguments.
pub(super) fn path_args(args: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Value::Object(map) = args {
        for key in PATH_KEYS {
            let mut push = |v: &Value| {
                if let Some(s) = v.as_str().map(str::trim)
                    && plausible_path_value(s)
                {
                    out.push(s.to_string());
                }
            };
            match map.get(*key) {
                Some(Value::Array(items)) => items.iter().for_each(&mut push),
                Some(v) => push(v),
                None => {}
            }
        }
    }
    out
}

/// What a tool call does, judged from its name (and `command`, for editor tools).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ToolKind {
    Todo,
    Modify,
    Read,
    Shell,
    Other,
}

/// The lowercase words of a tool name: `str_replace_based_edit_tool` → str, replace, based, …;
/// `TodoWrite` → todo, write.
fn name_words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_alphanumeric() {
            if !cur.is_empty() {
                words.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !cur.is_empty() {
            words.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        cur.extend(c.to_lowercase());
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// The kind of a tool call.
pub(super) fn classify_tool(name: &str, args: &Value) -> ToolKind {
    let words = name_words(name);
    let has = |list: &[&str]| words.iter().any(|w| list.contains(&w.as_str()));
    if has(&["todo", "todos", "todowrite"]) {
        return ToolKind::Todo;
    }
    // str_replace_based_edit_tool and friends say what they do in `command`.
    if has(&["edit", "editor"])
        && let Some(cmd) = args.get("command").and_then(Value::as_str)
    {
        match cmd {
            "view" => return ToolKind::Read,
            "create" | "str_replace" | "insert" | "undo_edit" => return ToolKind::Modify,
            _ => {}
        }
    }
    if has(&[
        "write",
        "edit",
        "replace",
        "patch",
        "multiedit",
        "create",
        "insert",
        "delete",
        "move",
        "rename",
    ]) {
        ToolKind::Modify
    } else if has(&[
        "read", "cat", "view", "grep", "glob", "ls", "list", "find", "search", "open", "head",
        "tail",
    ]) {
        ToolKind::Read
    } else if has(&[
        "bash",
        "shell",
        "sh",
        "zsh",
        "exec",
        "terminal",
        "command",
        "cmd",
        "run",
        "powershell",
    ]) {
        ToolKind::Shell
    } else {
        ToolKind::Other
    }
}

/// What a successful tool call did, for the "Done" section: a command that changes something
/// (`ran \`cargo test\``) or the files an edit touched. Reads and listings are left out.
pub(super) fn action(name: &str, args: &Value) -> Option<String> {
    match classify_tool(name, args) {
        ToolKind::Modify => {
            let mut paths = path_args(args);
            walk_strings(args, &mut |_, s| paths.extend(patch_paths(s)));
            paths.dedup();
            (!paths.is_empty()).then(|| format!("edited {}", paths.join(", ")))
        }
        ToolKind::Shell => {
            let command = command_line(args)?;
            let program = command.split_whitespace().next().unwrap_or("");
            let program = program.rsplit('/').next().unwrap_or(program);
            let reads =
                READ_COMMANDS.contains(&program) || matches!(program, "cd" | "echo" | "pwd");
            (!reads).then(|| format!("ran `{}`", item(command, 100)))
        }
        ToolKind::Todo | ToolKind::Read | ToolKind::Other => None,
    }
}

/// The first line of a shell call's command.
pub(super) fn command_line(args: &Value) -> Option<&str> {
    let mut command = None;
    walk_strings(args, &mut |key, s| {
        if command.is_none() && matches!(key, Some("command" | "cmd" | "script")) {
            command = Some(s);
        }
    });
    command?.lines().map(str::trim).find(|l| !l.is_empty())
}

/// Shell commands that only read the files they name.
const READ_COMMANDS: &[&str] = &[
    "cat",
    "head",
    "tail",
    "less",
    "more",
    "bat",
    "nl",
    "wc",
    "ls",
    "tree",
    "find",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "ag",
    "ack",
    "stat",
    "file",
    "diff",
    "view",
    "sed",
    "du",
    "md5sum",
    "sha256sum",
    "jq",
];

fn looks_like_path(t: &str) -> bool {
    !t.is_empty()
        && !t.starts_with('-')
        && !t.contains("://")
        && t != "/dev/null"
        && !t.chars().any(|c| "*?{}[]$<>()|`=\\,".contains(c))
        && t != "."
        && t != ".."
        && (t.contains('/') || EXT_RE.is_match(t))
}

/// Paths that read-like commands of a shell command line name (`cat a.rs | grep x b.rs`).
pub(super) fn shell_read_paths(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    for segment in command.split(['\n', ';', '|', '&']) {
        let words: Vec<&str> = segment
            .split_whitespace()
            .map(|w| w.trim_matches(|c| c == '"' || c == '\''))
            .collect();
        let mut rest = words.as_slice();
        while let Some((first, tail)) = rest.split_first() {
            let env_assignment = first.contains('=') && !first.starts_with('-');
            if env_assignment || matches!(*first, "sudo" | "time" | "command" | "xargs" | "nice") {
                rest = tail;
            } else {
                break;
            }
        }
        let Some((program, args)) = rest.split_first() else {
            continue;
        };
        let program = program.rsplit('/').next().unwrap_or(program);
        if !READ_COMMANDS.contains(&program) {
            continue;
        }
        if matches!(program, "sed") && args.iter().any(|a| a.starts_with("-i")) {
            continue;
        }
        let mut skip_pattern = matches!(
            program,
            "grep" | "egrep" | "fgrep" | "rg" | "ag" | "ack" | "jq" | "sed"
        ) && !args.iter().any(|a| *a == "-e" || *a == "-f");
        let mut skip_next = false;
        for arg in args {
            if skip_next {
                skip_next = false;
                continue;
            }
            if matches!(*arg, ">" | ">>" | "2>" | "2>>" | "&>") {
                skip_next = true;
                continue;
            }
            if arg.starts_with('-') || arg.contains('>') {
                continue;
            }
            if skip_pattern {
                skip_pattern = false;
                continue;
            }
            if looks_like_path(arg) {
                out.push((*arg).to_string());
            }
        }
    }
    out
}

/// Files named in patch text (`*** Update File: x`, `+++ b/x`).
pub(super) fn patch_paths(text: &str) -> Vec<String> {
    PATCH_FILE_RE
        .captures_iter(text)
        .filter_map(|c| c.get(1))
        .map(|m| m.as_str().to_string())
        .filter(|p| p != "/dev/null")
        .collect()
}

/// Open items of a todo tool call: `(items, is_whole_list)`.
pub(super) fn todo_items(args: &Value) -> (Vec<String>, bool) {
    let text_of = |v: &Value| -> Option<String> {
        ["content", "text", "title", "task", "description", "subject"]
            .iter()
            .find_map(|k| v.get(*k).and_then(Value::as_str))
            .map(|s| item(s, 160))
    };
    let list = match args {
        Value::Array(items) => Some(items),
        Value::Object(map) => ["todos", "items", "tasks"]
            .iter()
            .find_map(|k| map.get(*k).and_then(Value::as_array))
            .or_else(|| map.values().find_map(Value::as_array)),
        _ => None,
    };
    let Some(list) = list else {
        return (text_of(args).into_iter().collect(), false);
    };
    let open = list
        .iter()
        .filter_map(|v| {
            if let Some(s) = v.as_str() {
                return Some(item(s, 160));
            }
            let status = ["status", "state"]
                .iter()
                .find_map(|k| v.get(*k).and_then(Value::as_str))
                .unwrap_or("")
                .to_ascii_lowercase();
            let done = ["done", "completed", "checked"]
                .iter()
                .any(|k| v.get(*k).and_then(Value::as_bool) == Some(true));
            let closed = matches!(
                status.as_str(),
                "completed" | "complete" | "done" | "cancelled" | "canceled"
            );
            if done || closed { None } else { text_of(v) }
        })
        .collect();
    (open, true)
}

#[cfg(test)]
#[path = "tools_tests.rs"]
mod tests;
