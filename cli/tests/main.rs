//! The `ctxhost` command from the outside: one integration-test binary, so the library, mlua
//! and rhai link once. Each module is one command's (or one concern's) tests.

#[path = "../../tests/common/mod.rs"]
#[macro_use]
mod common;

mod bin;
mod bounded;
mod bridge_state;
mod cli;
mod compare;
mod contexts;
mod crash;
mod did_you_mean;
mod doctor_pipeline;
mod isolation;
mod kills;
mod new_engine;
mod new_hook;
mod pg_serve;
/// The Postgres server the tests use (a scratch schema each), shared with the library's suite.
#[path = "../../tests/common/pg.rs"]
#[allow(dead_code)]
mod pg_server;
mod progress;
mod report;
mod retention;
mod rng;
mod serve;
mod snapshots;
mod store;
mod terminal;
mod watch;
