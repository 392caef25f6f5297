//! `ctxhost new NAME --lang lua|rhai [--kind engine|hook]`: a single-file engine skeleton (or
//! a pipeline hook's) that passes `ctxhost check` and documents every lifecycle method (every
//! hook function), so an author starts from something sound.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::cli::Outcome;
use crate::cli::args::{Kind, Lang, NewArgs};

/// The Lua skeleton; `__ID__`, `__NAME__` and `__FILE__` are filled in.
const LUA_TEMPLATE: &str = include_str!("../templates/engine.lua");
/// The Rhai skeleton; same placeholders.
const RHAI_TEMPLATE: &str = include_str!("../templates/engine.rhai");
/// The Lua hook skeleton; same placeholders.
const LUA_HOOK_TEMPLATE: &str = include_str!("../templates/hook.lua");
/// The Rhai hook skeleton; same placeholders.
const RHAI_HOOK_TEMPLATE: &str = include_str!("../templates/hook.rhai");

pub(crate) fn run(args: NewArgs, out: &mut dyn Write) -> anyhow::Result<Outcome> {
    let file = target_file(&args.name, args.lang)?;
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_owned();
    anyhow::ensure!(
        stem.starts_with(|c: char| c.is_ascii_alphabetic())
            && stem
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
        "engine name {stem:?}: use letters, digits, `_` and `-`, starting with a letter"
    );
    let id = stem.replace('_', "-");
    let template = match (args.kind, args.lang) {
        (Kind::Engine, Lang::Lua) => LUA_TEMPLATE,
        (Kind::Engine, Lang::Rhai) => RHAI_TEMPLATE,
        (Kind::Hook, Lang::Lua) => LUA_HOOK_TEMPLATE,
        (Kind::Hook, Lang::Rhai) => RHAI_HOOK_TEMPLATE,
    };
    let text = template
        .replace("__ID__", &id)
        .replace("__NAME__", &display_name(&stem))
        .replace("__FILE__", &file.display().to_string());
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let mut f = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&file)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            anyhow::bail!("{} already exists; not overwriting it", file.display())
        }
        Err(e) => return Err(e).with_context(|| format!("create {}", file.display())),
    };
    f.write_all(text.as_bytes())
        .with_context(|| format!("write {}", file.display()))?;
    let what = match args.kind {
        Kind::Engine => "engine",
        Kind::Hook => "hook",
    };
    writeln!(out, "wrote {} ({what} id \"{id}\")", file.display())?;
    writeln!(out, "next: ctxhost check {}", file.display())?;
    if args.kind == Kind::Engine {
        writeln!(out, "      ctxhost watch {}", file.display())?;
    }
    Ok(Outcome::Ok)
}

/// `my_engine` → `my_engine.lua`; a name that already ends in the language's extension is
/// kept; another engine extension is an error.
fn target_file(name: &Path, lang: Lang) -> anyhow::Result<PathBuf> {
    let ext = name.extension().and_then(|e| e.to_str());
    match (ext, lang) {
        (Some("lua" | "luau"), Lang::Lua) | (Some("rhai"), Lang::Rhai) => Ok(name.to_path_buf()),
        (Some(e @ ("lua" | "luau" | "rhai")), _) => {
            anyhow::bail!(
                "{} is a .{e} file but --lang is {}",
                name.display(),
                extension(lang)
            )
        }
        _ => {
            let mut file = name.as_os_str().to_owned();
            file.push(".");
            file.push(extension(lang));
            Ok(PathBuf::from(file))
        }
    }
}

fn extension(lang: Lang) -> &'static str {
    match lang {
        Lang::Lua => "lua",
        Lang::Rhai => "rhai",
    }
}

/// `my_engine` → `My engine`.
fn display_name(stem: &str) -> String {
    let words = stem.replace(['_', '-'], " ");
    let mut chars = words.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_files_ids_and_titles() {
        assert_eq!(
            target_file(Path::new("my_engine"), Lang::Lua).unwrap(),
            PathBuf::from("my_engine.lua")
        );
        assert_eq!(
            target_file(Path::new("dir/x.rhai"), Lang::Rhai).unwrap(),
            PathBuf::from("dir/x.rhai")
        );
        assert!(target_file(Path::new("x.lua"), Lang::Rhai).is_err());
        assert_eq!(display_name("my_engine-two"), "My engine two");
    }
}
