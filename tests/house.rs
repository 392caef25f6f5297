//! Host faults are kept apart from engine faults: a failing store is the host's error, never a
//! quarantine; a reload lifts the quarantine of the configured entry whatever `info.id` the
//! script declares; the id `legacy` belongs to the built-in engine.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use ctxhost::config::{Config, Entry};
use ctxhost::contract::message::{Message, Role};
use ctxhost::runtime::{Host, SessionSpec};
use ctxhost::session::{Session, TurnInput};
use ctxhost::store::jsonl::JsonlStore;
use ctxhost::store::{Commit, Opened, SessionStore, StorageCursor};
use ctxhost::transcript::{Durability, TranscriptStore};

/// A JSONL store whose appends of compaction summaries fail with "No space left on device"
/// while `full` is set, as a full disk would fail the one write a compaction makes.
#[derive(Debug)]
struct FullDisk {
    inner: Box<dyn SessionStore>,
    full: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
}

impl SessionStore for FullDisk {
    fn append(&mut self, messages: Vec<Message>) -> ctxhost::Result<Vec<Arc<Message>>> {
        if self.full.load(Ordering::SeqCst)
            && messages.iter().any(|m| m.role() == Role::CompactionSummary)
        {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(ctxhost::Error::io(
                "append to transcript",
                Path::new(&self.inner.location()),
                std::io::Error::from_raw_os_error(28),
            ));
        }
        self.inner.append(messages)
    }
    fn commit(&mut self, commit: Commit<'_>) -> ctxhost::Result<()> {
        self.inner.commit(commit)
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn cursor(&self) -> StorageCursor {
        self.inner.cursor()
    }
    fn location(&self) -> String {
        self.inner.location()
    }
}

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn config_with(id: &str, path: &Path, window: u64) -> Config {
    let mut config = Config::default();
    config.host.window = window;
    config.plugins.slots.context_engine = Some(id.into());
    config.plugins.entries.insert(
        id.into(),
        Entry {
            path: Some(path.to_path_buf()),
            ..Entry::default()
        },
    );
    config
}

struct Disk {
    full: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
}

fn session_on_full_disk(host: &Host, file: &Path) -> (Session, Disk) {
    let spec = SessionSpec::new("s", file);
    let full = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicUsize::new(0));
    let opened = JsonlStore::create(file, "s", "", Durability::Entry).unwrap();
    let store = FullDisk {
        inner: opened.store,
        full: Arc::clone(&full),
        refused: Arc::clone(&refused),
    };
    let opened = Opened {
        store: Box::new(store),
        ..opened
    };
    let session = Session::with_store(host.session_setup(&spec), opened).expect("session");
    (session, Disk { full, refused })
}

/// `scripts/delegating.lua` (a non-owning engine) in a 3,000-token window over a [`FullDisk`].
fn delegating_on_full_disk(file: &Path) -> (Host, Session, Disk) {
    let host = Host::new(config_with(
        "delegating",
        &repo_file("scripts/delegating.lua"),
        3_000,
    ))
    .unwrap();
    let (session, disk) = session_on_full_disk(&host, file);
    (host, session, disk)
}

fn big_turn(session: &mut Session, n: usize) -> ctxhost::Result<()> {
    session.begin_turn(TurnInput {
        user: Message::user(format!("step {n}: please go on with the refactor")),
        is_heartbeat: false,
    })?;
    session.end_turn(vec![Message::assistant(format!(
        "done with step {n}. {}",
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit. ".repeat(40)
    ))])?;
    Ok(())
}

fn stored_messages(file: &Path) -> usize {
    let (_, messages, problems) = TranscriptStore::open(file).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    messages.len()
}

#[test]
fn a_full_disk_during_auto_compaction_is_the_hosts_error_not_the_engines() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.jsonl");
    let (host, mut session, disk) = delegating_on_full_disk(&file);
    // Fill the window without compacting.
    let mut n = 0;
    while session.context_tokens() < session.token_budget() {
        n += 1;
        big_turn(&mut session, n).unwrap();
    }
    let before = stored_messages(&file);
    disk.full.store(true, Ordering::SeqCst);

    let err = big_turn(&mut session, n + 1).expect_err("the summary cannot be stored");
    assert!(
        matches!(err, ctxhost::Error::Io { .. }),
        "a store failure reaches the caller as itself: {err}"
    );
    assert!(err.to_string().contains("No space left"), "{err}");
    assert_eq!(
        disk.refused.load(Ordering::SeqCst),
        1,
        "one attempt, no loop"
    );
    assert!(host.quarantine().all().is_empty(), "nothing quarantined");
    assert_eq!(session.quarantine(), None);
    // The user message of the failed turn was stored before the compaction; nothing is lost.
    assert_eq!(stored_messages(&file), before + 1);

    // The disk has room again: the session goes on with the same engine.
    disk.full.store(false, Ordering::SeqCst);
    big_turn(&mut session, n + 2).unwrap();
    assert!(!session.stats().fallback);
    assert_eq!(session.engine_id(), "delegating");
}

#[test]
fn a_full_disk_during_an_engines_compact_quarantines_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.jsonl");
    let (host, mut session, disk) = delegating_on_full_disk(&file);
    for n in 1..=3 {
        big_turn(&mut session, n).unwrap();
    }
    let before = stored_messages(&file);
    disk.full.store(true, Ordering::SeqCst);

    // `/compact`: the engine's compact delegates to the built-in compaction, whose summary
    // cannot be stored. Before, that was the engine's "invalid result" and a quarantine.
    let err = session
        .compact_now(None)
        .expect_err("the summary cannot be stored");
    assert!(matches!(err, ctxhost::Error::Io { .. }), "{err}");
    assert_eq!(
        disk.refused.load(Ordering::SeqCst),
        1,
        "one attempt, no loop"
    );
    assert!(host.quarantine().all().is_empty(), "nothing quarantined");
    assert_eq!(stored_messages(&file), before);

    disk.full.store(false, Ordering::SeqCst);
    let r = session.compact_now(None).unwrap();
    assert!(r.compacted);
    assert_eq!(stored_messages(&file), before + 1);
}

/// An engine whose `info.id` differs from the entry it is configured under.
fn renamed_engine(broken: bool) -> String {
    let fail = if broken { "error(\"broken\")" } else { "" };
    format!(
        r#"local fit = require("fit")
local M = {{ info = {{ id = "declared-id", name = "Renamed" }} }}
function M.ingest(p) return {{ ingested = true }} end
function M.assemble(p)
  {fail}
  local kept, tokens = fit.newest_first(p.messages, p.tokenBudget)
  return {{ messages = kept, estimatedTokens = tokens }}
end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#
    )
}

#[test]
fn a_reload_lifts_the_quarantine_of_the_configured_entry_whatever_info_id_says() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mine.lua");
    std::fs::write(&path, renamed_engine(true)).unwrap();
    let host = Host::new(config_with("mine", &path, 32_000)).unwrap();
    let spec = SessionSpec::new("s", dir.path().join("s.jsonl"));
    let mut session = Session::create(host.session_setup(&spec), &spec.file, "").unwrap();
    let turn = |s: &mut Session| {
        let a = s
            .begin_turn(TurnInput {
                user: Message::user("go"),
                is_heartbeat: false,
            })
            .unwrap();
        s.end_turn(vec![Message::assistant("ok")]).unwrap();
        a.fallback
    };
    assert!(turn(&mut session), "the broken engine fell back to legacy");
    assert!(host.quarantine().contains("mine"), "keyed by the entry");
    assert!(!host.quarantine().contains("declared-id"));

    std::fs::write(&path, renamed_engine(false)).unwrap();
    host.reload_engine().expect("reload");
    assert!(host.quarantine().all().is_empty(), "the reload lifted it");
    assert!(!turn(&mut session), "the fixed engine serves the next turn");
}

/// An engine file whose script declares `info.id = "legacy"`.
fn impostor(dir: &Path) -> PathBuf {
    let path = dir.join("impostor.lua");
    std::fs::write(
        &path,
        renamed_engine(false).replace("declared-id", "legacy"),
    )
    .unwrap();
    path
}

#[test]
fn a_script_cannot_take_the_id_legacy() {
    let dir = tempfile::tempdir().unwrap();
    let path = impostor(dir.path());
    let host = Host::new(config_with("impostor", &path, 32_000)).unwrap();
    let failure = host
        .quarantine()
        .first_failure("impostor")
        .expect("refused at load");
    assert!(
        failure
            .to_string()
            .contains("reserved for the built-in engine"),
        "{failure}"
    );
    // The refusal is loud: the turns say they fell back.
    let spec = SessionSpec::new("s", dir.path().join("s.jsonl"));
    let mut session = Session::create(host.session_setup(&spec), &spec.file, "").unwrap();
    let a = session
        .begin_turn(TurnInput {
            user: Message::user("go"),
            is_heartbeat: false,
        })
        .unwrap();
    assert!(a.fallback);
}

#[test]
fn a_config_entry_cannot_be_named_legacy() {
    let err = Config::parse(
        r#"{ plugins: { slots: { contextEngine: "legacy" },
                       entries: { legacy: { enabled: true, path: "x.lua" } } } }"#,
        "cfg.json5",
    )
    .expect_err("refused");
    let text = err.to_string();
    assert!(text.contains("plugins.entries.legacy"), "{text}");
    assert!(text.contains("built-in engine"), "{text}");
}

#[test]
fn a_window_of_zero_in_a_config_is_refused() {
    let err = Config::parse("{ host: { window: 0 } }", "cfg.json5").expect_err("refused");
    assert!(err.to_string().contains("host.window"), "{err}");
}

#[test]
fn check_without_a_config_warns_when_info_id_differs_from_the_file_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("my_policy.lua");
    std::fs::write(&path, renamed_engine(false)).unwrap();
    let report = ctxhost::tools::check::check_engine(&path, &Config::default());
    assert!(report.sound, "{:#?}", report.steps);
    assert_eq!(report.engine, "declared-id");
    assert!(
        report.warnings.iter().any(
            |w| w.contains("differs from the configured id \"my-policy\"")
                && w.contains("change info.id")
        ),
        "{:?}",
        report.warnings
    );
}

#[test]
fn check_refuses_an_engine_that_calls_itself_legacy() {
    let dir = tempfile::tempdir().unwrap();
    let path = impostor(dir.path());
    let report = ctxhost::tools::check::check_engine(&path, &Config::default());
    assert!(!report.sound);
    let failed = report.steps.iter().find(|s| !s.ok).expect("a failed step");
    assert!(
        failed.detail.contains("reserved for the built-in engine"),
        "{failed:?}"
    );
}

/// Every `.rs` file under `rel` (a file or a folder of the library's source), with its `//`
/// comments removed, so only code paths count.
fn code_of(rel: &str) -> Vec<(PathBuf, String)> {
    fn walk(p: &Path, out: &mut Vec<(PathBuf, String)>) {
        if p.is_dir() {
            for e in std::fs::read_dir(p).unwrap() {
                walk(&e.unwrap().path(), out);
            }
        } else if p.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(p).unwrap();
            let code: Vec<&str> = text
                .lines()
                .map(|l| l.split("//").next().unwrap())
                .collect();
            out.push((p.to_path_buf(), code.join("\n")));
        }
    }
    let mut out = Vec::new();
    let path = repo_file(rel);
    if path.exists() {
        walk(&path, &mut out);
    }
    out
}

/// The files under `rels` that name any of `modules` by a `crate::` path.
fn importers(rels: &[&str], modules: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for rel in rels {
        for (file, code) in code_of(rel) {
            for m in modules {
                let path = format!("crate::{m}");
                let hit = code.match_indices(&path).any(|(i, _)| {
                    let next = code[i + path.len()..].chars().next();
                    !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
                });
                if hit {
                    found.push(format!("{} imports crate::{m}", file.display()));
                }
            }
        }
    }
    found
}

#[test]
fn the_engine_layer_imports_no_config_session_or_store() {
    let rels = ["src/engine", "src/sandbox.rs", "src/sandbox"];
    assert!(code_of("src/engine").len() > 10, "src/engine not found");
    let found = importers(&rels, &["config", "session", "store"]);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_config_imports_no_engine_sandbox_session_or_store() {
    let rels = ["src/config.rs", "src/config"];
    assert!(!code_of("src/config.rs").is_empty() || !code_of("src/config").is_empty());
    let found = importers(&rels, &["engine", "sandbox", "session", "store"]);
    assert!(found.is_empty(), "{found:#?}");
}

/// The root's public modules (issue 19 item 4): at most ten an embedder uses, plus the one
/// doc-hidden `testing` door; `error` and `sandbox` are private (their types are at the root).
#[test]
fn the_root_exposes_at_most_ten_modules() {
    let lib = std::fs::read_to_string(repo_file("src/lib.rs")).unwrap();
    let lines: Vec<&str> = lib.lines().map(str::trim).collect();
    let mut public = Vec::new();
    let mut hidden = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if let Some(name) = line.strip_prefix("pub mod ") {
            let name = name.trim_end_matches(';').to_string();
            if i > 0 && lines[i - 1] == "#[doc(hidden)]" {
                hidden.push(name);
            } else {
                public.push(name);
            }
        }
    }
    assert!(
        public.len() <= 10,
        "{} public modules: {public:?}",
        public.len()
    );
    assert!(
        !public.iter().any(|m| m == "error" || m == "sandbox"),
        "{public:?}"
    );
    assert_eq!(hidden, ["testing"]);
}
