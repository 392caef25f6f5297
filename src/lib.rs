//! ctxhost: a host for scriptable context engines.
//!
//! A context engine decides what an LLM sees on each turn. ctxhost runs engines written as
//! single Lua (Luau) or Rhai files behind one contract (`ENGINE_CONTRACT.md`): it owns the
//! transcript, validates every engine and every result, and falls back to the built-in `legacy`
//! engine when a script fails, so the agent never goes silent and no message is lost.
//!
//! Data flows one way: [`transcript`] store → [`session`] → turn driver → [`engine`] → result
//! validation ([`contract`]) and [`pairing`] repair → the context the model sees.

pub mod check;
pub mod compaction;
pub mod config;
pub mod contract;
pub mod engine;
pub mod error;
pub mod fit;
pub mod host;
pub mod message;
pub mod pairing;
pub mod quarantine;
pub mod reload;
pub mod replay;
pub mod runtime;
pub mod sandbox;
pub mod serve;
pub mod session;
pub mod stdlib;
pub mod summarize;
pub mod tokens;
pub mod transcript;

pub use error::{EngineError, EngineErrorKind, Error, Result};
