//! `ctxhost store`: what the session store holds, copied out (`backup`) or into another
//! backend (`migrate`).

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};

use crate::cli::Outcome;
use crate::cli::args::{StoreArgs, StoreCommand};
use ctxhost::config::discover;
use ctxhost::serve::state;
use ctxhost::store::jsonl::JsonlBackend;
use ctxhost::store::sqlite::SqliteBackend;
use ctxhost::store::{Backend, messages_digest};
use ctxhost::transcript::Durability;

pub(crate) fn run(args: StoreArgs, out: &mut dyn Write) -> anyhow::Result<Outcome> {
    match args.command {
        StoreCommand::Backup {
            dest,
            config,
            state_dir,
        } => backup(&dest, config.as_deref(), state_dir, out),
        StoreCommand::Migrate { from, to } => migrate(&from, &to, out),
    }
}

/// The state directory of `--state-dir`, else the one `serve` uses by default.
fn state_dir_or_default(dir: Option<std::path::PathBuf>) -> anyhow::Result<std::path::PathBuf> {
    match dir {
        Some(d) => Ok(d),
        None => state::default_state_dir()
            .context("no state directory: pass --state-dir, or set CTXHOST_STATE_DIR or HOME"),
    }
}

fn backup(
    dest: &Path,
    config: Option<&Path>,
    state_dir: Option<std::path::PathBuf>,
    out: &mut dyn Write,
) -> anyhow::Result<Outcome> {
    let config = discover(config)?;
    let state_dir = state_dir_or_default(state_dir)?;
    let backend = ctxhost::store::open_backend(&config, &state_dir)?;
    let sessions = backend.sessions()?.len();
    backend
        .backup(dest)
        .with_context(|| format!("back up {} to {}", backend.location(), dest.display()))?;
    writeln!(
        out,
        "backed up {} ({}, {sessions} sessions) to {}",
        backend.location(),
        backend.kind(),
        dest.display()
    )?;
    Ok(Outcome::Ok)
}

/// The backend `--to` names: `sqlite:PATH` or `postgres:URL`.
fn target(to: &str) -> anyhow::Result<Arc<dyn Backend>> {
    if let Some(path) = to.strip_prefix("sqlite:") {
        anyhow::ensure!(
            !path.is_empty(),
            "--to sqlite: needs a database file after the colon"
        );
        return Ok(Arc::new(SqliteBackend::open(
            Path::new(path),
            Durability::Entry,
        )?));
    }
    if to.starts_with("postgres:") || to.starts_with("postgresql:") {
        // The whole argument is the URL; the password comes from PGPASSWORD.
        let options = ctxhost::store::postgres::PgOptions::new(to);
        return Ok(Arc::new(ctxhost::store::postgres::PgBackend::connect(
            options,
        )?));
    }
    bail!("--to {to}: expected sqlite:PATH or postgres:URL")
}

/// Copies every session of the JSONL state directory `from` into `to` with its ids, state and
/// turns (`Backend::import`), then reads each back and compares counts and digests. A session
/// already copied is left alone, so a run cut short is finished by running it again.
fn migrate(from: &Path, to: &str, out: &mut dyn Write) -> anyhow::Result<Outcome> {
    anyhow::ensure!(
        from.join("sessions").is_dir(),
        "--from {}: no sessions/ directory there (expected a ctxhost state directory)",
        from.display()
    );
    let source = JsonlBackend::new(from, Durability::Entry);
    let target = target(to)?;
    let listed = source.sessions()?;
    let (mut copied, mut present, mut messages) = (0usize, 0usize, 0u64);
    for s in &listed {
        let opened = source
            .open(&s.id, "")
            .with_context(|| format!("read session {:?}", s.id))?;
        let meta = opened.store.meta();
        let done = target
            .import(&s.id, &opened.messages, opened.state.as_ref(), &meta)
            .with_context(|| format!("copy session {:?}", s.id))?;
        let back = target
            .open(&s.id, "")
            .with_context(|| format!("read back session {:?}", s.id))?;
        let digest = messages_digest(&opened.messages);
        anyhow::ensure!(
            back.messages.len() == opened.messages.len()
                && messages_digest(&back.messages) == digest
                && back.state == opened.state,
            "session {:?}: the copy differs from its source ({} messages copied, {} read back); \
             the source is unchanged",
            s.id,
            opened.messages.len(),
            back.messages.len()
        );
        messages += opened.messages.len() as u64;
        if done {
            copied += 1;
        } else {
            present += 1;
        }
        writeln!(
            out,
            "{} {:?}: {} messages, sha256 {}",
            if done { "copied " } else { "present" },
            s.id,
            opened.messages.len(),
            &digest[..16]
        )?;
    }
    writeln!(
        out,
        "{} sessions ({messages} messages) in {}: {copied} copied, {present} already there; \
         counts and SHA-256 digests match the source",
        listed.len(),
        target.location()
    )?;
    Ok(Outcome::Ok)
}
