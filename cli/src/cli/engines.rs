//! `ctxhost engines install|list|uninstall|enable|disable`: sharing engines as single files.

use std::io::Write;

use crate::cli::Outcome;
use crate::cli::args::{EnginesArgs, EnginesCommand};
use crate::install::{self, InstallOutcome};
use ctxhost::config::{Config, ConfigSource, discover, locate};

pub(crate) fn run(args: EnginesArgs, out: &mut dyn Write) -> anyhow::Result<Outcome> {
    let config = editable_config(args.config.as_deref())?;
    match args.command {
        EnginesCommand::Install { file, no_activate } => {
            match install::install(&config, &file, !no_activate)? {
                InstallOutcome::Installed { id, file, replaced } => {
                    if let Some(previous) = replaced {
                        writeln!(
                            out,
                            "replacing the installed {id} (was {})",
                            previous.display()
                        )?;
                    }
                    writeln!(out, "installed {id} as {}", file.display())?;
                    if !no_activate {
                        writeln!(out, "{id} is now the context engine")?;
                    }
                    Ok(Outcome::Ok)
                }
                InstallOutcome::Refused(report) => {
                    writeln!(out, "refused: {} is not sound", report.file.display())?;
                    for s in report.steps.iter().filter(|s| !s.ok) {
                        writeln!(out, "  {}: {}", s.step, s.detail)?;
                    }
                    Ok(Outcome::Problems)
                }
            }
        }
        EnginesCommand::List => {
            let entries = install::list(&config);
            if entries.is_empty() {
                writeln!(out, "no engines installed (the context engine is legacy)")?;
            }
            for e in entries {
                let mark = if e.active { "*" } else { " " };
                let state = if e.enabled { "enabled" } else { "disabled" };
                let path = e.path.map(|p| p.display().to_string()).unwrap_or_default();
                let missing = if e.file_exists { "" } else { " (file missing)" };
                writeln!(out, "{mark} {:<24} {state:<9} {path}{missing}", e.id)?;
            }
            Ok(Outcome::Ok)
        }
        EnginesCommand::Uninstall { id } => {
            if install::uninstall(&config, &id)? {
                writeln!(out, "uninstalled {id}")?;
                Ok(Outcome::Ok)
            } else {
                anyhow::bail!("{}", not_installed(&config, &id))
            }
        }
        EnginesCommand::Enable { id } => toggle(&config, &id, true, out),
        EnginesCommand::Disable { id } => toggle(&config, &id, false, out),
    }
}

fn toggle(
    config: &ctxhost::config::Config,
    id: &str,
    enabled: bool,
    out: &mut dyn Write,
) -> anyhow::Result<Outcome> {
    if !install::set_enabled(config, id, enabled)? {
        anyhow::bail!("{}", not_installed(config, id));
    }
    if enabled {
        writeln!(out, "enabled {id}; it is now the context engine")?;
    } else {
        writeln!(out, "disabled {id}")?;
    }
    Ok(Outcome::Ok)
}

/// "no engine … is installed", with the installed id the user most likely meant: entries are
/// named by id (`my-policy`), so a file name (`my_policy.rhai`, `my_policy_rhai`) or a typo
/// gets a did-you-mean.
fn not_installed(config: &ctxhost::config::Config, id: &str) -> String {
    let ids: Vec<String> = install::list(config).into_iter().map(|e| e.id).collect();
    let as_id = {
        let stem = ["_lua", "_luau", "_rhai", ".lua", ".luau", ".rhai"]
            .iter()
            .find_map(|ext| id.strip_suffix(ext))
            .unwrap_or(id);
        stem.replace('_', "-")
    };
    let dashed = id.replace('_', "-");
    let hint = ids
        .iter()
        .find(|i| **i == dashed || **i == as_id)
        .map(String::as_str)
        .or_else(|| ctxhost::contract::closest(id, ids.iter().map(String::as_str)))
        .map(|c| {
            format!(
                "; did you mean \"{c}\"? (entries are named by id: the file name with `_` as `-`)"
            )
        })
        .unwrap_or_default();
    format!("no engine \"{id}\" is installed{hint}")
}

/// The config the `engines` commands edit: like every command's, except that a named file
/// that does not exist yet is created rather than an error.
fn editable_config(explicit: Option<&std::path::Path>) -> anyhow::Result<Config> {
    match locate(explicit) {
        Some(
            source @ (ConfigSource::Flag(_)
            | ConfigSource::Env(_)
            | ConfigSource::DefaultLocation(_)),
        ) if source.path().is_some_and(|p| !p.exists()) => {
            let path = source
                .path()
                .map(std::path::Path::to_path_buf)
                .unwrap_or_default();
            Ok(Config {
                base_dir: path
                    .parent()
                    .map(std::path::Path::to_path_buf)
                    .unwrap_or_default(),
                source,
                ..Config::default()
            })
        }
        _ => Ok(discover(explicit)?),
    }
}
