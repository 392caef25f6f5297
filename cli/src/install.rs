//! Sharing engines as single files: install an engine file into the engines directory and the
//! config (after `check` passes), list, enable, disable and uninstall entries.
//!
//! The config file is edited as a document: the user's keys and values are kept; comments are
//! not (the file is rewritten as JSON, which is valid JSON5), so the previous version is kept
//! beside it as `<file>.bak`. Uninstalling or disabling the engine in the slot resets the slot
//! to `legacy`.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value, json};

use ctxhost::check::{CheckReport, check_engine};
use ctxhost::config::{Config, ConfigSource};
use ctxhost::engine::legacy::LEGACY_ID;
use ctxhost::error::{Error, Result};

/// An editable config file.
#[derive(Debug)]
pub struct ConfigDocument {
    path: PathBuf,
    root: Map<String, Value>,
}

/// One installed engine, for `engines list`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Installed {
    /// The entry id.
    pub id: String,
    /// Whether the entry is enabled.
    pub enabled: bool,
    /// Whether it is the engine in the slot.
    pub active: bool,
    /// Its file as configured.
    pub path: Option<PathBuf>,
    /// Whether the file exists.
    pub file_exists: bool,
}

/// What `install` did.
#[derive(Debug)]
pub enum InstallOutcome {
    /// Installed (and put in the slot when `activate`).
    Installed {
        /// The entry id (the engine's `info.id`).
        id: String,
        /// Where the file was copied.
        file: PathBuf,
    },
    /// `check` found the engine unsound; nothing was changed.
    Refused(Box<CheckReport>),
}

impl ConfigDocument {
    /// Opens the config file at `path`, or starts an empty one when it does not exist yet.
    pub fn open(path: &Path) -> Result<ConfigDocument> {
        let root = if path.exists() {
            let text =
                std::fs::read_to_string(path).map_err(|e| Error::io("read config", path, e))?;
            // Validate with the typed parser first, for its precise error messages.
            Config::parse(&text, &path.display().to_string())?;
            match json5::from_str::<Value>(&text) {
                Ok(Value::Object(m)) => m,
                Ok(_) => {
                    return Err(Error::Config {
                        place: path.display().to_string(),
                        message: "the config must be an object".into(),
                    });
                }
                Err(e) => {
                    return Err(Error::Config {
                        place: path.display().to_string(),
                        message: e.to_string(),
                    });
                }
            }
        } else {
            Map::new()
        };
        Ok(ConfigDocument {
            path: path.to_path_buf(),
            root,
        })
    }

    fn plugins(&mut self) -> &mut Map<String, Value> {
        object(self.root.entry("plugins").or_insert_with(|| json!({})))
    }

    fn entries(&mut self) -> &mut Map<String, Value> {
        object(self.plugins().entry("entries").or_insert_with(|| json!({})))
    }

    /// The engine id in the slot, if any.
    pub fn slot(&self) -> Option<String> {
        self.root
            .get("plugins")?
            .get("slots")?
            .get("contextEngine")?
            .as_str()
            .map(str::to_owned)
    }

    /// Puts `id` in the context-engine slot (`None`: back to `legacy`).
    pub fn set_slot(&mut self, id: Option<&str>) {
        let slots = object(self.plugins().entry("slots").or_insert_with(|| json!({})));
        slots.insert(
            "contextEngine".into(),
            Value::String(id.unwrap_or(LEGACY_ID).to_owned()),
        );
    }

    /// Adds or replaces an entry.
    pub fn set_entry(&mut self, id: &str, path: &Path, enabled: bool) {
        let entries = self.entries();
        let entry = object(entries.entry(id).or_insert_with(|| json!({})));
        entry.insert("enabled".into(), Value::Bool(enabled));
        entry.insert("path".into(), Value::String(path.display().to_string()));
    }

    /// Enables or disables an entry; false when there is no such entry. Disabling the engine in
    /// the slot resets the slot to `legacy`.
    pub fn set_enabled(&mut self, id: &str, enabled: bool) -> bool {
        let Some(entry) = self.entries().get_mut(id) else {
            return false;
        };
        object(entry).insert("enabled".into(), Value::Bool(enabled));
        if !enabled && self.slot().as_deref() == Some(id) {
            self.set_slot(None);
        }
        true
    }

    /// Removes an entry; returns its path. Removing the engine in the slot resets the slot.
    pub fn remove_entry(&mut self, id: &str) -> Option<Option<PathBuf>> {
        let removed = self.entries().remove(id)?;
        if self.slot().as_deref() == Some(id) {
            self.set_slot(None);
        }
        Some(
            removed
                .get("path")
                .and_then(Value::as_str)
                .map(PathBuf::from),
        )
    }

    /// Writes the document back (the previous file kept as `<file>.bak`), after checking that
    /// it still parses as a valid config.
    pub fn save(&self) -> Result<()> {
        let text = serde_json::to_string_pretty(&self.root).map_err(|e| Error::Config {
            place: self.path.display().to_string(),
            message: e.to_string(),
        })?;
        Config::parse(&text, &self.path.display().to_string())?;
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::io("create config directory", dir, e))?;
        }
        if self.path.exists() {
            let mut bak = self.path.as_os_str().to_owned();
            bak.push(".bak");
            std::fs::copy(&self.path, PathBuf::from(&bak))
                .map_err(|e| Error::io("back up config", &self.path, e))?;
        }
        let mut tmp = self.path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        std::fs::write(&tmp, text + "\n").map_err(|e| Error::io("write config", &tmp, e))?;
        std::fs::rename(&tmp, &self.path).map_err(|e| Error::io("replace config", &self.path, e))
    }
}

/// The value as an object, replacing anything else (a hand-edited `entries: null`) by `{}`.
fn object(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = json!({});
    }
    match v {
        Value::Object(m) => m,
        _ => unreachable!("the value was just made an object"),
    }
}

/// The config file that `engines` commands edit: the one in use, or the default location.
pub fn config_file(config: &Config) -> Result<PathBuf> {
    match &config.source {
        ConfigSource::Defaults => ctxhost::config::default_path().ok_or_else(|| Error::Config {
            place: "config".into(),
            message: "no config file given and no home directory for the default one".into(),
        }),
        other => Ok(other.path().map(Path::to_path_buf).unwrap_or_default()),
    }
}

/// Checks an engine file and, when it is sound, copies it into the engines directory, adds
/// its entry (id = its `info.id`) and, with `activate`, puts it in the slot.
pub fn install(config: &Config, file: &Path, activate: bool) -> Result<InstallOutcome> {
    let report = check_engine(file, config);
    if !report.sound {
        return Ok(InstallOutcome::Refused(Box::new(report)));
    }
    let config_path = config_file(config)?;
    let base = config_path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let dir = match &config.host.engines_dir {
        Some(d) if d.is_absolute() => d.clone(),
        Some(d) => base.join(d),
        None => base.join("engines"),
    };
    std::fs::create_dir_all(&dir).map_err(|e| Error::io("create engines directory", &dir, e))?;
    let name = file
        .file_name()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("engine.lua"));
    let target = dir.join(&name);
    std::fs::copy(file, &target).map_err(|e| Error::io("copy engine", &target, e))?;
    let relative = target
        .strip_prefix(&base)
        .map(Path::to_path_buf)
        .unwrap_or_else(|_| target.clone());
    let mut doc = ConfigDocument::open(&config_path)?;
    doc.set_entry(&report.engine, &relative, true);
    if activate {
        doc.set_slot(Some(&report.engine));
    }
    doc.save()?;
    Ok(InstallOutcome::Installed {
        id: report.engine.clone(),
        file: target,
    })
}

/// Every entry of the config, with whether it is active and whether its file exists.
pub fn list(config: &Config) -> Vec<Installed> {
    let slot = config.plugins.slots.context_engine.clone();
    config
        .plugins
        .entries
        .iter()
        .map(|(id, e)| Installed {
            id: id.clone(),
            enabled: e.enabled,
            active: slot.as_deref() == Some(id.as_str()) && e.enabled,
            file_exists: e.path.as_ref().is_some_and(|p| config.resolve(p).is_file()),
            path: e.path.clone(),
        })
        .collect()
}

/// Removes an entry (and its file when it lives in the engines directory); resets the slot if
/// it named the entry. False when there is no such entry.
pub fn uninstall(config: &Config, id: &str) -> Result<bool> {
    let path = config_file(config)?;
    let mut doc = ConfigDocument::open(&path)?;
    let Some(file) = doc.remove_entry(id) else {
        return Ok(false);
    };
    doc.save()?;
    if let Some(file) = file {
        let file = config.resolve(&file);
        if file.starts_with(config.engines_dir()) {
            std::fs::remove_file(&file).map_err(|e| Error::io("remove engine", &file, e))?;
        }
    }
    Ok(true)
}

/// Enables or disables an entry; false when there is no such entry.
pub fn set_enabled(config: &Config, id: &str, enabled: bool) -> Result<bool> {
    let path = config_file(config)?;
    let mut doc = ConfigDocument::open(&path)?;
    if !doc.set_enabled(id, enabled) {
        return Ok(false);
    }
    doc.save()?;
    Ok(true)
}
