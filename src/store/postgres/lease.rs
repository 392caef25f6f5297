//! Leases: a session is served by one process at a time. A lease is a row (owner, fencing
//! token, expiry) taken when a process opens the session, renewed while it keeps it open (a
//! background task renews all of a process's leases in one statement; each commit renews its
//! own) and released when it closes or evicts it. Every commit checks, under the lease row's
//! lock, that its token is still the row's and the lease has not expired, so a process that
//! was paused or cut off past its expiry, or whose session another process took over, writes
//! nothing. Expiry is judged by the database's clock only, so the processes' clocks may
//! differ.
//!
//! A process that dies keeps its leases until they expire; the next process to open one of
//! its sessions waits for that (at most its `leaseWait`), takes the lease with the next token
//! and continues from the last committed turn.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use super::driver::{Fail, Retry};

/// What taking a lease found.
#[derive(Debug)]
pub(crate) enum Take {
    /// The lease is this process's now, with this fencing token.
    Taken(i64),
    /// Another process holds it for `remaining` more.
    Held {
        /// The holder's owner id.
        owner: String,
        /// Until its lease expires, unless renewed.
        remaining: Duration,
    },
}

/// Takes the lease on `session` for `owner` when it is free, expired, or already `owner`'s
/// (a second open in the same process fences the first: the token moves on).
pub(crate) async fn take(
    client: &deadpool_postgres::Object,
    s: &str,
    session: &str,
    owner: &str,
    ttl: Duration,
) -> Result<Take, Fail> {
    let taken = client
        .query_opt(
            &format!(
                "INSERT INTO {s}.ctxhost_leases AS l (session_id, owner, token, expires_at)
                 VALUES ($1, $2, 1, clock_timestamp() + make_interval(secs => $3))
                 ON CONFLICT (session_id) DO UPDATE
                   SET owner = EXCLUDED.owner, token = l.token + 1,
                       expires_at = EXCLUDED.expires_at, taken_at = clock_timestamp()
                   WHERE l.expires_at <= clock_timestamp() OR l.owner = EXCLUDED.owner
                 RETURNING token"
            ),
            &[&session, &owner, &ttl.as_secs_f64()],
        )
        .await?;
    if let Some(row) = taken {
        return Ok(Take::Taken(row.try_get(0)?));
    }
    let held = client
        .query_opt(
            &format!(
                "SELECT owner,
                        greatest(0, (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint)
                 FROM {s}.ctxhost_leases WHERE session_id = $1"
            ),
            &[&session],
        )
        .await?;
    Ok(match held {
        Some(row) => Take::Held {
            owner: row.try_get(0)?,
            remaining: Duration::from_millis(row.try_get::<_, i64>(1)?.max(0) as u64),
        },
        // Released between the two statements: try again at once.
        None => Take::Held {
            owner: String::new(),
            remaining: Duration::ZERO,
        },
    })
}

/// Checks, inside a commit's transaction, that `token` still holds the lease on `session`
/// and that the lease is live, and renews it, in one statement: the row stays locked until
/// the transaction ends (a takeover waits for the commit). Judging and renewing at one
/// instant matters: were they two statements, a process paused between them (SIGSTOP, a GC,
/// a slow network; nobody can take the row it locked meanwhile) would on waking extend a
/// lease that expired while it slept, from then, and keep it with every renewal after.
pub(crate) async fn check_and_renew(
    tx: &deadpool_postgres::Transaction<'_>,
    s: &str,
    session: &str,
    token: i64,
    ttl: Duration,
) -> Result<(), Fail> {
    let renewed = tx
        .execute(
            &format!(
                "UPDATE {s}.ctxhost_leases SET expires_at = clock_timestamp() + make_interval(secs => $3)
                 WHERE session_id = $1 AND token = $2 AND expires_at > clock_timestamp()"
            ),
            &[&session, &token, &ttl.as_secs_f64()],
        )
        .await?;
    if renewed == 1 {
        return Ok(());
    }
    // Refused: only what to say about it is left to find.
    let row = tx
        .query_opt(
            &format!("SELECT token, owner FROM {s}.ctxhost_leases WHERE session_id = $1"),
            &[&session],
        )
        .await?;
    let Some(row) = row else {
        return Err(Fail::Moved("it has no lease any more".into()));
    };
    let (now, owner): (i64, String) = (row.try_get(0)?, row.try_get(1)?);
    if now != token {
        return Err(Fail::Moved(format!(
            "its lease was taken over by {owner} (fencing token {now}; this process held {token}); this write was refused"
        )));
    }
    Err(Fail::Moved(format!(
        "this process's lease (fencing token {token}) expired before the write; the write was refused"
    )))
}

/// The leases this process holds, and which of them it lost.
#[derive(Debug)]
pub(crate) struct Leases {
    /// This process's owner id (host, pid and a random part: unique per backend).
    pub(crate) owner: String,
    held: Mutex<HashMap<(String, i64), Held>>,
    /// Bumped at every registration: a renewal judges only leases registered before it ran.
    epoch: AtomicU64,
}

#[derive(Debug)]
struct Held {
    lost: Arc<AtomicBool>,
    epoch: u64,
}

impl Leases {
    /// No leases yet, for `owner`.
    pub(crate) fn new(owner: String) -> Self {
        Leases {
            owner,
            held: Mutex::new(HashMap::new()),
            epoch: AtomicU64::new(0),
        }
    }

    /// Notes a lease taken; the flag turns true once a renewal finds it lost.
    pub(crate) fn register(&self, session: &str, token: i64) -> Arc<AtomicBool> {
        let lost = Arc::new(AtomicBool::new(false));
        let epoch = self.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        self.held.lock().insert(
            (session.to_owned(), token),
            Held {
                lost: Arc::clone(&lost),
                epoch,
            },
        );
        lost
    }

    /// Forgets a lease (released, or its session dropped).
    pub(crate) fn unregister(&self, session: &str, token: i64) {
        self.held.lock().remove(&(session.to_owned(), token));
    }

    /// How many leases this process holds.
    pub(crate) fn len(&self) -> usize {
        self.held.lock().len()
    }

    /// Renews every lease this process holds (registered) that is still live, in one
    /// statement, and marks lost each registered one the database no longer gives this
    /// process. A lease row of this owner that is not registered any more (its release failed)
    /// is left to expire: renewing by owner alone would keep it, and its session, forever.
    pub(crate) async fn renew(
        &self,
        pool: &deadpool_postgres::Pool,
        s: &str,
        ttl: Duration,
    ) -> Result<usize, Fail> {
        let before = self.epoch.load(Ordering::SeqCst);
        let (sessions, tokens): (Vec<String>, Vec<i64>) = self.held.lock().keys().cloned().unzip();
        let client = pool.get().await?;
        let rows = client
            .query(
                &format!(
                    "UPDATE {s}.ctxhost_leases
                     SET expires_at = clock_timestamp() + make_interval(secs => $2)
                     WHERE owner = $1 AND expires_at > clock_timestamp()
                       AND (session_id, token) IN (SELECT * FROM unnest($3::text[], $4::bigint[]))
                     RETURNING session_id, token"
                ),
                &[&self.owner, &ttl.as_secs_f64(), &sessions, &tokens],
            )
            .await?;
        let mut kept = HashSet::new();
        for row in rows {
            kept.insert((row.try_get::<_, String>(0)?, row.try_get::<_, i64>(1)?));
        }
        for (key, held) in self.held.lock().iter() {
            if held.epoch <= before
                && !kept.contains(key)
                && !held.lost.swap(true, Ordering::SeqCst)
            {
                tracing::warn!(session = %key.0, token = key.1, "postgres: a lease was lost (expired or taken over); the session will not be written by this process");
            }
        }
        Ok(kept.len())
    }
}

/// Renews `leases` every third of `ttl` until the runtime stops (the backend is dropped).
pub(crate) async fn renew_forever(
    leases: Arc<Leases>,
    pool: deadpool_postgres::Pool,
    s: String,
    ttl: Duration,
    retry: Retry,
) {
    let every = ttl / 3;
    loop {
        tokio::time::sleep(every).await;
        if leases.len() == 0 {
            continue;
        }
        // Tries only within the interval: the next round comes soon anyway.
        let retry = Retry {
            budget: every.min(retry.budget),
            ..retry
        };
        if let Err(e) = retry
            .run("renew leases", || leases.renew(&pool, &s, ttl))
            .await
        {
            tracing::warn!("postgres: renewing leases failed: {}", e.message());
        }
    }
}

/// Releases one lease (the session closed or was evicted): it expires now, so the next
/// process to open the session takes it at once, with the next token.
pub(crate) async fn release(
    pool: &deadpool_postgres::Pool,
    s: &str,
    session: &str,
    token: i64,
) -> Result<(), Fail> {
    let client = pool.get().await?;
    client
        .execute(
            &format!(
                "UPDATE {s}.ctxhost_leases SET expires_at = least(expires_at, clock_timestamp())
                 WHERE session_id = $1 AND token = $2"
            ),
            &[&session, &token],
        )
        .await?;
    Ok(())
}

/// Releases every lease `owner` holds (the backend is closing).
pub(crate) async fn release_all(
    pool: &deadpool_postgres::Pool,
    s: &str,
    owner: &str,
) -> Result<u64, Fail> {
    let client = pool.get().await?;
    Ok(client
        .execute(
            &format!(
                "UPDATE {s}.ctxhost_leases SET expires_at = clock_timestamp()
                 WHERE owner = $1 AND expires_at > clock_timestamp()"
            ),
            &[&owner],
        )
        .await?)
}
