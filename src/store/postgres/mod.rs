//! Sessions in a Postgres database shared by many `ctxhost serve` processes
//! (`host.store: {kind: "postgres", url}`).
//!
//! - A turn's entries, its state and the session's metadata (turns, last seq) are written in
//!   one transaction (`session`); a reader sees a session before a commit or after it.
//! - A session is served by one process at a time through a lease with a fencing token
//!   (`lease`); a write carrying a stale token is refused with
//!   [`crate::Error::SessionMoved`], which tells the caller to
//!   drop the session, never to write it.
//! - The tables are created and migrated on connect, once however many processes start at
//!   once (`schema`).
//! - A dropped connection or a restarting server is ridden out by trying again within
//!   `retrySeconds`, then reported naming the server (never the password).
//!
//! The password comes from the environment variable `passwordEnv` names (default
//! `PGPASSWORD`), so a config file holds none; a password written in the URL is used but
//! never shown.

mod catalog;
mod driver;
mod lease;
mod schema;
mod session;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{Backend, Opened, SessionMeta, SessionSummary};
use crate::contract::message::Message;
use crate::error::{Error, Result};
use driver::{Driver, Fail, Retry};
use lease::Leases;
pub use session::PgStore;

const KIND: &str = "postgres";

/// How to reach the database and how leases behave.
#[derive(Clone)]
pub struct PgOptions {
    /// A libpq-style URL or key=value string (`postgresql://user@host/db`,
    /// `host=/run/postgresql dbname=ctxhost`).
    pub url: String,
    /// The environment variable holding the password; `None` reads `PGPASSWORD` when set.
    pub password_env: Option<String>,
    /// The Postgres schema holding ctxhost's tables (created when missing).
    pub schema: String,
    /// How long a lease lasts unless renewed; renewed every third of it.
    pub lease: Duration,
    /// How long opening a session waits for another process's lease to expire.
    pub lease_wait: Duration,
    /// Whether a background task renews the leases; an embedder that turns it off calls
    /// [`PgBackend::renew_leases`] itself, more often than `lease`.
    pub renew_in_background: bool,
    /// How long a call keeps trying after a dropped connection or a restarting server.
    pub retry_for: Duration,
    /// Connections this process keeps at most.
    pub max_connections: usize,
}

impl PgOptions {
    /// Defaults for `url`: schema `public`, 10 s leases waited for up to 12 s, 15 s of
    /// retrying, 8 connections.
    pub fn new(url: impl Into<String>) -> Self {
        PgOptions {
            url: url.into(),
            password_env: None,
            schema: "public".into(),
            lease: Duration::from_secs(10),
            lease_wait: Duration::from_secs(12),
            renew_in_background: true,
            retry_for: Duration::from_secs(15),
            max_connections: 8,
        }
    }
}

impl std::fmt::Debug for PgOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password: only its server, user and database are shown.
        let url = match self.url.parse::<tokio_postgres::Config>() {
            Ok(config) => describe(&config),
            Err(_) => "(not a Postgres URL)".into(),
        };
        f.debug_struct("PgOptions")
            .field("url", &url)
            .field("password_env", &self.password_env)
            .field("schema", &self.schema)
            .field("lease", &self.lease)
            .field("lease_wait", &self.lease_wait)
            .field("renew_in_background", &self.renew_in_background)
            .field("retry_for", &self.retry_for)
            .field("max_connections", &self.max_connections)
            .finish()
    }
}

/// What every store of one backend shares.
#[derive(Debug)]
struct Shared {
    pool: deadpool_postgres::Pool,
    /// The quoted schema name, for SQL text.
    s: String,
    /// `user@host:port/db`, for messages and `location()` (no password).
    target: String,
    leases: Arc<Leases>,
    options: PgOptions,
    retry: Retry,
    // Last: dropped after everything above that may still hand it work.
    driver: Driver,
}

impl Shared {
    fn error(&self, op: &'static str, session: Option<&str>, fail: Fail) -> Error {
        match fail {
            Fail::Moved(message) => Error::SessionMoved {
                backend: KIND,
                op,
                session: session.unwrap_or_default().to_owned(),
                message,
            },
            Fail::Transient(m) | Fail::Fatal(m) => Error::Store {
                backend: KIND,
                op,
                session: session.map(str::to_owned),
                message: format!("{} ({})", m, self.target),
            },
        }
    }

    /// Runs `call` on the runtime thread with retries, as one operation of the seam.
    fn run<T, F, Fut>(&self, op: &'static str, session: Option<&str>, call: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = std::result::Result<T, Fail>> + Send,
    {
        let retry = self.retry;
        let mut call = call;
        self.driver
            .run(async move { retry.run(op, &mut call).await })
            .and_then(|r| r)
            .map_err(|f| self.error(op, session, f))
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Every store is gone; leases whose release did not get through expire now rather
        // than at their expiry, so other processes take the sessions over at once.
        let (pool, s, owner) = (self.pool.clone(), self.s.clone(), self.leases.owner.clone());
        let released = self.driver.run(async move {
            tokio::time::timeout(
                Duration::from_secs(2),
                lease::release_all(&pool, &s, &owner),
            )
            .await
        });
        if let Ok(Ok(Err(e))) = released {
            tracing::warn!(
                "postgres: releasing leases at close failed: {}",
                e.message()
            );
        }
        self.pool.close();
    }
}

/// Sessions in Postgres, shared with other processes through leases.
#[derive(Debug, Clone)]
pub struct PgBackend {
    shared: Arc<Shared>,
}

impl PgBackend {
    /// Connects, creates or migrates the tables, and starts renewing leases. A server that
    /// cannot be reached within `retry_for` is an error naming it (never the password).
    pub fn connect(options: PgOptions) -> Result<PgBackend> {
        let config_error = |message: String| Error::Store {
            backend: KIND,
            op: "connect",
            session: None,
            message,
        };
        let mut config: tokio_postgres::Config = options.url.parse().map_err(|e| {
            config_error(format!(
                "host.store.url is not a Postgres URL or key=value string: {e}"
            ))
        })?;
        let env = options.password_env.as_deref();
        match std::env::var(env.unwrap_or("PGPASSWORD")) {
            Ok(pw) => {
                config.password(pw);
            }
            Err(_) if env.is_some() => {
                return Err(config_error(format!(
                    "the environment variable {} (host.store.passwordEnv) is not set",
                    env.unwrap_or_default()
                )));
            }
            Err(_) => {}
        }
        let owner = owner_id();
        // Names this backend's connections in pg_stat_activity (and lets a test cut them).
        config.application_name(format!("ctxhost {owner}"));
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        let target = describe(&config);
        let s = schema::quote_ident(&options.schema).ok_or_else(|| {
            config_error(format!(
                "host.store.schema \"{}\" is not a usable schema name (1 to 63 bytes)",
                options.schema
            ))
        })?;
        if options.lease < Duration::from_millis(300) {
            return Err(config_error(
                "host.store.leaseSeconds must be at least 0.3 (leases are renewed every third of it)"
                    .into(),
            ));
        }
        let driver = Driver::start().map_err(|e| config_error(format!("start its thread: {e}")))?;
        let manager = deadpool_postgres::Manager::from_config(
            config,
            tokio_postgres::NoTls,
            deadpool_postgres::ManagerConfig {
                recycling_method: deadpool_postgres::RecyclingMethod::Fast,
            },
        );
        let pool = deadpool_postgres::Pool::builder(manager)
            .max_size(options.max_connections.max(2))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(30)))
            .create_timeout(Some(Duration::from_secs(6)))
            .build()
            .map_err(|e| config_error(format!("connection pool: {e}")))?;
        let shared = Arc::new(Shared {
            pool,
            s,
            target,
            leases: Arc::new(Leases::new(owner)),
            retry: Retry {
                budget: options.retry_for,
                first_pause: Duration::from_millis(50),
                max_pause: Duration::from_secs(1),
            },
            options,
            driver,
        });
        let (pool, schema) = (shared.pool.clone(), shared.options.schema.clone());
        shared.run("create or migrate tables", None, move || {
            let (pool, schema) = (pool.clone(), schema.clone());
            async move {
                let mut client = pool.get().await?;
                schema::migrate(&mut client, &schema).await
            }
        })?;
        if shared.options.renew_in_background {
            shared.driver.spawn(lease::renew_forever(
                Arc::clone(&shared.leases),
                shared.pool.clone(),
                shared.s.clone(),
                shared.options.lease,
                shared.retry,
            ));
        }
        Ok(PgBackend { shared })
    }

    /// This process's owner id in the lease table.
    pub fn owner(&self) -> &str {
        &self.shared.leases.owner
    }

    /// Renews every live lease this backend holds now; returns how many it renewed. The
    /// background task does this every third of the lease; an embedder that turned it off
    /// calls this itself.
    pub fn renew_leases(&self) -> Result<usize> {
        let (leases, pool, s, ttl) = (
            Arc::clone(&self.shared.leases),
            self.shared.pool.clone(),
            self.shared.s.clone(),
            self.shared.options.lease,
        );
        self.shared.run("renew leases", None, move || {
            let (leases, pool, s) = (Arc::clone(&leases), pool.clone(), s.clone());
            async move { leases.renew(&pool, &s, ttl).await }
        })
    }
}

impl Backend for PgBackend {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn open(&self, id: &str, cwd: &str) -> Result<Opened> {
        session::open(&self.shared, id, cwd)
    }

    fn sessions(&self) -> Result<Vec<SessionSummary>> {
        catalog::list(&self.shared)
    }

    fn import(
        &self,
        id: &str,
        messages: &[Arc<Message>],
        state: Option<&Value>,
        meta: &SessionMeta,
    ) -> Result<bool> {
        catalog::import(&self.shared, id, messages, state, meta)
    }

    fn size_bytes(&self) -> Option<u64> {
        let (pool, schema) = (self.shared.pool.clone(), self.shared.options.schema.clone());
        self.shared
            .run("measure size", None, move || {
                let (pool, schema) = (pool.clone(), schema.clone());
                async move {
                    let client = pool.get().await?;
                    let row = client
                        .query_one(
                            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
                             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                             WHERE n.nspname = $1 AND c.relkind = 'r'
                               AND c.relname LIKE 'ctxhost\\_%'",
                            &[&schema],
                        )
                        .await?;
                    Ok(row.try_get::<_, i64>(0)? as u64)
                }
            })
            .ok()
    }
}

/// `user@host:port/db` (or the socket directory), for messages: never the password.
fn describe(config: &tokio_postgres::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(dir) => dir.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgres://{}@{host}:{port}/{}",
        config.get_user().unwrap_or(""),
        config.get_dbname().unwrap_or("")
    )
}

/// This backend's name in the lease table: host, pid and a random part, so two backends in
/// one process (or a restarted process with the same pid) never share leases.
fn owner_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .map(|h| h.chars().take(32).collect::<String>())
        .unwrap_or_else(|| "host".into());
    let mut random = [0u8; 4];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut random);
    format!(
        "{host}:{}:{}",
        std::process::id(),
        random
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    )
}
