//! The engine watcher through a real host and real files: a save is reloaded and sessions take
//! the new version at their next turn with their state; a half-written save, a deleted file and
//! a syntax error keep the old version serving and report the error with file:line; a
//! rename-into-place and a recreated file are picked up; and a replay of a shared transcript
//! keeps running correctly while the engine file is rewritten under it over and over.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ctxhost::contract::message::Message;
use ctxhost::runtime::reload::{EngineWatcher, ReloadOutcome};
use ctxhost::runtime::{Host, SessionHandle, SessionSpec};
use ctxhost::session::TurnInput;
use ctxhost::tools::replay::split_turns;
use ctxhost::transcript::import;

/// A debounce short enough to keep the tests quick; the default (200 ms) is measured by the
/// `reload` bench.
const DEBOUNCE: Duration = Duration::from_millis(30);

/// An engine that names its version twice (at the top and the bottom of the file, with padding
/// between) and counts its assembles in state.
fn engine(version: &str) -> String {
    let padding: String = (0..400)
        .map(|i| format!("-- padding line {i} so a torn write can cut the file in the middle\n"))
        .collect();
    format!(
        r#"local VERSION = "{version}"
local fit = require("fit")
local tail_marker
local M = {{ info = {{ id = "counter", name = "Counter" }} }}
function M.ingest(p) return {{ ingested = true }} end
function M.assemble(p)
  p.state.n = (p.state.n or 0) + 1
  local addition = "version " .. VERSION .. "/" .. tail_marker() .. " n=" .. p.state.n
  local extra = host.tokens(addition)
  local kept, tokens = fit.newest_first(p.messages, p.tokenBudget - extra)
  return {{ messages = kept, estimatedTokens = tokens + extra, systemPromptAddition = addition }}
end
function M.compact(p) return host.delegateCompaction(p) end
{padding}
tail_marker = function() return "{version}" end
return M
"#
    )
}

fn engine_file(dir: &Path) -> PathBuf {
    dir.join("counter.lua")
}

/// A v1 engine file in a fresh directory, a host whose slot names it, and a watcher on it.
fn watched() -> (tempfile::TempDir, PathBuf, Arc<Host>, EngineWatcher) {
    let dir = tempfile::tempdir().unwrap();
    let file = engine_file(dir.path());
    std::fs::write(&file, engine("v1")).unwrap();
    let host = common::replay::host(32_000, Some(&file));
    let w = EngineWatcher::for_host(Arc::clone(&host), DEBOUNCE).unwrap();
    (dir, file, host, w)
}

/// A session of `host` whose transcript lives in `dir`.
async fn session(host: &Host, dir: &Path) -> SessionHandle {
    host.create_session(SessionSpec::new("s", dir.join("s.jsonl")))
        .await
        .unwrap()
}

async fn next(w: &mut EngineWatcher) -> ReloadOutcome {
    tokio::time::timeout(Duration::from_secs(20), w.next_outcome())
        .await
        .expect("a reload outcome within 20 s")
        .expect("the watcher is running")
}

async fn turn(s: &SessionHandle) -> String {
    let a = s
        .begin_turn(TurnInput {
            user: Message::user("go"),
            is_heartbeat: false,
        })
        .await
        .expect("turn");
    assert!(!a.fallback, "fell back");
    s.end_turn(vec![Message::assistant("ok")])
        .await
        .expect("end");
    a.system_prompt_addition.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_save_is_picked_up_at_the_next_turn_with_state_kept() {
    let (dir, file, host, mut w) = watched();
    let s = session(&host, dir.path()).await;
    assert_eq!(turn(&s).await, "version v1/v1 n=1");

    std::fs::write(&file, engine("v2")).unwrap();
    let o = next(&mut w).await;
    assert_eq!(o.result.as_ref().ok(), Some(&1), "{:?}", o.result);
    assert_eq!(host.engine_cell().number(), 1);
    assert_eq!(turn(&s).await, "version v2/v2 n=2", "state carried over");
    assert!(w.try_next_outcome().is_none(), "one save, one reload");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_written_save_keeps_the_old_version_until_the_next_save() {
    let (dir, file, host, mut w) = watched();
    let s = session(&host, dir.path()).await;
    assert_eq!(turn(&s).await, "version v1/v1 n=1");

    // The first half of v2: cut inside `assemble`, so the parser fails at the end.
    let v2 = engine("v2");
    let cut = v2.find("local kept").unwrap();
    std::fs::write(&file, &v2[..cut]).unwrap();
    let o = next(&mut w).await;
    let err = o.result.expect_err("a torn file does not load");
    assert!(
        err.to_string().contains("counter.lua:"),
        "the error names file:line: {err}"
    );
    assert_eq!(
        host.engine_cell().number(),
        0,
        "no generation bump on failure"
    );
    assert_eq!(turn(&s).await, "version v1/v1 n=2", "v1 keeps serving");

    std::fs::write(&file, &v2).unwrap();
    let o = next(&mut w).await;
    assert_eq!(o.result.ok(), Some(1));
    assert_eq!(turn(&s).await, "version v2/v2 n=3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_syntax_error_is_reported_with_its_line_and_the_old_version_serves() {
    let (dir, file, host, mut w) = watched();
    let s = session(&host, dir.path()).await;

    std::fs::write(&file, "local M = {\n  info = \n").unwrap();
    let err = next(&mut w).await.result.expect_err("syntax error");
    assert!(err.to_string().contains("counter.lua:3"), "{err}");
    assert_eq!(turn(&s).await, "version v1/v1 n=1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_then_recreated_file_is_reloaded() {
    let (dir, file, host, mut w) = watched();
    let s = session(&host, dir.path()).await;

    std::fs::remove_file(&file).unwrap();
    let err = next(&mut w).await.result.expect_err("the file is gone");
    assert!(err.to_string().contains("no engine file"), "{err}");
    assert_eq!(turn(&s).await, "version v1/v1 n=1", "v1 keeps serving");

    std::fs::write(&file, engine("v2")).unwrap();
    assert_eq!(next(&mut w).await.result.ok(), Some(1));
    assert_eq!(turn(&s).await, "version v2/v2 n=2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_into_place_is_reloaded() {
    let (dir, file, host, mut w) = watched();

    // What editors do: write a temporary file beside the original, rename it over.
    let tmp = dir.path().join(".counter.lua.swp");
    std::fs::write(&tmp, engine("v2")).unwrap();
    std::fs::rename(&tmp, &file).unwrap();
    assert_eq!(next(&mut w).await.result.ok(), Some(1));

    // The watch survives the inode change: a second rename-save is seen too.
    std::fs::write(&tmp, engine("v3")).unwrap();
    std::fs::rename(&tmp, &file).unwrap();
    assert_eq!(next(&mut w).await.result.ok(), Some(2));
    let s = session(&host, dir.path()).await;
    assert_eq!(turn(&s).await, "version v3/v3 n=1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_files_in_the_directory_do_not_reload() {
    let (dir, _file, host, mut w) = watched();
    std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
    std::fs::write(dir.path().join("other.lua"), engine("v9")).unwrap();
    tokio::time::sleep(DEBOUNCE * 10).await;
    assert!(w.try_next_outcome().is_none());
    assert_eq!(host.engine_cell().number(), 0);
}

/// The transcript the replay-under-reload test drives: the largest shared pi session.
fn shared_transcript() -> PathBuf {
    common::shared_dir().join("data/transcripts/pimono-large-session.jsonl")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_keeps_running_while_the_engine_is_rewritten_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let engines = dir.path().join("engines");
    std::fs::create_dir(&engines).unwrap();
    let file = engine_file(&engines);
    std::fs::write(&file, engine("v1")).unwrap();
    let host = common::replay::host(16_000, Some(&file));
    let w = EngineWatcher::for_host(Arc::clone(&host), Duration::from_millis(5)).unwrap();

    // The writer flips the file between two valid versions with plain (non-atomic) writes
    // until the replay is done; some reloads may catch a torn file and be refused.
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (done, file) = (Arc::clone(&done), file.clone());
        tokio::spawn(async move {
            let mut writes = 0u32;
            while !done.load(Ordering::Relaxed) {
                writes += 1;
                let v = if writes.is_multiple_of(2) { "v1" } else { "v2" };
                std::fs::write(&file, engine(v)).unwrap();
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
            writes
        })
    };
    let collector = {
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let mut w = w;
            let (mut ok, mut refused) = (0u32, 0u32);
            while !done.load(Ordering::Relaxed) {
                let Ok(Some(o)) = tokio::time::timeout(DEBOUNCE, w.next_outcome()).await else {
                    continue;
                };
                match o.result {
                    Ok(_) => ok += 1,
                    Err(_) => refused += 1,
                }
            }
            (ok, refused)
        })
    };

    let path = shared_transcript();
    let imported = import(&path).expect("import");
    let source = imported.sessions.into_iter().next().expect("a session");
    let session = host
        .create_session(SessionSpec::new("s", dir.path().join("s.jsonl")))
        .await
        .unwrap();
    let (preamble, turns) = split_turns(source.messages);
    session.record(preamble).await.unwrap();
    let mut last_n = 0u64;
    let mut versions_seen = std::collections::BTreeSet::new();
    let turn_count = turns.len();
    for (t, recorded) in turns.into_iter().enumerate() {
        let (calls, stats) = common::replay::drive_recorded(&session, recorded).await;
        assert!(!stats.fallback, "turn {}: fell back", t + 1);
        let mut turn_version = None;
        for a in &calls {
            common::replay::check_assembly(&path, 0, t + 1, a);
            let addition = a.system_prompt_addition.clone().unwrap_or_default();
            let (version, n) = parse_addition(&addition);
            assert!(
                version == "v1/v1" || version == "v2/v2",
                "turn {}: one whole version per call, got {addition:?}",
                t + 1
            );
            assert!(n > last_n, "turn {}: state kept across reloads", t + 1);
            last_n = n;
            assert_eq!(
                *turn_version.get_or_insert_with(|| version.clone()),
                version,
                "turn {}: every call of a turn sees the same version",
                t + 1
            );
            versions_seen.insert(version);
        }
    }
    session.close().await.unwrap();
    done.store(true, Ordering::Relaxed);
    let writes = writer.await.unwrap();
    let generation = host.engine_cell().number();
    assert!(
        host.quarantine().all().is_empty(),
        "{:?}",
        host.quarantine().all()
    );
    let (ok, refused) = collector.await.unwrap();
    eprintln!(
        "replayed {turn_count} turns while the engine file was rewritten {writes} times; \
         {ok} reloads took effect, {refused} refused (torn writes); versions seen: {versions_seen:?}"
    );
    assert!(
        generation > 0,
        "at least one reload happened during the replay"
    );
}

/// `"version v1/v1 n=12"` → (`"v1/v1"`, 12).
fn parse_addition(addition: &str) -> (String, u64) {
    let rest = addition.strip_prefix("version ").unwrap_or_default();
    let (version, n) = rest.split_once(" n=").unwrap_or_default();
    (version.to_owned(), n.parse().unwrap_or(0))
}

/// An engine for the CLI: sends the newest messages that fit `budget_expr`.
fn fitting_engine(budget_expr: &str) -> String {
    format!(
        r#"local fit = require("fit")
local M = {{ info = {{ id = "fitting", name = "Fitting" }} }}
function M.ingest(p) return {{ ingested = false }} end
function M.assemble(p)
  local kept, tokens = fit.newest_first(p.messages, {budget_expr})
  return {{ messages = kept, estimatedTokens = tokens }}
end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#
    )
}

/// Reads the child's stdout line by line on a thread; `wait_for` blocks until a line matches.
struct Lines {
    rx: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Lines {
    fn new(stdout: std::process::ChildStdout) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines {
            rx,
            seen: Vec::new(),
        }
    }

    fn wait_for(&mut self, needle: &str) -> String {
        loop {
            match self.rx.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(e) => panic!(
                    "no line with {needle:?} ({e}); saw:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }

    fn rest(mut self) -> String {
        while let Ok(line) = self.rx.recv_timeout(Duration::from_secs(60)) {
            self.seen.push(line);
        }
        self.seen.join("\n")
    }
}

#[test]
fn watch_replays_again_after_a_save_and_prints_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fitting.lua");
    std::fs::write(&file, fitting_engine("p.tokenBudget")).unwrap();
    let transcript =
        common::shared_dir().join("data/transcripts/fasthooks-sample_main_transcript.jsonl");
    let (mut child, mut lines) = watch_two_runs(&[file.as_os_str(), transcript.as_os_str()]);
    lines.wait_for("run 1 (generation 0)");
    // Each run says where the engine's time went, the host functions it called included.
    lines.wait_for("engine time per method:");
    let host_fn = lines.wait_for("host.fit");
    assert!(host_fn.contains("calls  p50"), "{host_fn}");
    lines.wait_for("waiting for changes");

    // A broken save: reported with file:line, no replay, the old version keeps serving.
    std::fs::write(&file, "local M = {\n  info =\n").unwrap();
    let refused = lines.wait_for("reload refused");
    assert!(refused.contains("fitting.lua:3"), "{refused}");
    assert!(refused.contains("generation 0 keeps serving"), "{refused}");

    // A good save that halves the budget: run 2 shows the turns whose context shrank.
    std::fs::write(&file, fitting_engine("p.tokenBudget // 2")).unwrap();
    lines.wait_for("reloaded: generation 1 active");
    lines.wait_for("run 2 (generation 1)");
    let status = child.wait().unwrap();
    let out = lines.rest();
    assert!(status.success(), "{status}\n{out}");
    let changed = changed_turns(&out);
    assert!(!changed.is_empty(), "no changed turn in:\n{out}");
    for l in &changed {
        assert!(
            l.contains(" → ") && l.contains("(-"),
            "a smaller context: {l}"
        );
    }
    assert!(out.contains("turns unchanged ("), "{out}");
    assert!(
        out.contains("of which in host functions:"),
        "run 2 has its times: {out}"
    );
}

/// `tests/fixtures/hooks/versioned.lua` at `version`: a hook naming its version in every call.
fn versioned_hook(version: &str) -> String {
    let fixture = common::repo_root().join("tests/fixtures/hooks/versioned.lua");
    std::fs::read_to_string(fixture)
        .unwrap()
        .replace("@version@", version)
}

/// A config with the pipeline in the slot and two hooks from `dir`: `counter` (counts its calls
/// in its session state and in a VM local: tests/fixtures/hooks/counter.lua) and `other`.
fn two_hooks(dir: &Path) -> ctxhost::config::Config {
    let counter = common::repo_root().join("tests/fixtures/hooks/counter.lua");
    std::fs::copy(&counter, dir.join("counter.lua")).unwrap();
    std::fs::write(dir.join("other.lua"), versioned_hook("v1")).unwrap();
    let mut config = ctxhost::config::Config::default();
    config.host.window = 32_000;
    config.plugins.slots.context_engine = Some("pipeline".into());
    for (id, file, cfg) in [
        (
            "counter",
            "counter.lua",
            serde_json::json!({"label": "counter"}),
        ),
        ("other", "other.lua", serde_json::json!({})),
    ] {
        config.plugins.entries.insert(
            id.into(),
            ctxhost::config::Entry {
                path: Some(dir.join(file)),
                config: cfg,
                ..Default::default()
            },
        );
    }
    config.host.pipeline.hooks = vec!["counter".into(), "other".into()];
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_hook_is_reloaded_alone_and_the_other_hooks_keep_their_state() {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(Host::new(two_hooks(dir.path())).unwrap());
    let mut w = EngineWatcher::for_host(Arc::clone(&host), DEBOUNCE).unwrap();
    assert_eq!(w.paths().len(), 2, "every hook file is watched");
    let s = session(&host, dir.path()).await;
    let first = turn(&s).await;
    assert!(first.contains("counter v1 state=1 vm=1"), "{first}");
    assert!(first.contains("other v1"), "{first}");
    let second = turn(&s).await;
    assert!(second.contains("counter v1 state=2 vm=2"), "{second}");

    // A save of `other` reloads `other` alone.
    std::fs::write(dir.path().join("other.lua"), versioned_hook("v2")).unwrap();
    let o = next(&mut w).await;
    assert_eq!(o.hook.as_deref(), Some("other"), "{o:?}");
    assert_eq!(o.result.as_ref().ok(), Some(&1), "{:?}", o.result);
    assert_eq!(
        host.engine_cell().number(),
        0,
        "the engine was not reloaded"
    );
    let third = turn(&s).await;
    // The counter goes on: the same VM (its local count) and its state.
    assert!(third.contains("counter v1 state=3 vm=3"), "{third}");
    // The edited hook's new behaviour shows.
    assert!(
        third.contains("other v2") && !third.contains("other v1"),
        "{third}"
    );

    // A broken save of `other` is refused with its place; the running version stays.
    std::fs::write(dir.path().join("other.lua"), "local M = {\n  info =\n").unwrap();
    let o = next(&mut w).await;
    assert_eq!(o.hook.as_deref(), Some("other"));
    let err = o.result.expect_err("a broken hook").to_string();
    assert!(err.contains("other.lua:3"), "{err}");
    let fourth = turn(&s).await;
    assert!(fourth.contains("counter v1 state=4 vm=4"), "{fourth}");
    assert!(fourth.contains("other v2"), "{fourth}");
    assert_eq!(host.hook_generation("other").unwrap(), 1);
    assert_eq!(host.hook_generation("counter").unwrap(), 0);
    assert!(w.try_next_outcome().is_none(), "no reload of the counter");
    s.close().await.unwrap();
}

#[test]
fn watch_of_a_pipeline_reloads_the_saved_hook_alone() {
    let dir = tempfile::tempdir().unwrap();
    let config = two_hooks(dir.path());
    let file = dir.path().join("pipeline.json5");
    let entry = |id: &str| serde_json::json!({"path": config.plugins.entries[id].path, "config": config.plugins.entries[id].config});
    let json = serde_json::json!({
        "plugins": {
            "slots": {"contextEngine": "pipeline"},
            "entries": {"counter": entry("counter"), "other": entry("other")},
        },
        "host": {"pipeline": {"hooks": ["counter", "other"]}},
    });
    std::fs::write(&file, json.to_string()).unwrap();
    let transcript =
        common::shared_dir().join("data/transcripts/fasthooks-sample_main_transcript.jsonl");
    let (mut child, mut lines) = watch_two_runs(&[
        "pipeline".as_ref(),
        transcript.as_os_str(),
        "--config".as_ref(),
        file.as_os_str(),
    ]);
    let watching = lines.wait_for("watching");
    assert!(
        watching.contains("counter.lua") && watching.contains("other.lua"),
        "{watching}"
    );
    lines.wait_for("run 1 (generation 0)");
    let hooks = lines.wait_for("hooks:");
    assert!(
        hooks.contains("counter generation 0, other generation 0"),
        "{hooks}"
    );
    lines.wait_for("waiting for changes");

    // A broken save of one hook: refused with its place, no replay.
    std::fs::write(dir.path().join("other.lua"), "local M = {\n  info =\n").unwrap();
    let refused = lines.wait_for("refused");
    assert!(refused.contains("hook other"), "{refused}");
    assert!(refused.contains("other.lua:3"), "{refused}");

    // A good save with a longer block: that hook alone reloads and every call grows.
    std::fs::write(
        dir.path().join("other.lua"),
        versioned_hook(&"v2 with a much longer block ".repeat(20)),
    )
    .unwrap();
    let reloaded = lines.wait_for("reloaded hook other");
    assert!(reloaded.contains("generation 1"), "{reloaded}");
    lines.wait_for("run 2 (generation 0)");
    let hooks = lines.wait_for("hooks:");
    assert!(
        hooks.contains("counter generation 0, other generation 1"),
        "{hooks}"
    );
    let status = child.wait().unwrap();
    let out = lines.rest();
    assert!(status.success(), "{status}\n{out}");
    let changed = changed_turns(&out);
    assert!(!changed.is_empty(), "no changed turn in:\n{out}");
}

/// The lines of `watch`'s output that name a turn whose context changed between two runs.
fn changed_turns(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| l.trim_start().starts_with("turn") && l.contains("tokens"))
        .collect()
}

/// `ctxhost watch ARGS` at a 4,000-token window for two runs, its stdout read line by line.
fn watch_two_runs(args: &[&std::ffi::OsStr]) -> (std::process::Child, Lines) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ctxhost"))
        .arg("watch")
        .args(args)
        .args(["--window", "4000", "--max-runs", "2", "--debounce-ms", "50"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = Lines::new(child.stdout.take().unwrap());
    (child, lines)
}
