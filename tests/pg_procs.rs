//! Leases across processes: 4 worker processes serve 200 sessions over one Postgres database
//! (`CTXHOST_TEST_PG`); mid-traffic one is SIGKILLed and another SIGSTOPped past its leases'
//! expiry, then resumed. Their sessions continue on the others from the last committed turn:
//! every turn is stored exactly once, in order, and no write is accepted under a fencing token
//! older than one already written (the resumed process's writes are refused: it answers
//! `moved`). The workers are this program re-run (`pg_fleet`). A second test stops a worker
//! in the middle of a commit, right after its lease check, past its lease: on waking it must
//! not keep the lease.
//!
//! A plain `main` (harness = false), so the same binary can be the workers; it prints libtest's
//! closing line.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

#[path = "pg_fleet.rs"]
mod pg_fleet;
#[path = "common/pg_row_lock.rs"]
mod pg_row_lock;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pg_fleet::{Fleet, answer, question};
use pg_row_lock::{RowLock, wait_for_waiter};

const WORKERS: usize = 4;
const SESSIONS: usize = 200;
const TURNS: u64 = 6;
const LEASE: Duration = Duration::from_secs(2);

/// One test: the server's URL and a schema of its own.
type Test = fn(&str, &str);

fn main() {
    if pg_fleet::worker_main() {
        return;
    }
    let url = match std::env::var("CTXHOST_TEST_PG") {
        Ok(url) if !url.is_empty() => url,
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CTXHOST_TEST_PG is not set and CI=true: the 4-process lease test must run (tests/run.sh starts a server)"
            );
            eprintln!("pg_procs: skipped: CTXHOST_TEST_PG is not set (tests/run.sh sets it)");
            println!("test result: ok. 0 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out");
            return;
        }
    };
    let tests: [(&str, Test); 2] = [
        (
            "four_processes_one_killed_one_paused_lose_and_double_nothing",
            four_processes_one_killed_one_paused,
        ),
        (
            "a_process_paused_mid_commit_past_its_lease_gives_the_session_up",
            paused_mid_commit,
        ),
    ];
    let mut failed = 0;
    for (i, (name, test)) in tests.into_iter().enumerate() {
        let schema = format!("t_procs_{}_{i}", std::process::id());
        let outcome = std::panic::catch_unwind(|| test(&url, &schema));
        drop_schema(&url, &schema);
        if outcome.is_ok() {
            println!("test {name} ... ok");
        } else {
            println!("test {name} ... FAILED");
            failed += 1;
        }
    }
    if failed == 0 {
        println!(
            "test result: ok. {} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out",
            tests.len()
        );
    } else {
        println!(
            "test result: FAILED. {} passed; {failed} failed; 0 ignored; 0 measured; 0 filtered out",
            tests.len() - failed
        );
        std::process::exit(101);
    }
}

/// One connect first: the tables exist before the workers race for them.
fn create_tables(url: &str, schema: &str) {
    drop(
        ctxhost::store::postgres::PgBackend::connect(ctxhost::store::postgres::PgOptions {
            schema: schema.to_owned(),
            ..ctxhost::store::postgres::PgOptions::new(url)
        })
        .unwrap(),
    );
}

fn four_processes_one_killed_one_paused(url: &str, schema: &str) {
    create_tables(url, schema);
    let mut fleet = Fleet::spawn(WORKERS, url, schema, LEASE);
    let sessions: Vec<String> = (0..SESSIONS).map(|s| format!("s{s:03}")).collect();
    let index: BTreeMap<&str, usize> = sessions
        .iter()
        .enumerate()
        .map(|(i, s)| (s.as_str(), i))
        .collect();
    let mut route: Vec<usize> = (0..SESSIONS).map(|s| s % WORKERS).collect();
    let mut done = vec![0u64; SESSIONS];
    for (s, id) in sessions.iter().enumerate() {
        assert!(fleet.send(route[s], id, 1));
    }
    let total = SESSIONS as u64 * TURNS;
    let (mut answered, mut killed, mut paused) = (0u64, false, None::<Instant>);
    let mut resumed = false;
    let mut tally: BTreeMap<String, u64> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(180);
    while done.iter().sum::<u64>() < total {
        assert!(
            Instant::now() < deadline,
            "no progress: done {done:?}, {tally:?}"
        );
        if let Some(at) = paused
            && !resumed
            && at.elapsed() > LEASE * 2
        {
            // The paused process wakes up with every lease it held expired and taken over.
            fleet.signal(1, "CONT");
            resumed = true;
        }
        let Some(a) = fleet.next(Duration::from_millis(200)) else {
            continue;
        };
        let s = index[a.session.as_str()];
        if a.worker != route[s] {
            // From a process the session was moved away from.
            *tally.entry(format!("stale {}", a.kind)).or_default() += 1;
            continue;
        }
        *tally.entry(a.kind.clone()).or_default() += 1;
        match a.kind.as_str() {
            "ok" | "dup" => {
                assert_eq!(a.turn, done[s] + 1, "{}: answered out of turn", a.session);
                done[s] = a.turn;
                answered += 1;
                if done[s] < TURNS {
                    assert!(fleet.send(route[s], &a.session, done[s] + 1));
                }
            }
            // Taken over elsewhere, or a failure: the same turn again, where it is routed.
            _ => assert!(fleet.send(route[s], &a.session, a.turn)),
        }
        if !killed && answered >= total / 4 {
            // SIGKILL worker 0 mid-traffic; its sessions (and their unanswered turns) go to the
            // others, which wait for its leases to expire and go on from the last commit.
            fleet.signal(0, "KILL");
            killed = true;
            move_sessions(&mut fleet, &mut route, &done, &sessions, 0, &[1, 2, 3]);
        }
        if killed && paused.is_none() && answered >= total / 2 {
            // SIGSTOP worker 1 with turns queued; its sessions move on without it.
            fleet.signal(1, "STOP");
            paused = Some(Instant::now());
            move_sessions(&mut fleet, &mut route, &done, &sessions, 1, &[2, 3]);
        }
    }
    if !resumed {
        fleet.signal(1, "CONT");
    }
    // Let the resumed process finish its queue (its answers are stale), then close all.
    std::thread::sleep(LEASE);
    while let Some(a) = fleet.next(Duration::from_millis(500)) {
        let s = index[a.session.as_str()];
        let key = if a.worker != route[s] { "stale " } else { "" };
        *tally.entry(format!("{key}{}", a.kind)).or_default() += 1;
    }
    fleet.close();
    eprintln!("pg_procs: answers {tally:?}");

    let rows = query(
        url,
        &format!(
            "SELECT session_id, seq, body, token FROM \"{schema}\".ctxhost_entries ORDER BY session_id, seq"
        ),
    );
    let mut stored: BTreeMap<String, Vec<(String, i64)>> = BTreeMap::new();
    for row in &rows {
        let body: String = row.get(2);
        let m: ctxhost::Message = serde_json::from_str(&body).unwrap();
        stored
            .entry(row.get(0))
            .or_default()
            .push((m.text(), row.get(3)));
    }
    let (mut lost, mut doubled, mut stale_writes) = (0, 0, 0);
    for id in &sessions {
        let got = stored.get(id).cloned().unwrap_or_default();
        let want: Vec<String> = (1..=TURNS)
            .flat_map(|n| [question(id, n), answer(id, n)])
            .collect();
        let texts: Vec<String> = got.iter().map(|(t, _)| t.clone()).collect();
        for w in &want {
            match texts.iter().filter(|t| *t == w).count() {
                0 => lost += 1,
                1 => {}
                _ => doubled += 1,
            }
        }
        assert!(
            texts == want || lost + doubled > 0,
            "{id}: out of order: {texts:?}"
        );
        // A write accepted from a process after its lease moved would carry a token older
        // than one already written before it.
        stale_writes += got.windows(2).filter(|w| w[1].1 < w[0].1).count();
    }
    let moved_sessions = stored
        .values()
        .filter(|v| v.first().map(|f| f.1) != v.last().map(|l| l.1))
        .count();
    eprintln!(
        "pg_procs: {SESSIONS} sessions x {TURNS} turns over {WORKERS} processes (one SIGKILLed, one \
         SIGSTOPped past its leases): {moved_sessions} sessions changed process, lost {lost}, \
         doubled {doubled}, writes under a stale token {stale_writes}"
    );
    assert_eq!((lost, doubled, stale_writes), (0, 0, 0));
    assert!(
        moved_sessions >= SESSIONS / 4,
        "the killed and the paused process's sessions continued elsewhere ({moved_sessions})"
    );
    assert!(
        tally.get("stale moved").copied().unwrap_or(0) > 0,
        "the resumed process's queued turns were refused (answered moved): {tally:?}"
    );
}

/// A worker stopped (SIGSTOP) in the middle of a commit, right after its lease check, for
/// longer than its lease: nobody can take the lease while it sleeps (the commit holds the row),
/// and on waking it must not extend the lease from then: another worker takes the session
/// over at once, and the woken one's next write is refused. (Before the commit judged and
/// renewed its lease in one statement, the woken worker renewed it from its wake-up and kept
/// it for good: the session's next turns were refused the lease forever.)
fn paused_mid_commit(url: &str, schema: &str) {
    create_tables(url, schema);
    let mut fleet = Fleet::spawn(2, url, schema, LEASE);
    let next_answer = |fleet: &Fleet, w: usize| {
        let a = fleet
            .next(Duration::from_secs(60))
            .expect("an answer within a minute");
        assert_eq!(a.worker, w, "{a:?}");
        a
    };
    assert!(fleet.send(0, "p", 1));
    assert_eq!(next_answer(&fleet, 0).kind, "ok");

    // The test locks the session's lease row, so worker 0's next commit waits there; it is
    // stopped while it waits, the lock let go (its lease check goes through, and the answer
    // waits for it), and it sleeps past its lease.
    let lock = RowLock::take(
        url,
        format!("SELECT 1 FROM \"{schema}\".ctxhost_leases WHERE session_id = 'p' FOR UPDATE"),
    );
    assert!(fleet.send(0, "p", 2));
    // Its commit's lease statement, not its background renewal (`WHERE owner = $1`).
    let waiting = format!(
        "SELECT count(*) FROM pg_stat_activity
         WHERE application_name LIKE 'ctxhost %:{}:%' AND wait_event_type = 'Lock'
           AND query NOT LIKE '%WHERE owner = $1%'",
        fleet.pid(0)
    );
    wait_for_waiter("worker 0's commit", || {
        query(url, &waiting)[0].get::<_, i64>(0)
    });
    fleet.signal(0, "STOP");
    drop(lock);
    std::thread::sleep(LEASE * 2 + Duration::from_millis(500));
    fleet.signal(0, "CONT");
    // Judged while its lease was live, with nobody able to take it meanwhile: written.
    let woke = next_answer(&fleet, 0);
    assert_eq!((woke.kind.as_str(), woke.turn), ("ok", 2));

    // Worker 1 takes the session over at once and goes on from there.
    assert!(fleet.send(1, "p", 3));
    let a = next_answer(&fleet, 1);
    assert_eq!(
        (a.kind.as_str(), a.turn),
        ("ok", 3),
        "worker 1 took the lease"
    );
    // The woken worker's write of that same turn is refused.
    assert!(fleet.send(0, "p", 3));
    assert_eq!(next_answer(&fleet, 0).kind, "moved");
    fleet.close();
}

/// Routes every session of worker `from` to `to` (round robin) and sends its next turn there.
fn move_sessions(
    fleet: &mut Fleet,
    route: &mut [usize],
    done: &[u64],
    sessions: &[String],
    from: usize,
    to: &[usize],
) {
    let mut next = 0;
    for s in 0..route.len() {
        if route[s] == from {
            route[s] = to[next % to.len()];
            next += 1;
            if done[s] < TURNS {
                assert!(fleet.send(route[s], &sessions[s], done[s] + 1));
            }
        }
    }
}

fn query(url: &str, sql: &str) -> Vec<tokio_postgres::Row> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = url
            .parse::<tokio_postgres::Config>()
            .unwrap()
            .connect(tokio_postgres::NoTls)
            .await
            .unwrap();
        let driver = tokio::spawn(conn);
        let rows = client.query(sql, &[]).await.unwrap();
        drop(client);
        let _ = driver.await;
        rows
    })
}

fn drop_schema(url: &str, schema: &str) {
    query(url, &format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
}
