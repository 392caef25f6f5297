//! Size guards on the Luau builtins whose cost a script controls and that run without an
//! interrupt, so no single native step outlives the call's deadline by much (issue 10, item 3):
//!
//! - `string.find(s, p, init, plain)` with a plain pattern (or one without specials): Luau
//!   compares naively, O(#s · #p), with no interrupt. Past [`PLAIN_FIND_WORK`] the host finds it
//!   with `memchr::memmem` (O(#s + #p)); same result.
//! - `table.sort(t)` without a comparator: pure C, no interrupt. Past [`NATIVE_SORT_ITEMS`] the
//!   host passes a Lua `a < b` comparator (same order and errors), so the interrupt (deadline)
//!   reaches the sort.
//!
//! `string.rep` needs no guard: Luau sizes its result first, so the memory cap refuses it before
//! any work.

use mlua::{Function, Lua, MultiValue, Table, Value};

/// The naive-search work (#haystack · #needle) past which a plain `string.find` runs in Rust.
pub(super) const PLAIN_FIND_WORK: usize = 1 << 22;

/// Table sizes past which `table.sort` without a comparator gets an interruptible one.
pub(super) const NATIVE_SORT_ITEMS: usize = 1 << 16;

/// Luau's pattern specials: a pattern without them is searched as plain text.
const SPECIALS: &[u8] = b"^$*+?.([%-";

/// Installs the guards on `lua`'s `string` and `table` (before `sandbox(true)` freezes them).
pub(super) fn install(lua: &Lua) -> mlua::Result<()> {
    let globals = lua.globals();
    let string: Table = globals.raw_get("string")?;
    let find: Function = string.raw_get("find")?;
    let guarded = lua.create_function(move |_, args: MultiValue| {
        if let Some(found) = plain_find(&args) {
            return Ok(found);
        }
        find.call::<MultiValue>(args)
    })?;
    string.raw_set("find", guarded)?;

    let table: Table = globals.raw_get("table")?;
    let sort: Function = table.raw_get("sort")?;
    let less: Function = lua
        .load("return function(a, b) return a < b end")
        .set_name("=table.sort")
        .eval()?;
    let guarded = lua.create_function(move |_, args: MultiValue| {
        let mut args: Vec<Value> = args.into_iter().collect();
        let big = matches!(args.first(), Some(Value::Table(t)) if t.raw_len() > NATIVE_SORT_ITEMS);
        let no_comparator = args.get(1).is_none_or(Value::is_nil);
        if big && no_comparator {
            args.truncate(1);
            args.push(Value::Function(less.clone()));
        }
        sort.call::<MultiValue>(MultiValue::from_iter(args))
    })?;
    table.raw_set("sort", guarded)?;
    Ok(())
}

/// `string.find` done in Rust when it is a plain search big enough to matter; `None` to let
/// Luau do it (small, a real pattern, or arguments Luau should judge).
fn plain_find(args: &MultiValue) -> Option<MultiValue> {
    let mut it = args.iter();
    let (Some(Value::String(s)), Some(Value::String(p))) = (it.next(), it.next()) else {
        return None;
    };
    let init = match it.next() {
        None | Some(Value::Nil) => 1,
        Some(Value::Integer(i)) => *i,
        Some(Value::Number(n)) if n.fract() == 0.0 && n.abs() < 1e15 => *n as i64,
        _ => return None,
    };
    let plain = it
        .next()
        .is_some_and(|v| !matches!(v, Value::Nil | Value::Boolean(false)));
    let (s, p) = (s.as_bytes(), p.as_bytes());
    if p.is_empty() || s.len().saturating_mul(p.len()) <= PLAIN_FIND_WORK {
        return None;
    }
    if !plain && p.iter().any(|c| SPECIALS.contains(c)) {
        return None;
    }
    let len = i64::try_from(s.len()).ok()?;
    let start = match init {
        i if i < 0 => (len + i + 1).max(1),
        0 => 1,
        i => i,
    };
    if start > len + 1 {
        return Some(MultiValue::from_iter([Value::Nil]));
    }
    let from = usize::try_from(start - 1).ok()?;
    let hit = memchr::memmem::find(&s[from..], &p).map(|i| i + from);
    Some(match hit {
        Some(i) => {
            let first = i64::try_from(i).ok()? + 1;
            let last = first + i64::try_from(p.len()).ok()? - 1;
            MultiValue::from_iter([Value::Integer(first), Value::Integer(last)])
        }
        None => MultiValue::from_iter([Value::Nil]),
    })
}
