//! Sessions in one SQLite database file (`host.store: {kind: "sqlite", path}`), embedded
//! through rusqlite's bundled SQLite.
//!
//! - WAL mode: readers never wait for the writer, and a commit is one append to the WAL (with
//!   `durability` `entry` or `turn`, synced: the commit's one durable sync).
//! - A busy timeout instead of "database is locked": a second process (a `store backup`, a
//!   `doctor`, another `serve`) waits its turn.
//! - The schema is versioned (`PRAGMA user_version`) and migrated inside `BEGIN IMMEDIATE`, so
//!   two processes starting at once never race a migration: the second waits, then finds the
//!   schema current.
//! - A session's appends wait in memory until its commit, which writes them and the state in
//!   one transaction: no transaction is held longer than one call's writes, and a crash leaves
//!   the session before the call or after it.
//!
//! ```text
//! sessions(id, created_at, cwd, turns, seq, next_id, state)
//! entries(session, seq, id, body)        seq: 1-based position; body: the message as JSON
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde_json::Value;

use super::pending::Pending;
use super::{Backend, Commit, Opened, SessionMeta, SessionStore, SessionSummary, StorageCursor};
use crate::contract::message::{Message, MessageBody};
use crate::error::{Error, Result};
use crate::transcript::Durability;

const KIND: &str = "sqlite";

/// How long a write waits for another process's transaction before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// The schema, one step per version: step `n` takes a database from version `n` to `n + 1`.
const MIGRATIONS: &[&str] = &["CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        created_at TEXT NOT NULL,
        cwd TEXT NOT NULL DEFAULT '',
        turns INTEGER NOT NULL DEFAULT 0,
        seq INTEGER NOT NULL DEFAULT 0,
        next_id INTEGER NOT NULL DEFAULT 1,
        state TEXT
    );
    CREATE TABLE entries (
        session TEXT NOT NULL REFERENCES sessions(id),
        seq INTEGER NOT NULL,
        id TEXT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (session, seq)
    ) WITHOUT ROWID;"];

fn err(op: &'static str, session: Option<&str>, e: impl std::fmt::Display) -> Error {
    Error::Store {
        backend: KIND,
        op,
        session: session.map(str::to_owned),
        message: e.to_string(),
    }
}

/// Every session of one SQLite database file. Stores opened from it share its connection
/// (SQLite writes one transaction at a time anyway).
#[derive(Debug)]
pub struct SqliteBackend {
    path: PathBuf,
    conn: Arc<Mutex<Connection>>,
}

impl SqliteBackend {
    /// Opens (creating if missing) the database `path` and brings its schema up to date.
    pub fn open(path: &Path, durability: Durability) -> Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::io("create store directory", dir, e))?;
        }
        let conn = Connection::open(path).map_err(|e| err("open database", None, e))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| err("open database", None, e))?;
        let synchronous = match durability {
            Durability::Entry | Durability::Turn => "FULL",
            Durability::None => "OFF",
        };
        // `journal_mode` answers with the mode it set; WAL stays set in the file.
        conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0))
            .map_err(|e| err("set WAL mode", None, e))?;
        conn.execute_batch(&format!(
            "PRAGMA synchronous = {synchronous}; PRAGMA foreign_keys = ON;"
        ))
        .map_err(|e| err("open database", None, e))?;
        let mut backend = SqliteBackend {
            path: path.to_path_buf(),
            conn: Arc::new(Mutex::new(conn)),
        };
        backend.migrate()?;
        Ok(backend)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version this ctxhost writes.
    pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

    /// Applies the migrations the database lacks, all inside one `BEGIN IMMEDIATE`: a second
    /// process waits for the first, then finds nothing left to do. A database newer than this
    /// ctxhost is refused, untouched.
    fn migrate(&mut self) -> Result<()> {
        let mut conn = self.conn.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| err("migrate schema", None, e))?;
        let version: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| err("migrate schema", None, e))?;
        if version > Self::SCHEMA_VERSION {
            return Err(err(
                "migrate schema",
                None,
                format!(
                    "{}: schema version {version} is newer than this ctxhost's {}; nothing was changed",
                    self.path.display(),
                    Self::SCHEMA_VERSION
                ),
            ));
        }
        for (n, step) in MIGRATIONS.iter().enumerate().skip(version.max(0) as usize) {
            tx.execute_batch(step)
                .map_err(|e| err("migrate schema", None, format!("step {}: {e}", n + 1)))?;
        }
        tx.pragma_update(None, "user_version", Self::SCHEMA_VERSION)
            .map_err(|e| err("migrate schema", None, e))?;
        tx.commit().map_err(|e| err("migrate schema", None, e))
    }

    /// Writes a consistent copy of the whole database to `dest` while others keep writing
    /// (`VACUUM INTO`): a snapshot as of one committed transaction.
    pub fn backup_to(&self, dest: &Path) -> Result<()> {
        if dest.exists() {
            return Err(err(
                "back up",
                None,
                format!("{} exists; nothing was written", dest.display()),
            ));
        }
        let dest_text = dest.to_str().ok_or_else(|| {
            err(
                "back up",
                None,
                format!("{} is not valid UTF-8", dest.display()),
            )
        })?;
        self.conn
            .lock()
            .execute("VACUUM INTO ?1", params![dest_text])
            .map_err(|e| err("back up", None, e))?;
        Ok(())
    }
}

fn encode_body(body: &MessageBody, session: &str) -> Result<String> {
    serde_json::to_string(body).map_err(|e| err("encode message", Some(session), e))
}

fn decode_entry(session: &str, id: String, body: &str) -> Result<Arc<Message>> {
    let body: MessageBody =
        serde_json::from_str(body).map_err(|e| err("read message", Some(session), e))?;
    Ok(Arc::new(Message { id, body }))
}

/// A session's row.
struct Row {
    created_at: String,
    turns: u64,
    seq: u64,
    next_id: u64,
    state: Option<String>,
}

fn read_row(conn: &Connection, id: &str) -> Result<Option<Row>> {
    conn.query_row(
        "SELECT created_at, turns, seq, next_id, state FROM sessions WHERE id = ?1",
        params![id],
        |r| {
            Ok(Row {
                created_at: r.get(0)?,
                turns: r.get::<_, i64>(1)? as u64,
                seq: r.get::<_, i64>(2)? as u64,
                next_id: r.get::<_, i64>(3)? as u64,
                state: r.get(4)?,
            })
        },
    )
    .optional()
    .map_err(|e| err("read session", Some(id), e))
}

fn read_entries(conn: &Connection, id: &str, upto: u64) -> Result<Vec<Arc<Message>>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, body FROM entries WHERE session = ?1 AND seq <= ?2 ORDER BY seq",
        )
        .map_err(|e| err("read session", Some(id), e))?;
    let rows = stmt
        .query_map(params![id, upto as i64], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .map_err(|e| err("read session", Some(id), e))?;
    let mut out = Vec::new();
    for row in rows {
        let (entry, body) = row.map_err(|e| err("read session", Some(id), e))?;
        out.push(decode_entry(id, entry, &body)?);
    }
    Ok(out)
}

fn parse_state(id: &str, text: Option<String>) -> Option<Value> {
    let text = text?;
    match serde_json::from_str(&text) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(session = id, "ignoring an unreadable session state: {e}");
            None
        }
    }
}

impl Backend for SqliteBackend {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn open(&self, id: &str, cwd: &str) -> Result<Opened> {
        let mut conn = self.conn.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| err("open session", Some(id), e))?;
        tx.execute(
            "INSERT OR IGNORE INTO sessions (id, created_at, cwd) VALUES (?1, ?2, ?3)",
            params![id, crate::transcript::iso_now(), cwd],
        )
        .map_err(|e| err("open session", Some(id), e))?;
        let row = read_row(&tx, id)?
            .ok_or_else(|| err("open session", Some(id), "the session row vanished"))?;
        let messages = read_entries(&tx, id, row.seq)?;
        tx.commit().map_err(|e| err("open session", Some(id), e))?;
        drop(conn);
        let state = parse_state(id, row.state);
        let store = SqliteStore {
            id: id.to_owned(),
            conn: Arc::clone(&self.conn),
            pending: Pending::after(&messages, row.next_id),
            created_at: row.created_at,
            turns: row.turns,
            state: state.clone().map(Arc::new),
        };
        Ok(Opened {
            store: Box::new(store),
            messages,
            state,
        })
    }

    fn sessions(&self) -> Result<Vec<SessionSummary>> {
        let conn = self.conn.lock();
        let mut stmt = conn
            .prepare("SELECT id, seq, created_at, turns FROM sessions ORDER BY id")
            .map_err(|e| err("list sessions", None, e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(SessionSummary {
                    id: r.get(0)?,
                    messages: r.get::<_, i64>(1)? as u64,
                    meta: SessionMeta {
                        created_at: Some(r.get(2)?),
                        turns: Some(r.get::<_, i64>(3)? as u64),
                    },
                })
            })
            .map_err(|e| err("list sessions", None, e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| err("list sessions", None, e))
    }

    fn import(
        &self,
        id: &str,
        messages: &[Arc<Message>],
        state: Option<&Value>,
        meta: &SessionMeta,
    ) -> Result<bool> {
        let mut conn = self.conn.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| err("import session", Some(id), e))?;
        if let Some(row) = read_row(&tx, id)? {
            let existing = read_entries(&tx, id, row.seq)?;
            if !super::may_import(KIND, id, &existing, messages)? {
                return Ok(false);
            }
        }
        let mut next_id = 1u64;
        for m in messages {
            match u64::from_str_radix(&m.id, 16) {
                Ok(n) if n >= next_id => next_id = n + 1,
                _ => {
                    return Err(err(
                        "import session",
                        Some(id),
                        format!(
                            "message \"{}\" has an id that is not a hex number after {:08x}; nothing was copied",
                            m.id,
                            next_id.saturating_sub(1)
                        ),
                    ));
                }
            }
        }
        let state_text = state
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| err("import session", Some(id), e))?;
        let created_at = meta
            .created_at
            .clone()
            .unwrap_or_else(crate::transcript::iso_now);
        tx.execute(
            "INSERT INTO sessions (id, created_at, turns, seq, next_id, state)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (id) DO UPDATE SET created_at = ?2, turns = ?3, seq = ?4,
               next_id = ?5, state = ?6",
            params![
                id,
                created_at,
                meta.turns.unwrap_or(0) as i64,
                messages.len() as i64,
                next_id as i64,
                state_text
            ],
        )
        .map_err(|e| err("import session", Some(id), e))?;
        insert_entries(&tx, id, 0, messages)?;
        tx.commit()
            .map_err(|e| err("import session", Some(id), e))?;
        Ok(true)
    }

    fn size_bytes(&self) -> Option<u64> {
        let mut wal = self.path.as_os_str().to_owned();
        wal.push("-wal");
        let wal = PathBuf::from(wal);
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        Some(size(&self.path) + size(&wal))
    }

    fn location(&self) -> String {
        format!("sqlite:{}", self.path.display())
    }

    fn backup(&self, dest: &Path) -> Result<()> {
        self.backup_to(dest)
    }
}

fn insert_entries(
    tx: &rusqlite::Transaction<'_>,
    id: &str,
    after: u64,
    messages: &[Arc<Message>],
) -> Result<()> {
    let mut stmt = tx
        .prepare_cached("INSERT INTO entries (session, seq, id, body) VALUES (?1, ?2, ?3, ?4)")
        .map_err(|e| err("write entries", Some(id), e))?;
    for (i, m) in messages.iter().enumerate() {
        let body = encode_body(&m.body, id)?;
        stmt.execute(params![id, (after + i as u64 + 1) as i64, m.id, body])
            .map_err(|e| err("write entries", Some(id), e))?;
    }
    Ok(())
}

/// One session's store over a [`SqliteBackend`]: appends wait in `pending` until a commit
/// writes them with the state in one transaction.
#[derive(Debug)]
pub struct SqliteStore {
    id: String,
    conn: Arc<Mutex<Connection>>,
    pending: Pending,
    created_at: String,
    turns: u64,
    /// The state as last committed, to skip writing one that did not change.
    state: Option<Arc<Value>>,
}

impl SessionStore for SqliteStore {
    fn append(&mut self, messages: Vec<Message>) -> Result<Vec<Arc<Message>>> {
        Ok(self.pending.stamp(messages))
    }

    fn commit(&mut self, commit: Commit<'_>) -> Result<()> {
        let new_state = commit
            .state
            .filter(|s| Some(&***s) != self.state.as_deref());
        if self.pending.is_empty() && new_state.is_none() && !commit.turn_ended {
            return Ok(());
        }
        let state_text = new_state
            .map(|s| serde_json::to_string(&**s))
            .transpose()
            .map_err(|e| err("encode state", Some(&self.id), e))?;
        let seq = self.pending.len() as u64;
        let turns = self.turns + u64::from(commit.turn_ended);
        let mut conn = self.conn.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| err("commit", Some(&self.id), e))?;
        insert_entries(
            &tx,
            &self.id,
            self.pending.committed_len() as u64,
            self.pending.messages(),
        )?;
        let updated = match &state_text {
            Some(text) => tx.execute(
                "UPDATE sessions SET seq = ?2, turns = ?3, next_id = ?4, state = ?5 WHERE id = ?1",
                params![
                    &self.id,
                    seq as i64,
                    turns as i64,
                    self.pending.next_id() as i64,
                    text
                ],
            ),
            None => tx.execute(
                "UPDATE sessions SET seq = ?2, turns = ?3, next_id = ?4 WHERE id = ?1",
                params![
                    &self.id,
                    seq as i64,
                    turns as i64,
                    self.pending.next_id() as i64
                ],
            ),
        }
        .map_err(|e| err("commit", Some(&self.id), e))?;
        if updated != 1 {
            return Err(err(
                "commit",
                Some(&self.id),
                "the session's row is gone (removed by hand?); nothing was written",
            ));
        }
        tx.commit().map_err(|e| err("commit", Some(&self.id), e))?;
        drop(conn);
        self.pending.committed();
        self.turns = turns;
        if let Some(s) = new_state {
            self.state = Some(Arc::clone(s));
        }
        Ok(())
    }

    fn len(&self) -> usize {
        self.pending.len()
    }

    fn cursor(&self) -> StorageCursor {
        self.pending.cursor(KIND, &self.id)
    }

    fn meta(&self) -> SessionMeta {
        SessionMeta {
            created_at: Some(self.created_at.clone()),
            turns: Some(self.turns),
        }
    }

    fn location(&self) -> String {
        format!("sqlite:{}#{}", self.conn_path(), self.id)
    }
}

impl SqliteStore {
    fn conn_path(&self) -> String {
        self.conn.lock().path().unwrap_or_default().to_owned()
    }
}
