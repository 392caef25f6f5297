//! The Postgres server the store tests use: `CTXHOST_TEST_PG` (a URL or key=value string;
//! `tests/run.sh` starts a throwaway cluster and sets it). Unset, a test says so and skips,
//! except under CI=true, where a missing server fails the test.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::Duration;

use ctxhost::store::postgres::PgOptions;

/// The server's connection string, or `None` (the test skips) outside CI.
pub fn url(test: &str) -> Option<String> {
    match std::env::var("CTXHOST_TEST_PG") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{test}: CTXHOST_TEST_PG is not set and CI=true: the Postgres tests must run \
                 (tests/run.sh starts a server)"
            );
            eprintln!("{test}: skipped: CTXHOST_TEST_PG is not set (tests/run.sh sets it)");
            None
        }
    }
}

/// A schema of its own for one test (dropped by [`Scratch`]), so tests running at once never
/// see each other's sessions.
pub struct Scratch {
    /// The server.
    pub url: String,
    /// The schema's name.
    pub schema: String,
}

impl Scratch {
    /// A fresh schema name on the server, or `None` when the test skips.
    pub fn new(test: &str) -> Option<Scratch> {
        let url = url(test)?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let schema = format!("t_{test}_{}_{nanos:x}", std::process::id());
        let schema: String = schema.chars().take(63).collect();
        Some(Scratch { url, schema })
    }

    /// Options for this schema, with short leases and retries so the tests do not wait long.
    pub fn options(&self) -> PgOptions {
        options(&self.url, &self.schema)
    }

    /// Runs SQL on the server over a connection of the test's own (on a thread of its own,
    /// so an async test may call it too).
    pub fn sql(&self, text: &str) -> Vec<tokio_postgres::Row> {
        std::thread::scope(|s| s.spawn(|| self.sql_here(text)).join().unwrap())
    }

    fn sql_here(&self, text: &str) -> Vec<tokio_postgres::Row> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (client, conn) = self
                .url
                .parse::<tokio_postgres::Config>()
                .unwrap()
                .connect(tokio_postgres::NoTls)
                .await
                .unwrap();
            let driver = tokio::spawn(conn);
            let rows = client.query(text, &[]).await.unwrap();
            drop(client);
            let _ = driver.await;
            rows
        })
    }
}

/// [`Scratch::options`] for `schema` on `url`, for a process that did not make the schema (a
/// test's child process).
pub fn options(url: &str, schema: &str) -> PgOptions {
    PgOptions {
        schema: schema.to_owned(),
        lease: Duration::from_secs(2),
        lease_wait: Duration::from_secs(4),
        retry_for: Duration::from_secs(20),
        max_connections: 4,
        ..PgOptions::new(url.to_owned())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.sql(&format!(
                "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
                self.schema
            ));
        }
    }
}

/// Held (shared) by every Postgres test while it runs and (alone) by the one that restarts
/// the server, so a restart never lands in another test's lease timing.
pub static SERVER: parking_lot::RwLock<()> = parking_lot::RwLock::new(());
