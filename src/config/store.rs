//! `host.store`: which backend keeps the sessions, and its settings.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `host.store`: where sessions are kept (see [`crate::store`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum StoreSettings {
    /// Files under the state directory: `sessions/<id>/transcript.jsonl` and its state.
    #[default]
    Jsonl,
    /// One SQLite database file for every session of a state directory.
    Sqlite(SqliteSettings),
    /// A Postgres database shared by many `ctxhost serve` processes.
    Postgres(PostgresSettings),
}

/// `host.store` with `kind: "sqlite"`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct SqliteSettings {
    /// The database file, relative to the config file. Default `ctxhost.db` in the state
    /// directory.
    pub path: Option<PathBuf>,
}

/// `host.store` with `kind: "postgres"`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PostgresSettings {
    /// `postgres://user@host:port/db` or `host=/run/postgresql dbname=ctxhost`, without a
    /// password (it comes from `passwordEnv`).
    pub url: String,
    /// The environment variable holding the password. Without it, `PGPASSWORD` when set.
    #[serde(default)]
    pub password_env: Option<String>,
    /// The Postgres schema holding ctxhost's tables (created when missing). Default `public`.
    #[serde(default)]
    pub schema: Option<String>,
    /// How long a session's lease lasts unless renewed (renewed every third of it): how long
    /// a dead process's sessions wait before another takes them over. Default 10,000.
    #[serde(default)]
    pub lease_ms: Option<u64>,
    /// How long opening a session waits for another process's lease to expire. Default the
    /// lease plus 2,000 (12,000 with the default lease).
    #[serde(default)]
    pub lease_wait_ms: Option<u64>,
}

impl PostgresSettings {
    /// The shortest lease: renewal every third of it must fit a busy database's round trips.
    pub const MIN_LEASE_MS: u64 = 1_000;
    /// The longest lease: a dead process's sessions must not wait longer than this.
    pub const MAX_LEASE_MS: u64 = 3_600_000;

    /// The lease and the wait for one, as configured or by default (milliseconds).
    pub fn lease_and_wait_ms(&self) -> (u64, u64) {
        let lease = self.lease_ms.unwrap_or(10_000);
        (lease, self.lease_wait_ms.unwrap_or(lease + 2_000))
    }

    /// Refuses a lease outside its bounds, or a wait shorter than the lease (opening a session
    /// a dead process held would then always fail), naming the key.
    pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
        let (lease, wait) = self.lease_and_wait_ms();
        if !(Self::MIN_LEASE_MS..=Self::MAX_LEASE_MS).contains(&lease) {
            return Err((
                "leaseMs",
                format!(
                    "a lease of {lease} ms is outside {}..={} ms",
                    Self::MIN_LEASE_MS,
                    Self::MAX_LEASE_MS
                ),
            ));
        }
        if wait < lease {
            return Err((
                "leaseWaitMs",
                format!(
                    "a wait of {wait} ms is shorter than the lease of {lease} ms: a session a dead process held could never be opened"
                ),
            ));
        }
        Ok(())
    }
}
