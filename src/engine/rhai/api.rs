//! The `host` module as Rhai scripts see it (`host::tokens`, `host::summarize`,
//! `host::delegateCompaction`, `host::repairPairing`, `host::log::*`, `host::config`,
//! `host::now`).
//!
//! Every `host` function is an entry of [`API`]: this module registers each under
//! `host::<path>` (once per accepted arity) and converts values, Rhai values in as
//! [`HostValue`]s ([`values::host_value`]) and [`HostOut`]s back. Each instance builds its own
//! module whose functions share a [`Bridge`] with the VM: its [`HostScope`] (engine, caps and
//! the running lifecycle call) and its resident messages.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use rhai::{Array, Dynamic, EvalAltResult, FLOAT, INT, Map, Module, Position, Shared};
use serde_json::Value as Json;

use super::messages::MessageList;
use super::values::{self, Resident};
use crate::contract::ResultLimits;
use crate::engine::api::{
    API, Args, HeldMessage, HostError, HostFn, HostOut, HostScope, HostValue, Kept, LogLevel, Param,
};
use crate::engine::script::Budget;
use crate::sandbox::StopSignals;

/// What the `host` functions share with their VM.
#[derive(Debug)]
pub(crate) struct Bridge {
    /// The engine, the caps on arguments and the running lifecycle call.
    pub scope: Mutex<HostScope>,
    /// The VM's resident messages.
    pub resident: Mutex<Resident>,
}

/// A failure the host, not the script, is to blame for (a `host` function's
/// [`HostError::host`]), thrown as this type so that scripts cannot forge one: the VM
/// classifies it as `Host`. A script that catches it sees its message via `to_string`.
#[derive(Clone, Debug)]
pub(crate) struct HostFault(pub String);

type Out<T> = Result<T, Box<EvalAltResult>>;

fn fail(msg: impl Into<String>) -> Box<EvalAltResult> {
    msg.into().into()
}

fn rhai_error(e: HostError) -> Box<EvalAltResult> {
    if e.is_host_fault() {
        let fault = Dynamic::from(HostFault(e.message().to_string()));
        EvalAltResult::ErrorRuntime(fault, Position::NONE).into()
    } else {
        fail(e.message())
    }
}

impl Bridge {
    /// A bridge for the engine labelled `engine`, with no call running and no resident messages.
    pub(crate) fn new(engine: &str, limits: ResultLimits, signals: Arc<StopSignals>) -> Self {
        Bridge {
            scope: Mutex::new(HostScope::new(engine, limits, signals)),
            resident: Mutex::new(Resident::default()),
        }
    }

    /// Logs script text (`print`, `debug`) like `host::log::*`.
    pub(crate) fn log(&self, level: LogLevel, text: String) {
        self.scope.lock().log(level, text);
    }

    /// One call of `f` as `name` with `args`: converted as its params say, run, converted back.
    fn call(&self, f: &HostFn, name: &str, args: &[Dynamic]) -> Out<Dynamic> {
        let out = {
            let scope = self.scope.lock();
            let mut budget = Budget::new(scope.limits().max_result_bytes);
            let mut values = Args::default();
            for ((param, v), slot) in f.params.iter().zip(args).zip(&mut values) {
                let converted = match param {
                    // The context list is passed whole, shared (`host::fit(p.messages, …)`).
                    Param::Value(_) if let Some(held) = self.context_list(v) => {
                        Ok(HostValue::Resident(held))
                    }
                    Param::Value(p) => {
                        values::host_value(v, &mut budget).map_err(|e| e.describe(p))
                    }
                    Param::Fields(p, fields) => {
                        values::host_fields(v, fields, &mut budget).map_err(|e| e.describe(p))
                    }
                    Param::Text => Ok(HostValue::Text(v.to_string())),
                };
                *slot = converted.map_err(|e| fail(format!("{name}: {e}")))?;
            }
            scope.run(f, name, values).map_err(rhai_error)?
        };
        self.value_of(out, args.first())
    }

    /// The held messages of `v` when it is the context list (`p.messages`).
    fn context_list(&self, v: &Dynamic) -> Option<Arc<Vec<Arc<HeldMessage>>>> {
        let list = v.read_lock::<MessageList>()?;
        self.resident.lock().held_list(&list)
    }

    /// What a host function returned, as a Rhai value (the first of several); messages the
    /// script passed in (`given`, the first argument) come back as its very values.
    fn value_of(&self, out: HostOut, given: Option<&Dynamic>) -> Out<Dynamic> {
        Ok(match out {
            HostOut::Nil => Dynamic::UNIT,
            HostOut::Count(n) => Dynamic::from(INT::try_from(n).unwrap_or(INT::MAX)),
            HostOut::Number(n) => Dynamic::from(n as FLOAT),
            HostOut::Data(j) => values::from_json(&j).map_err(fail)?,
            HostOut::Messages(kept) => {
                let mut out = Array::with_capacity(kept.len());
                for k in kept {
                    out.push(match k {
                        Kept::Given(i) => given
                            .and_then(|g| values::with_items(g, |items| items.get(i).cloned()).ok())
                            .flatten()
                            .ok_or_else(|| fail("a kept message has no list"))?,
                        Kept::New(m) => self.resident.lock().value_for(&m).map_err(fail)?,
                    });
                }
                Dynamic::from_array(out)
            }
            HostOut::Many(outs) => match outs.into_iter().next() {
                Some(first) => self.value_of(first, given)?,
                None => Dynamic::UNIT,
            },
            HostOut::Record(fields) => {
                let mut map = Map::new();
                for (name, out) in fields {
                    map.insert(name.into(), self.value_of(out, given)?);
                }
                Dynamic::from_map(map)
            }
        })
    }
}

/// Registers `f` in `module` under its last path segment, once per accepted arity.
fn register(module: &mut Module, f: &'static HostFn, bridge: &Arc<Bridge>) -> Result<(), String> {
    let name: Arc<str> = format!("host::{}", f.path.join("::")).into();
    let Some(last) = f.path.last() else {
        return Ok(());
    };
    for arity in f.required..=f.params.len() {
        let (b, n) = (bridge.clone(), name.clone());
        match arity {
            0 => module.set_native_fn(*last, move || b.call(f, &n, &[])),
            1 => module.set_native_fn(*last, move |a: Dynamic| b.call(f, &n, &[a])),
            2 => module.set_native_fn(*last, move |a: Dynamic, c: Dynamic| b.call(f, &n, &[a, c])),
            3 => module.set_native_fn(*last, move |a: Dynamic, c: Dynamic, d: Dynamic| {
                b.call(f, &n, &[a, c, d])
            }),
            _ => return Err(format!("{name} takes more arguments than Rhai registers")),
        };
    }
    Ok(())
}

/// The `host` module of one instance, with `host::config` set to `config` (`#{}` when none).
pub(crate) fn host_module(bridge: &Arc<Bridge>, config: &Json) -> Result<Shared<Module>, String> {
    let mut host = Module::new();
    let mut subs: BTreeMap<&str, Module> = BTreeMap::new();
    for f in &API {
        match f.path {
            [_] => register(&mut host, f, bridge)?,
            [sub, _] => register(subs.entry(sub).or_default(), f, bridge)?,
            _ => return Err(format!("host::{} is nested too deep", f.path.join("::"))),
        }
    }
    for (name, sub) in subs {
        host.set_sub_module(name, sub);
    }
    let config = match config {
        Json::Null => Dynamic::from_map(Map::new()),
        c => values::from_json(c)?,
    };
    host.set_var("config", config.into_read_only());
    Ok(host.into())
}
