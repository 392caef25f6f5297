//! What the host computes for sessions and for scripts, below the engine layer: token counts
//! ([`tokens`]), summaries ([`summarize`]) and model calls ([`llm`]), recall of compacted
//! history (`recall`), the built-in compaction ([`compaction`]), and the repairs every
//! context gets before the model sees it: fitting to the budget (`fit`), tool-call pairing
//! (`pairing`) and the guarantees of a call ([`guarantee`]). Nothing here knows an engine
//! or a session.

pub mod compaction;
pub(crate) mod fit;
pub(crate) mod fnv;
pub mod guarantee;
pub(crate) mod id_map;
pub mod llm;
pub(crate) mod pairing;
pub(crate) mod recall;
pub mod summarize;
pub mod tokens;
