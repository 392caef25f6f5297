//! Every session backend the tests run on, each over a scratch directory: one list, so a new
//! backend joins every test that runs on all of them with one line here and one in
//! `each_backend!`.

use std::path::Path;
use std::sync::Arc;

use ctxhost::store::Backend;
use ctxhost::store::jsonl::JsonlBackend;
use ctxhost::store::memory::MemoryBackend;
use ctxhost::store::sqlite::SqliteBackend;
use ctxhost::transcript::Durability;

/// Which backend a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Files under a state directory (the default).
    Jsonl,
    /// One SQLite database file.
    Sqlite,
    /// Memory only (a crash is dropping the store uncommitted).
    Memory,
}

impl Kind {
    /// The backend's `storageCursor.backend` name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Jsonl => "fs-jsonl",
            Kind::Sqlite => "sqlite",
            Kind::Memory => "memory",
        }
    }

    /// A backend of this kind keeping its sessions under `dir`.
    pub fn open(self, dir: &Path) -> Arc<dyn Backend> {
        match self {
            Kind::Jsonl => Arc::new(JsonlBackend::new(dir, Durability::Entry)),
            Kind::Sqlite => {
                Arc::new(SqliteBackend::open(&dir.join("ctxhost.db"), Durability::Entry).unwrap())
            }
            Kind::Memory => Arc::new(MemoryBackend::new()),
        }
    }

    /// The `host.store` config naming this backend under `dir` (memory has none).
    pub fn settings(self, dir: &Path) -> Option<ctxhost::config::StoreSettings> {
        use ctxhost::config::{SqliteSettings, StoreSettings};
        match self {
            Kind::Jsonl => Some(StoreSettings::Jsonl),
            Kind::Sqlite => Some(StoreSettings::Sqlite(SqliteSettings {
                path: Some(dir.join("ctxhost.db")),
            })),
            Kind::Memory => None,
        }
    }
}

/// Runs each case on every backend, one test per backend: `name => f;` makes `name::Jsonl`,
/// `name::Sqlite` and `name::Memory`, calling `f(Kind::Jsonl)` and so on. `durable:` first
/// leaves memory out (for cases that read what a backend left on disk from a new process).
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
                    $f($crate::common::backends::Kind::$kind);
                }
            )*
        }
    };
    (durable: $($name:ident => $f:path;)*) => {$(
        each_backend!(@one $name $f, Jsonl Sqlite);
    )*};
    ($($name:ident => $f:path;)*) => {$(
        each_backend!(@one $name $f, Jsonl Sqlite Memory);
    )*};
}
