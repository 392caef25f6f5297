//! The tables the Postgres backend keeps, and their migrations: run in one transaction under
//! a transaction-scoped advisory lock, so several `ctxhost serve` processes starting at once
//! apply each migration exactly once (the others wait, then find it applied).
//!
//! ```text
//! ctxhost_schema    one row per applied migration
//! ctxhost_sessions  one row per session: created at, cwd, turns, last seq, next id, the
//!                   committed state (JSON text) and the number of commits
//! ctxhost_entries   one row per message (session, seq): its entry id, the message as JSON and
//!                   the fencing token of the lease it was written under (0: imported)
//! ctxhost_leases    one row per session served: owner, fencing token, expiry
//! ```

use deadpool_postgres::Object;

use super::driver::Fail;

/// Each migration's statements, in order; a database records how many it applied.
const MIGRATIONS: &[&str] = &[r#"
CREATE TABLE IF NOT EXISTS {s}.ctxhost_sessions (
    id          text PRIMARY KEY,
    cwd         text NOT NULL DEFAULT '',
    created_at  text NOT NULL,
    turns       bigint NOT NULL DEFAULT 0,
    last_seq    bigint NOT NULL DEFAULT 0,
    next_id     bigint NOT NULL DEFAULT 1,
    commits     bigint NOT NULL DEFAULT 0,
    state       text,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS {s}.ctxhost_entries (
    session_id  text NOT NULL REFERENCES {s}.ctxhost_sessions (id) ON DELETE CASCADE,
    seq         bigint NOT NULL,
    entry_id    text NOT NULL,
    body        text NOT NULL,
    token       bigint NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE IF NOT EXISTS {s}.ctxhost_leases (
    session_id  text PRIMARY KEY,
    owner       text NOT NULL,
    token       bigint NOT NULL,
    expires_at  timestamptz NOT NULL,
    taken_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS ctxhost_leases_owner ON {s}.ctxhost_leases (owner);
"#];

/// The schema version this ctxhost writes.
pub(crate) const VERSION: i64 = MIGRATIONS.len() as i64;

/// `name` as a quoted SQL identifier; `None` for a name Postgres could not take (empty,
/// longer than 63 bytes, or holding a NUL).
pub(crate) fn quote_ident(name: &str) -> Option<String> {
    if name.is_empty() || name.len() > 63 || name.contains('\0') {
        return None;
    }
    Some(format!("\"{}\"", name.replace('"', "\"\"")))
}

/// Applies the migrations the database lacks, once, whoever else is starting. A database a
/// newer ctxhost migrated further is refused, not written.
pub(crate) async fn migrate(client: &mut Object, schema: &str) -> Result<(), Fail> {
    let s = quote_ident(schema)
        .ok_or_else(|| Fail::Fatal(format!("\"{schema}\" is not a usable schema name")))?;
    let tx = client.transaction().await?;
    // One key per schema: processes migrating other schemas do not wait for each other.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('ctxhost schema ' || $1::text))",
        &[&schema],
    )
    .await?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {s};
         CREATE TABLE IF NOT EXISTS {s}.ctxhost_schema (
             version     bigint PRIMARY KEY,
             applied_at  timestamptz NOT NULL DEFAULT now()
         );"
    ))
    .await?;
    let row = tx
        .query_one(
            &format!("SELECT coalesce(max(version), 0) FROM {s}.ctxhost_schema"),
            &[],
        )
        .await?;
    let applied: i64 = row.try_get(0)?;
    if applied > VERSION {
        return Err(Fail::Fatal(format!(
            "the database's ctxhost tables are at schema version {applied}, newer than this ctxhost's {VERSION}: upgrade ctxhost (nothing was changed)"
        )));
    }
    for (n, sql) in MIGRATIONS.iter().enumerate().skip(applied as usize) {
        tx.batch_execute(&sql.replace("{s}", &s)).await?;
        tx.execute(
            &format!("INSERT INTO {s}.ctxhost_schema (version) VALUES ($1)"),
            &[&(n as i64 + 1)],
        )
        .await?;
        tracing::info!(
            schema,
            version = n + 1,
            "postgres: applied a schema migration"
        );
    }
    tx.commit().await?;
    Ok(())
}
