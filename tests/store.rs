//! Where sessions are kept (issue 21), the same on every backend (`each_backend!`): a commit is
//! what survives, the lifecycle context names where a session stands, a session copies between
//! backends with its ids, and SQLite's schema migrates once however many processes start.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::sync::Arc;

use ctxhost::Message;
use ctxhost::config::{Config, Entry};
use ctxhost::runtime::{Host, SessionSpec};
use ctxhost::session::{Session, TurnInput};
use ctxhost::store::{Backend, Commit, messages_digest};
use serde_json::json;

use crate::common;
use crate::common::backends::{Kind, Place};
use crate::common::engine::Lang;

fn texts(messages: &[Arc<Message>]) -> Vec<String> {
    messages.iter().map(|m| m.text()).collect()
}

/// A host whose engine is the pipeline with one hook that writes the lifecycle context's
/// storage fields into the system prompt.
fn storage_reporter(lang: Lang) -> Host {
    let ext = match lang {
        Lang::Lua => "lua",
        Lang::Rhai => "rhai",
    };
    let mut config = Config::default();
    config.host.window = 8_000;
    config.plugins.slots.context_engine = Some("pipeline".into());
    config.plugins.entries.insert(
        "storage".into(),
        Entry {
            path: Some(common::repo_root().join(format!("tests/fixtures/hooks/storage.{ext}"))),
            ..Entry::default()
        },
    );
    config.host.pipeline.hooks = vec!["storage".into()];
    Host::new(config).expect("host")
}

fn turn(session: &mut Session, n: usize) -> String {
    let a = session
        .begin_turn(TurnInput {
            user: Message::user(format!("question {n}")),
            is_heartbeat: false,
        })
        .unwrap();
    session
        .end_turn(vec![Message::assistant(format!("answer {n}"))])
        .unwrap();
    a.system_prompt_addition.unwrap_or_default()
}

fn lifecycle_names_where_the_session_stands(place: &Place, lang: Lang) {
    let backend = place.open();
    let host = storage_reporter(lang);
    let setup = || host.session_setup(&SessionSpec::new("conv-1", ""));
    let mut s = Session::in_backend(setup(), backend.as_ref(), "").unwrap();
    let first = turn(&mut s, 0);
    let second = turn(&mut s, 1);
    drop(s);
    let mut s = Session::in_backend(setup(), backend.as_ref(), "").unwrap();
    let reopened = turn(&mut s, 2);
    let b = place.kind.name();
    // The cursor is after the turn's request (the store's count and its newest entry); the
    // turn number counts the turns committed before it, across a reopen.
    for (seen, want) in [
        (
            &first,
            format!("backend={b} session=conv-1 seq=1 entry=00000001 turn=1 created=true"),
        ),
        (
            &second,
            format!("backend={b} session=conv-1 seq=3 entry=00000003 turn=2 created=true"),
        ),
        (
            &reopened,
            format!("backend={b} session=conv-1 seq=5 entry=00000005 turn=3 created=true"),
        ),
    ] {
        assert!(seen.contains(&want), "{seen:?} lacks {want:?}");
    }
}

fn lifecycle_in_lua(place: &Place) {
    lifecycle_names_where_the_session_stands(place, Lang::Lua);
}

fn lifecycle_in_rhai(place: &Place) {
    lifecycle_names_where_the_session_stands(place, Lang::Rhai);
}

/// A commit survives a reopen with its entries, state and turn count; what was appended after
/// the last commit is not there (a crash: the store dropped uncommitted), and the session goes
/// on from its last commit with fresh ids.
fn a_commit_is_what_survives(place: &Place) {
    let backend = place.open();
    let mut opened = backend.open("c", "/w").unwrap();
    assert!(opened.messages.is_empty() && opened.state.is_none());
    opened
        .store
        .append(vec![Message::user("one"), Message::assistant("two")])
        .unwrap();
    let state = json!({"engine": "e", "state": {"n": 2}});
    opened
        .store
        .commit(Commit {
            state: Some(&Arc::new(state.clone())),
            turn_ended: true,
        })
        .unwrap();
    opened.store.append(vec![Message::user("lost")]).unwrap();
    drop(opened);
    // A second backend over the same place (a new process).
    let backend = match place.kind {
        Kind::Memory => backend,
        _ => place.open(),
    };
    let mut again = backend.open("c", "").unwrap();
    assert_eq!(texts(&again.messages), ["one", "two"]);
    assert_eq!(again.state, Some(state.clone()));
    assert_eq!(again.store.meta().turns, Some(1));
    assert!(again.store.meta().created_at.is_some());
    let cursor = again.store.cursor();
    assert_eq!(
        (
            cursor.backend.as_str(),
            cursor.seq,
            cursor.entry_id.as_deref()
        ),
        (place.kind.name(), 2, Some("00000002"))
    );
    let next = again.store.append(vec![Message::user("three")]).unwrap();
    assert_ne!(next[0].id, "00000001");
    assert_ne!(next[0].id, "00000002");
    again.store.commit(Commit::default()).unwrap();
    drop(again);
    let last = backend.open("c", "").unwrap();
    assert_eq!(texts(&last.messages), ["one", "two", "three"]);
    assert_eq!(last.state, Some(state));
    let listed = backend.sessions().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].id.as_str(), listed[0].messages), ("c", 3));
}

/// A driven session's engine state and context come back on reopen, the same on every
/// backend (the state counter engine counts what it ingested).
fn a_session_reopens_where_it_stopped(place: &Place) {
    let backend = place.open();
    let mut config = Config::default();
    config.plugins.slots.context_engine = Some("counter".into());
    config.plugins.entries.insert(
        "counter".into(),
        Entry {
            path: Some(common::repo_root().join("tests/fixtures/lua/state_counter.lua")),
            ..Entry::default()
        },
    );
    let host = Host::new(config).unwrap();
    let setup = || host.session_setup(&SessionSpec::new("r", ""));
    let mut s = Session::in_backend(setup(), backend.as_ref(), "").unwrap();
    for n in 0..3 {
        turn(&mut s, n);
    }
    let context = texts(s.context());
    s.close().unwrap();
    drop(s);
    let mut s = Session::in_backend(setup(), backend.as_ref(), "").unwrap();
    assert_eq!(texts(s.context()), context);
    turn(&mut s, 3);
    s.close().unwrap();
    drop(s);
    let opened = backend.open("r", "").unwrap();
    let state = opened.state.unwrap();
    assert_eq!(state["engine"], "state-counter");
    assert_eq!(state["state"]["n"], 8, "{state}");
    assert_eq!(opened.messages.len(), 8);
}

/// Every session of a backend copies into another with its ids, its state and its turns
/// (`ctxhost store migrate`), once: a second copy changes nothing, and the copy reads back
/// with the same digest.
fn a_session_copies_into_sqlite_with_its_ids_once(place: &Place) {
    let source = place.open();
    let mut s = source.open("m", "").unwrap();
    s.store
        .append(vec![Message::user("q"), Message::assistant("a")])
        .unwrap();
    let state = json!({"engine": "e", "state": [1, 2]});
    s.store
        .commit(Commit {
            state: Some(&Arc::new(state.clone())),
            turn_ended: true,
        })
        .unwrap();
    drop(s);
    let from = source.open("m", "").unwrap();
    let meta = from.store.meta();
    let target = Kind::Sqlite.open(&place.dir().join("to"));
    assert!(
        target
            .import("m", &from.messages, from.state.as_ref(), &meta)
            .unwrap()
    );
    assert!(
        !target
            .import("m", &from.messages, from.state.as_ref(), &meta)
            .unwrap()
    );
    let copied = target.open("m", "").unwrap();
    assert_eq!(
        messages_digest(&copied.messages),
        messages_digest(&from.messages)
    );
    assert_eq!(copied.state, Some(state));
    assert_eq!(copied.store.meta().turns, Some(1));
    assert_eq!(copied.store.meta().created_at, meta.created_at);
}

each_backend! {
    the_lifecycle_context_names_where_the_session_stands_in_lua => lifecycle_in_lua;
    the_lifecycle_context_names_where_the_session_stands_in_rhai => lifecycle_in_rhai;
    a_commit_is_what_survives_a_crash => a_commit_is_what_survives;
    a_driven_session_reopens_where_it_stopped => a_session_reopens_where_it_stopped;
    a_session_copies_with_its_ids_once => a_session_copies_into_sqlite_with_its_ids_once;
}

/// Eight "processes" (connections) opening one new database at once: one migrates, the others
/// wait (`BEGIN IMMEDIATE`, busy timeout) and find the schema current; none fails.
#[test]
fn sqlite_opened_by_many_at_once_migrates_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ctxhost.db");
    let opened: Vec<ctxhost::Result<()>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let path = path.clone();
                scope.spawn(move || -> ctxhost::Result<()> {
                    let b = ctxhost::store::sqlite::SqliteBackend::open(
                        &path,
                        ctxhost::transcript::Durability::Entry,
                    )?;
                    let mut s = b.open(&format!("s{i}"), "")?;
                    s.store.append(vec![Message::user(format!("from {i}"))])?;
                    s.store.commit(Commit::default())?;
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in opened {
        r.unwrap();
    }
    let b = Kind::Sqlite.open(dir.path());
    assert_eq!(b.sessions().unwrap().len(), 8);
}

/// A database a newer ctxhost migrated is refused whole, naming the versions, and left as it
/// was.
#[test]
fn sqlite_refuses_a_newer_schema_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ctxhost.db");
    drop(Kind::Sqlite.open(dir.path()));
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let err =
        ctxhost::store::sqlite::SqliteBackend::open(&path, ctxhost::transcript::Durability::Entry)
            .unwrap_err();
    assert!(err.to_string().contains("schema version 99"), "{err}");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 99);
}
