//! Exactly once under the bridge's own retries: a client that behaves like
//! `bridges/openclaw/index.js` (one `ctxhost serve --stdio` child; it speaks delta views, and a
//! call whose child died under it is sent again to a new child, from no belief of what ctxhost
//! holds: [`views`]) drives conversations while the child is SIGKILLed at random moments after
//! a request is written. Seen from outside at
//! the end: each conversation's `transcript.jsonl` holds every client message exactly once, in
//! order (the session's own compaction summaries aside), and no acknowledged message is ever
//! missing from a later `assemble` window. It runs once per durable backend
//! (`each_backend!`): JSONL files, one SQLite database (`host.store: {kind: "sqlite"}`), and a
//! Postgres schema of the test's own (`host.store: {kind: "postgres", url, schema}`). On
//! Postgres a killed child keeps its sessions' leases until they expire (10 s, the store's
//! default; `host.store.leaseMs` can shorten it to 1 s, which would still add 100 s): when the
//! bridge starts the next child, every
//! lease then held is a killed child's (it runs one child at a time, and waits for each it
//! kills), and the test expires them at once, as 10 s would. Waiting out the lease is the
//! 4-process test's part (`pg_serve`); here it would only make 100 kills take 17 minutes.
//!
//! The counts (kills, messages acknowledged, stored twice, lost) and what each kill left on
//! disk (messages stored before a session's first state save, or after its last; a summary
//! stored after it; an empty transcript) are printed to stderr.
//!
//! `CTXHOST_KILL_RUNS` sets the number of kills (default 100), `CTXHOST_KILL_SEED` replays one
//! run: the same conversations and the same kill plan (kill delays follow the measured round
//! trip, so a replay hits nearby moments, not the same instants). `CTXHOST_KILL_LOG` passes a
//! log level to the children and shows their stderr; `CTXHOST_KILL_TRACE=FILE` writes the
//! run's calls and kills to FILE. With `CTXHOST_KILL_GIVE_UP` set, a call whose retry died too
//! is given up half the time, as the bridge gives up after one retry (OpenClaw's error path;
//! its own transcript keeps the message, and a later view carries it).
//! `CTXHOST_KILL_VIEWS=full` speaks the full form (the whole history with every call, as a
//! protocol-1 client) instead of delta views.

#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

pub(crate) mod child;
pub(crate) mod disk;
mod tally;
mod views;

use crate::rng::{Rng, env_u64};
use child::{Outcome, Serve};
use disk::{is_summary, key_of, left_behind, stored, transcript_of};
use tally::{Conversation, Tally};
use views::{Carried, rebuilt};

/// Keeps everything; a forced `compact` writes a summary and keeps every message after it, so
/// kills land behind summaries while every client message stays in the window.
pub(crate) const ENGINE: &str = r#"local M = { info = { id = "keepall", name = "Keep all", ownsCompaction = true } }
function M.ingest(p) p.state.ingested = (p.state.ingested or 0) + 1 return { ingested = true } end
function M.assemble(p)
  return { messages = p.messages, estimatedTokens = host.tokens(p.messages) }
end
function M.compact(p)
  local first
  for _, m in ipairs(p.messages) do
    if m.role ~= "compactionSummary" then first = m break end
  end
  if not first then return { ok = true, compacted = false, reason = "nothing to keep" } end
  return { ok = true, compacted = true,
           result = { summary = "summary of " .. #p.messages .. " messages",
                      firstKeptEntryId = first.id, tokensBefore = host.tokens(p.messages) } }
end
return M
"#;

const KEY: &str = "agent:main:main";

/// The bridge side: the child it talks to, and what it has seen.
struct Bridge<'a> {
    state: PathBuf,
    /// The Postgres schema, whose killed children's leases are expired (see the module doc).
    pg: Option<&'a crate::pg_server::Scratch>,
    /// Leases expired that way.
    leases_expired: u64,
    /// Children started so far (every one before the current was killed).
    children: u64,
    /// The config naming the store (`host.store`), when it is not the default JSONL one.
    config: Option<PathBuf>,
    engine: PathBuf,
    home: PathBuf,
    serve: Option<Serve>,
    rng: Rng,
    /// The remaining kills; none are planned once it reaches 0.
    kills_left: u64,
    kills: u64,
    /// Kills that left the call unanswered (it was sent again).
    resent: u64,
    /// Whether a call whose retry died too is given up (the bridge's own rule), rather than
    /// sent again until answered.
    give_up: bool,
    /// Calls given up after their retry died too.
    given_up: u64,
    /// A running mean of a call's round trip (µs): kill delays are drawn from about twice it.
    round_trip_us: f64,
    /// Speaks delta views (else the full form).
    delta: bool,
    log: Vec<String>,
    /// What each kill left on disk (see [`left_behind`]), by kind.
    windows: BTreeMap<&'static str, u64>,
}

impl Bridge<'_> {
    fn serve(&mut self) -> &mut Serve {
        if self.serve.is_none() {
            if let Some(pg) = self.pg.filter(|_| self.children > 0) {
                let expired = pg.sql(&format!(
                    "UPDATE \"{}\".ctxhost_leases SET expires_at = clock_timestamp()
                     WHERE expires_at > clock_timestamp() RETURNING session_id",
                    pg.schema
                ));
                self.leases_expired += expired.len() as u64;
            }
            self.children += 1;
            let mut s = Serve::spawn(&self.state, &self.engine, &self.home);
            let mut init = json!({"engine": self.engine, "clientInfo": {"name": "kills-test", "version": "1"},
                              "capabilities": {"delegateCompaction": true, "llmComplete": true,
                                               "deltaViews": self.delta}});
            if let Some(config) = &self.config {
                init["config"] = json!(config);
            }
            let id = s.write("initialize", &init).expect("initialize written");
            match s.wait(id, None) {
                Some(Outcome::Answered(r)) => assert!(r.get("error").is_none(), "{r}"),
                _ => panic!("a fresh child died during initialize"),
            }
            self.serve = Some(s);
        }
        self.serve.as_mut().unwrap()
    }

    /// One call, sent again (the same params) to a new child until answered, or given up as
    /// the bridge does once its one retry died too (`None`: OpenClaw's error path; the turn
    /// goes on, and its own transcript keeps the message).
    fn call(&mut self, method: &str, params: Value, early: bool) -> Option<Value> {
        let mut died = 0;
        loop {
            match self.attempt(method, &params, early, &mut died) {
                Attempt::Answered(r) => return Some(r),
                Attempt::Refused(e) => {
                    panic!("{method} answered an error: {e}\n{}", self.log.join("\n"))
                }
                Attempt::Died => {}
                Attempt::GivenUp => return None,
            }
        }
    }

    /// One try of a call, with a kill planned at random (more often when `early`: a
    /// conversation's first calls, before its first save, and compactions, whose summary a
    /// retry must not take for a client message). `died` counts the tries of this call the
    /// child died under; after the second, the call is given up half the time when
    /// `give_up` is set.
    fn attempt(&mut self, method: &str, params: &Value, early: bool, died: &mut u32) -> Attempt {
        let kill_at =
            (self.kills_left > 0 && self.rng.one_in(if early { 2 } else { 4 })).then(|| {
                let span = (2.0 * self.round_trip_us) as u64 + 50;
                Duration::from_micros(self.rng.below(span))
            });
        self.serve();
        let mut serve = self.serve.take().unwrap();
        let started = Instant::now();
        let Some(id) = serve.write(method, params) else {
            panic!(
                "{method}: the child's stdin closed before a kill\n{}",
                self.log.join("\n")
            );
        };
        let mut outcome = serve.wait(id, kill_at.map(|d| started + d));
        let killed = outcome.is_none();
        if killed {
            // The kill lands while the call is in flight; an answer already on its way
            // still counts, as it does for the bridge.
            serve.kill();
            self.kills += 1;
            self.kills_left -= 1;
            outcome = serve.wait(id, None);
            let window = match &self.config {
                // A call's messages and state are one transaction: no window between them.
                Some(_) => "a database transaction (all or nothing)",
                None => left_behind(&self.state, params["sessionId"].as_str().unwrap_or("")),
            };
            *self.windows.entry(window).or_default() += 1;
            self.log.push(format!(
                "kill {} at {:?} in {method}, {window} ({})",
                self.kills,
                kill_at.unwrap_or_default(),
                if matches!(outcome, Some(Outcome::Answered(_))) {
                    "answered"
                } else {
                    "sent again"
                }
            ));
        }
        match outcome {
            Some(Outcome::Answered(r)) => {
                if killed {
                    serve.kill();
                } else {
                    let us = started.elapsed().as_micros() as f64;
                    self.round_trip_us = 0.9 * self.round_trip_us + 0.1 * us;
                    self.serve = Some(serve);
                }
                match r.get("error") {
                    Some(e) => Attempt::Refused(e.clone()),
                    None => Attempt::Answered(r["result"].clone()),
                }
            }
            _ => {
                assert!(
                    killed,
                    "{method}: the child died by itself\n{}",
                    self.log.join("\n")
                );
                serve.kill();
                *died += 1;
                if self.give_up && *died >= 2 && self.rng.one_in(2) {
                    self.given_up += 1;
                    self.log.push(format!("{method} given up"));
                    return Attempt::GivenUp;
                }
                self.resent += 1;
                Attempt::Died
            }
        }
    }
}

/// How one try of a call ended.
enum Attempt {
    /// Its result.
    Answered(Value),
    /// Its error.
    Refused(Value),
    /// The child died under it (it is sent again).
    Died,
    /// Given up, as the bridge gives up after its one retry.
    GivenUp,
}

fn user(text: String) -> Value {
    json!({"role": "user", "content": text, "timestamp": 1})
}

fn assistant(text: String) -> Value {
    json!({"role": "assistant", "content": [{"type": "text", "text": text}], "timestamp": 2})
}

each_backend! { durable:
    sigkills_under_bridge_retries_store_nothing_twice_and_lose_nothing => kills_on;
}

/// The client messages the store holds for `session_id`, in order (summaries aside): read from
/// the JSONL files, or through `database` (the store's own reading of SQLite or Postgres).
fn stored_in(
    b: &Bridge,
    database: Option<&dyn ctxhost::store::Backend>,
    session_id: &str,
) -> Vec<String> {
    match database {
        None => stored(&transcript_of(&b.state, session_id)),
        Some(backend) => backend
            .open(session_id, "")
            .unwrap()
            .messages
            .iter()
            .map(|m| serde_json::to_value(&**m).unwrap())
            .filter(|m| !is_summary(m))
            .map(|m| key_of(&m))
            .collect(),
    }
}

fn kills_on(place: &crate::common::backends::Place) {
    use crate::common::backends::Kind;
    let kind = place.kind;
    let runs = env_u64("CTXHOST_KILL_RUNS").unwrap_or(100);
    let seed = env_u64("CTXHOST_KILL_SEED").unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            | 1
    });
    let dir = tempfile::tempdir().unwrap();
    let engine = dir.path().join("keepall.lua");
    std::fs::write(&engine, ENGINE).unwrap();
    let config = match kind {
        Kind::Sqlite => {
            // `ctxhost.db` in the state directory, the default path.
            let file = dir.path().join("sqlite.json5");
            std::fs::write(&file, "{ host: { store: { kind: \"sqlite\" } } }").unwrap();
            Some(file)
        }
        Kind::Postgres => {
            let file = dir.path().join("postgres.json");
            let store = place.settings().unwrap();
            std::fs::write(&file, json!({"host": {"store": store}}).to_string()).unwrap();
            Some(file)
        }
        _ => None,
    };
    // The state directory is the place's own: SQLite's default `ctxhost.db` in it is what
    // `place.open()` reads back.
    let mut b = Bridge {
        state: place.dir().to_path_buf(),
        pg: place.pg(),
        leases_expired: 0,
        children: 0,
        config,
        engine,
        home: dir.path().to_path_buf(),
        serve: None,
        rng: Rng(seed),
        kills_left: runs,
        kills: 0,
        resent: 0,
        give_up: std::env::var_os("CTXHOST_KILL_GIVE_UP").is_some(),
        given_up: 0,
        round_trip_us: 3000.0,
        delta: std::env::var("CTXHOST_KILL_VIEWS").as_deref() != Ok("full"),
        log: Vec::new(),
        windows: BTreeMap::new(),
    };
    // The conversations' shape has its own generator: the same seed gives the same calls
    // whatever the kills (whose moments follow the measured round trip) did.
    let mut shape = Rng(seed ^ 0x9e37_79b9_7f4a_7c15 | 1);
    let mut tally = Tally::default();
    let mut conversations: Vec<Conversation> = Vec::new();
    let mut compactions = 0;
    let mut ts = 0u64;
    while b.kills_left > 0 {
        // A new conversation under the same key, as OpenClaw's `/new` makes one.
        let n = conversations.len();
        let mut c = Conversation {
            id: format!("sid-{n}"),
            view: Vec::new(),
            known: None,
            acknowledged: BTreeSet::new(),
        };
        let turns = 4 + shape.below(10);
        let mut calls = 0;
        for t in 0..turns {
            let base = json!({"sessionId": c.id, "sessionKey": KEY});
            let with = |extra: Value| {
                let mut p = base.clone();
                p.as_object_mut()
                    .unwrap()
                    .extend(extra.as_object().unwrap().clone());
                p
            };
            ts += 1;
            let question = user(format!("c{n} t{t} question"));
            b.log.push(format!("{}: ingest t{t} question", c.id));
            let answered = if b.delta {
                let early = calls < 2;
                b.view_call(
                    &mut c.known,
                    "ingest",
                    with(json!({})),
                    Carried::New(vec![question.clone()]),
                    early,
                )
            } else {
                b.call("ingest", with(json!({"message": question})), calls < 2)
            };
            calls += 1;
            c.view.push(question);
            if answered.is_some() {
                c.acknowledge(c.view.len() - 1..c.view.len());
            }
            let before = c.view.len() - 1;
            // OpenClaw's view holds the question, or not yet (it is then the prompt).
            let shown = if shape.one_in(3) {
                before
            } else {
                c.view.len()
            };
            b.log.push(format!("{}: assemble ({shown} messages)", c.id));
            let prompt = json!({"tokenBudget": 1_000_000, "prompt": format!("c{n} t{t} question")});
            let r = if b.delta {
                let shown_view = c.view[..shown].to_vec();
                b.view_call(
                    &mut c.known,
                    "assemble",
                    with(prompt),
                    Carried::View(shown_view.clone()),
                    calls < 2,
                )
                .map(|r| rebuilt(&r, &shown_view))
            } else {
                let mut p = with(prompt);
                p["messages"] = json!(c.view[..shown]);
                b.call("assemble", p, calls < 2)
            };
            calls += 1;
            if let Some(r) = r {
                c.acknowledge(0..shown);
                tally.window(&c, &r, &b.log);
            }
            let reply: Vec<Value> = if shape.one_in(3) {
                // A tool turn: the call, its result and the answer in one batch.
                let call_id = format!("call_c{n}_t{t}");
                vec![
                    json!({"role": "assistant", "content": [{"type": "toolCall", "id": call_id,
                           "name": "read", "arguments": {"path": format!("f{t}")}}], "timestamp": ts}),
                    json!({"role": "toolResult", "toolCallId": call_id, "toolName": "read",
                           "content": [{"type": "text", "text": format!("c{n} t{t} file")}],
                           "isError": false, "timestamp": ts}),
                    assistant(format!("c{n} t{t} answer after reading")),
                ]
            } else {
                vec![assistant(format!("c{n} t{t} answer"))]
            };
            let ingested = if shape.one_in(4) {
                // The reply reaches ctxhost only in afterTurn's view (as OpenClaw sends it to
                // an engine that defines afterTurn).
                b.log.push(format!("{}: t{t} reply not ingested", c.id));
                None
            } else if b.delta {
                let method = if reply.len() > 1 {
                    "ingestBatch"
                } else {
                    "ingest"
                };
                b.log
                    .push(format!("{}: {method} t{t} ({})", c.id, reply.len()));
                calls += 1;
                b.view_call(
                    &mut c.known,
                    method,
                    with(json!({})),
                    Carried::New(reply.clone()),
                    calls < 3,
                )
            } else if reply.len() > 1 {
                b.log
                    .push(format!("{}: ingestBatch t{t} ({})", c.id, reply.len()));
                calls += 1;
                b.call("ingestBatch", with(json!({"messages": reply})), calls < 3)
            } else {
                b.log.push(format!("{}: ingest t{t} answer", c.id));
                calls += 1;
                b.call("ingest", with(json!({"message": reply[0]})), calls < 3)
            };
            c.view.extend(reply.iter().cloned());
            if ingested.is_some() {
                c.acknowledge(c.view.len() - reply.len()..c.view.len());
            }
            b.log
                .push(format!("{}: afterTurn ({} messages)", c.id, c.view.len()));
            let turn = json!({"sessionFile": "f", "prePromptMessageCount": before,
                              "tokenBudget": 1_000_000});
            let answered = if b.delta {
                b.view_call(
                    &mut c.known,
                    "afterTurn",
                    with(turn),
                    Carried::View(c.view.clone()),
                    calls < 2,
                )
            } else {
                let mut p = with(turn);
                p["messages"] = json!(c.view);
                b.call("afterTurn", p, calls < 2)
            };
            calls += 1;
            if answered.is_some() {
                c.acknowledge(0..c.view.len());
            }
            if shape.one_in(6) {
                b.log.push(format!("{}: compact", c.id));
                let r = b.call(
                    "compact",
                    with(json!({"force": true, "tokenBudget": 1_000_000})),
                    true,
                );
                if let Some(r) = r {
                    assert_eq!(r["ok"], true, "{r}");
                    compactions += 1;
                }
            }
        }
        conversations.push(c);
    }

    // A clean child: every conversation's window, then its transcript.
    if let Some(mut s) = b.serve.take() {
        s.kill();
    }
    for c in &mut conversations {
        let params = json!({"sessionId": c.id, "sessionKey": KEY, "tokenBudget": 1_000_000});
        let r = if b.delta {
            let view = c.view.clone();
            b.view_call(
                &mut c.known,
                "assemble",
                params,
                Carried::View(view.clone()),
                false,
            )
            .map(|r| rebuilt(&r, &view))
        } else {
            let mut p = params;
            p["messages"] = json!(c.view);
            b.call("assemble", p, false)
        }
        .expect("no kills are left");
        c.acknowledge(0..c.view.len());
        tally.window(c, &r, &b.log);
    }
    b.serve.take().unwrap().close();
    let database = (kind != Kind::Jsonl).then(|| place.open());
    for c in &conversations {
        tally.stored(c, &stored_in(&b, database.as_deref(), &c.id));
    }
    eprintln!(
        "kills ({kind:?}): {} views: {} kills ({} calls sent again, {} given up), {} conversations, {} compactions, {} messages \
         acknowledged, stored twice {}, lost {}, out of order {} (CTXHOST_KILL_SEED={seed})",
        if b.delta { "delta" } else { "full" },
        b.kills,
        b.resent,
        b.given_up,
        conversations.len(),
        compactions,
        tally.acknowledged,
        tally.twice.len(),
        tally.lost.len(),
        tally.out_of_order.len(),
    );
    eprintln!("kills: what the kills left on disk: {:?}", b.windows);
    if b.pg.is_some() {
        eprintln!(
            "kills: killed children's leases expired by the test: {}",
            b.leases_expired
        );
    }
    if let Ok(path) = std::env::var("CTXHOST_KILL_TRACE") {
        std::fs::write(path, b.log.join("\n")).unwrap();
    }
    // A message first seen after later ones (its call was given up) cannot be stored in its
    // place in an append-only transcript: order is asserted when every call was answered.
    assert!(
        tally.twice.is_empty()
            && tally.lost.is_empty()
            && (tally.out_of_order.is_empty() || b.given_up > 0),
        "CTXHOST_KILL_SEED={seed}: stored twice {:?}, lost {:?}, out of order {:?}",
        tally.twice,
        tally.lost,
        tally.out_of_order
    );
    assert!(
        b.resent > 0,
        "no kill left a call unanswered (seed {seed}); the test proved nothing"
    );
}
