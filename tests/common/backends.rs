//! Every session backend the tests run on, each over a scratch place of its own: one list, so a
//! new backend joins every test that runs on all of them with one line here and one in
//! `each_backend!`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ctxhost::store::Backend;
use ctxhost::store::jsonl::JsonlBackend;
use ctxhost::store::memory::MemoryBackend;
use ctxhost::store::postgres::{PgBackend, PgOptions};
use ctxhost::store::sqlite::SqliteBackend;
use ctxhost::transcript::Durability;

use crate::pg_server::{SERVER, Scratch};

/// Which backend a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Files under a state directory (the default).
    Jsonl,
    /// One SQLite database file.
    Sqlite,
    /// Memory only (a crash is dropping the store uncommitted).
    Memory,
    /// A Postgres schema of the test's own on the server `CTXHOST_TEST_PG` names.
    Postgres,
}

impl Kind {
    /// The backend's `storageCursor.backend` name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Jsonl => "fs-jsonl",
            Kind::Sqlite => "sqlite",
            Kind::Memory => "memory",
            Kind::Postgres => "postgres",
        }
    }

    /// The kind whose [`Kind::name`] is `name`.
    pub fn named(name: &str) -> Option<Kind> {
        [Kind::Jsonl, Kind::Sqlite, Kind::Memory, Kind::Postgres]
            .into_iter()
            .find(|k| k.name() == name)
    }

    /// A backend of a kind kept under a directory (JSONL, SQLite, memory) keeping its sessions
    /// under `dir`; Postgres needs a [`Place`] (its schema).
    pub fn open(self, dir: &Path) -> Arc<dyn Backend> {
        match self {
            Kind::Jsonl => Arc::new(JsonlBackend::new(dir, Durability::Entry)),
            Kind::Sqlite => {
                Arc::new(SqliteBackend::open(&dir.join("ctxhost.db"), Durability::Entry).unwrap())
            }
            Kind::Memory => Arc::new(MemoryBackend::new()),
            Kind::Postgres => panic!("a Postgres backend is opened from its Place (its schema)"),
        }
    }
}

/// A Postgres backend over `schema` on the server `url`, as the tests run it: the pool size of
/// the other Postgres tests ([`crate::pg_server::options`]), and the store's own 10 s lease (waited for
/// up to 12 s): none of the suites on every backend waits out a lease, and a 2 s lease could
/// expire under a loaded 2-core machine's 1,000 sessions.
pub fn postgres(url: &str, schema: &str) -> Arc<dyn Backend> {
    Arc::new(
        PgBackend::connect(PgOptions {
            lease: Duration::from_secs(10),
            lease_wait: Duration::from_secs(12),
            ..crate::pg_server::options(url, schema)
        })
        .unwrap(),
    )
}

/// The Postgres part of a [`Place`]: the scratch schema (dropped with it), and the shared hold
/// on the server every Postgres test keeps while it runs (the restart test takes it alone).
struct PgPlace {
    scratch: Scratch,
    _server: parking_lot::RwLockReadGuard<'static, ()>,
}

/// Where one test keeps its sessions: a scratch directory (removed at the end), and on Postgres a
/// scratch schema of the test's own (dropped at the end, kept for a look when the test failed).
pub struct Place {
    /// The backend's kind.
    pub kind: Kind,
    // Before `dir`: the schema goes first.
    pg: Option<PgPlace>,
    dir: tempfile::TempDir,
}

impl Place {
    /// A fresh place for `kind`, or `None` when the test skips: Postgres without
    /// `CTXHOST_TEST_PG` (said on stderr; a failure under CI=true, as every Postgres test).
    pub fn new(kind: Kind, test: &str) -> Option<Place> {
        static N: AtomicU64 = AtomicU64::new(0);
        let pg = match kind {
            Kind::Postgres => {
                // A short name: the schema name keeps the process id and a clock part too.
                let short: String = test.chars().take(20).collect();
                let n = N.fetch_add(1, Ordering::Relaxed);
                let scratch = Scratch::new(&format!("{short}_{n}"))?;
                Some(PgPlace {
                    scratch,
                    _server: SERVER.read_recursive(),
                })
            }
            _ => None,
        };
        Some(Place {
            kind,
            pg,
            dir: tempfile::tempdir().unwrap(),
        })
    }

    /// The scratch directory (a JSONL state directory, or where SQLite's `ctxhost.db` is).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The scratch schema, on Postgres.
    pub fn pg(&self) -> Option<&Scratch> {
        self.pg.as_ref().map(|p| &p.scratch)
    }

    /// A new backend over this place (as a new process would see it; memory has only what
    /// this one holds: a new, empty one).
    pub fn open(&self) -> Arc<dyn Backend> {
        match &self.pg {
            Some(p) => postgres(&p.scratch.url, &p.scratch.schema),
            None => self.kind.open(self.dir()),
        }
    }

    /// The `host.store` config naming this place (`ctxhost.db` in the state directory for
    /// SQLite, as the default path puts it; memory has none).
    pub fn settings(&self) -> Option<ctxhost::config::StoreSettings> {
        use ctxhost::config::{PostgresSettings, SqliteSettings, StoreSettings};
        match self.kind {
            Kind::Jsonl => Some(StoreSettings::Jsonl),
            Kind::Sqlite => Some(StoreSettings::Sqlite(SqliteSettings { path: None })),
            Kind::Memory => None,
            Kind::Postgres => self.pg().map(|s| {
                StoreSettings::Postgres(PostgresSettings {
                    url: s.url.clone(),
                    password_env: None,
                    schema: Some(s.schema.clone()),
                    ..PostgresSettings::default()
                })
            }),
        }
    }
}

/// Runs each case on every backend, one test per backend: `name => f;` makes `name::Jsonl`,
/// `name::Sqlite`, `name::Memory` and `name::Postgres`, calling `f(&place)` with a fresh
/// [`Place`] of that kind (the Postgres one skips without `CTXHOST_TEST_PG`, failing under
/// CI=true). `durable:` first leaves memory out (for cases that read what a backend left behind
/// from a new process).
#[allow(unused_macros)]
macro_rules! each_backend {
    (@one $name:ident $f:path, $($kind:ident)*) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                #[allow(non_snake_case)]
                fn $kind() {
                    let kind = $crate::common::backends::Kind::$kind;
                    let Some(place) =
                        $crate::common::backends::Place::new(kind, stringify!($name))
                    else {
                        return;
                    };
                    $f(&place);
                }
            )*
        }
    };
    (durable: $($name:ident => $f:path;)*) => {$(
        each_backend!(@one $name $f, Jsonl Sqlite Postgres);
    )*};
    ($($name:ident => $f:path;)*) => {$(
        each_backend!(@one $name $f, Jsonl Sqlite Memory Postgres);
    )*};
}
