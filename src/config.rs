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
#![doc = include_str!("../docs/configuration.md")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::LEGACY_ID;
pub use crate::contract::PIPELINE_ID;
use crate::contract::limits::{HostLimits, Isolation};
use crate::error::{Error, Result};
use crate::services::compaction::CompactionSettings;
use crate::services::tokens::Tokenizer;

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

/// What the host does when an engine fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FailurePolicy {
    /// Quarantine the engine and answer from `legacy` (default).
    #[default]
    Fallback,
    /// Return the error to the caller.
    Strict,
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
    /// When transcript appends are forced to disk: `entry` (default), `turn` or `none`.
    pub durability: crate::transcript::Durability,
    /// Where sessions are kept: `{kind: "jsonl"}` (default: files under the state
    /// directory), `{kind: "sqlite", path?}` or `{kind: "postgres", url, passwordEnv?}`.
    pub store: StoreSettings,
    /// Built-in compaction.
    pub compaction: CompactionSettings,
    /// Which summarizer writes compaction summaries: `{kind: "builtin"}` (default, offline)
    /// or `{kind: "llm", baseUrl, model, ...}` (an OpenAI-compatible endpoint).
    pub summarizer: crate::services::llm::SummarizerSettings,
    /// What `host.complete` may spend, per engine: `{timeoutMs, maxOutputTokens,
    /// maxCallsPerTurn, maxTokensPerDay}`. It asks the model `host.summarizer` names (`llm`,
    /// or the `serve` client's with `client`), or the embedder's.
    pub complete: crate::services::llm::ModelLimits,
    /// Script limits: per-call deadline and grace, memory, result caps, Rhai's operations.
    pub limits: HostLimits,
    /// How much engine time one turn may take, and what happens to an engine that keeps
    /// taking more.
    pub turn_budget: TurnBudget,
    /// File watching for hot reload.
    pub watch: WatchSettings,
    /// Where `ctxhost engines install` puts engine files; relative to the config file.
    /// Default `engines` beside the config file.
    pub engines_dir: Option<PathBuf>,
    /// Where engine VMs run: `thread` (default: a worker thread in this process; a call stuck
    /// in native code past deadline + grace is abandoned) or `process` (a child process per
    /// engine instance, killed at deadline + grace; see [`crate::engine::isolation`]).
    pub isolation: Isolation,
    /// The `pipeline` engine's hooks and their budget (`plugins.slots.contextEngine:
    /// "pipeline"`).
    pub pipeline: PipelineSettings,
    /// What `ctxhost serve` keeps open (`host.serve`).
    pub serve: ServeSettings,
}

/// `host.pipeline`: which hooks run, in which order, and what their contributions may cost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct PipelineSettings {
    /// Hook ids, each an entry under `plugins.entries`, in the order they run.
    pub hooks: Vec<String>,
    /// The share of the token budget all contributions together may take. Default 0.25.
    pub contribution_share: f64,
    /// Each hook's time limit per call, in ms. Default 5,000, never above the sandbox deadline.
    pub timeout_ms: u64,
    /// Per-hook time limits, by hook id, overriding `timeoutMs`.
    pub timeouts: BTreeMap<String, u64>,
}

impl Default for PipelineSettings {
    fn default() -> Self {
        PipelineSettings {
            hooks: Vec::new(),
            contribution_share: 0.25,
            timeout_ms: 5_000,
            timeouts: BTreeMap::new(),
        }
    }
}

/// `host.turnBudget`: the engine time (every lifecycle call of the configured engine, summed)
/// one turn may take. A per-call deadline stops a runaway call; this catches an engine that
/// stays under the deadline yet makes every turn slow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct TurnBudget {
    /// Engine time one turn may take, in ms. Default 1,000.
    pub engine_ms: u64,
    /// What an over-budget turn does: `report` (default: a warning and the turn marked slow)
    /// or `quarantine` (after `strikes` slow turns in a row the engine is quarantined with
    /// kind `Limit`, and `legacy` answers).
    pub on_exceed: SlowEnginePolicy,
    /// Slow turns in a row before `quarantine` acts. Default 3.
    pub strikes: u32,
}

impl Default for TurnBudget {
    fn default() -> Self {
        TurnBudget {
            engine_ms: 1_000,
            on_exceed: SlowEnginePolicy::Report,
            strikes: 3,
        }
    }
}

/// What the host does about an engine that exceeds its turn budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SlowEnginePolicy {
    /// Warn and mark the turn slow.
    #[default]
    Report,
    /// Quarantine the engine after repeated slow turns.
    Quarantine,
}

/// `host.watch`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct WatchSettings {
    /// Reload engines when their file changes (`ctxhost watch` always does). Default true.
    pub enabled: bool,
    /// Quiet time after the last change before a reload, in ms. Default 200.
    pub debounce_ms: u64,
}

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings {
            enabled: true,
            debounce_ms: 200,
        }
    }
}

/// `host.serve`: a gateway's memory follows the sessions in use, not every session ever seen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ServeSettings {
    /// A session no call reached for this long is released (its state saved, its engine
    /// instance disposed; the next call reopens it), in ms. Default 600,000 (ten minutes).
    pub idle_ms: u64,
    /// At most this many sessions open at once; opening one more releases the least recently
    /// used. Default 256.
    pub max_live: usize,
}

impl Default for ServeSettings {
    fn default() -> Self {
        ServeSettings {
            idle_ms: 600_000,
            max_live: 256,
        }
    }
}

impl Default for HostSettings {
    fn default() -> Self {
        HostSettings {
            failure_policy: FailurePolicy::Fallback,
            tokenizer: Tokenizer::Estimate,
            window: 32_000,
            durability: crate::transcript::Durability::default(),
            store: StoreSettings::default(),
            compaction: CompactionSettings::default(),
            summarizer: crate::services::llm::SummarizerSettings::default(),
            complete: crate::services::llm::ModelLimits::default(),
            limits: HostLimits::default(),
            turn_budget: TurnBudget::default(),
            watch: WatchSettings::default(),
            engines_dir: None,
            isolation: Isolation::Thread,
            pipeline: Default::default(),
            serve: ServeSettings::default(),
        }
    }
}

impl Config {
    /// Reads and parses a config file; relative engine paths resolve against its directory.
    pub fn load(path: &Path) -> Result<Config> {
        let text = read_config_text(path)?;
        let mut cfg = Config::parse(&text, &path.display().to_string())?;
        cfg.base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Ok(cfg)
    }

    /// Parses JSON5 text; `place` names the source in errors, which read
    /// `place:LINE:COL: message` and suggest the closest key for a misspelt one.
    pub fn parse(text: &str, place: &str) -> Result<Config> {
        check_nesting(text, place)?;
        let config: Config = json5::from_str(text).map_err(|e| {
            let place = match e.position() {
                Some(p) => format!("{place}:{}:{}", p.line + 1, p.column + 1),
                None => place.to_owned(),
            };
            let message = match e.code() {
                Some(code) => code.to_string(),
                None => explain_serde_message(&e.to_string()),
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

/// The largest config file read (4 MiB): configs are small, and a wrong path (a device, a log)
/// must not be read whole.
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// The deepest nesting of `{` and `[` a config may have. The JSON5 parser recurses per level,
/// so a deeper file would overflow the stack and abort the process instead of failing cleanly.
pub const MAX_CONFIG_DEPTH: usize = 64;

fn read_config_text(path: &Path) -> Result<String> {
    use std::io::Read;
    let too_big = || Error::Config {
        place: path.display().to_string(),
        message: format!("larger than {MAX_CONFIG_BYTES} bytes; is this the config file?"),
    };
    let file = std::fs::File::open(path).map_err(|e| Error::io("read config", path, e))?;
    if file.metadata().is_ok_and(|m| m.len() > MAX_CONFIG_BYTES) {
        return Err(too_big());
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("read config", path, e))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|e| Error::Config {
        place: path.display().to_string(),
        message: format!("not UTF-8 text: {e}"),
    })
}

/// Refuses JSON5 nested deeper than [`MAX_CONFIG_DEPTH`], naming where it gets too deep.
/// Strings and comments are skipped, so brackets inside them do not count.
fn check_nesting(text: &str, place: &str) -> Result<()> {
    let (mut depth, mut line, mut col) = (0usize, 1usize, 0usize);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        col += 1;
        match c {
            '\n' => {
                line += 1;
                col = 0;
            }
            '"' | '\'' => {
                while let Some(d) = chars.next() {
                    col += 1;
                    match d {
                        '\\' => {
                            chars.next();
                            col += 1;
                        }
                        '\n' => {
                            line += 1;
                            col = 0;
                        }
                        d if d == c => break,
                        _ => {}
                    }
                }
            }
            '/' if chars.peek() == Some(&'/') => {
                for d in chars.by_ref() {
                    if d == '\n' {
                        line += 1;
                        col = 0;
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut star = false;
                for d in chars.by_ref() {
                    if d == '\n' {
                        line += 1;
                        col = 0;
                    }
                    if star && d == '/' {
                        break;
                    }
                    star = d == '*';
                }
            }
            '{' | '[' => {
                depth += 1;
                if depth > MAX_CONFIG_DEPTH {
                    return Err(Error::Config {
                        place: format!("{place}:{line}:{col}"),
                        message: format!(
                            "nested deeper than {MAX_CONFIG_DEPTH} levels; a config is never this deep"
                        ),
                    });
                }
            }
            '}' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Turns serde's "unknown field `x`, expected one of `a`, `b`" into "unknown key `x` (did you
/// mean `a`?)", and drops the position json5 appends (the caller puts it in front).
fn explain_serde_message(raw: &str) -> String {
    let message = raw.rsplit_once(" at line ").map_or(raw, |(m, _)| m);
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message.to_owned();
    };
    let Some((key, expected)) = rest.split_once('`') else {
        return message.to_owned();
    };
    let candidates: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    match crate::contract::closest(key, candidates.iter().copied()) {
        Some(best) => format!("unknown key `{key}` (did you mean `{best}`?)"),
        None if !candidates.is_empty() => {
            format!(
                "unknown key `{key}`; known keys here: {}",
                candidates.join(", ")
            )
        }
        None => format!("unknown key `{key}`"),
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;

/// `host.store`: where sessions are kept (see [`crate::store`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum StoreSettings {
    /// Files under the state directory: `sessions/<id>/transcript.jsonl` and its state.
    #[default]
    Jsonl,
    /// One SQLite database file for every session of a state directory.
    Sqlite(SqliteSettings),
    /// A Postgres database shared by many `ctxhost serve` processes.
    Postgres(PostgresSettings),
}

/// `host.store` with `kind: "sqlite"`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct SqliteSettings {
    /// The database file, relative to the config file. Default `ctxhost.db` in the state
    /// directory.
    pub path: Option<PathBuf>,
}

/// `host.store` with `kind: "postgres"`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PostgresSettings {
    /// `postgres://user@host:port/db` or `host=/run/postgresql dbname=ctxhost`, without a
    /// password (it comes from `passwordEnv`).
    pub url: String,
    /// The environment variable holding the password. Without it, `PGPASSWORD` when set.
    #[serde(default)]
    pub password_env: Option<String>,
    /// The Postgres schema holding ctxhost's tables (created when missing). Default `public`.
    #[serde(default)]
    pub schema: Option<String>,
}
