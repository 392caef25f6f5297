//! Sharing engines as single files: install an engine file into the engines directory and the
//! config (after `check` passes), list, enable, disable and uninstall entries.
//!
//! The config file is edited in place as a JSON5 document: only the keys an edit touches change;
//! comments, layout and key order stay as the user wrote them (the previous version is kept
//! beside it as `<file>.bak`). Uninstalling or disabling the engine in the slot resets the slot
//! to `legacy`.

use std::path::{Path, PathBuf};

use jsonc_parser::ParseOptions;
use jsonc_parser::cst::{CstInputValue, CstObject, CstRootNode};
use serde::Serialize;

use ctxhost::config::{Config, ConfigSource};
use ctxhost::contract::LEGACY_ID;
use ctxhost::tools::check::{CheckReport, check_engine};
use ctxhost::{Error, Result};

/// An editable config file: a concrete syntax tree of the user's JSON5, so an edit changes
/// only the keys it touches and every comment, blank line and key order stays as written.
#[derive(Debug)]
pub struct ConfigDocument {
    path: PathBuf,
    root: CstRootNode,
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
        /// The path of the entry this one replaced, when the id was installed already.
        replaced: Option<PathBuf>,
    },
    /// `check` found the engine unsound; nothing was changed.
    Refused(Box<CheckReport>),
}

impl ConfigDocument {
    /// Opens the config file at `path`, or starts an empty one when it does not exist yet.
    pub fn open(path: &Path) -> Result<ConfigDocument> {
        let text = if path.exists() {
            let text =
                std::fs::read_to_string(path).map_err(|e| Error::io("read config", path, e))?;
            // Validate with the typed parser first, for its precise error messages.
            Config::parse(&text, &path.display().to_string())?;
            text
        } else {
            "{}\n".to_owned()
        };
        let root =
            CstRootNode::parse(&text, &ParseOptions::default()).map_err(|e| Error::Config {
                place: path.display().to_string(),
                message: e.to_string(),
            })?;
        if root.value().is_some_and(|v| v.as_object().is_none()) {
            return Err(Error::Config {
                place: path.display().to_string(),
                message: "the config must be an object".into(),
            });
        }
        Ok(ConfigDocument {
            path: path.to_path_buf(),
            root,
        })
    }

    fn plugins(&self) -> CstObject {
        self.root
            .object_value_or_set()
            .object_value_or_set("plugins")
    }

    fn entries(&self) -> CstObject {
        self.plugins().object_value_or_set("entries")
    }

    /// The engine id in the slot, if any.
    pub fn slot(&self) -> Option<String> {
        self.root
            .object_value()?
            .object_value("plugins")?
            .object_value("slots")?
            .get("contextEngine")?
            .value()?
            .as_string_lit()?
            .decoded_value()
            .ok()
    }

    /// The configured path of an entry, when the entry exists (and names one).
    pub fn entry_path(&self, id: &str) -> Option<Option<PathBuf>> {
        let entry = self
            .root
            .object_value()?
            .object_value("plugins")?
            .object_value("entries")?
            .get(id)?;
        Some(
            entry
                .value()
                .and_then(|v| v.as_object())
                .and_then(|o| o.get("path"))
                .and_then(|p| p.value())
                .and_then(|v| v.as_string_lit())
                .and_then(|s| s.decoded_value().ok())
                .map(PathBuf::from),
        )
    }

    /// Puts `id` in the context-engine slot (`None`: back to `legacy`).
    pub fn set_slot(&mut self, id: Option<&str>) {
        let slots = self.plugins().object_value_or_set("slots");
        set(&slots, "contextEngine", string(id.unwrap_or(LEGACY_ID)));
    }

    /// Adds or replaces an entry, keeping any other keys (its `config`) it already has.
    pub fn set_entry(&mut self, id: &str, path: &Path, enabled: bool) {
        let entry = self.entries().object_value_or_set(id);
        set(&entry, "enabled", CstInputValue::Bool(enabled));
        set(&entry, "path", string(&path.display().to_string()));
    }

    /// Enables or disables an entry; false when there is no such entry. Disabling the engine in
    /// the slot resets the slot to `legacy`.
    pub fn set_enabled(&mut self, id: &str, enabled: bool) -> bool {
        if self.entry_path(id).is_none() {
            return false;
        }
        let entry = self.entries().object_value_or_set(id);
        set(&entry, "enabled", CstInputValue::Bool(enabled));
        if !enabled && self.slot().as_deref() == Some(id) {
            self.set_slot(None);
        }
        true
    }

    /// Removes an entry; returns its path. Removing the engine in the slot resets the slot.
    pub fn remove_entry(&mut self, id: &str) -> Option<Option<PathBuf>> {
        let path = self.entry_path(id)?;
        if let Some(prop) = self.entries().get(id) {
            prop.remove();
        }
        if self.slot().as_deref() == Some(id) {
            self.set_slot(None);
        }
        Some(path)
    }

    /// Writes the document back (the previous file kept as `<file>.bak`), after checking that
    /// it still parses as a valid config.
    pub fn save(&self) -> Result<()> {
        let mut text = self.root.to_string();
        if !text.ends_with('\n') {
            text.push('\n');
        }
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
        std::fs::write(&tmp, text).map_err(|e| Error::io("write config", &tmp, e))?;
        std::fs::rename(&tmp, &self.path).map_err(|e| Error::io("replace config", &self.path, e))
    }
}

/// Sets `key` of `object` to `value`, in place when the key exists (its comments stay).
fn set(object: &CstObject, key: &str, value: CstInputValue) {
    match object.get(key) {
        Some(prop) => prop.set_value(value),
        None => {
            object.append(key, value);
        }
    }
}

fn string(s: &str) -> CstInputValue {
    CstInputValue::String(s.to_owned())
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
    let replaced = doc
        .entry_path(&report.engine)
        .map(Option::unwrap_or_default);
    doc.set_entry(&report.engine, &relative, true);
    if activate {
        doc.set_slot(Some(&report.engine));
    }
    doc.save()?;
    Ok(InstallOutcome::Installed {
        id: report.engine.clone(),
        file: target,
        replaced,
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

/// Enables an entry and puts it in the slot, or disables it (resetting the slot when it held
/// the entry); false when there is no such entry.
pub fn set_enabled(config: &Config, id: &str, enabled: bool) -> Result<bool> {
    let path = config_file(config)?;
    let mut doc = ConfigDocument::open(&path)?;
    if !doc.set_enabled(id, enabled) {
        return Ok(false);
    }
    if enabled {
        doc.set_slot(Some(id));
    }
    doc.save()?;
    Ok(true)
}
