//! The table of `host` functions ([`API`]) and what one of them runs with ([`HostScope`],
//! [`Ctx`]).
//!
//! An adapter registers every [`HostFn`] under its [`path`](HostFn::path) (joined with `.` in
//! Lua, `::` in Rhai), converts each argument as its [`Param`] says, calls
//! [`HostScope::run`] and converts the [`HostOut`] back. Errors name the function as the script
//! spelled it.

use std::fmt::Display;
use std::sync::Arc;

use super::value::{HostError, HostOut, HostValue};
use super::{
    HostCall, LogLevel, clock, compaction, complete, fit, log, pairing, recall, summarize, tokens,
};
use crate::contract::ResultLimits;
use crate::sandbox::StopSignals;

/// How an adapter converts one argument of a `host` function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param {
    /// Any value, converted whole (resident messages as [`HostValue::Message`]); the name is
    /// the parameter's in errors.
    Value(&'static str),
    /// A map of which only these fields are converted, into a [`HostValue::Map`] (anything else
    /// as itself). `host.delegateCompaction(p)` reads a few fields of `p`, which also carries
    /// the context and the state.
    Fields(&'static str, &'static [&'static str]),
    /// Text, as the language prints values: this argument and every one after it (Lua joins
    /// them with tabs), into a [`HostValue::Text`].
    Text,
}

/// One `host` function.
#[derive(Debug)]
pub struct HostFn {
    /// Where scripts find it under `host`: `["tokens"]`, `["log", "info"]`.
    pub path: &'static [&'static str],
    /// Its parameters, in order.
    pub params: &'static [Param],
    /// How many leading parameters a call must pass; the rest may be left out (a language that
    /// registers by arity registers each count from here to `params.len()`).
    pub required: usize,
    /// Whether it takes one argument whose result for a resident message never changes
    /// (messages are frozen and the session's counter is fixed), so a VM may keep it per
    /// message (Lua memoizes `host.tokens(m)` in the VM).
    pub per_message: bool,
    /// The function, over converted arguments (one per parameter, in order; the rest are
    /// [`HostValue::Nil`]).
    pub run: fn(&Ctx<'_>, Args) -> Result<HostOut, HostError>,
}

/// The most parameters a `host` function has.
pub(crate) const MAX_PARAMS: usize = 3;

/// The converted arguments of one call (on the stack: `host.tokens` is called per message).
pub(crate) type Args = [HostValue; MAX_PARAMS];

/// Every `host` function scripts can call.
pub(crate) static API: [HostFn; 12] = [
    HostFn {
        path: &["tokens"],
        params: &[Param::Value("x")],
        required: 1,
        per_message: true,
        run: tokens::tokens,
    },
    HostFn {
        path: &["fit"],
        params: &[
            Param::Value("messages"),
            Param::Value("budget"),
            Param::Value("opts"),
        ],
        required: 2,
        per_message: false,
        run: fit::fit,
    },
    HostFn {
        path: &["summarize"],
        params: &[Param::Value("messages"), Param::Value("opts")],
        required: 1,
        per_message: false,
        run: summarize::summarize,
    },
    HostFn {
        path: &["complete"],
        params: &[Param::Value("request")],
        required: 1,
        per_message: false,
        run: complete::complete,
    },
    HostFn {
        path: &["delegateCompaction"],
        params: &[Param::Fields("p", &compaction::COMPACT_FIELDS)],
        required: 1,
        per_message: false,
        run: compaction::delegate,
    },
    HostFn {
        path: &["repairPairing"],
        params: &[Param::Value("messages")],
        required: 1,
        per_message: false,
        run: pairing::repair,
    },
    HostFn {
        path: &["search"],
        params: &[Param::Value("query"), Param::Value("opts")],
        required: 1,
        per_message: false,
        run: recall::search,
    },
    HostFn {
        path: &["fetch"],
        params: &[Param::Value("ids")],
        required: 1,
        per_message: false,
        run: recall::fetch,
    },
    HostFn {
        path: &["now"],
        params: &[],
        required: 0,
        per_message: false,
        run: clock::now,
    },
    HostFn {
        path: &["log", "debug"],
        params: &[Param::Text],
        required: 1,
        per_message: false,
        run: log::debug,
    },
    HostFn {
        path: &["log", "info"],
        params: &[Param::Text],
        required: 1,
        per_message: false,
        run: log::info,
    },
    HostFn {
        path: &["log", "warn"],
        params: &[Param::Text],
        required: 1,
        per_message: false,
        run: log::warn,
    },
];

/// The entry at `path` (e.g. `["log", "info"]`, which Lua's `print` also is).
pub fn find(path: &[&str]) -> Option<&'static HostFn> {
    API.iter().find(|f| f.path == path)
}

/// What `host` functions know of their VM: the engine (for log lines), the caps on what
/// scripts pass in, and the running lifecycle call, if any. Each VM keeps one.
#[derive(Debug)]
pub struct HostScope {
    engine: String,
    limits: ResultLimits,
    call: Option<HostCall>,
    signals: Arc<StopSignals>,
    logged: log::CallLog,
}

impl HostScope {
    /// A scope for the engine labelled `engine` (until its `info` names it), no call running;
    /// `signals` are the VM's (a model call pauses its deadline and watches its cancel flag).
    pub fn new(engine: &str, limits: ResultLimits, signals: Arc<StopSignals>) -> Self {
        HostScope {
            engine: engine.to_string(),
            limits,
            call: None,
            signals,
            logged: log::CallLog::default(),
        }
    }

    /// The VM's stop signals.
    pub fn signals(&self) -> &StopSignals {
        &self.signals
    }

    /// The engine's id, once `info` gives one.
    pub fn rename(&mut self, engine: &str) {
        self.engine = engine.to_string();
    }

    /// A lifecycle call starts (`Some`) or ends (`None`).
    pub fn set_call(&mut self, call: Option<HostCall>) {
        let dropped = self.logged.reset();
        let session = self.call.as_ref().map(HostCall::session_id);
        log::report_dropped(&self.engine, session, dropped);
        self.call = call;
    }

    /// Caps on what scripts pass to `host` functions (bytes of text, messages in a list).
    pub fn limits(&self) -> &ResultLimits {
        &self.limits
    }

    /// Logs script text (from `host.log.*` or the language's `print`) at `level`, tagged with
    /// the engine and, inside a call, the session; see [`log::log`].
    pub fn log(&self, level: LogLevel, text: String) {
        let session = self.call.as_ref().map(HostCall::session_id);
        let budget = self.call.as_ref().map(|_| &self.logged);
        log::log_within(&self.engine, session, level, text, budget);
    }

    /// Runs `f` on converted `args`, as the script called it by `name` (`host.tokens`).
    pub fn run(&self, f: &HostFn, name: &str, args: Args) -> Result<HostOut, HostError> {
        let Some(call) = &self.call else {
            return (f.run)(&Ctx { scope: self, name }, args);
        };
        let started = std::time::Instant::now();
        let out = match call.forward() {
            Some(fwd) if fwd.forwards(f) => fwd.forward(f, name, args),
            _ => (f.run)(&Ctx { scope: self, name }, args),
        };
        call.services()
            .host_times
            .lock()
            .record_named(f.path, started.elapsed());
        out
    }
}

/// What one `host` function call runs with.
#[derive(Debug)]
pub struct Ctx<'a> {
    scope: &'a HostScope,
    name: &'a str,
}

impl Ctx<'_> {
    /// The running lifecycle call; outside one, a script error saying so.
    pub fn call(&self) -> Result<&HostCall, HostError> {
        self.scope.call.as_ref().ok_or_else(|| {
            HostError::script(format!(
                "{} is only available inside a lifecycle call",
                self.name
            ))
        })
    }

    /// The function as the script spelled it (`host.tokens`, `host::tokens`).
    pub fn name(&self) -> &str {
        self.name
    }

    /// The index scripts of this language give the first item of a list: 0 in Rhai (which
    /// spells host functions `host::name`), 1 in Lua (`host.name`).
    pub fn first_index(&self) -> i64 {
        if self.name.contains("::") { 0 } else { 1 }
    }

    /// The VM's scope.
    pub fn scope(&self) -> &HostScope {
        self.scope
    }

    /// A script error, prefixed with the function's name.
    pub fn script_error(&self, e: impl Display) -> HostError {
        HostError::script(format!("{}: {e}", self.name))
    }

    /// A host fault, prefixed with the function's name.
    pub fn host_error(&self, e: impl Display) -> HostError {
        HostError::host(format!("{}: {e}", self.name))
    }
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
