//! The flat workload files `shared/data/workloads/build_workload.py` writes, read as they are:
//! for [`super::workloads`] (as host sessions) and `examples/replay_workload.rs` (as Chat
//! Completions arrays), which includes this file alone.

use std::path::Path;
use std::process::Command;

use serde::Deserialize;

/// One flat workload message.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flat {
    /// `user`, `assistant` or `toolResult`.
    pub role: String,
    /// The message's text (an assistant's renders each call as `name JSON(arguments)`).
    pub text: String,
    /// An assistant message's tool calls.
    #[serde(default)]
    pub tool_calls: Vec<FlatCall>,
    /// The call a `toolResult` answers.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// The tool a `toolResult` comes from.
    #[serde(default)]
    pub tool_name: Option<String>,
}

/// One tool call of a flat assistant message.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlatCall {
    /// The call id.
    pub id: String,
    /// The tool.
    pub name: String,
}

/// Runs `python3 script out` (`build_workload.py`), which writes the workload files into `out`.
pub fn build(script: &Path, out: &Path) -> Result<(), String> {
    let run = Command::new("python3")
        .arg(script)
        .arg(out)
        .output()
        .map_err(|e| format!("python3 {}: {e}", script.display()))?;
    if !run.status.success() {
        return Err(format!(
            "python3 {} failed ({}): {}",
            script.display(),
            run.status,
            String::from_utf8_lossy(&run.stderr)
        ));
    }
    Ok(())
}

/// Reads a flat workload file.
pub fn read(path: &Path) -> Result<Vec<Flat>, String> {
    let raw = std::fs::read(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    serde_json::from_slice(&raw).map_err(|e| format!("parse {}: {e}", path.display()))
}
