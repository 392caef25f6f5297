//! Internals the crate's own tests and benches reach: not part of the API, hidden from the docs,
//! and free to change with any release.
//!
//! An embedder builds a [`Host`](crate::Host) and drives sessions through it; the crate's tests
//! also drive one script VM, one worker or one adapter directly, and this module is the one door
//! they use for that, so the rest of the crate's internals stay `pub(crate)`.

pub use crate::engine::api::{
    Completions, HeldMessage, HostError, HostOut, HostScope, HostValue, SessionModel,
    SessionServices, SummarizeOptions,
};
pub use crate::engine::legacy::{Legacy, LegacyFactory};
pub use crate::engine::script::{ScriptInstance, ScriptVm, info_from_json};
pub use crate::sandbox::{StopSignals, Worker, admit_worker};
pub use crate::services::recall::RecallIndex;
pub use crate::session::checks::check_assemble;
pub use crate::session::state::state_path;
pub use crate::session::timed_summarizer::BUILTIN_ROW;
pub use crate::store::jsonl::committed_document;

/// The Lua (Luau) adapter, loaded directly (without the dispatch on the file's extension).
pub mod lua {
    pub use crate::engine::lua::{LuaFactory, load};
}

/// The Rhai adapter, loaded directly (without the dispatch on the file's extension).
pub mod rhai {
    pub use crate::engine::rhai::{RhaiFactory, load};
}

/// The script API's function table.
pub mod table {
    pub use crate::engine::api::table::find;
}

/// The check and repair of tool-call pairing the turn driver applies to every context.
pub mod pairing {
    pub use crate::services::pairing::{is_well_paired, repair};
}
