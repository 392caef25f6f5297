//! ctxhost: a host for scriptable context engines.
//!
//! A context engine decides what an LLM sees on each turn. ctxhost runs engines written as
//! single Lua (Luau) or Rhai files behind one contract (`docs/contract.md`): it owns the
//! transcript, validates every engine and every result, and falls back to the built-in `legacy`
//! engine when a script fails, so the agent never goes silent and no message is lost.
//!
//! Data flows one way: [`transcript`] store → [`session`] → turn driver → [`engine`] → result
//! validation ([`contract`]) and [`pairing`] repair → the context the model sees.

pub mod check;
pub mod compaction;
pub mod compare;
pub mod config;
pub mod contract;
pub mod engine;
pub mod error;
pub(crate) mod fit;
pub(crate) mod fnv;
pub mod guarantee;
pub mod host;
pub mod isolation;
pub mod limits;
pub mod llm;
pub mod message;
pub mod pairing;
pub mod pipeline;
mod quarantine;
pub mod recall;
pub mod reload;
pub mod replay;
pub mod runtime;
pub mod sandbox;
pub mod serve;
pub mod session;
pub mod status;
pub mod stdlib;
pub mod store;
pub mod summarize;
pub mod tokens;
pub mod transcript;

// The surface an embedder needs, at the root: the host and its sessions, the messages they
// carry, the configuration, and the seams an embedder implements (an `Engine`, a transcript
// `Store`, a `Summarizer`, a `TokenCounter`).
pub use config::{Config, Entry, FailurePolicy};
pub use engine::{Engine, EngineFactory, InstanceContext, SpawnRollback};
pub use error::{EngineError, EngineErrorKind, Error, Op, Result, ScriptLocation};
pub use host::HostCall;
pub use message::Message;
pub use quarantine::Quarantine;
pub use runtime::{Host, HostBuilder, SessionHandle, SessionSpec};
pub use session::{Assembly, Session, TurnInput, TurnStats};
pub use summarize::Summarizer;
pub use tokens::TokenCounter;
pub use transcript::{Durability, Store, TranscriptStore};
