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
                anyhow::bail!("no engine \"{id}\" is installed")
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
        anyhow::bail!("no engine \"{id}\" is installed");
    }
    if enabled {
        writeln!(out, "enabled {id}; it is now the context engine")?;
    } else {
        writeln!(out, "disabled {id}")?;
    }
    Ok(Outcome::Ok)
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
