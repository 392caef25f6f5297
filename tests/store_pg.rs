//! The Postgres store against a real server (`CTXHOST_TEST_PG`; see `pg_server`): a turn's
//! writes commit together and reopen in another backend (another process's view), leases keep
//! a session to one writer (a paused owner whose lease moved cannot commit), migrations run
//! once when many start at once, a dropped connection and a restarted server are ridden out,
//! and no error shows the password.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::sync::Arc;
use std::time::Duration;

use ctxhost::Error;
use ctxhost::Message;
use ctxhost::store::postgres::{PgBackend, PgOptions};
use ctxhost::store::{Backend, Commit, SessionStore, messages_digest};
use serde_json::json;

use crate::pg_row_lock::{RowLock, wait_for_waiter};
use crate::pg_server::{SERVER, Scratch};

fn texts(messages: &[Arc<Message>]) -> Vec<String> {
    messages.iter().map(|m| m.text()).collect()
}

fn commit_turn(store: &mut dyn SessionStore, state: &serde_json::Value) -> ctxhost::Result<()> {
    store.commit(Commit {
        state: Some(&Arc::new(state.clone())),
        turn_ended: true,
    })
}

#[test]
fn a_turn_commits_entries_state_and_meta_together_and_another_process_reads_them() {
    let Some(db) = Scratch::new("commit") else {
        return;
    };
    let _server = SERVER.read();
    let a = PgBackend::connect(db.options()).unwrap();
    let mut opened = a.open("conv-1", "/work").unwrap();
    assert!(opened.messages.is_empty() && opened.state.is_none());
    let stored = opened
        .store
        .append(vec![Message::user("one"), Message::assistant("two")])
        .unwrap();
    let state = json!({"engine": "e", "state": {"n": 2}, "client": {"mirror": ["x"]}});
    commit_turn(&mut *opened.store, &state).unwrap();
    // The next turn appends, and its process dies before the commit.
    opened.store.append(vec![Message::user("lost")]).unwrap();
    let cursor = opened.store.cursor();
    assert_eq!((cursor.backend.as_str(), cursor.seq), ("postgres", 3));
    let created = opened.store.meta().created_at.unwrap();
    drop(opened);

    // Another backend (as another process would) sees the committed turn only.
    let b = PgBackend::connect(db.options()).unwrap();
    let mut again = b.open("conv-1", "").unwrap();
    assert_eq!(texts(&again.messages), ["one", "two"]);
    assert_eq!(
        again.messages.iter().map(|m| &m.id).collect::<Vec<_>>(),
        stored.iter().map(|m| &m.id).collect::<Vec<_>>()
    );
    assert_eq!(again.state, Some(state.clone()));
    assert_eq!(again.store.meta().turns, Some(1));
    assert_eq!(again.store.meta().created_at, Some(created));
    let cursor = again.store.cursor();
    assert_eq!(cursor.seq, 2);
    assert_eq!(cursor.entry_id.as_deref(), Some(&*stored[1].id));

    // The session goes on from there; a commit without state keeps the committed one.
    let next = again.store.append(vec![Message::user("three")]).unwrap();
    assert!(next[0].id > stored[1].id, "ids keep increasing");
    again.store.commit(Commit::default()).unwrap();
    drop(again);
    let last = a.open("conv-1", "").unwrap();
    assert_eq!(texts(&last.messages), ["one", "two", "three"]);
    assert_eq!(last.state, Some(state));
    drop(last);
    let listed = b.sessions().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].id.as_str(), listed[0].messages), ("conv-1", 3));
    assert_eq!(listed[0].meta.turns, Some(1));
    assert!(b.size_bytes().unwrap() > 0);
}

#[test]
fn a_paused_owner_whose_lease_moved_cannot_commit() {
    let Some(db) = Scratch::new("fencing") else {
        return;
    };
    let _server = SERVER.read();
    // A stands for a process paused (SIGSTOP, a long GC, a cut network): it renews nothing.
    let paused = PgBackend::connect(PgOptions {
        renew_in_background: false,
        lease: Duration::from_secs(1),
        ..db.options()
    })
    .unwrap();
    let mut a = paused.open("conv", "").unwrap();
    a.store.append(vec![Message::user("q1")]).unwrap();
    commit_turn(&mut *a.store, &json!({"turn": 1})).unwrap();
    a.store
        .append(vec![Message::user("q2 from the paused owner")])
        .unwrap();

    // B opens the session once A's lease expired (it waits for that) and takes it over.
    let other = PgBackend::connect(db.options()).unwrap();
    let mut b = other.open("conv", "").unwrap();
    assert_eq!(texts(&b.messages), ["q1"]);
    b.store.append(vec![Message::user("q2 from B")]).unwrap();
    commit_turn(&mut *b.store, &json!({"turn": 2})).unwrap();

    // A wakes up: its commit carries the old fencing token and is refused.
    let err = commit_turn(&mut *a.store, &json!({"turn": "A's"})).unwrap_err();
    assert!(matches!(err, Error::SessionMoved { .. }), "{err}");
    assert!(err.to_string().contains("taken over"), "{err}");
    // ... and so is anything after it: the session is to be dropped, not written.
    assert!(matches!(
        a.store.append(vec![Message::user("more")]),
        Err(Error::SessionMoved { .. })
    ));
    assert_eq!(paused.renew_leases().unwrap(), 0);
    drop(a);
    drop(b);

    let after = other.open("conv", "").unwrap();
    assert_eq!(texts(&after.messages), ["q1", "q2 from B"]);
    assert_eq!(after.state, Some(json!({"turn": 2})));
}

#[test]
fn a_lease_that_expired_refuses_the_write_even_when_nobody_took_it() {
    let Some(db) = Scratch::new("expired") else {
        return;
    };
    let _server = SERVER.read();
    let paused = PgBackend::connect(PgOptions {
        renew_in_background: false,
        lease: Duration::from_millis(500),
        ..db.options()
    })
    .unwrap();
    let mut a = paused.open("conv", "").unwrap();
    a.store.append(vec![Message::user("q1")]).unwrap();
    commit_turn(&mut *a.store, &json!(1)).unwrap();
    a.store.append(vec![Message::user("late")]).unwrap();
    // Until the lease expires a renewal keeps it; this one comes too late.
    std::thread::sleep(Duration::from_millis(800));
    let err = commit_turn(&mut *a.store, &json!(2)).unwrap_err();
    assert!(matches!(err, Error::SessionMoved { .. }), "{err}");
    assert!(err.to_string().contains("expired"), "{err}");
    drop(a);
    let again = paused.open("conv", "").unwrap();
    assert_eq!(texts(&again.messages), ["q1"]);
    assert_eq!(again.state, Some(json!(1)));
}

#[test]
fn a_commit_held_up_past_its_lease_expiry_does_not_extend_the_lease() {
    let Some(db) = Scratch::new("heldup") else {
        return;
    };
    let _server = SERVER.read();
    let lease = db.options().lease;
    // A renews its lease only by committing.
    let a = PgBackend::connect(PgOptions {
        renew_in_background: false,
        ..db.options()
    })
    .unwrap();
    let mut opened = a.open("conv", "").unwrap();
    opened.store.append(vec![Message::user("q1")]).unwrap();
    // The test locks the lease row, so A's commit waits there after it judged its lease live:
    // the delay a SIGSTOP, a GC pause or a slow network can put between a commit's statements.
    let lock = RowLock::take(
        &db.url,
        format!(
            "SELECT 1 FROM \"{}\".ctxhost_leases WHERE session_id = 'conv' FOR UPDATE",
            db.schema
        ),
    );
    let committing = std::thread::spawn(move || {
        let written = commit_turn(&mut *opened.store, &json!(1));
        (opened, written)
    });
    let waiting = format!(
        "SELECT count(*) FROM pg_stat_activity
         WHERE application_name = 'ctxhost {}' AND wait_event_type = 'Lock'",
        a.owner()
    );
    wait_for_waiter("the held-up commit", || {
        db.sql(&waiting)[0].get::<_, i64>(0)
    });
    // The lease runs out while the commit waits (a renewal judged before the wait ends by then).
    std::thread::sleep(lease + Duration::from_millis(300));
    drop(lock);
    let (opened, written) = committing.join().unwrap();
    // Judged while the lease was live and nobody could take it meanwhile: written.
    written.unwrap();

    // The lease ended at its expiry: the commit did not extend it from after that.
    assert_eq!(a.renew_leases().unwrap(), 0);
    let b = PgBackend::connect(PgOptions {
        lease_wait: Duration::ZERO,
        ..db.options()
    })
    .unwrap();
    let mut taken = b.open("conv", "").unwrap();
    assert_eq!(texts(&taken.messages), ["q1"]);
    assert_eq!(taken.state, Some(json!(1)));
    taken.store.append(vec![Message::user("q2")]).unwrap();
    commit_turn(&mut *taken.store, &json!(2)).unwrap();
    drop((opened, taken));
    assert_eq!(texts(&b.open("conv", "").unwrap().messages), ["q1", "q2"]);
}

#[test]
fn a_lease_whose_release_failed_is_not_renewed_and_expires() {
    let Some(db) = Scratch::new("unreleased") else {
        return;
    };
    let _server = SERVER.read();
    let a = PgBackend::connect(db.options()).unwrap();
    let opened = a.open("conv", "").unwrap();
    // The server refuses A's release when the session closes (a trigger stands for any failure).
    db.sql(&format!(
        "CREATE FUNCTION \"{}\".refuse() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'refused by the test'; END $$",
        db.schema
    ));
    db.sql(&format!(
        "CREATE TRIGGER refuse BEFORE UPDATE ON \"{s}\".ctxhost_leases FOR EACH ROW
         WHEN (NEW.expires_at <= clock_timestamp()) EXECUTE FUNCTION \"{s}\".refuse()",
        s = db.schema
    ));
    drop(opened);
    db.sql(&format!(
        "DROP TRIGGER refuse ON \"{}\".ctxhost_leases",
        db.schema
    ));
    // A serves the session no more: nothing renews its lease, which runs out by itself.
    assert_eq!(a.renew_leases().unwrap(), 0);
    let b = PgBackend::connect(db.options()).unwrap();
    let mut taken = b.open("conv", "").unwrap();
    taken.store.append(vec![Message::user("b")]).unwrap();
    taken.store.commit(Commit::default()).unwrap();
}

#[test]
fn a_live_lease_keeps_the_session_to_its_owner_until_it_is_released() {
    let Some(db) = Scratch::new("held") else {
        return;
    };
    let _server = SERVER.read();
    let a = PgBackend::connect(db.options()).unwrap();
    let held = a.open("conv", "").unwrap();
    let b = PgBackend::connect(PgOptions {
        lease_wait: Duration::from_millis(300),
        ..db.options()
    })
    .unwrap();
    let err = b.open("conv", "").unwrap_err();
    assert!(matches!(err, Error::SessionMoved { .. }), "{err}");
    assert!(err.to_string().contains(a.owner()), "{err}");
    // Closing releases it: B takes it at once, with the next token.
    drop(held);
    let mut taken = b.open("conv", "").unwrap();
    taken.store.append(vec![Message::user("b")]).unwrap();
    taken.store.commit(Commit::default()).unwrap();
    // A second open in the same process fences the first.
    let mut second = b.open("conv", "").unwrap();
    taken.store.append(vec![Message::user("stale")]).unwrap();
    let err = taken.store.commit(Commit::default()).unwrap_err();
    assert!(matches!(err, Error::SessionMoved { .. }), "{err}");
    second.store.append(vec![Message::user("fresh")]).unwrap();
    second.store.commit(Commit::default()).unwrap();
    drop((taken, second));
    assert_eq!(texts(&a.open("conv", "").unwrap().messages), ["b", "fresh"]);
}

#[test]
fn migrations_run_once_when_many_processes_start_at_once() {
    let Some(db) = Scratch::new("migrate") else {
        return;
    };
    let _server = SERVER.read();
    let options = db.options();
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let options = options.clone();
            std::thread::spawn(move || PgBackend::connect(options).map(|_| ()))
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    let rows = db.sql(&format!(
        "SELECT count(*) FROM \"{}\".ctxhost_schema",
        db.schema
    ));
    assert_eq!(rows[0].get::<_, i64>(0), 1);
}

#[test]
fn a_session_imports_with_its_ids_once_and_a_different_one_is_refused() {
    let Some(db) = Scratch::new("import") else {
        return;
    };
    let _server = SERVER.read();
    let source = ctxhost::store::memory::MemoryBackend::new();
    let mut s = source.open("conv", "").unwrap();
    s.store
        .append(vec![Message::user("q"), Message::assistant("a")])
        .unwrap();
    let state = json!({"engine": "e", "state": null});
    commit_turn(&mut *s.store, &state).unwrap();
    let meta = s.store.meta();
    drop(s);
    let messages = source.open("conv", "").unwrap().messages;

    let target = PgBackend::connect(db.options()).unwrap();
    assert!(
        target
            .import("conv", &messages, Some(&state), &meta)
            .unwrap()
    );
    assert!(
        !target
            .import("conv", &messages, Some(&state), &meta)
            .unwrap()
    );
    let mut copied = target.open("conv", "").unwrap();
    assert_eq!(
        messages_digest(&copied.messages),
        messages_digest(&messages)
    );
    assert_eq!(copied.state, Some(state.clone()));
    assert_eq!(copied.store.meta().turns, Some(1));
    assert_eq!(copied.store.meta().created_at, meta.created_at);
    let next = copied.store.append(vec![Message::user("next")]).unwrap();
    assert!(
        next[0].id > messages[1].id,
        "new ids follow the copied ones"
    );

    // While served, nothing is imported into it.
    let err = target.import("other", &messages, None, &meta);
    assert!(err.unwrap());
    let err = target
        .import("conv", &messages[..1], None, &meta)
        .unwrap_err();
    assert!(err.to_string().contains("being served"), "{err}");
    drop(copied);
    let other = vec![Arc::new(Message {
        id: "00000001".into(),
        ..Message::user("something else")
    })];
    let err = target.import("conv", &other, None, &meta).unwrap_err();
    assert!(err.to_string().contains("nothing was copied"), "{err}");
    assert_eq!(
        texts(&target.open("conv", "").unwrap().messages),
        ["q", "a"]
    );
}

#[test]
fn a_dropped_connection_is_ridden_out_and_a_commit_is_written_once() {
    let Some(db) = Scratch::new("reconnect") else {
        return;
    };
    let _server = SERVER.read();
    let backend = PgBackend::connect(db.options()).unwrap();
    let mut opened = backend.open("conv", "").unwrap();
    opened.store.append(vec![Message::user("before")]).unwrap();
    commit_turn(&mut *opened.store, &json!(1)).unwrap();
    for round in 0..3 {
        // The server ends every connection of this backend (as a failover or an admin would).
        let cut = db.sql(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE application_name = 'ctxhost {}'",
            backend.owner()
        ));
        assert!(!cut.is_empty(), "the backend had connections to cut");
        opened
            .store
            .append(vec![Message::user(format!("after cut {round}"))])
            .unwrap();
        commit_turn(&mut *opened.store, &json!(round + 2)).unwrap();
    }
    drop(opened);
    let again = backend.open("conv", "").unwrap();
    assert_eq!(
        texts(&again.messages),
        ["before", "after cut 0", "after cut 1", "after cut 2"]
    );
    assert_eq!(again.store.meta().turns, Some(4));
}

#[test]
fn a_restarted_server_is_ridden_out() {
    let Some(db) = Scratch::new("restart") else {
        return;
    };
    let Ok(restart) = std::env::var("CTXHOST_TEST_PG_RESTART") else {
        eprintln!(
            "a_restarted_server_is_ridden_out: skipped: CTXHOST_TEST_PG_RESTART is not set (tests/run.sh's own cluster sets it)"
        );
        return;
    };
    let _server = SERVER.write();
    let backend = PgBackend::connect(db.options()).unwrap();
    let mut opened = backend.open("conv", "").unwrap();
    opened.store.append(vec![Message::user("before")]).unwrap();
    commit_turn(&mut *opened.store, &json!(1)).unwrap();
    let status = std::process::Command::new("sh")
        .args(["-c", &restart])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{restart}: {status}");
    opened.store.append(vec![Message::user("after")]).unwrap();
    commit_turn(&mut *opened.store, &json!(2)).unwrap();
    drop(opened);
    let again = backend.open("conv", "").unwrap();
    assert_eq!(texts(&again.messages), ["before", "after"]);
}

#[test]
fn connection_errors_name_the_server_and_never_the_password() {
    // No server is needed: nothing listens on port 1.
    const SECRET: &str = "pw-Sekret-4711";
    // A password from the environment: PATH's value stands for one (a test may not set a
    // variable), long and unlike anything an error would say by itself.
    let from_env = std::env::var("PATH").unwrap();
    let cases = [
        (
            "postgresql://ctxhost@127.0.0.1:1/db".to_owned(),
            Some("PATH"),
        ),
        (
            format!("postgresql://ctxhost:{SECRET}@127.0.0.1:1/db"),
            None,
        ),
        (
            format!("host=127.0.0.1 port=1 user=ctxhost password={SECRET} dbname=db"),
            None,
        ),
    ];
    for (url, password_env) in cases {
        let options = PgOptions {
            password_env: password_env.map(str::to_owned),
            retry_for: Duration::from_millis(300),
            ..PgOptions::new(url)
        };
        let shown = format!("{options:?}");
        assert!(!shown.contains(SECRET), "{shown}");
        let err = PgBackend::connect(options).unwrap_err();
        let text = format!("{err} {err:?}");
        assert!(
            !text.contains(SECRET) && !text.contains(&from_env),
            "{text}"
        );
        assert!(text.contains("127.0.0.1:1"), "{text}");
    }
    let err = PgBackend::connect(PgOptions {
        password_env: Some("CTXHOST_TEST_PG_NO_SUCH_VARIABLE".into()),
        ..PgOptions::new("host=127.0.0.1 port=1")
    })
    .unwrap_err();
    assert!(
        err.to_string().contains("CTXHOST_TEST_PG_NO_SUCH_VARIABLE"),
        "{err}"
    );
}
