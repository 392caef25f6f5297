//! Guarded versions of the Rhai builtins that grow a value, registered on each instance's engine
//! in front of the standard package (and, with fast operators off, in front of the builtin
//! operators): each does what the builtin does, after asking the engine's [`Meter`] whether the
//! growth fits under the memory cap. A refused step fails before it allocates, with kind
//! `Memory`. Semantics are the builtins' own (Rhai 1.27's `packages/*`).

use std::sync::Arc;

use rhai::{
    Array, Blob, Dynamic, Engine as RhaiEngine, FnPtr, INT, ImmutableString, Map, NativeCallContext,
};

use super::memory::{ENTRY, Meter, SLOT, held, shallow};

type Fallible<T> = Result<T, Box<rhai::EvalAltResult>>;

/// A non-negative script length as `usize` (negative: 0).
fn length(len: INT) -> usize {
    usize::try_from(len).unwrap_or(0)
}

/// Bytes `need` copies of `item` add to an array: a slot each, and a copy of the item each
/// unless it is a string (strings are shared, not copied).
fn padding_cost(need: usize, item: &Dynamic) -> usize {
    let slots = need.saturating_mul(SLOT);
    if item.is_string() {
        slots.saturating_add(shallow(item))
    } else {
        need.saturating_mul(held(item)).max(slots)
    }
}

/// Registers every guarded builtin on `e`, charging `meter`.
pub(super) fn register(e: &mut RhaiEngine, meter: &Arc<Meter>) {
    for name in ["sort", "sort_by"] {
        e.register_fn(name, sort_by);
    }
    strings(e, meter);
    arrays(e, meter);
    blobs(e, meter);
    maps(e, meter);
    printing(e, meter);
}

/// `print`, `to_string`, `debug` and `to_debug` of an array or a map (what `${a}` and `print(a)`
/// run) as Rhai's own (`packages/string_basic.rs`), except that the text is checked against the
/// cap as it grows: Rhai's builds the whole text in one native step, 1.2 GB for an array of
/// 600,000 shared 2 KB strings, before anything can stop it. Past the cap the text stops there
/// and the growth is counted, so the script fails as `Memory` at its next operation (an error
/// returned here would not stop it: Rhai prints the value natively instead).
fn printing(e: &mut RhaiEngine, meter: &Arc<Meter>) {
    for name in ["print", "to_string", "debug", "to_debug"] {
        let m = meter.clone();
        e.register_fn(
            name,
            move |ctx: NativeCallContext, a: &mut Array| -> ImmutableString {
                let len = a.len();
                let mut out = String::from("[");
                for (i, x) in a.iter_mut().enumerate() {
                    let item = debug_text(&ctx, x);
                    if over_cap(&m, out.len() + item.len() + 3) {
                        return out.into();
                    }
                    out.push_str(&item);
                    if i + 1 < len {
                        out.push_str(", ");
                    }
                }
                out.push(']');
                out.into()
            },
        );
        let m = meter.clone();
        e.register_fn(
            name,
            move |ctx: NativeCallContext, map: &mut Map| -> ImmutableString {
                let len = map.len();
                let mut out = String::from("#{");
                for (i, (k, v)) in map.iter_mut().enumerate() {
                    let value = debug_text(&ctx, v);
                    let key = format!("{k:?}: ");
                    if over_cap(&m, out.len() + key.len() + value.len() + 3) {
                        return out.into();
                    }
                    out.push_str(&key);
                    out.push_str(&value);
                    if i + 1 < len {
                        out.push_str(", ");
                    }
                }
                out.push('}');
                out.into()
            },
        );
    }
}

/// Whether a printed text of `bytes` would pass the cap; if so the growth is counted, so the
/// script stops as `Memory` at its next operation.
fn over_cap(m: &Meter, bytes: usize) -> bool {
    if m.check(bytes, "a printed value").is_ok() {
        return false;
    }
    m.add(bytes);
    true
}

/// One item of a printed array or map, as Rhai prints it: its `to_debug` (the script's own
/// when it defines one for the type, a guarded one for arrays and maps), else its type name.
fn debug_text(ctx: &NativeCallContext, v: &mut Dynamic) -> ImmutableString {
    let engine = ctx.engine();
    match ctx.call_native_fn_raw(rhai::FUNC_TO_DEBUG, true, &mut [v]) {
        Ok(r) if r.is_string() => r.into_immutable_string().unwrap_or_default(),
        Ok(r) => engine.map_type_name(r.type_name()).into(),
        Err(_) => engine.map_type_name(&format!("{v:?}")).into(),
    }
}

/// `array.sort(comparer)` as Rhai's, except that the first error of the comparer (the deadline
/// stopping it, a throw) ends the sort and is returned: Rhai's own ignores comparer errors and
/// calls the comparer O(n log n) more times after the deadline, in one native step.
fn sort_by(ctx: NativeCallContext, a: &mut Array, comparer: FnPtr) -> Fallible<()> {
    use std::cmp::Ordering;
    if a.len() <= 1 {
        return Ok(());
    }
    let mut failed: Option<Box<rhai::EvalAltResult>> = None;
    let sorted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        a.sort_by(|x, y| {
            if failed.is_some() {
                return Ordering::Equal;
            }
            let v = match comparer.call_raw(&ctx, None, [x.clone(), y.clone()]) {
                Ok(v) => v,
                Err(e) => {
                    failed = Some(e);
                    return Ordering::Equal;
                }
            };
            match v
                .as_int()
                .or_else(|_| v.as_bool().map(|b| if b { -1 } else { 1 }))
            {
                Ok(n) => n.cmp(&0),
                Err(_) => x.type_id().cmp(&y.type_id()),
            }
        });
    }));
    if let Some(e) = failed {
        return Err(e);
    }
    sorted.map_err(|_| "error in comparer for sorting".into())
}

fn strings(e: &mut RhaiEngine, meter: &Arc<Meter>) {
    for name in ["+=", "append"] {
        let m = meter.clone();
        e.register_fn(
            name,
            move |s: &mut ImmutableString, x: ImmutableString| -> Fallible<()> {
                m.charge(x.len(), "a string")?;
                *s += x;
                Ok(())
            },
        );
        let m = meter.clone();
        e.register_fn(
            name,
            move |s: &mut ImmutableString, c: char| -> Fallible<()> {
                m.charge(c.len_utf8(), "a string")?;
                s.make_mut().push(c);
                Ok(())
            },
        );
    }
    let m = meter.clone();
    e.register_fn(
        "+",
        move |a: ImmutableString, b: ImmutableString| -> Fallible<ImmutableString> {
            m.check(a.len() + b.len(), "a string")?;
            Ok(a + b)
        },
    );
    let m = meter.clone();
    e.register_fn(
        "+",
        move |a: ImmutableString, c: char| -> Fallible<ImmutableString> {
            m.check(a.len() + 4, "a string")?;
            Ok(a + c)
        },
    );
    let m = meter.clone();
    e.register_fn(
        "+",
        move |c: char, b: ImmutableString| -> Fallible<ImmutableString> {
            m.check(b.len() + 4, "a string")?;
            let mut s = String::with_capacity(b.len() + 4);
            s.push(c);
            s.push_str(&b);
            Ok(s.into())
        },
    );
    let m = meter.clone();
    e.register_fn(
        "pad",
        move |s: &mut ImmutableString, len: INT, c: char| -> Fallible<()> {
            let need = length(len).saturating_sub(s.chars().count());
            if need == 0 {
                return Ok(());
            }
            m.charge(need.saturating_mul(c.len_utf8()), "pad")?;
            let p = s.make_mut();
            p.push_str(&c.to_string().repeat(need));
            Ok(())
        },
    );
    let m = meter.clone();
    e.register_fn(
        "pad",
        move |s: &mut ImmutableString, len: INT, padding: ImmutableString| -> Fallible<()> {
            let need = length(len).saturating_sub(s.chars().count());
            let chars = padding.chars().count();
            if need == 0 || chars == 0 {
                return Ok(());
            }
            let per_char = padding.len().div_ceil(chars);
            m.charge(need.saturating_mul(per_char), "pad")?;
            let p = s.make_mut();
            p.push_str(&padding.repeat(need / chars));
            p.extend(padding.chars().take(need % chars));
            Ok(())
        },
    );
    let m = meter.clone();
    e.register_fn(
        "replace",
        move |s: &mut ImmutableString,
              find: ImmutableString,
              with: ImmutableString|
              -> Fallible<()> {
            if find.is_empty() {
                return Ok(());
            }
            if with.len() > find.len() {
                let hits = s.matches(find.as_str()).count();
                m.charge(hits.saturating_mul(with.len() - find.len()), "replace")?;
            }
            *s = s.replace(find.as_str(), &with).into();
            Ok(())
        },
    );
    let m = meter.clone();
    e.register_fn(
        "split",
        move |s: &mut ImmutableString, delim: ImmutableString| -> Fallible<Array> {
            if s.is_empty() || (!delim.is_empty() && !s.contains(delim.as_str())) {
                return Ok(vec![s.clone().into()]);
            }
            let pieces = if delim.is_empty() {
                s.chars().count() + 2
            } else {
                s.matches(delim.as_str()).count() + 1
            };
            m.charge(pieces.saturating_mul(SLOT + ENTRY) + s.len(), "split")?;
            Ok(s.split(delim.as_str())
                .map(|p| Dynamic::from(p.to_string()))
                .collect())
        },
    );
    let m = meter.clone();
    e.register_fn(
        "split",
        move |s: &mut ImmutableString, delim: char| -> Fallible<Array> {
            if !s.contains(delim) {
                return Ok(vec![s.clone().into()]);
            }
            let pieces = s.matches(delim).count() + 1;
            m.charge(pieces.saturating_mul(SLOT + ENTRY) + s.len(), "split")?;
            Ok(s.split(delim)
                .map(|p| Dynamic::from(p.to_string()))
                .collect())
        },
    );
    // Interpolation (`${i}`) and map keys made from numbers call these; Rhai ignores their
    // errors there, so they only count (`on_progress` stops the script).
    let m = meter.clone();
    e.register_fn("to_string", move |i: INT| -> ImmutableString {
        m.add(ENTRY);
        i.to_string().into()
    });
}

fn arrays(e: &mut RhaiEngine, meter: &Arc<Meter>) {
    for name in ["push", "+="] {
        let m = meter.clone();
        e.register_fn(name, move |a: &mut Array, item: Dynamic| -> Fallible<()> {
            m.charge(held(&item), "an array")?;
            a.push(item);
            Ok(())
        });
    }
    for name in ["append", "+="] {
        let m = meter.clone();
        e.register_fn(name, move |a: &mut Array, more: Array| -> Fallible<()> {
            let bytes = more.iter().map(held).fold(0, usize::saturating_add);
            m.charge(bytes, "an array")?;
            if a.is_empty() {
                *a = more;
            } else {
                a.extend(more);
            }
            Ok(())
        });
    }
    let m = meter.clone();
    e.register_fn("+", move |a: Array, b: Array| -> Fallible<Array> {
        m.check((a.len() + b.len()).saturating_mul(SLOT), "an array")?;
        let mut a = a;
        a.extend(b);
        Ok(a)
    });
    let m = meter.clone();
    e.register_fn(
        "insert",
        move |a: &mut Array, index: INT, item: Dynamic| -> Fallible<()> {
            m.charge(held(&item), "an array")?;
            let len = a.len();
            let at = if index < 0 {
                len.saturating_sub(usize::try_from(index.unsigned_abs()).unwrap_or(usize::MAX))
            } else {
                usize::try_from(index).unwrap_or(usize::MAX).min(len)
            };
            a.insert(at, item);
            Ok(())
        },
    );
    let m = meter.clone();
    e.register_fn(
        "pad",
        move |a: &mut Array, len: INT, item: Dynamic| -> Fallible<()> {
            let need = length(len).saturating_sub(a.len());
            if need == 0 {
                return Ok(());
            }
            m.charge(padding_cost(need, &item), "pad")?;
            a.resize(a.len() + need, item);
            Ok(())
        },
    );
}

fn blobs(e: &mut RhaiEngine, meter: &Arc<Meter>) {
    fn byte(v: INT) -> u8 {
        u8::try_from(v & 0xff).unwrap_or(0)
    }
    let m = meter.clone();
    e.register_fn("blob", move |len: INT| -> Fallible<Blob> {
        m.charge(length(len), "blob")?;
        Ok(vec![0; length(len)])
    });
    let m = meter.clone();
    e.register_fn("blob", move |len: INT, v: INT| -> Fallible<Blob> {
        m.charge(length(len), "blob")?;
        Ok(vec![byte(v); length(len)])
    });
    let m = meter.clone();
    e.register_fn(
        "pad",
        move |b: &mut Blob, len: INT, v: INT| -> Fallible<()> {
            let need = length(len).saturating_sub(b.len());
            m.charge(need, "pad")?;
            b.resize(b.len() + need, byte(v));
            Ok(())
        },
    );
    for name in ["append", "+="] {
        let m = meter.clone();
        e.register_fn(name, move |b: &mut Blob, more: Blob| -> Fallible<()> {
            m.charge(more.len(), "a blob")?;
            b.extend(more);
            Ok(())
        });
    }
    let m = meter.clone();
    e.register_fn("+", move |a: Blob, b: Blob| -> Fallible<Blob> {
        m.check(a.len() + b.len(), "a blob")?;
        let mut a = a;
        a.extend(b);
        Ok(a)
    });
    let m = meter.clone();
    e.register_fn("to_array", move |b: &mut Blob| -> Fallible<Array> {
        m.charge(b.len().saturating_mul(SLOT), "to_array")?;
        Ok(b.iter().map(|&x| Dynamic::from(INT::from(x))).collect())
    });
}

fn maps(e: &mut RhaiEngine, meter: &Arc<Meter>) {
    fn entries(m: &Map) -> usize {
        m.iter()
            .map(|(k, v)| k.len() + ENTRY + held(v))
            .fold(0, usize::saturating_add)
    }
    for name in ["mixin", "+="] {
        let m = meter.clone();
        e.register_fn(name, move |a: &mut Map, b: Map| -> Fallible<()> {
            m.charge(entries(&b), "a map")?;
            a.extend(b);
            Ok(())
        });
    }
    let m = meter.clone();
    e.register_fn("+", move |a: Map, b: Map| -> Fallible<Map> {
        m.check(entries(&a) + entries(&b), "a map")?;
        let mut a = a;
        a.extend(b);
        Ok(a)
    });
    let m = meter.clone();
    e.register_fn("fill_with", move |a: &mut Map, b: Map| -> Fallible<()> {
        m.charge(entries(&b), "a map")?;
        for (k, v) in b {
            a.entry(k).or_insert(v);
        }
        Ok(())
    });
}
