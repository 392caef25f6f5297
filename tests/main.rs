//! ctxhost's integration tests: one test binary, so the library, mlua, rhai and tokio link
//! once. Each module tests one concern from the outside, with real scripts, real transcripts
//! and real files; the shared helpers are in `common` and `sessions`.

mod common;
mod sessions;

mod bad_input;
mod conformance;
mod engines;
mod guide;
mod hostile;
mod house;
mod lua_engine;
mod reload;
mod replay;
mod rhai_engine;
mod serve;
mod stdlib;
mod transcripts;
mod twins;
mod workloads;
