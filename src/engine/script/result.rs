//! A script's converted result as the contract's types: the map check (in the language's own
//! noun), deserializing with the field at fault named, messages and their lists.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value as Json, json};

use super::convert::ConvError;
use super::language::Returned;
use crate::contract::{EngineInfo, Method};

/// Deserializes `obj` into `T` (read in place, not copied); on failure, names the field at
/// fault by trying each field alone over a known-good template (made only then).
pub(crate) fn typed<T: DeserializeOwned>(
    obj: &Map<String, Json>,
    template: impl FnOnce() -> Json,
) -> Result<T, String> {
    match T::deserialize(obj) {
        Ok(v) => Ok(v),
        Err(e) => {
            let template = &template();
            for (k, v) in obj {
                let mut probe = template.clone();
                if let Json::Object(m) = &mut probe {
                    m.insert(k.clone(), v.clone());
                }
                if let Err(e2) = serde_json::from_value::<T>(probe) {
                    return Err(in_script_terms(k, v, &e2.to_string()));
                }
            }
            let message = e.to_string();
            // A required field is missing: name the keys the result has that are no field,
            // with the field each one most likely meant.
            if message.starts_with("missing field")
                && let Json::Object(known) = template
            {
                let unknown: Vec<String> = obj
                    .keys()
                    .filter(|k| !known.contains_key(*k))
                    .map(
                        |k| match crate::contract::closest(k, known.keys().map(String::as_str)) {
                            Some(c) => format!("`{k}` (did you mean `{c}`?)"),
                            None => format!("`{k}`"),
                        },
                    )
                    .collect();
                if !unknown.is_empty() {
                    return Err(format!(
                        "{message}; the result has unknown keys: {}",
                        unknown.join(", ")
                    ));
                }
            }
            Err(message)
        }
    }
}

/// "missing field `messages`" of an assemble result, naming the keys it has instead (`msgs`:
/// did you mean `messages`?).
pub(crate) fn missing_messages<'a>(keys: impl Iterator<Item = &'a str>) -> String {
    const FIELDS: [&str; 3] = ["messages", "estimatedTokens", "systemPromptAddition"];
    let unknown: Vec<String> = keys
        .filter(|k| !FIELDS.contains(k))
        .map(
            |k| match crate::contract::closest(k, FIELDS.iter().copied()) {
                Some(c) => format!("`{k}` (did you mean `{c}`?)"),
                None => format!("`{k}`"),
            },
        )
        .collect();
    if unknown.is_empty() {
        "missing field `messages`".to_owned()
    } else {
        format!(
            "missing field `messages`; the result has unknown keys: {}",
            unknown.join(", ")
        )
    }
}

/// serde's "invalid type: string \"lots\", expected f64" for field `key` as a script author
/// reads it: "`estimatedTokens` must be a number, got the string \"lots\"".
fn in_script_terms(key: &str, value: &Json, serde_message: &str) -> String {
    let Some(rest) = serde_message.strip_prefix("invalid type: ") else {
        return format!("`{key}`: {serde_message}");
    };
    let expected = rest.rsplit_once(", expected ").map_or("", |(_, e)| e);
    let wanted = match expected {
        "f64" | "f32" | "u64" | "u32" | "u16" | "u8" | "usize" | "i64" | "i32" | "isize" => {
            "a number"
        }
        "a boolean" => "true or false",
        "a string" => "a string",
        "a sequence" => "a list",
        e if e.starts_with("struct") || e.starts_with("a map") => "a map",
        _ => return format!("`{key}`: {serde_message}"),
    };
    let got = match value {
        Json::String(s) => {
            let shown: String = s.chars().take(40).collect();
            format!("the string {shown:?}")
        }
        other => json_type(other).to_owned(),
    };
    format!("`{key}` must be {wanted}, got {got}")
}

/// A value's kind as a script author names it (`nothing`, `a list`, `a map`), for errors about
/// what a script returned.
pub(crate) fn json_type(v: &Json) -> &'static str {
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
    typed(&object(v, method, noun)?, || template)
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
    typed::<EngineInfo>(&map, || json!({"id": "", "name": ""}))
        .map_err(|e| format!("info.{}", e.trim_start_matches('`').replacen('`', "", 1)))
}

/// A failed conversion of one list item, prefixed with its 1-based index.
pub(crate) fn at_index(i: usize, e: impl std::fmt::Display) -> String {
    format!("[{}] {e}", i + 1)
}

/// `messages` errors as the host reports them (`messages[3] ...` or `messages: ...`).
pub(crate) fn messages_error(e: String) -> String {
    if e.starts_with('[') {
        format!("messages{e}")
    } else {
        format!("messages: {e}")
    }
}

/// The most messages one list may hold, as an error when over.
pub(crate) fn check_count(len: usize, max: usize) -> Result<(), String> {
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
pub(crate) fn json_reply(converted: Result<Json, ConvError>) -> Result<Returned, String> {
    match converted.map_err(|e| e.describe(""))? {
        Json::Null => Ok(Returned::Nothing),
        j => Ok(Returned::Json(j)),
    }
}
