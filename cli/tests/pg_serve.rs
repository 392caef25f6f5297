//! 4 `ctxhost serve --stdio` processes over one Postgres database (`host.store: {kind:
//! "postgres"}`, a schema of this run's own, dropped at the end), 200 sessions spread over them
//! (ingest, assemble and afterTurn, in the full form: every call carries the client's whole
//! view, as a protocol-1 client sends it). One process is SIGKILLed mid-traffic, with a call in
//! flight; its sessions go to the other three, which take them over once its leases expire (a
//! call answered -32003 meanwhile is sent again, a bounded number of times) and continue them.
//! A second process is then SIGSTOPped with a call queued, its sessions moved and continued
//! elsewhere past its leases, and it is woken up: its queued call must be refused (-32003), and
//! nothing of it stored.
//!
//! Checked from the database at the end: every message of every session stored exactly once,
//! in the client's order (none lost, none doubled), and no entry written under a fencing token
//! older than one already written for that session. The counts are printed to stderr.
//!
//! The server is `CTXHOST_TEST_PG` (`tests/run.sh` starts one); unset, the test skips, except
//! under CI=true. The lease is the store's default (10 s, waited for up to 12 s): `host.store`
//! has no lease setting.

#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::kills::ENGINE;
use crate::kills::child::{Outcome, Serve};
use crate::kills::disk::{is_summary, key_of};
use crate::pg_server::{SERVER, Scratch};

const PROCESSES: usize = 4;
const SESSIONS: usize = 200;
/// Sends of a call answered -32003 (its session's lease is still another process's) before
/// the test gives up; the store itself waits up to 12 s for a lease on each.
const MOVED_TRIES: u32 = 5;

/// What the client knows of one session.
struct Conversation {
    id: String,
    key: String,
    /// Every message the client holds, in order (what OpenClaw's own transcript keeps).
    view: Vec<Value>,
    turns: u64,
    /// The process serving it.
    route: usize,
    /// Processes it was moved away from.
    moves: u32,
    /// A call the killed process died under: sent again first, wherever the session goes
    /// next (as the bridge sends a call its child died under again to a new child).
    unanswered: Option<(&'static str, Value)>,
}

impl Conversation {
    fn params(&self, extra: Value) -> Value {
        let mut p = json!({"sessionId": self.id, "sessionKey": self.key});
        p.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        p
    }
}

/// How one call ended.
enum Reply {
    Answered,
    /// The child died under it (only the killed process's calls may).
    Died,
}

/// Counts over every call.
#[derive(Default)]
struct Counts {
    calls: u64,
    /// Calls answered -32003 and sent again.
    moved_answers: u64,
    /// Calls the killed process died under, sent again to the process taking over.
    resent: u64,
}

/// Sends `method` to `serve` until it is answered without -32003 (at most [`MOVED_TRIES`]
/// times); any other error fails the test.
fn call(serve: &mut Serve, method: &str, params: &Value, counts: &mut Counts) -> Reply {
    for _ in 0..MOVED_TRIES {
        counts.calls += 1;
        let id = serve
            .write(method, params)
            .expect("the child's stdin is open");
        match serve.wait(id, None) {
            Some(Outcome::Answered(r)) => match r.get("error") {
                None => return Reply::Answered,
                Some(e) if e["code"] == -32003 => {
                    counts.moved_answers += 1;
                    std::thread::sleep(Duration::from_millis(500));
                }
                Some(e) => panic!("{method} {}: answered an error: {e}", params["sessionId"]),
            },
            _ => return Reply::Died,
        }
    }
    panic!(
        "{method} {}: still -32003 after {MOVED_TRIES} sends",
        params["sessionId"]
    );
}

/// One turn of `c`: its question ingested, a window assembled, the answer reaching ctxhost in
/// afterTurn's view. With `kill`, the process is SIGKILLed once afterTurn's request is
/// written (the call is in flight); returns whether every call was answered.
fn turn(serve: &mut Serve, c: &mut Conversation, kill: bool, counts: &mut Counts) -> bool {
    if let Some((method, params)) = c.unanswered.take() {
        counts.resent += 1;
        assert!(
            matches!(call(serve, method, &params, counts), Reply::Answered),
            "{}: {method} sent again died too",
            c.id
        );
    }
    let t = c.turns;
    c.turns += 1;
    let question = json!({"role": "user", "content": format!("{} t{t} question", c.id), "timestamp": t * 2 + 1});
    c.view.push(question.clone());
    let before = c.view.len() - 1;
    let mut ok = matches!(
        call(
            serve,
            "ingest",
            &c.params(json!({"message": question})),
            counts
        ),
        Reply::Answered
    );
    ok &= matches!(
        call(
            serve,
            "assemble",
            &c.params(json!({"messages": c.view, "tokenBudget": 1_000_000,
                             "prompt": format!("{} t{t} question", c.id)})),
            counts
        ),
        Reply::Answered
    );
    c.view
        .push(json!({"role": "assistant", "timestamp": t * 2 + 2,
        "content": [{"type": "text", "text": format!("{} t{t} answer", c.id)}]}));
    let after = c.params(json!({"messages": c.view, "prePromptMessageCount": before,
                                "sessionFile": "f", "tokenBudget": 1_000_000}));
    if kill {
        counts.calls += 1;
        let id = serve.write("afterTurn", &after).expect("stdin open");
        std::thread::sleep(Duration::from_millis(2));
        serve.kill();
        // An answer already on its way still counts; else the call is sent again.
        let answered =
            matches!(serve.wait(id, None), Some(Outcome::Answered(r)) if r.get("error").is_none());
        if !answered {
            c.unanswered = Some(("afterTurn", after));
        }
        return ok && answered;
    }
    ok & matches!(call(serve, "afterTurn", &after, counts), Reply::Answered)
}

/// One turn of every session, each process's sessions on a thread of their own (the
/// processes serve at once). `kill`: (process, after how many of its sessions) is SIGKILLed
/// with that session's afterTurn in flight, and its remaining sessions get no turn this round.
fn round(
    serves: &mut [Option<Serve>],
    conversations: &mut [Conversation],
    kill: Option<(usize, usize)>,
    counts: &mut Counts,
) {
    let mut buckets: Vec<Vec<&mut Conversation>> = (0..serves.len()).map(|_| Vec::new()).collect();
    for c in conversations.iter_mut() {
        buckets[c.route].push(c);
    }
    let tallies: Vec<Counts> = std::thread::scope(|scope| {
        let threads: Vec<_> = serves
            .iter_mut()
            .zip(buckets)
            .enumerate()
            .filter_map(|(p, (serve, bucket))| {
                let serve = serve.as_mut()?;
                Some(scope.spawn(move || {
                    let mut counts = Counts::default();
                    for (i, c) in bucket.into_iter().enumerate() {
                        let killing = kill == Some((p, i));
                        let answered = turn(serve, c, killing, &mut counts);
                        if killing {
                            eprintln!(
                                "pg_serve: process {p} (pid {}) SIGKILLed in {}'s afterTurn ({})",
                                serve.pid(),
                                c.id,
                                if answered { "answered" } else { "unanswered" }
                            );
                            break;
                        }
                        assert!(answered, "process {p}: {} died under a call", c.id);
                    }
                    counts
                }))
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for t in tallies {
        counts.calls += t.calls;
        counts.moved_answers += t.moved_answers;
        counts.resent += t.resent;
    }
}

/// Routes every session of process `from` to `to`, round robin.
fn move_sessions(conversations: &mut [Conversation], from: usize, to: &[usize]) -> usize {
    let mut n = 0;
    for c in conversations.iter_mut().filter(|c| c.route == from) {
        c.route = to[n % to.len()];
        c.moves += 1;
        n += 1;
    }
    n
}

fn signal(serve: &Serve, signal: &str) {
    let pid = serve.pid().to_string();
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Wakes a stopped child when dropped (a failing test must not leave it stopped forever; it
/// is this test's own child, not yet waited for, so its pid is still its own).
struct WakeOnDrop(u32);

impl Drop for WakeOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

fn start(dir: &Path, p: usize, engine: &Path, config: &Path) -> Serve {
    let home = dir.join(format!("p{p}"));
    std::fs::create_dir_all(&home).unwrap();
    let mut s = Serve::spawn(&home.join("state"), engine, &home);
    let init = json!({"engine": engine, "config": config,
                      "clientInfo": {"name": "pg-serve-test", "version": "1"},
                      "capabilities": {"deltaViews": false}});
    let id = s.write("initialize", &init).unwrap();
    match s.wait(id, None) {
        Some(Outcome::Answered(r)) => assert!(r.get("error").is_none(), "{r}"),
        _ => panic!("serve process {p} died during initialize"),
    }
    s
}

#[test]
fn four_serve_processes_share_200_sessions_and_one_sigkilled_loses_nothing() {
    let Some(pg) = Scratch::new("pg_serve") else {
        return;
    };
    let _server = SERVER.read();
    let dir = tempfile::tempdir().unwrap();
    let engine = dir.path().join("keepall.lua");
    std::fs::write(&engine, ENGINE).unwrap();
    let config = dir.path().join("ctxhost.json5");
    std::fs::write(
        &config,
        format!(
            "{{ host: {{ store: {{ kind: \"postgres\", url: {:?}, schema: {:?} }} }} }}",
            pg.url, pg.schema
        ),
    )
    .unwrap();
    let mut serves: Vec<Option<Serve>> = (0..PROCESSES)
        .map(|p| Some(start(dir.path(), p, &engine, &config)))
        .collect();
    let mut conversations: Vec<Conversation> = (0..SESSIONS)
        .map(|n| Conversation {
            id: format!("sid-{n}"),
            key: format!("agent:pg{n}:main"),
            view: Vec::new(),
            turns: 0,
            route: n % PROCESSES,
            moves: 0,
            unanswered: None,
        })
        .collect();
    let mut counts = Counts::default();

    // Every process serves its sessions; in the second round process 0 is SIGKILLed halfway
    // through its sessions, with a call in flight, while the others are mid-round.
    round(&mut serves, &mut conversations, None, &mut counts);
    round(
        &mut serves,
        &mut conversations,
        Some((0, SESSIONS / PROCESSES / 2)),
        &mut counts,
    );
    serves[0] = None;
    let killed_moved = move_sessions(&mut conversations, 0, &[1, 2, 3]);
    // Its sessions continue on the others (each first waits out the dead process's lease).
    round(&mut serves, &mut conversations, None, &mut counts);
    round(&mut serves, &mut conversations, None, &mut counts);

    // Process 1 stops with a call queued for one of its sessions; its sessions move on.
    let stale_session = conversations
        .iter()
        .find(|c| c.route == 1)
        .unwrap()
        .id
        .clone();
    let stale_text = format!("{stale_session} from the stopped process");
    let (stale_id, stale_params, wake) = {
        let c = conversations
            .iter()
            .find(|c| c.id == stale_session)
            .unwrap();
        let serve = serves[1].as_mut().unwrap();
        signal(serve, "STOP");
        let wake = WakeOnDrop(serve.pid());
        let params =
            c.params(json!({"message": {"role": "user", "content": stale_text, "timestamp": 0}}));
        (serve.write("ingest", &params).unwrap(), params, wake)
    };
    let stopped = serves[1].take().unwrap();
    let stopped_moved = move_sessions(&mut conversations, 1, &[2, 3]);
    round(&mut serves, &mut conversations, None, &mut counts);
    // Every lease it held has expired and been taken over: it wakes up and its queued call
    // must be refused.
    let mut stopped = stopped;
    signal(&stopped, "CONT");
    drop(wake);
    let stale_reply = match stopped.wait(stale_id, None) {
        Some(Outcome::Answered(r)) => r,
        _ => panic!("the resumed process died"),
    };
    assert_eq!(
        stale_reply["error"]["code"], -32003,
        "a process whose lease moved has its write refused: {stale_reply} ({stale_params})"
    );
    stopped.close();
    round(&mut serves, &mut conversations, None, &mut counts);
    for s in serves.iter_mut() {
        if let Some(s) = s.take() {
            s.close();
        }
    }

    // What the database holds, session by session.
    let rows = pg.sql(&format!(
        "SELECT session_id, seq, body, token FROM \"{}\".ctxhost_entries ORDER BY session_id, seq",
        pg.schema
    ));
    let mut stored: BTreeMap<String, Vec<(String, i64)>> = BTreeMap::new();
    for row in &rows {
        let body: Value = serde_json::from_str(row.get::<_, &str>(2)).unwrap();
        let message = if body.get("message").is_some() {
            &body["message"]
        } else {
            &body
        };
        if message.get("role").is_none() || is_summary(message) {
            continue;
        }
        stored
            .entry(row.get(0))
            .or_default()
            .push((key_of(message), row.get(3)));
    }
    let (mut messages, mut lost, mut doubled, mut stale_writes, mut changed_token) =
        (0, 0, 0, 0, 0);
    for c in &conversations {
        let got = stored
            .get(&c.id)
            .or_else(|| stored.get(&c.key))
            .unwrap_or_else(|| {
                panic!(
                    "{} ({}) has no entries; stored sessions: {:?}",
                    c.id,
                    c.key,
                    stored.keys().take(5).collect::<Vec<_>>()
                )
            });
        let texts: Vec<&str> = got.iter().map(|(t, _)| t.as_str()).collect();
        let want: Vec<String> = c.view.iter().map(key_of).collect();
        for w in &want {
            match texts.iter().filter(|t| **t == w.as_str()).count() {
                0 => lost += 1,
                1 => {}
                _ => doubled += 1,
            }
        }
        for t in &texts {
            assert!(
                want.iter().any(|w| w == t),
                "{}: a message the client never had in its view is stored: {t}",
                c.id
            );
        }
        assert!(
            texts == want || lost + doubled > 0,
            "{}: stored out of order: {texts:?}",
            c.id
        );
        messages += texts.len();
        // A write accepted from a process after its lease moved carries a token older than
        // one already written before it.
        stale_writes += got.windows(2).filter(|w| w[1].1 < w[0].1).count();
        if got.first().map(|f| f.1) != got.last().map(|l| l.1) {
            changed_token += 1;
        }
        assert!(
            c.moves == 0 || got.first().map(|f| f.1) != got.last().map(|l| l.1),
            "{}: moved, yet every entry carries one token",
            c.id
        );
    }
    let turns: u64 = conversations.iter().map(|c| c.turns).sum();
    eprintln!(
        "pg_serve: {SESSIONS} sessions over {PROCESSES} serve processes, {turns} turns, {} calls \
         ({} answered -32003 and sent again, {} the SIGKILLed process died under sent again \
         elsewhere); sessions moved: {killed_moved} from the SIGKILLed \
         process, {stopped_moved} from the SIGSTOPped one ({changed_token} sessions' entries \
         carry more than one fencing token); messages stored {messages} of {} sent, lost {lost}, \
         doubled {doubled}, written under a stale token {stale_writes}; the stopped process's \
         queued write answered {}",
        counts.calls,
        counts.moved_answers,
        counts.resent,
        conversations.iter().map(|c| c.view.len()).sum::<usize>(),
        stale_reply["error"]["code"],
    );
    assert_eq!((lost, doubled, stale_writes), (0, 0, 0));
    assert!(
        !rows
            .iter()
            .any(|r| r.get::<_, &str>(2).contains(&stale_text)),
        "nothing of the stopped process's refused call is stored"
    );
}
