//! **Test harness, not the adapter.** A small stand-in for the Lua adapter so that the stdlib and
//! the example engines can be tested before (and independently of) `ctxhost::engine::lua`:
//! a sandboxed Luau state (`Lua::new()` + `sandbox(true)`), a `require` that serves only the
//! embedded `stdlib/` modules, and a `host` table whose functions call the real host code
//! (`HostCall`: `host.tokens` counts with the default chars/4 CJK-weighted estimate; compaction
//! and pairing repair are the host's own). `host.summarize` uses a tiny deterministic test
//! summarizer, so these tests do not depend on the built-in summarizer's wording.
//!
//! Messages handed to scripts are frozen (`set_readonly`, recursively) like the adapter's, so a
//! stdlib function that writes into an input message fails here.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use mlua::{Function, Lua, LuaSerdeExt, Table, Value};
use serde_json::{Value as Json, json};

use ctxhost::compaction::CompactionSettings;
use ctxhost::contract::{CompactParams, ResultLimits};
use ctxhost::host::{HostCall, SessionServices, SummarizeOptions};
use ctxhost::message::Message;
use ctxhost::summarize::{Summarizer, Summary, SummaryRequest};
use ctxhost::tokens::{Estimate, TokenCache, TokenCounter};

/// A deterministic summarizer for tests: the first line of each message, cut to the budget.
#[derive(Debug)]
pub struct TestSummarizer;

impl Summarizer for TestSummarizer {
    fn summarize(
        &self,
        request: &SummaryRequest<'_>,
        counter: &dyn TokenCounter,
    ) -> ctxhost::Result<Summary> {
        let mut text = String::new();
        if let Some(prev) = request.previous_summary {
            text.push_str(prev);
            text.push('\n');
        }
        for m in request.messages {
            let t = m.text();
            let line = t.lines().next().unwrap_or("");
            let line: String = line.chars().take(80).collect();
            text.push_str(&format!("- {}: {line}\n", m.role().as_str()));
        }
        // Cut to the budget (chars/4 estimate: 4 bytes per token is safe for ASCII).
        while counter.count_text(&text) > request.max_tokens {
            let keep = text
                .char_indices()
                .map(|(i, _)| i)
                .take_while(|i| *i < text.len() * 3 / 4)
                .last()
                .unwrap_or(0);
            text.truncate(keep);
        }
        let tokens = counter.count_text(&text);
        Ok(Summary {
            text,
            tokens,
            identifiers_found: 0,
            identifiers_kept: 0,
            read_files: Vec::new(),
            modified_files: Vec::new(),
        })
    }
}

/// What the `host` functions of the harness need to reach.
struct HarnessCall {
    call: HostCall,
    logs: Vec<String>,
}

/// A sandboxed Luau state with the stdlib and a `host` table.
pub struct Harness {
    /// The VM.
    pub lua: Lua,
}

fn services() -> Arc<SessionServices> {
    Arc::new(SessionServices {
        tokens: TokenCache::new(Arc::new(Estimate)),
        summarizer: Arc::new(TestSummarizer),
        compaction: CompactionSettings::default(),
        limits: ResultLimits::default(),
    })
}

fn host_call(context: Vec<Arc<Message>>, budget: u64, config: Json) -> HostCall {
    HostCall::new(
        Arc::from("harness"),
        Arc::from("session"),
        Arc::new(context),
        services(),
        Arc::new(config),
        budget,
    )
}

/// Converts a Lua message table to a host message.
pub fn to_message(lua: &Lua, v: Value) -> mlua::Result<Arc<Message>> {
    let json: Json = lua.from_value(v)?;
    let m: Message = serde_json::from_value(json).map_err(mlua::Error::external)?;
    Ok(Arc::new(m))
}

/// Converts a Lua list of message tables to host messages.
pub fn to_messages(lua: &Lua, t: &Table) -> mlua::Result<Vec<Arc<Message>>> {
    t.sequence_values::<Value>()
        .map(|v| to_message(lua, v?))
        .collect()
}

/// Freezes a table and every table inside it.
pub fn freeze(t: &Table) -> mlua::Result<()> {
    if t.is_readonly() {
        return Ok(());
    }
    for pair in t.pairs::<Value, Value>() {
        let (_, v) = pair?;
        if let Value::Table(inner) = v {
            freeze(&inner)?;
        }
    }
    t.set_readonly(true);
    Ok(())
}

/// A frozen Lua message table from a JSON message.
pub fn lua_message(lua: &Lua, m: &Json) -> mlua::Result<Value> {
    let v = lua.to_value(m)?;
    if let Value::Table(t) = &v {
        freeze(t)?;
    }
    Ok(v)
}

/// A frozen Lua list of frozen messages.
pub fn lua_messages(lua: &Lua, ms: &[Json]) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    for m in ms {
        t.push(lua_message(lua, m)?)?;
    }
    // Like the adapter's resident list: an array metatable (protected, so `table.clone` fails
    // on it, as it does on the real thing) and read-only.
    t.set_metatable(Some(lua.array_metatable()))?;
    t.set_readonly(true);
    Ok(t)
}

fn tokens_of(lua: &Lua, call: &HostCall, v: Value) -> mlua::Result<u64> {
    match v {
        Value::String(s) => Ok(call.tokens_text(&s.to_str()?)),
        Value::Table(t) => {
            if t.contains_key("role")? {
                let m = to_message(lua, Value::Table(t))?;
                Ok(call.tokens_message(&m))
            } else {
                let ms = to_messages(lua, &t)?;
                Ok(call.tokens_messages(&ms))
            }
        }
        other => Err(mlua::Error::runtime(format!(
            "host.tokens: expected a string, a message or a list, got {}",
            other.type_name()
        ))),
    }
}

fn current(lua: &Lua) -> mlua::Result<HostCall> {
    lua.app_data_ref::<HarnessCall>()
        .map(|c| c.call.clone())
        .ok_or_else(|| mlua::Error::runtime("no host call"))
}

impl Harness {
    /// A fresh sandboxed state with the stdlib and `host`, for a session context of `context`
    /// messages and a turn budget of `budget`.
    pub fn new() -> mlua::Result<Harness> {
        let lua = Lua::new();
        lua.set_app_data(HarnessCall {
            call: host_call(Vec::new(), 8_000, json!({})),
            logs: Vec::new(),
        });
        lua.set_named_registry_value("stdlib_loaded", lua.create_table()?)?;
        let require = lua.create_function(|lua, name: String| {
            let loaded: Table = lua.named_registry_value("stdlib_loaded")?;
            let cached: Value = loaded.get(name.as_str())?;
            if !cached.is_nil() {
                return Ok(cached);
            }
            let Some(src) = ctxhost::stdlib::lua_module(&name) else {
                return Err(mlua::Error::runtime(format!(
                    "module '{name}' not found: only stdlib modules resolve"
                )));
            };
            let v: Value = lua
                .load(src)
                .set_name(format!("@stdlib/{name}.lua"))
                .eval()?;
            loaded.set(name.as_str(), v.clone())?;
            Ok(v)
        })?;
        lua.globals().set("require", require)?;

        let host = lua.create_table()?;
        host.set(
            "tokens",
            lua.create_function(|lua, v: Value| {
                let call = current(lua)?;
                tokens_of(lua, &call, v)
            })?,
        )?;
        host.set(
            "summarize",
            lua.create_function(|lua, (ms, opts): (Table, Option<Value>)| {
                let call = current(lua)?;
                let ms = to_messages(lua, &ms)?;
                let opts: SummarizeOptions = match opts {
                    Some(v) => lua.from_value(v)?,
                    None => SummarizeOptions::default(),
                };
                let out = call.summarize(&ms, &opts).map_err(mlua::Error::external)?;
                let t = lua.create_table()?;
                t.set("text", out.text)?;
                t.set("tokens", out.tokens)?;
                Ok(t)
            })?,
        )?;
        host.set(
            "delegateCompaction",
            lua.create_function(|lua, p: Value| {
                let call = current(lua)?;
                let params: CompactParams = lua.from_value(p)?;
                let r = call.delegate_compaction(&params);
                lua.to_value(&r)
            })?,
        )?;
        host.set(
            "repairPairing",
            lua.create_function(|lua, ms: Table| {
                let call = current(lua)?;
                let ms = to_messages(lua, &ms)?;
                let r = call.repair_pairing(ms);
                let out = lua.create_table()?;
                for m in &r.messages {
                    out.push(lua.to_value(&**m)?)?;
                }
                Ok((out, r.repairs.len()))
            })?,
        )?;
        let log = lua.create_table()?;
        for level in ["debug", "info", "warn"] {
            log.set(
                level,
                lua.create_function(move |lua, m: String| {
                    if let Some(mut c) = lua.app_data_mut::<HarnessCall>() {
                        c.logs.push(format!("{level}: {m}"));
                    }
                    Ok(())
                })?,
            )?;
        }
        host.set("log", log)?;
        host.set("config", lua.create_table()?)?;
        host.set("now", lua.create_function(|_, ()| Ok(0.0))?)?;
        lua.globals().set("host", host)?;
        lua.sandbox(true)?;
        Ok(Harness { lua })
    }

    /// Sets the session context and budget `host.delegateCompaction` and friends see.
    pub fn set_call(&self, context: Vec<Arc<Message>>, budget: u64, config: Json) {
        if let Some(mut c) = self.lua.app_data_mut::<HarnessCall>() {
            c.call = host_call(context, budget, config);
        }
    }

    /// What scripts logged.
    pub fn logs(&self) -> Vec<String> {
        self.lua
            .app_data_ref::<HarnessCall>()
            .map(|c| c.logs.clone())
            .unwrap_or_default()
    }

    /// Runs a chunk and returns its value.
    pub fn eval<T: mlua::FromLuaMulti>(&self, name: &str, src: &str) -> mlua::Result<T> {
        self.lua.load(src).set_name(format!("@{name}")).eval()
    }

    /// Loads an engine file: the returned table, or the factory's result for `ctx`.
    pub fn load_engine(&self, path: &Path, config: Json) -> mlua::Result<Table> {
        let src = std::fs::read_to_string(path).map_err(mlua::Error::external)?;
        let v: Value = self
            .lua
            .load(&src)
            .set_name(format!("@{}", path.display()))
            .eval()?;
        match v {
            Value::Table(t) => Ok(t),
            Value::Function(f) => {
                let ctx = self.lua.create_table()?;
                ctx.set("config", self.lua.to_value(&config)?)?;
                ctx.set("agentDir", "/agent")?;
                ctx.set("workspaceDir", "/workspace")?;
                f.call::<Table>(ctx)
            }
            other => Err(mlua::Error::runtime(format!(
                "engine file returned a {}",
                other.type_name()
            ))),
        }
    }

    /// Calls `engine[method](p)`.
    pub fn call(&self, engine: &Table, method: &str, p: Table) -> mlua::Result<Value> {
        let f: Function = engine.get(method)?;
        f.call::<Value>(p)
    }

    /// A params table from JSON fields plus optional messages and state.
    pub fn params(
        &self,
        fields: Json,
        messages: Option<Table>,
        state: &Table,
    ) -> mlua::Result<Table> {
        let p: Table = match self.lua.to_value(&fields)? {
            Value::Table(t) => t,
            _ => self.lua.create_table()?,
        };
        if let Some(ms) = messages {
            p.set("messages", ms)?;
        }
        p.set("state", state.clone())?;
        Ok(p)
    }

    /// A Lua value as JSON.
    /// Empty tables become empty arrays (an empty message list is the only empty table an
    /// engine result holds).
    pub fn json(&self, v: Value) -> mlua::Result<Json> {
        let opts = mlua::serde::DeserializeOptions::new().encode_empty_tables_as_array(true);
        self.lua.from_value_with(v, opts)
    }
}

/// Test messages: `user`, `assistant` text, and an assistant calling `n` tools with results.
pub mod build {
    use serde_json::{Value as Json, json};

    /// A user message.
    pub fn user(id: &str, text: &str) -> Json {
        json!({"id": id, "role": "user", "content": text})
    }

    /// An assistant text reply.
    pub fn assistant(id: &str, text: &str) -> Json {
        json!({"id": id, "role": "assistant", "content": [{"type": "text", "text": text}]})
    }

    /// An assistant message with tool calls `call_ids`.
    pub fn calls(id: &str, call_ids: &[&str]) -> Json {
        let blocks: Vec<Json> = call_ids
            .iter()
            .map(|c| json!({"type": "toolCall", "id": c, "name": "read", "arguments": {"path": "/src/main.rs"}}))
            .collect();
        json!({"id": id, "role": "assistant", "content": blocks})
    }

    /// A tool result for `call_id`.
    pub fn result(id: &str, call_id: &str, text: &str) -> Json {
        json!({"id": id, "role": "toolResult", "toolCallId": call_id, "toolName": "read",
               "content": [{"type": "text", "text": text}], "isError": false})
    }

    /// A deterministic session of `turns` turns; every turn is a user message, then (on odd
    /// turns) an assistant calling 1–3 tools with results of varied size, then a reply.
    pub fn session(turns: usize) -> Vec<Json> {
        let mut out = Vec::new();
        let mut n = 0;
        let mut id = || {
            n += 1;
            format!("m{n:05}")
        };
        for t in 0..turns {
            out.push(user(
                &id(),
                &format!(
                    "turn {t}: please look at file {t} {}",
                    "x".repeat(t * 7 % 90)
                ),
            ));
            if t % 2 == 1 {
                let k = 1 + t % 3;
                let call_ids: Vec<String> = (0..k).map(|c| format!("call_{t}_{c}")).collect();
                let refs: Vec<&str> = call_ids.iter().map(String::as_str).collect();
                out.push(calls(&id(), &refs));
                for (c, cid) in call_ids.iter().enumerate() {
                    let size = 50 + (t * 131 + c * 977) % 6_000;
                    out.push(result(
                        &id(),
                        cid,
                        &format!("output of {cid}\n{}", "y".repeat(size)),
                    ));
                }
            }
            out.push(assistant(
                &id(),
                &format!("done with turn {t} {}", "z".repeat(t * 13 % 200)),
            ));
        }
        out
    }
}
