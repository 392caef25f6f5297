//! `ctxhost watch ENGINE [TRANSCRIPT]`: the engine author's loop. Replay once, then on every
//! save reload the engine (keeping the old one when the new one does not load) and replay
//! again, printing per turn what changed against the previous run. `ctxhost watch pipeline`
//! follows every hook file of the pipeline `--config` composes instead: a save reloads that
//! hook alone, and the other hooks keep their loaded version.

use std::collections::BTreeMap;
use std::io::Write;

use crate::report::group;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::cli::Outcome;
use crate::cli::args::WatchArgs;
use ctxhost::engine::pipeline::PIPELINE_ID;
use ctxhost::runtime::Host;
use ctxhost::runtime::reload::{EngineWatcher, ReloadOutcome};
use ctxhost::tools::replay::{ReplayOptions, ReplaySummary, TurnReport, replay};
use ctxhost::tools::status::StatusFile;
use ctxhost::transcript::Durability;
use ctxhost::transcript::{Import, import};

pub(crate) fn run(args: WatchArgs, out: &mut dyn Write) -> anyhow::Result<Outcome> {
    // `pipeline` (when no such file exists) is the hook pipeline the config composes.
    let pipeline = !args.engine.is_file() && args.engine.as_os_str() == PIPELINE_ID;
    anyhow::ensure!(
        pipeline || args.engine.is_file(),
        "no engine file at {} (or `pipeline`, for the hook pipeline --config composes)",
        args.engine.display()
    );
    anyhow::ensure!(args.max_runs != Some(0), "--max-runs must be at least 1");
    let engine = (!pipeline).then_some(args.engine.as_path());
    let mut config = super::replay::host_config(&args.host, engine)?;
    anyhow::ensure!(
        !pipeline || config.plugins.slots.context_engine.as_deref() == Some(PIPELINE_ID),
        "`watch pipeline` needs a --config whose plugins.slots.contextEngine is \"pipeline\""
    );
    // Every run replays into a scratch directory that is removed: nothing there needs fsync.
    config.host.durability = Durability::None;
    let (window, tokenizer) = (config.host.window, config.host.tokenizer);
    let transcript = args
        .transcript
        .clone()
        .unwrap_or_else(super::replay::demo_transcript);
    let imported = import(&transcript)?;
    let debounce = Duration::from_millis(args.debounce_ms.unwrap_or(config.host.watch.debounce_ms));
    // Removed when the command ends, by any path: a normal end, an error, or Ctrl-C below.
    let scratch = tempfile::Builder::new()
        .prefix("ctxhost-watch-")
        .tempdir()
        .context("create a temporary directory for the replayed sessions")?;
    let out_dir = scratch.path().to_path_buf();
    let opts = ReplayOptions {
        out_dir: out_dir.clone(),
        concurrency: std::thread::available_parallelism().map_or(2, |n| n.get()),
        contexts: false,
    };
    let host = Arc::new(Host::new(config)?);
    // Published for `ctxhost doctor`, which runs in another process (abandoned workers are
    // counted per process); removed when the watch ends. No state directory: nothing published.
    let _status = ctxhost::serve::state::default_state_dir()
        .and_then(|dir| StatusFile::publish(&dir, "watch"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    let result = runtime.block_on(async {
        // Watch before the first run, so a save during it is not missed.
        let mut watcher = EngineWatcher::for_host(Arc::clone(&host), debounce)?;
        let watched = watcher
            .paths()
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        writeln!(
            out,
            "watching {watched} (debounce {} ms): replaying {} at {} tokens ({tokenizer}) on every save",
            debounce.as_millis(),
            transcript.display(),
            group(window),
        )?;
        let mut runs = 1u32;
        let mut last = run_once(&host, &transcript, &imported, &opts, runs, out).await?;
        let mut previous = last.as_ref().map(|(reports, _)| reports.clone());
        loop {
            if args.max_runs.is_some_and(|max| runs >= max) {
                break;
            }
            writeln!(out, "waiting for changes to {watched}")?;
            out.flush()?;
            let first = tokio::select! {
                outcome = watcher.next_outcome() => outcome,
                // Ctrl-C ends the watch like the end of the stream: the scratch folder goes.
                _ = tokio::signal::ctrl_c() => None,
            };
            let Some(first) = first else {
                break;
            };
            // Saves that landed while we replayed: report each, replay once.
            let mut reloaded = report_outcome(out, &host, &first)?;
            while let Some(more) = watcher.try_next_outcome() {
                reloaded |= report_outcome(out, &host, &more)?;
            }
            if !reloaded {
                continue;
            }
            runs += 1;
            last = run_once(&host, &transcript, &imported, &opts, runs, out).await?;
            if let (Some(before), Some((after, _))) = (&previous, &last) {
                write_diff(out, before, after)?;
            }
            if let Some((reports, _)) = &last {
                previous = Some(reports.clone());
            }
        }
        anyhow::Ok(last)
    });
    drop(scratch);
    Ok(match result? {
        Some((_, s)) if s.quarantine.is_none() && s.over_budget_turns == 0 => Outcome::Ok,
        _ => Outcome::Problems,
    })
}

/// One replay; a replay that fails (a host fault, not an engine error) is reported and the
/// watch goes on.
async fn run_once(
    host: &Arc<Host>,
    transcript: &Path,
    imported: &Import,
    opts: &ReplayOptions,
    run: u32,
    out: &mut dyn Write,
) -> anyhow::Result<Option<(Vec<TurnReport>, ReplaySummary)>> {
    let generation = host.engine_cell().number();
    let mut reports = Vec::new();
    let result = replay(Arc::clone(host), transcript, imported.clone(), opts, |t| {
        reports.push(t.clone())
    })
    .await;
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            writeln!(out, "run {run} (generation {generation}) failed: {e}")?;
            return Ok(None);
        }
    };
    writeln!(
        out,
        "run {run} (generation {generation}): {}, {}, {}, max {} assembled tokens, {} over budget, {} ms",
        turns(summary.turns),
        super::replay::plural(summary.compactions, "compaction", "compactions"),
        super::replay::plural(summary.fallbacks, "fallback", "fallbacks"),
        group(summary.max_assembled_tokens),
        summary.over_budget_turns,
        summary.wall_ms
    )?;
    if let Some(q) = &summary.quarantine {
        writeln!(out, "  engine error: {}", q.error)?;
    }
    if let Ok(files) = host.hook_files() {
        let hooks: Vec<String> = files
            .iter()
            .map(|(id, _)| {
                let generation = host.hook_generation(id).unwrap_or_default();
                format!("{id} generation {generation}")
            })
            .collect();
        writeln!(out, "  hooks: {}", hooks.join(", "))?;
    }
    super::replay::write_times(out, "  ", &summary)?;
    out.flush()?;
    Ok(Some((reports, summary)))
}

/// Prints one reload outcome; true when a new generation (of the engine, or of one hook) is
/// active.
fn report_outcome(out: &mut dyn Write, host: &Host, o: &ReloadOutcome) -> anyhow::Result<bool> {
    match &o.result {
        Ok(generation) => {
            let reloaded = match &o.hook {
                Some(hook) => format!("reloaded hook {hook}"),
                None => "reloaded".to_owned(),
            };
            writeln!(
                out,
                "{reloaded}: generation {generation} active {} ms after the save ({} ms after the debounce)",
                o.since_change().as_millis(),
                o.after_debounce().as_millis()
            )?;
            Ok(true)
        }
        Err(e) => {
            let serving = match &o.hook {
                Some(hook) => host.hook_generation(hook).unwrap_or_default(),
                None => host.engine_cell().number(),
            };
            writeln!(
                out,
                "reload refused{}, generation {serving} keeps serving: {e}",
                match &o.hook {
                    Some(hook) => format!(" for hook {hook}"),
                    None => String::new(),
                }
            )?;
            Ok(false)
        }
    }
}

/// Per turn, what changed between two runs; unchanged turns in one line.
fn write_diff(
    out: &mut dyn Write,
    before: &[TurnReport],
    after: &[TurnReport],
) -> anyhow::Result<()> {
    let multi = after
        .iter()
        .chain(before)
        .any(|t| t.session != after.first().map_or("", |f| f.session.as_str()));
    let key = |t: &TurnReport| (t.session.clone(), t.turn);
    let old: BTreeMap<_, &TurnReport> = before.iter().map(|t| (key(t), t)).collect();
    let mut unchanged: Vec<&TurnReport> = Vec::new();
    // Turns the engine no longer answers: legacy's numbers say nothing about the edit, so one
    // line for all of them.
    let mut falling_back: Vec<&TurnReport> = Vec::new();
    for t in after {
        let label = if multi {
            format!("{} turn {}", t.session, t.turn)
        } else {
            format!("turn {:>4}", t.turn)
        };
        let Some(o) = old.get(&key(t)) else {
            writeln!(out, "  {label}: new")?;
            continue;
        };
        let changes = turn_changes(o, t);
        if t.fallback && !o.fallback {
            falling_back.push(t);
        } else if changes.is_empty() {
            unchanged.push(t);
        } else {
            writeln!(out, "  {label}: {}", changes.join("; "))?;
        }
    }
    let new_keys: std::collections::BTreeSet<_> = after.iter().map(key).collect();
    let missing = before
        .iter()
        .filter(|t| !new_keys.contains(&key(t)))
        .count();
    if missing > 0 {
        writeln!(
            out,
            "  {} of the previous run {} missing",
            turns(missing as u64),
            if missing == 1 { "is" } else { "are" }
        )?;
    }
    if !falling_back.is_empty() {
        let verb = if falling_back.len() == 1 {
            "now falls"
        } else {
            "now fall"
        };
        if multi {
            writeln!(
                out,
                "  {} {verb} back to legacy",
                turns(falling_back.len() as u64)
            )?;
        } else {
            let numbers: Vec<u64> = falling_back.iter().map(|t| t.turn).collect();
            writeln!(
                out,
                "  {} {verb} back to legacy ({})",
                turns(falling_back.len() as u64),
                ranges(&numbers)
            )?;
        }
    }
    if unchanged.len() == after.len() && after.len() != 1 {
        writeln!(out, "  all {} turns unchanged", after.len())?;
    } else if !unchanged.is_empty() {
        if multi {
            writeln!(out, "  {} unchanged", turns(unchanged.len() as u64))?;
        } else {
            let numbers: Vec<u64> = unchanged.iter().map(|t| t.turn).collect();
            writeln!(
                out,
                "  {} unchanged ({})",
                turns(unchanged.len() as u64),
                ranges(&numbers)
            )?;
        }
    }
    out.flush()?;
    Ok(())
}

fn turns(n: u64) -> String {
    super::replay::plural(n, "turn", "turns")
}

/// What differs in one turn: assembled tokens, messages, compactions, fallback.
fn turn_changes(o: &TurnReport, t: &TurnReport) -> Vec<String> {
    let mut c = Vec::new();
    if o.assembled_tokens != t.assembled_tokens {
        let delta = t.assembled_tokens as i128 - o.assembled_tokens as i128;
        c.push(format!(
            "tokens {} → {} ({}{})",
            group(o.assembled_tokens),
            group(t.assembled_tokens),
            if delta > 0 { "+" } else { "-" },
            group(delta.unsigned_abs() as u64)
        ));
    }
    if o.assembled_messages != t.assembled_messages {
        c.push(format!(
            "messages {} → {}",
            o.assembled_messages, t.assembled_messages
        ));
    }
    if o.compactions != t.compactions {
        c.push(format!("compactions {} → {}", o.compactions, t.compactions));
    }
    if o.fallback != t.fallback {
        c.push(if t.fallback {
            "now falls back to legacy".to_owned()
        } else {
            "no longer falls back".to_owned()
        });
    }
    c
}

/// `1 2 3 5 7 8` → `1-3, 5, 7-8`.
fn ranges(turns: &[u64]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < turns.len() {
        let start = turns[i];
        let mut end = start;
        while i + 1 < turns.len() && turns[i + 1] == end + 1 {
            i += 1;
            end = turns[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::ranges;

    #[test]
    fn ranges_collapse_runs() {
        assert_eq!(ranges(&[1, 2, 3, 5, 7, 8]), "1-3, 5, 7-8");
        assert_eq!(ranges(&[4]), "4");
        assert_eq!(ranges(&[]), "");
    }
}
