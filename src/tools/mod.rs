//! The author's tools on top of the front door ([`crate::runtime::Host`]): [`replay`] a
//! recorded conversation through an engine, [`check`] an engine on a synthetic or real session,
//! [`compare`] engines on cost, cache reuse and what the model can still find, and the
//! [`status`] files `doctor` reads from running processes.

pub mod check;
pub mod compare;
pub mod replay;
pub mod status;
