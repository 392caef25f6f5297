//! `ctxhost store migrate` and `ctxhost store backup`, and what `doctor` shows of the store:
//! real state directories written through the library, the command run as a user would.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use ctxhost::Message;
use ctxhost::store::jsonl::JsonlBackend;
use ctxhost::store::sqlite::SqliteBackend;
use ctxhost::store::{Backend, Commit, messages_digest};
use ctxhost::transcript::Durability;
use serde_json::json;

fn ctxhost(args: &[&str], state_dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ctxhost"))
        .args(args)
        .env("CTXHOST_LOG", "off")
        .env_remove("CTXHOST_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/ctxhost-test-config")
        .env("OPENCLAW_CONFIG_PATH", "/nonexistent/openclaw.json")
        .env("CTXHOST_STATE_DIR", state_dir)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Three sessions of 2, 4 and 6 messages, each with a state, in `backend`.
fn fill(backend: &dyn Backend) {
    for (n, id) in ["agent:main:a", "sid-b", "sid-c"].iter().enumerate() {
        let mut s = backend.open(id, "/w").unwrap();
        for t in 0..=n {
            s.store
                .append(vec![
                    Message::user(format!("{id} question {t}")),
                    Message::assistant(format!("{id} answer {t}")),
                ])
                .unwrap();
            let state = Arc::new(json!({"engine": "e", "state": {"turns": t + 1}}));
            s.store
                .commit(Commit {
                    state: Some(&state),
                    turn_ended: true,
                })
                .unwrap();
        }
    }
}

fn same_sessions(a: &dyn Backend, b: &dyn Backend) {
    let (la, lb) = (a.sessions().unwrap(), b.sessions().unwrap());
    let ids = |l: &[ctxhost::store::SessionSummary]| -> Vec<(String, u64)> {
        l.iter().map(|s| (s.id.clone(), s.messages)).collect()
    };
    assert_eq!(ids(&la), ids(&lb));
    for s in &la {
        let (x, y) = (a.open(&s.id, "").unwrap(), b.open(&s.id, "").unwrap());
        assert_eq!(
            messages_digest(&x.messages),
            messages_digest(&y.messages),
            "{}",
            s.id
        );
        assert_eq!(x.state, y.state, "{}", s.id);
        assert_eq!(x.store.meta().turns, y.store.meta().turns, "{}", s.id);
    }
}

#[test]
fn migrate_copies_every_session_into_sqlite_verified_and_again_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let source = JsonlBackend::new(&state, Durability::Entry);
    fill(&source);
    let db = dir.path().join("out.db");
    let to = format!("sqlite:{}", db.display());
    let from = state.display().to_string();

    let o = ctxhost(&["store", "migrate", "--from", &from, "--to", &to], &state);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = stdout(&o);
    assert!(
        text.contains("3 sessions (12 messages)") && text.contains("3 copied, 0 already there"),
        "{text}"
    );
    let target = SqliteBackend::open(&db, Durability::Entry).unwrap();
    same_sessions(&source, &target);
    drop(target);

    // Run again (a migration cut short is finished this way): nothing is copied twice.
    let o = ctxhost(&["store", "migrate", "--from", &from, "--to", &to], &state);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        stdout(&o).contains("0 copied, 3 already there"),
        "{}",
        stdout(&o)
    );
    let target = SqliteBackend::open(&db, Durability::Entry).unwrap();
    same_sessions(&source, &target);
}

#[test]
fn migrate_refuses_a_target_holding_other_messages_and_overwrites_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    fill(&JsonlBackend::new(&state, Durability::Entry));
    let db = dir.path().join("out.db");
    {
        let target = SqliteBackend::open(&db, Durability::Entry).unwrap();
        let mut s = target.open("sid-b", "").unwrap();
        s.store
            .append(vec![Message::user("someone else's")])
            .unwrap();
        s.store.commit(Commit::default()).unwrap();
    }
    let o = ctxhost(
        &[
            "store",
            "migrate",
            "--from",
            &state.display().to_string(),
            "--to",
            &format!("sqlite:{}", db.display()),
        ],
        &state,
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("sid-b") && err.contains("nothing was copied"),
        "{err}"
    );
    let target = SqliteBackend::open(&db, Durability::Entry).unwrap();
    let kept = target.open("sid-b", "").unwrap().messages;
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].text(), "someone else's");
}

#[test]
fn backup_of_sqlite_is_a_database_holding_every_session() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let db = dir.path().join("live.db");
    let source = SqliteBackend::open(&db, Durability::Entry).unwrap();
    fill(&source);
    let config = dir.path().join("ctxhost.json5");
    std::fs::write(
        &config,
        format!(
            "{{ host: {{ store: {{ kind: \"sqlite\", path: {:?} }} }} }}",
            db.display().to_string()
        ),
    )
    .unwrap();
    let dest = dir.path().join("backup.db");
    let o = ctxhost(
        &[
            "store",
            "backup",
            &dest.display().to_string(),
            "--config",
            &config.display().to_string(),
        ],
        &state,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout(&o).contains("3 sessions"), "{}", stdout(&o));
    let copy = SqliteBackend::open(&dest, Durability::Entry).unwrap();
    same_sessions(&source, &copy);
    // The copy is not written over.
    let again = ctxhost(
        &[
            "store",
            "backup",
            &dest.display().to_string(),
            "--config",
            &config.display().to_string(),
        ],
        &state,
    );
    assert!(!again.status.success());

    // `doctor` shows the backend, where it is and its sessions.
    let o = ctxhost(
        &["doctor", "--config", &config.display().to_string()],
        &state,
    );
    let text = stdout(&o);
    assert!(
        text.contains(&format!("store:      sqlite at sqlite:{}", db.display()))
            && text.contains("(3 sessions,")
            && text.contains("sid-c: 6 messages, 3 turns"),
        "{text}"
    );
}

#[test]
fn backup_of_a_jsonl_state_directory_opens_with_every_session() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let source: Arc<dyn Backend> = Arc::new(JsonlBackend::new(&state, Durability::Entry));
    fill(source.as_ref());
    let dest = dir.path().join("copy");
    let o = ctxhost(&["store", "backup", &dest.display().to_string()], &state);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let copy = JsonlBackend::new(&dest, Durability::Entry);
    same_sessions(source.as_ref(), &copy);
}
