//! Configuration (contract §10): a JSON5 file of OpenClaw's shape — `plugins.slots`,
//! `plugins.entries` — plus a `host` section for ctxhost's own settings.
//!
//! ```
//! let cfg = ctxhost::config::Config::parse(r#"{
//!   plugins: { slots: { contextEngine: "recent" },
//!              entries: { recent: { path: "scripts/recent_turns.lua" } } },
//!   host: { window: 16000 },
//! }"#, "inline").unwrap();
//! assert_eq!(cfg.engine_entry().unwrap().0, "recent");
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::compaction::CompactionSettings;
use crate::engine::legacy::LEGACY_ID;
use crate::error::{Error, Result};
use crate::session::FailurePolicy;
use crate::tokens::Tokenizer;

/// The whole configuration file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Config {
    /// OpenClaw-compatible plugin slots and entries.
    pub plugins: Plugins,
    /// ctxhost's own settings.
    pub host: HostSettings,
    /// The directory relative engine paths resolve against (the config file's directory).
    #[serde(skip)]
    pub base_dir: PathBuf,
}

/// `plugins`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Plugins {
    /// Which plugin fills which slot.
    pub slots: Slots,
    /// Plugin entries by id.
    pub entries: BTreeMap<String, Entry>,
}

/// `plugins.slots`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Slots {
    /// The context engine's entry id; absent or `"legacy"` means the built-in engine.
    pub context_engine: Option<String>,
}

/// `plugins.entries.<id>`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Entry {
    /// A disabled entry is never loaded. Default true.
    pub enabled: bool,
    /// The engine file (`.lua`, `.luau`, `.rhai`), relative to the config file.
    pub path: Option<PathBuf>,
    /// Given to the engine as `ctx.config` / `host.config`.
    pub config: Value,
}

impl Default for Entry {
    fn default() -> Self {
        Entry {
            enabled: true,
            path: None,
            config: Value::Object(Default::default()),
        }
    }
}

/// `host`: ctxhost's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct HostSettings {
    /// `fallback` (default) or `strict`.
    pub failure_policy: FailurePolicy,
    /// `estimate` (default), `o200k` or `cl100k`.
    pub tokenizer: Tokenizer,
    /// The model's context window in tokens. Default 32,000.
    pub window: u64,
    /// Built-in compaction.
    pub compaction: CompactionSettings,
    /// Script limits: per-call deadline and grace, memory, operations, result caps.
    pub limits: crate::sandbox::Limits,
}

impl Default for HostSettings {
    fn default() -> Self {
        HostSettings {
            failure_policy: FailurePolicy::Fallback,
            tokenizer: Tokenizer::Estimate,
            window: 32_000,
            compaction: CompactionSettings::default(),
            limits: crate::sandbox::Limits::default(),
        }
    }
}

impl Config {
    /// Reads and parses a config file; relative engine paths resolve against its directory.
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io("read config", path, e))?;
        let mut cfg = Config::parse(&text, &path.display().to_string())?;
        cfg.base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Ok(cfg)
    }

    /// Parses JSON5 text; `place` names the source in errors.
    pub fn parse(text: &str, place: &str) -> Result<Config> {
        json5::from_str(text).map_err(|e| Error::Config {
            place: place.to_owned(),
            message: e.to_string(),
        })
    }

    /// The context engine entry in the slot, with its id; `None` for `legacy`.
    pub fn engine_entry(&self) -> Option<(&str, &Entry)> {
        let id = self.plugins.slots.context_engine.as_deref()?;
        if id == LEGACY_ID {
            return None;
        }
        self.plugins
            .entries
            .get_key_value(id)
            .map(|(k, v)| (k.as_str(), v))
    }

    /// Resolves an entry's path against the config file's directory.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.base_dir.join(path)
        }
    }
}
