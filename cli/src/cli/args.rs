//! What the user typed, parsed by clap; no I/O here.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use ctxhost::services::tokens::Tokenizer;

/// ctxhost: host scriptable context engines and replay conversations through them.
#[derive(Debug, Parser)]
#[command(name = "ctxhost", version, about)]
pub struct Args {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// ctxhost's subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay a recorded conversation turn by turn and show what the model would see.
    Replay(ReplayArgs),
    /// Load, validate and exercise an engine file; exit 0 only for a sound engine.
    Check(CheckArgs),
    /// Replay through an engine on every save of its file and show what changed, turn by turn.
    Watch(WatchArgs),
    /// Write a single-file engine skeleton (Lua or Rhai) that passes `check`.
    New(NewArgs),
    /// Which engine is active and why, whether it can run, and the host's settings.
    Doctor(DoctorArgs),
    /// Install, list, enable, disable and uninstall single-file engines.
    Engines(EnginesArgs),
    /// Serve an engine to OpenClaw: JSON-RPC 2.0 over stdin/stdout, one JSON value per line.
    Serve(ServeArgs),
    /// Replay transcripts through several engines and windows; compare cost, cache reuse,
    /// re-references and time side by side, with baselines and gates for CI.
    Compare(crate::cli::compare::CompareArgs),
    /// Back up the session store, or copy a JSONL state directory into another backend.
    Store(StoreArgs),
}

/// `ctxhost store`.
#[derive(Debug, clap::Args)]
pub struct StoreArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: StoreCommand,
}

/// `ctxhost store` subcommands.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Write a consistent copy of every session to DEST while they may be served (SQLite:
    /// `VACUUM INTO`; JSONL: a copy of the state directory's sessions).
    Backup {
        /// Where the copy goes (a file for SQLite, a directory for JSONL); must not exist.
        dest: PathBuf,
        /// The config file naming the store (`host.store`; default: `$CTXHOST_CONFIG`, else
        /// `~/.config/ctxhost/config.json5`).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The state directory (default: the one `serve` uses).
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
    /// Copy every session of a JSONL state directory into another backend, with its ids,
    /// state and turns; verified by counts and SHA-256 digests; safe to run again.
    Migrate {
        /// The state directory to copy from (its `sessions/` directory).
        #[arg(long, value_name = "DIR")]
        from: PathBuf,
        /// Where to: `sqlite:PATH` or `postgres:URL`.
        #[arg(long, value_name = "TARGET")]
        to: String,
    },
}

/// `ctxhost serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Speak over stdin/stdout (the only transport).
    #[arg(long)]
    pub stdio: bool,
    /// A JSON5 config file (default: `$CTXHOST_CONFIG`, else `~/.config/ctxhost/config.json5`);
    /// `initialize` may name another.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The engine file (.lua, .luau, .rhai); `initialize` may name another.
    #[arg(long, value_name = "FILE")]
    pub engine: Option<PathBuf>,
    /// Where sessions are kept between client processes (default: `$CTXHOST_STATE_DIR`, else
    /// `$XDG_STATE_HOME/ctxhost`, else `~/.local/state/ctxhost`).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// The longest request line accepted, in bytes (default 64 MiB); longer lines are refused.
    #[arg(long, value_name = "BYTES")]
    pub max_line_bytes: Option<usize>,
    /// Where engine VMs run: `thread`, or `process` (a child process per session, killed at
    /// deadline + grace); default: the config's `host.isolation`, else thread.
    #[arg(long, value_name = "thread|process")]
    pub isolation: Option<ctxhost::contract::limits::Isolation>,
}

/// `ctxhost check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The engine file (.lua, .luau, .rhai).
    pub file: PathBuf,
    /// A JSON5 config file whose `host` settings (limits, tokenizer) apply.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Drive a real transcript (any format `replay` reads) instead of the synthetic session.
    #[arg(long, value_name = "FILE")]
    pub transcript: Option<PathBuf>,
    /// Run the engine in a child process (`process`) or on a thread (`thread`); default: the
    /// config's `host.isolation`.
    #[arg(long, value_name = "thread|process")]
    pub isolation: Option<ctxhost::contract::limits::Isolation>,
}

/// The host settings `replay` and `watch` take from the command line, over the config's.
#[derive(Debug, clap::Args)]
pub struct HostArgs {
    /// A JSON5 config file (contract §10 shape).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The model's context window in tokens (default: the config's, else 32,000).
    #[arg(long, value_name = "TOKENS", allow_negative_numbers = true, value_parser = window_tokens)]
    pub window: Option<u64>,
    /// How tokens are counted (default: the config's, else estimate).
    #[arg(long, value_name = "estimate|o200k|cl100k")]
    pub tokenizer: Option<Tokenizer>,
    /// Where engine VMs run: `thread`, or `process` (a child process per session, killed at
    /// deadline + grace); default: the config's `host.isolation`, else thread.
    #[arg(long, value_name = "thread|process")]
    pub isolation: Option<ctxhost::contract::limits::Isolation>,
}

/// `ctxhost replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The transcript (pi/OpenClaw, Claude Code, Codex rollout, Chat Completions arrays or
    /// SWE-agent .traj; detected automatically). Default: the bundled demo session.
    pub transcript: Option<PathBuf>,
    /// An engine file (.lua, .luau, .rhai) to use instead of the configured one.
    #[arg(long, value_name = "FILE")]
    pub engine: Option<PathBuf>,
    /// `--config`, `--window`, `--tokenizer`, `--isolation`.
    #[command(flatten)]
    pub host: HostArgs,
    /// One JSON object per line per turn, then a summary line.
    #[arg(long)]
    pub json: bool,
    /// Where the replayed sessions' transcripts go (default: a temporary directory, removed at
    /// exit unless `--keep`).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Keep the temporary directory of the replayed sessions' transcripts (and print its path).
    #[arg(long, conflicts_with = "out")]
    pub keep: bool,
    /// Return the engine's first error instead of falling back to legacy.
    #[arg(long)]
    pub strict: bool,
    /// Also write a self-contained HTML report (token chart, per-turn details) to this file.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Print only these turns (`5`, `3..7`, `12..`) and the assembled context of every model
    /// call of each: the whole systemPromptAddition and engine-made messages, each message's
    /// index, role, origin, tokens and first line, and what changed against the previous call.
    /// With `--json`, those turns' calls carry their `context`.
    #[arg(long, value_name = "TURN[..TURN]", value_parser = parse_turns)]
    pub show: Option<TurnRange>,
    /// With `--show`: print the whole turn table too, not only the turns shown.
    #[arg(long, requires = "show")]
    pub table: bool,
    /// With `--show`: print the systemPromptAddition and engine-made messages whole (default:
    /// cut after 40 lines of 300 characters).
    #[arg(long, requires = "show")]
    pub full: bool,
    /// With `--json`: every model call carries its `context` (as `--show` for all turns).
    #[arg(long, requires = "json")]
    pub contexts: bool,
}

/// Turns to show: `first..=last` (1-based; `last` open when `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TurnRange {
    /// The first turn shown.
    pub first: u64,
    /// The last turn shown (`None`: to the end).
    pub last: Option<u64>,
}

impl TurnRange {
    /// Whether turn `n` is in the range.
    pub fn contains(self, n: u64) -> bool {
        n >= self.first && self.last.is_none_or(|l| n <= l)
    }
}

/// `5`, `3..7` (both included) or `12..`.
fn parse_turns(s: &str) -> Result<TurnRange, String> {
    let number = |t: &str| -> Result<u64, String> {
        match t.trim().parse::<u64>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(format!(
                "`{t}` is not a turn number (turns count from 1; write 5, 3..7 or 12..)"
            )),
        }
    };
    let range = match s.split_once("..") {
        None => {
            let n = number(s)?;
            TurnRange {
                first: n,
                last: Some(n),
            }
        }
        Some((a, b)) => {
            let b = b.strip_prefix('=').unwrap_or(b);
            TurnRange {
                first: number(a)?,
                last: if b.trim().is_empty() {
                    None
                } else {
                    Some(number(b)?)
                },
            }
        }
    };
    if range.last.is_some_and(|l| l < range.first) {
        return Err(format!("`{s}` ends before it starts"));
    }
    Ok(range)
}

/// `ctxhost doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// The config file (default: `$CTXHOST_CONFIG`, else `~/.config/ctxhost/config.json5`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the diagnosis as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `ctxhost engines`.
#[derive(Debug, clap::Args)]
pub struct EnginesArgs {
    /// The config file to read and edit (default: `$CTXHOST_CONFIG`, else
    /// `~/.config/ctxhost/config.json5`).
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: EnginesCommand,
}

/// `ctxhost engines` subcommands.
#[derive(Debug, Subcommand)]
pub enum EnginesCommand {
    /// Check an engine file and, when sound, copy it into the engines directory, add its entry
    /// and make it the context engine.
    Install {
        /// The engine file.
        file: PathBuf,
        /// Add the entry without putting it in the slot.
        #[arg(long)]
        no_activate: bool,
    },
    /// List installed engines (`*` marks the one in the slot).
    List,
    /// Remove an engine's entry (and its installed file); the slot falls back to legacy.
    Uninstall {
        /// The entry id.
        id: String,
    },
    /// Enable an entry and make it the context engine (`use` is the same).
    #[command(alias = "use")]
    Enable {
        /// The entry id.
        id: String,
    },
    /// Disable an entry; disabling the engine in the slot resets the slot to legacy.
    Disable {
        /// The entry id.
        id: String,
    },
}

/// `ctxhost watch`.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// The engine file (.lua, .luau, .rhai) to reload on every save, or `pipeline`: every hook
    /// file of the pipeline `--config` composes, a save reloading that hook alone.
    pub engine: PathBuf,
    /// The transcript to replay (any format `replay` reads). Default: the bundled demo session.
    pub transcript: Option<PathBuf>,
    /// `--config`, `--window`, `--tokenizer`, `--isolation`.
    #[command(flatten)]
    pub host: HostArgs,
    /// Quiet time after the last write before reloading, in ms (default: the config's
    /// `host.watch.debounceMs`, else 200).
    #[arg(long, value_name = "MS")]
    pub debounce_ms: Option<u64>,
    /// Stop after this many replays (for scripts and tests); default: run until interrupted.
    #[arg(long, value_name = "N")]
    pub max_runs: Option<u32>,
}

/// `ctxhost new`.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The engine's name: `my_engine` writes `my_engine.lua` (or `.rhai`) with id `my-engine`;
    /// a directory may come first.
    pub name: PathBuf,
    /// The script language.
    #[arg(long, value_enum, default_value = "lua")]
    pub lang: Lang,
    /// What to write: a whole engine, or a hook for the `pipeline` engine.
    #[arg(long, value_enum, default_value = "engine")]
    pub kind: Kind,
}

/// What `ctxhost new` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// A single-file context engine (every lifecycle method).
    Engine,
    /// A hook the `pipeline` engine composes with others (`collect`, `prune`, ...).
    Hook,
}

/// The languages an engine can be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Luau (`.lua`).
    Lua,
    /// Rhai (`.rhai`).
    Rhai,
}

/// `--window`: a whole number of tokens, at least the smallest window that holds the output
/// reserve and a message (clap's own message for `-5` would suggest `-- -5`, which is wrong).
pub(crate) fn window_tokens(text: &str) -> Result<u64, String> {
    let n: i128 = text
        .trim()
        .parse()
        .map_err(|_| format!("must be a positive number of tokens, not {text:?}"))?;
    if n <= 0 {
        return Err(format!("must be a positive number of tokens, not {n}"));
    }
    let n = u64::try_from(n).map_err(|_| format!("{n} tokens is more than any model has"))?;
    if n < ctxhost::config::MIN_WINDOW {
        return Err(format!(
            "{n} tokens cannot hold the output reserve and one message; the smallest window is {}",
            ctxhost::config::MIN_WINDOW
        ));
    }
    Ok(n)
}
