//! One session in Postgres: opened under a lease, its turn's entries, state and metadata
//! written in one transaction that first checks the lease's fencing token.
//!
//! Appends wait in memory until the commit (as in the memory store): a process that dies
//! mid-turn leaves the session as its last commit left it. A commit is idempotent across a
//! lost answer: the session row counts commits, so a commit tried again after its connection
//! dropped finds it landed (same count + 1, same last seq) and does not write it twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::driver::Fail;
use super::lease::{self, Take};
use super::{KIND, Shared};
use crate::contract::message::Message;
use crate::error::{Error, Result};
use crate::store::pending::Pending;
use crate::store::{Commit, Opened, SessionMeta, SessionStore, StorageCursor};

/// One session's store over a [`super::PgBackend`], holding its lease.
#[derive(Debug)]
pub struct PgStore {
    shared: Arc<Shared>,
    id: String,
    token: i64,
    /// Set once a renewal or a commit found the lease gone.
    lost: Arc<AtomicBool>,
    pending: Pending,
    meta: SessionMeta,
    /// Commits the session row counted when this store last read or wrote it.
    commits: i64,
}

/// The session as its last commit left it.
pub(super) struct Loaded {
    created_at: String,
    turns: i64,
    next_id: i64,
    commits: i64,
    state: Option<Value>,
    pub(super) messages: Vec<Arc<Message>>,
}

/// Takes the lease on `id` (waiting up to `lease_wait` for another process's to expire),
/// then reads the session, creating it when new.
pub(super) fn open(shared: &Arc<Shared>, id: &str, cwd: &str) -> Result<Opened> {
    let token = take_lease(shared, id)?;
    let lost = shared.leases.register(id, token);
    let loaded = match load(shared, id, cwd) {
        Ok(l) => l,
        Err(e) => {
            release(shared, id, token);
            return Err(e);
        }
    };
    let store = PgStore {
        shared: Arc::clone(shared),
        id: id.to_owned(),
        token,
        lost,
        pending: Pending::after(&loaded.messages, loaded.next_id.max(1) as u64),
        meta: SessionMeta {
            created_at: Some(loaded.created_at),
            turns: Some(loaded.turns.max(0) as u64),
        },
        commits: loaded.commits,
    };
    Ok(Opened {
        store: Box::new(store),
        messages: loaded.messages,
        state: loaded.state,
    })
}

fn take_lease(shared: &Arc<Shared>, id: &str) -> Result<i64> {
    let started = Instant::now();
    let wait = shared.options.lease_wait;
    loop {
        let (pool, s, owner, session, ttl) = (
            shared.pool.clone(),
            shared.s.clone(),
            shared.leases.owner.clone(),
            id.to_owned(),
            shared.options.lease,
        );
        let took = shared.run("take lease", Some(id), move || {
            let (pool, s, owner, session) =
                (pool.clone(), s.clone(), owner.clone(), session.clone());
            async move {
                let client = pool.get().await?;
                lease::take(&client, &s, &session, &owner, ttl).await
            }
        })?;
        match took {
            Take::Taken(token) => return Ok(token),
            Take::Held { owner, remaining } => {
                let waited = started.elapsed();
                if waited + remaining > wait {
                    return Err(Error::SessionMoved {
                        backend: KIND,
                        op: "take lease",
                        session: id.to_owned(),
                        message: format!(
                            "it is served by {owner}, whose lease runs {:.1} s more (waited {:.1} s of the {:.1} s a process waits for a lease)",
                            remaining.as_secs_f64(),
                            waited.as_secs_f64(),
                            wait.as_secs_f64()
                        ),
                    });
                }
                // Look again when it is due to expire (or sooner: it may be released).
                std::thread::sleep(
                    remaining.clamp(Duration::from_millis(10), Duration::from_millis(250)),
                );
            }
        }
    }
}

fn load(shared: &Arc<Shared>, id: &str, cwd: &str) -> Result<Loaded> {
    let (pool, s, session, cwd) = (
        shared.pool.clone(),
        shared.s.clone(),
        id.to_owned(),
        cwd.to_owned(),
    );
    let created = crate::transcript::iso_now();
    shared.run("open session", Some(id), move || {
        let (pool, s, session, cwd, created) = (
            pool.clone(),
            s.clone(),
            session.clone(),
            cwd.clone(),
            created.clone(),
        );
        async move {
            let mut client = pool.get().await?;
            let tx = client
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                .start()
                .await?;
            tx.execute(
                &format!(
                    "INSERT INTO {s}.ctxhost_sessions (id, cwd, created_at) VALUES ($1, $2, $3)
                     ON CONFLICT (id) DO NOTHING"
                ),
                &[&session, &cwd, &created],
            )
            .await?;
            let loaded = read(&tx, &s, &session).await?;
            tx.commit().await?;
            Ok(loaded)
        }
    })
}

/// The session row and its entries, in one snapshot.
pub(super) async fn read(
    tx: &deadpool_postgres::Transaction<'_>,
    s: &str,
    session: &str,
) -> Result<Loaded, Fail> {
    let row = tx
        .query_one(
            &format!(
                "SELECT created_at, turns, last_seq, next_id, commits, state
                 FROM {s}.ctxhost_sessions WHERE id = $1"
            ),
            &[&session],
        )
        .await?;
    let last_seq: i64 = row.try_get(2)?;
    let state = match row.try_get::<_, Option<String>>(5)? {
        Some(text) => Some(
            serde_json::from_str::<Value>(&text)
                .map_err(|e| Fail::Fatal(format!("its stored state is not JSON: {e}")))?,
        ),
        None => None,
    };
    let rows = tx
        .query(
            &format!(
                "SELECT seq, body FROM {s}.ctxhost_entries WHERE session_id = $1 ORDER BY seq"
            ),
            &[&session],
        )
        .await?;
    let mut messages = Vec::with_capacity(rows.len());
    for row in rows {
        let seq: i64 = row.try_get(0)?;
        let body: &str = row.try_get(1)?;
        let m: Message = serde_json::from_str(body)
            .map_err(|e| Fail::Fatal(format!("entry {seq} is not a message: {e}")))?;
        messages.push(Arc::new(m));
    }
    if messages.len() as i64 != last_seq {
        return Err(Fail::Fatal(format!(
            "it holds {} entries but its last commit counted {last_seq}; nothing was changed",
            messages.len()
        )));
    }
    Ok(Loaded {
        created_at: row.try_get(0)?,
        turns: row.try_get(1)?,
        next_id: row.try_get(3)?,
        commits: row.try_get(4)?,
        state,
        messages,
    })
}

/// Releases the lease `token` on `id`, waiting a little for it (a close in serve, then an
/// open elsewhere, should find it free).
fn release(shared: &Arc<Shared>, id: &str, token: i64) {
    shared.leases.unregister(id, token);
    let (pool, s, session) = (shared.pool.clone(), shared.s.clone(), id.to_owned());
    let released = shared.driver.run(async move {
        tokio::time::timeout(
            Duration::from_secs(2),
            lease::release(&pool, &s, &session, token),
        )
        .await
    });
    match released {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => {
            tracing::warn!(
                session = id,
                "postgres: releasing a lease failed (it expires by itself): {}",
                e.message()
            );
        }
        _ => tracing::warn!(
            session = id,
            "postgres: releasing a lease timed out (it expires by itself)"
        ),
    }
}

/// What one commit writes.
struct Write {
    seqs: Vec<i64>,
    ids: Vec<String>,
    bodies: Vec<String>,
    state: Option<String>,
    turn: i64,
    last_seq: i64,
    next_id: i64,
    commits: i64,
}

impl PgStore {
    fn moved(&self, op: &'static str, message: String) -> Error {
        Error::SessionMoved {
            backend: KIND,
            op,
            session: self.id.clone(),
            message,
        }
    }
}

impl SessionStore for PgStore {
    fn append(&mut self, messages: Vec<Message>) -> Result<Vec<Arc<Message>>> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(self.moved(
                "append",
                "this process's lease was lost (expired or taken over)".into(),
            ));
        }
        Ok(self.pending.stamp(messages))
    }

    fn commit(&mut self, commit: Commit<'_>) -> Result<()> {
        if self.pending.is_empty() && commit.state.is_none() && !commit.turn_ended {
            return Ok(());
        }
        if self.lost.load(Ordering::SeqCst) {
            return Err(self.moved(
                "commit turn",
                "this process's lease was lost (expired or taken over); nothing was written".into(),
            ));
        }
        let encode = |what: &str, e: serde_json::Error| Error::Store {
            backend: KIND,
            op: "encode",
            session: Some(self.id.clone()),
            message: format!("{what}: {e}"),
        };
        let mut w = Write {
            seqs: Vec::with_capacity(self.pending.messages().len()),
            ids: Vec::with_capacity(self.pending.messages().len()),
            bodies: Vec::with_capacity(self.pending.messages().len()),
            state: commit
                .state
                .map(|s| serde_json::to_string(&**s))
                .transpose()
                .map_err(|e| encode("state", e))?,
            turn: i64::from(commit.turn_ended),
            last_seq: self.pending.len() as i64,
            next_id: self.pending.next_id() as i64,
            commits: self.commits,
        };
        let committed = self.pending.committed_len();
        for (i, m) in self.pending.messages().iter().enumerate() {
            w.seqs.push((committed + i + 1) as i64);
            w.ids.push(m.id.clone());
            w.bodies
                .push(serde_json::to_string(&**m).map_err(|e| encode("message", e))?);
        }
        let w = Arc::new(w);
        let (pool, s, session, token, ttl) = (
            self.shared.pool.clone(),
            self.shared.s.clone(),
            self.id.clone(),
            self.token,
            self.shared.options.lease,
        );
        let written = self.shared.run("commit turn", Some(&self.id), move || {
            let (pool, s, session, w) = (pool.clone(), s.clone(), session.clone(), Arc::clone(&w));
            async move {
                let mut client = pool.get().await?;
                let tx = client.transaction().await?;
                lease::check_and_renew(&tx, &s, &session, token, ttl).await?;
                let row = tx
                    .query_one(
                        &format!(
                            "SELECT commits, last_seq FROM {s}.ctxhost_sessions WHERE id = $1 FOR UPDATE"
                        ),
                        &[&session],
                    )
                    .await?;
                let (commits, last_seq): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
                if commits == w.commits + 1 && last_seq == w.last_seq {
                    // An earlier try of this very commit landed; its answer was lost.
                    return Ok(());
                }
                if commits != w.commits {
                    return Err(Fail::Moved(format!(
                        "it was written elsewhere ({commits} commits, this process saw {}); this write was refused",
                        w.commits
                    )));
                }
                if !w.seqs.is_empty() {
                    let insert = tx
                        .prepare_cached(&format!(
                            "INSERT INTO {s}.ctxhost_entries (session_id, seq, entry_id, body, token)
                             SELECT $1, *, $5 FROM unnest($2::bigint[], $3::text[], $4::text[])"
                        ))
                        .await?;
                    tx.execute(&insert, &[&session, &w.seqs, &w.ids, &w.bodies, &token])
                        .await?;
                }
                let update = tx
                    .prepare_cached(&format!(
                        "UPDATE {s}.ctxhost_sessions
                         SET state = coalesce($2, state), turns = turns + $3, last_seq = $4,
                             next_id = $5, commits = commits + 1, updated_at = now()
                         WHERE id = $1"
                    ))
                    .await?;
                tx.execute(
                    &update,
                    &[&session, &w.state, &w.turn, &w.last_seq, &w.next_id],
                )
                .await?;
                tx.commit().await?;
                Ok(())
            }
        });
        match written {
            Ok(()) => {
                self.pending.committed();
                self.commits += 1;
                if commit.turn_ended {
                    self.meta.turns = Some(self.meta.turns.unwrap_or(0) + 1);
                }
                Ok(())
            }
            Err(e) => {
                if matches!(e, Error::SessionMoved { .. }) {
                    self.lost.store(true, Ordering::SeqCst);
                }
                Err(e)
            }
        }
    }

    fn len(&self) -> usize {
        self.pending.len()
    }

    fn cursor(&self) -> StorageCursor {
        self.pending.cursor(KIND, &self.id)
    }

    fn meta(&self) -> SessionMeta {
        self.meta.clone()
    }

    fn location(&self) -> String {
        format!("{}#{}", self.shared.target, self.id)
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        if self.lost.load(Ordering::SeqCst) {
            self.shared.leases.unregister(&self.id, self.token);
        } else {
            release(&self.shared, &self.id, self.token);
        }
    }
}
