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
}
