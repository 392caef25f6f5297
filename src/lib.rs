//! ctxhost: a host for scriptable context engines.
//!
//! A context engine decides what an LLM sees on each turn. ctxhost runs engines written as
//! single Lua (Luau) or Rhai files behind one contract (`docs/contract.md`): it owns the
//! transcript, validates every engine and every result, and falls back to the built-in `legacy`
//! engine when a script fails, so the agent never goes silent and no message is lost.
//!
//! Data flows one way: [`transcript`] store → [`session`] → turn driver → [`engine`] → result
//! validation ([`contract`]) and tool-call pairing repair → the context the model sees.
//!
#![doc = include_str!("../docs/embedding.md")]
// Internals are `pub(crate)` unless the public surface reaches them; the library logs through
// `tracing` and never prints (the CLI does; unit tests may print what they measured).
#![warn(unreachable_pub)]
#![cfg_attr(not(test), warn(clippy::print_stdout))]

// The layers, bottom to top: `contract` (plain data and its checks), `sandbox` (private: the
// limits any call runs under: deadline, memory, the per-core gate), `services` (what the host
// computes: tokens, summaries, compaction, fitting, pairing), `engine` (the seam, the adapters,
// the script API), `transcript` and `store` (what a session keeps), `session`
// (one conversation and its turn driver), and the front doors: `runtime` (the `Host` an
// embedder builds), `serve` (the wire) and `tools` (replay, check, compare). `error` is private:
// its types are at the root. `testing` is the one door the crate's own tests and benches use
// into internals (hidden from the docs, no API promise).
pub mod config;
pub mod contract;
pub mod engine;
mod error;
pub mod runtime;
mod sandbox;
pub mod serve;
pub mod services;
pub mod session;
pub mod store;
#[doc(hidden)]
pub mod testing;
pub mod tools;
pub mod transcript;

// The surface an embedder needs, at the root: the host and its sessions, the messages they
// carry, the configuration, and the seams an embedder implements (an `Engine`, a
// `store::SessionStore` or `store::Backend`, a `Summarizer`, a `TokenCounter`).
pub use config::{Config, Entry, FailurePolicy};
pub use contract::message::Message;
pub use engine::Quarantine;
pub use engine::api::HostCall;
pub use engine::{Engine, EngineFactory, InstanceContext, SpawnRollback};
pub use error::{
    Disposition, EngineError, EngineErrorKind, Error, MAX_ERROR_MESSAGE_BYTES, Op, Result,
    ScriptLocation,
};
pub use runtime::{Host, HostBuilder, SessionHandle, SessionSpec};
// The program-wide pieces of the sandbox: the allocator a program installs so Rhai's memory cap
// counts what a worker thread allocates, and the count of VMs abandoned past deadline + grace.
pub use sandbox::abandoned_workers;
pub use sandbox::alloc::{Metered, MeteredAlloc};
pub use services::summarize::Summarizer;
pub use services::tokens::TokenCounter;
pub use session::{Assembly, Session, TurnInput, TurnStats};
pub use transcript::{Durability, TranscriptStore};
