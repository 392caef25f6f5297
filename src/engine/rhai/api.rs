//! The `host` module as Rhai scripts see it (`host::tokens`, `host::summarize`,
//! `host::delegateCompaction`, `host::repairPairing`, `host::log::*`, `host::config`,
//! `host::now`).
//!
//! Every behaviour lives in [`HostCall`]; this module only converts arguments and results. Each
//! instance builds its own module whose functions share a [`Bridge`] with the VM: the current
//! call's `HostCall` (set for the duration of a lifecycle call) and the resident messages.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use rhai::{Array, Dynamic, EvalAltResult, FLOAT, INT, Map, Module, Shared};
use serde_json::{Map as JsonMap, Value as Json};

use super::messages::ScriptMessage;
use super::values::{self, Resident};
use crate::contract::ResultLimits;
use crate::engine::script::Budget;
use crate::host::{HostCall, LogLevel};

/// What the `host` functions share with their VM.
#[derive(Debug)]
pub struct Bridge {
    /// The running lifecycle call, if any.
    pub call: Mutex<Option<HostCall>>,
    /// The VM's resident messages.
    pub resident: Mutex<Resident>,
    /// Caps applied to values scripts pass to `host::*`.
    pub limits: ResultLimits,
    /// For log lines outside a call.
    pub engine_id: Mutex<String>,
}

type Out<T> = Result<T, Box<EvalAltResult>>;

fn fail(msg: impl Into<String>) -> Box<EvalAltResult> {
    msg.into().into()
}

impl Bridge {
    /// A bridge with no call running and no resident messages.
    pub fn new(engine_id: &str, limits: ResultLimits) -> Self {
        Bridge {
            call: Mutex::new(None),
            resident: Mutex::new(Resident::default()),
            limits,
            engine_id: Mutex::new(engine_id.to_string()),
        }
    }

    fn with_call<R>(&self, name: &str, f: impl FnOnce(&HostCall) -> R) -> Out<R> {
        let guard = self.call.lock();
        let call = guard
            .as_ref()
            .ok_or_else(|| fail(format!("{name} is only available inside a lifecycle call")))?;
        Ok(f(call))
    }

    fn budget(&self) -> Budget {
        Budget::new(self.limits.max_result_bytes)
    }

    fn json_arg(&self, name: &str, v: &Dynamic) -> Out<Json> {
        values::to_json(v, &mut self.budget())
            .map_err(|e| fail(format!("{name}: {}", e.describe(""))))
    }

    fn messages_arg(&self, name: &str, v: &Dynamic) -> Out<Vec<Arc<crate::message::Message>>> {
        values::messages_from(v, &mut self.budget(), self.limits.max_result_messages)
            .map_err(|e| fail(format!("{name}: messages {e}")))
    }

    /// `host::tokens(x)`: a string, one message, or a list of messages (or strings).
    fn tokens(&self, v: &Dynamic) -> Out<INT> {
        let guard = self.call.lock();
        let call = guard
            .as_ref()
            .ok_or_else(|| fail("host::tokens is only available inside a lifecycle call"))?;
        let mut budget = self.budget();
        let one = |item: &Dynamic, budget: &mut Budget| -> Out<u64> {
            if let Ok(s) = item.as_immutable_string_ref() {
                return Ok(call.tokens_text(&s));
            }
            if let Some(m) = item.read_lock::<ScriptMessage>() {
                return Ok(m.tokens(|msg| call.tokens_message(msg)));
            }
            let m = values::message_from(item, budget)
                .map_err(|e| fail(format!("host::tokens: {e}")))?;
            Ok(call.tokens_message(&m))
        };
        let message_like = |d: &Dynamic| d.is_map() || d.is_string() || d.is::<ScriptMessage>();
        let n = if v.is_unit() {
            0
        } else if message_like(v) {
            one(v, &mut budget)?
        } else if let Ok(total) = values::with_items(v, |items| -> Out<u64> {
            let mut total = 0u64;
            for (i, item) in items.iter().enumerate() {
                if !message_like(item) {
                    return Err(fail(format!(
                        "host::tokens: item {} is a {}, expected a message",
                        i + 1,
                        item.type_name()
                    )));
                }
                total += one(item, &mut budget)?;
            }
            Ok(total)
        }) {
            total?
        } else {
            return Err(fail(format!(
                "host::tokens expects a string, a message or a list of messages, got {}",
                v.type_name()
            )));
        };
        Ok(INT::try_from(n).unwrap_or(INT::MAX))
    }

    /// `host::summarize(messages, opts)` → `#{text, tokens}`.
    fn summarize(&self, messages: &Dynamic, opts: Option<&Dynamic>) -> Out<Dynamic> {
        let messages = self.messages_arg("host::summarize", messages)?;
        let opts = match opts {
            Some(o) if !o.is_unit() => Some(self.json_arg("host::summarize opts", o)?),
            _ => None,
        };
        let opts = crate::host::summarize_options(opts).map_err(fail)?;
        let out = self
            .with_call("host::summarize", |call| call.summarize(&messages, &opts))?
            .map_err(|e| fail(format!("host::summarize: {e}")))?;
        let mut m = Map::new();
        m.insert("text".into(), out.text.into());
        m.insert(
            "tokens".into(),
            INT::try_from(out.tokens).unwrap_or(INT::MAX).into(),
        );
        Ok(Dynamic::from_map(m))
    }

    /// `host::delegateCompaction(p)` → the built-in compaction's `CompactResult` as a map.
    fn delegate_compaction(&self, p: &Dynamic) -> Out<Dynamic> {
        let p = p
            .as_map_ref()
            .map_err(|t| fail(format!("host::delegateCompaction expects p, got {t}")))?;
        let mut fields = JsonMap::new();
        for field in crate::host::COMPACT_FIELDS {
            if let Some(v) = p.get(field).filter(|v| !v.is_unit()) {
                let j = self.json_arg(&format!("host::delegateCompaction p.{field}"), v)?;
                fields.insert(field.to_string(), j);
            }
        }
        let params = crate::host::delegate_params(fields).map_err(fail)?;
        let result = self.with_call("host::delegateCompaction", |call| {
            call.delegate_compaction(&params)
        })?;
        let json = serde_json::to_value(&result).map_err(|e| fail(e.to_string()))?;
        values::from_json(&json).map_err(fail)
    }

    /// `host::repairPairing(messages)` → the repaired array; messages that survive are the very
    /// values passed in.
    fn repair_pairing(&self, messages: &Dynamic) -> Out<Dynamic> {
        let input = self.messages_arg("host::repairPairing", messages)?;
        let mut given: HashMap<usize, Dynamic> = HashMap::new();
        let _ = values::with_items(messages, |list| {
            for (m, item) in input.iter().zip(list.iter()) {
                given.insert(Arc::as_ptr(m) as usize, item.clone());
            }
        });
        let repaired = self.with_call("host::repairPairing", |call| call.repair_pairing(input))?;
        let mut out = Array::with_capacity(repaired.messages.len());
        for m in &repaired.messages {
            match given.get(&(Arc::as_ptr(m) as usize)) {
                Some(v) => out.push(v.clone()),
                None => out.push(self.resident.lock().value_for(m).map_err(fail)?),
            }
        }
        Ok(Dynamic::from_array(out))
    }

    fn log(&self, level: LogLevel, v: &Dynamic) {
        let text = v.to_string();
        if let Some(call) = self.call.lock().as_ref() {
            call.log(level, text);
            return;
        }
        let engine = self.engine_id.lock().clone();
        crate::host::log(&engine, None, level, text);
    }
}

/// The `host` module of one instance, with `host::config` set to `config`.
pub fn host_module(bridge: &Arc<Bridge>, config: &Json) -> Result<Shared<Module>, String> {
    let mut host = Module::new();
    let b = bridge.clone();
    host.set_native_fn("tokens", move |x: Dynamic| b.tokens(&x));
    let b = bridge.clone();
    host.set_native_fn("summarize", move |m: Dynamic| b.summarize(&m, None));
    let b = bridge.clone();
    host.set_native_fn("summarize", move |m: Dynamic, o: Dynamic| {
        b.summarize(&m, Some(&o))
    });
    let b = bridge.clone();
    host.set_native_fn("delegateCompaction", move |p: Dynamic| {
        b.delegate_compaction(&p)
    });
    let b = bridge.clone();
    host.set_native_fn("repairPairing", move |m: Dynamic| b.repair_pairing(&m));
    host.set_native_fn("now", || -> Out<FLOAT> {
        Ok(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64() * 1000.0)
            .unwrap_or(0.0))
    });
    let mut log = Module::new();
    for (name, level) in [
        ("debug", LogLevel::Debug),
        ("info", LogLevel::Info),
        ("warn", LogLevel::Warn),
    ] {
        let b = bridge.clone();
        log.set_native_fn(name, move |v: Dynamic| -> Out<()> {
            b.log(level, &v);
            Ok(())
        });
    }
    host.set_sub_module("log", log);
    let config = match config {
        Json::Null => Dynamic::from_map(Map::new()),
        c => values::from_json(c)?,
    };
    host.set_var("config", config.into_read_only());
    Ok(host.into())
}
