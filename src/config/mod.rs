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
//!
#![doc = include_str!("../../docs/configuration.md")]

mod host;
mod parse;
mod pipeline;
mod store;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::LEGACY_ID;
pub use crate::contract::PIPELINE_ID;
use crate::error::{Error, Result};
pub use host::{
    FailurePolicy, HostSettings, ServeSettings, SlowEnginePolicy, TurnBudget, WatchSettings,
};
pub use parse::{MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH};
pub use pipeline::PipelineSettings;
pub use store::{PostgresSettings, SqliteSettings, StoreSettings};

/// The environment variable that names the config file (overridden by `--config`).
pub const CONFIG_ENV: &str = "CTXHOST_CONFIG";

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
    /// The file this was read from, and why that file (for `doctor`).
    #[serde(skip)]
    pub source: ConfigSource,
}

/// Where a configuration came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ConfigSource {
    /// No file: built-in defaults.
    #[default]
    Defaults,
    /// `--config FILE`.
    Flag(PathBuf),
    /// `$CTXHOST_CONFIG`.
    Env(PathBuf),
    /// The default location.
    DefaultLocation(PathBuf),
}

impl ConfigSource {
    /// The file, when there is one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            ConfigSource::Defaults => None,
            ConfigSource::Flag(p) | ConfigSource::Env(p) | ConfigSource::DefaultLocation(p) => {
                Some(p)
            }
        }
    }
}

impl std::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigSource::Defaults => write!(f, "built-in defaults (no config file)"),
            ConfigSource::Flag(p) => write!(f, "{} (--config)", p.display()),
            ConfigSource::Env(p) => write!(f, "{} (${CONFIG_ENV})", p.display()),
            ConfigSource::DefaultLocation(p) => write!(f, "{} (default location)", p.display()),
        }
    }
}

/// The default config file: `$XDG_CONFIG_HOME/ctxhost/config.json5`, else
/// `~/.config/ctxhost/config.json5`.
pub fn default_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("ctxhost").join("config.json5"))
}

/// The config file to use: `explicit` (`--config`), else `$CTXHOST_CONFIG`, else the default
/// location; `None` when none of them names a file (the default location may not exist).
pub fn locate(explicit: Option<&Path>) -> Option<ConfigSource> {
    if let Some(p) = explicit {
        return Some(ConfigSource::Flag(p.to_path_buf()));
    }
    if let Some(p) = std::env::var_os(CONFIG_ENV).filter(|v| !v.is_empty()) {
        return Some(ConfigSource::Env(PathBuf::from(p)));
    }
    default_path().map(ConfigSource::DefaultLocation)
}

/// Reads the configuration the user means: an explicit or `$CTXHOST_CONFIG` file must exist;
/// the default location is used only when it exists; otherwise built-in defaults.
pub fn discover(explicit: Option<&Path>) -> Result<Config> {
    match locate(explicit) {
        Some(ConfigSource::DefaultLocation(p)) if !p.exists() => Ok(Config::default()),
        Some(source) => {
            let path = source.path().map(Path::to_path_buf).unwrap_or_default();
            let mut cfg = Config::load(&path)?;
            cfg.source = source;
            Ok(cfg)
        }
        None => Ok(Config::default()),
    }
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

impl Config {
    /// Reads and parses a config file; relative engine paths resolve against its directory.
    pub fn load(path: &Path) -> Result<Config> {
        let text = parse::read_config_text(path)?;
        let mut cfg = Config::parse(&text, &path.display().to_string())?;
        cfg.base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Ok(cfg)
    }

    /// Parses JSON5 text; `place` names the source in errors, which read
    /// `place:LINE:COL: message` and suggest the closest key for a misspelt one.
    pub fn parse(text: &str, place: &str) -> Result<Config> {
        parse::check_nesting(text, place)?;
        let config: Config = json5::from_str(text).map_err(|e| {
            let place = match e.position() {
                Some(p) => format!("{place}:{}:{}", p.line + 1, p.column + 1),
                None => place.to_owned(),
            };
            let message = match e.code() {
                Some(code) => code.to_string(),
                None => parse::explain_serde_message(&e.to_string()),
            };
            Error::Config { place, message }
        })?;
        config.validate(place)?;
        Ok(config)
    }

    /// Refuses values that parse but cannot work, naming the key.
    fn validate(&self, place: &str) -> Result<()> {
        if self.plugins.entries.contains_key(LEGACY_ID) {
            return Err(Error::Config {
                place: format!("{place}: plugins.entries.{LEGACY_ID}"),
                message: format!(
                    "\"{LEGACY_ID}\" is the built-in engine's id; give the entry another id (and name that id in plugins.slots.contextEngine)"
                ),
            });
        }
        if let Err(e) = self.host.limits.rhai.check() {
            return Err(Error::Config {
                place: format!("{place}: host.limits.{}", e.key),
                message: e.message,
            });
        }
        if let StoreSettings::Postgres(pg) = &self.host.store
            && let Err((key, message)) = pg.check()
        {
            return Err(Error::Config {
                place: format!("{place}: host.store.{key}"),
                message,
            });
        }
        if self.host.window < MIN_WINDOW {
            return Err(Error::Config {
                place: format!("{place}: host.window"),
                message: format!(
                    "a window of {} tokens cannot hold the output reserve and one message; the smallest window is {MIN_WINDOW}",
                    self.host.window
                ),
            });
        }
        Ok(())
    }

    /// The configuration a command runs with: the config file (`config`, else the usual
    /// [`discover`]y), with `engine` (when given) in the context-engine slot under the id
    /// [`engine_id_from_path`] makes of its file name, enabled, keeping the entry's `config`
    /// when the file has an entry of that id.
    pub fn with_engine_file(config: Option<&Path>, engine: Option<&Path>) -> Result<Config> {
        let mut cfg = discover(config)?;
        if let Some(engine) = engine {
            let id = engine_id_from_path(engine);
            cfg.plugins.slots.context_engine = Some(id.clone());
            let mut entry = cfg.plugins.entries.remove(&id).unwrap_or_default();
            entry.path = Some(std::path::absolute(engine).unwrap_or_else(|_| engine.to_path_buf()));
            entry.enabled = true;
            cfg.plugins.entries.insert(id, entry);
        }
        Ok(cfg)
    }

    /// The directory engines are installed into.
    pub fn engines_dir(&self) -> PathBuf {
        match &self.host.engines_dir {
            Some(d) => self.resolve(d),
            None => self.base_dir.join("engines"),
        }
    }

    /// The context engine entry in the slot, with its id; `None` for `legacy`.
    pub fn engine_entry(&self) -> Option<(&str, &Entry)> {
        let id = self.plugins.slots.context_engine.as_deref()?;
        if id == LEGACY_ID {
            return None;
        }
        let found = self
            .plugins
            .entries
            .get_key_value(id)
            .map(|(k, v)| (k.as_str(), v));
        // The pipeline needs no entry of its own (its hooks have theirs).
        static PIPELINE_ENTRY: std::sync::LazyLock<Entry> =
            std::sync::LazyLock::new(Entry::default);
        found.or_else(|| (id == PIPELINE_ID).then(|| (PIPELINE_ID, &*PIPELINE_ENTRY)))
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

/// The entry id for an engine file named on the command line: the file stem with `_` as `-`
/// (`recent_turns.lua` → `recent-turns`), which is what the example engines declare as
/// `info.id`.
pub fn engine_id_from_path(path: &Path) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("engine")
        .replace('_', "-")
}

/// The smallest context window the host accepts, in tokens: a quarter goes to the output
/// reserve, and the rest must hold at least one real message.
pub const MIN_WINDOW: u64 = 256;

#[cfg(test)]
mod tests;
