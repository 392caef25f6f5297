//! A script's converted result as the contract's types: the map check (in the language's own
//! noun), deserializing with the field at fault named, messages and their lists.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value as Json, json};

use super::convert::ConvError;
use super::language::Returned;
use crate::contract::{EngineInfo, Method};

/// Deserializes `obj` into `T`; on failure, names the field at fault by trying each field
/// alone over a known-good `template`.
pub fn typed<T: DeserializeOwned>(obj: &Map<String, Json>, template: &Json) -> Result<T, String> {
    match serde_json::from_value::<T>(Json::Object(obj.clone())) {
        Ok(v) => Ok(v),
        Err(e) => {
            for (k, v) in obj {
                let mut probe = template.clone();
                if let Json::Object(m) = &mut probe {
                    m.insert(k.clone(), v.clone());
                }
                if let Err(e2) = serde_json::from_value::<T>(probe) {
                    return Err(format!("`{k}`: {e2}"));
                }
            }
            Err(e.to_string())
        }
    }
}

fn json_type(v: &Json) -> &'static str {
    match v {
        Json::Null => "nothing",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "a map",
    }
}

/// The fields of a result that must be a map (`noun`: what the language calls one).
fn object(v: Json, method: Method, noun: &str) -> Result<Map<String, Json>, String> {
    match v {
        Json::Object(m) => Ok(m),
        other => Err(format!(
            "{method} must return a {noun}, got {}",
            json_type(&other)
        )),
    }
}

/// Converts a returned script value into `T` for `method`.
pub(crate) fn result_of<T: DeserializeOwned>(
    r: Returned,
    method: Method,
    noun: &str,
    template: Json,
) -> Result<T, String> {
    let v = match r {
        Returned::Json(v) => v,
        Returned::Nothing => Json::Null,
        other => return Err(format!("{method}: unexpected result {other:?}")),
    };
    typed(&object(v, method, noun)?, &template)
}

/// The `info` record from a converted script value (`id` / `name` default to empty strings so
/// the shape check, not the deserializer, reports them).
pub fn info_from_json(v: Json, noun: &str) -> Result<EngineInfo, String> {
    let Json::Object(mut map) = v else {
        return Err(format!("`info` must be a {noun} of fields"));
    };
    for f in ["id", "name"] {
        if map.get(f).is_none_or(Json::is_null) {
            map.insert(f.into(), Json::String(String::new()));
        }
    }
    typed::<EngineInfo>(&map, &json!({"id": "", "name": ""}))
        .map_err(|e| format!("info.{}", e.trim_start_matches('`').replacen('`', "", 1)))
}

/// A failed conversion of one list item, prefixed with its 1-based index.
pub fn at_index(i: usize, e: impl std::fmt::Display) -> String {
    format!("[{}] {e}", i + 1)
}

/// `messages` errors as the host reports them (`messages[3] ...` or `messages: ...`).
pub fn messages_error(e: String) -> String {
    if e.starts_with('[') {
        format!("messages{e}")
    } else {
        format!("messages: {e}")
    }
}

/// The most messages one list may hold, as an error when over.
pub fn check_count(len: usize, max: usize) -> Result<(), String> {
    if len > max {
        return Err(format!("{len} messages exceed the limit of {max}"));
    }
    Ok(())
}

/// A result that may be nothing (`commitTurn`, `maintain`).
pub(crate) fn optional<T: DeserializeOwned>(
    r: Returned,
    method: Method,
    noun: &str,
    template: Json,
) -> Result<Option<T>, String> {
    match r {
        Returned::Nothing | Returned::Json(Json::Null) => Ok(None),
        r => result_of(r, method, noun, template).map(Some),
    }
}

/// A whole result converted to JSON, as [`Expect::Json`](super::Expect::Json) wants it.
pub fn json_reply(converted: Result<Json, ConvError>) -> Result<Returned, String> {
    match converted.map_err(|e| e.describe(""))? {
        Json::Null => Ok(Returned::Nothing),
        j => Ok(Returned::Json(j)),
    }
}
