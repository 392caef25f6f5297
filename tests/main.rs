//! ctxhost's integration tests: one test binary, so the library, mlua, rhai and tokio link
//! once. Each module tests one concern from the outside, with real scripts, real transcripts
//! and real files; the shared helpers are in `common` and `sessions`.

/// Counts what each engine thread allocates, so a Rhai engine's memory cap sees copies no
/// guarded builtin does (`ctxhost::MeteredAlloc`).
#[global_allocator]
static ALLOC: ctxhost::MeteredAlloc = ctxhost::MeteredAlloc;

#[macro_use]
mod common;
#[macro_use]
mod modes;
mod sessions;
// The Postgres server the store tests use (not in `common`: cli/tests include that, and
// tokio-postgres is not theirs).
#[path = "common/pg_row_lock.rs"]
mod pg_row_lock;
#[path = "common/pg.rs"]
mod pg_server;

mod adapters;
mod bad_input;
mod budgets;
mod complete;
mod concurrency;
mod conformance;
mod engines;
mod guarantees;
mod guide;
mod hostile;
mod house;
mod isolation;
mod llm_summarizer;
mod lua_engine;
mod memory;
mod model_calls;
mod pipeline;
mod properties;
mod quality;
mod recall;
mod reload;
mod replay;
mod rhai_engine;
mod serve;
mod serve_model;
mod stdlib;
mod store;
mod store_pg;
mod transcripts;
mod twins;
mod workloads;
