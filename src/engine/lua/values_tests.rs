use super::*;
use crate::engine::script::result::typed;

fn lua() -> Lua {
    Lua::new()
}

#[test]
fn numbers_nan_and_whole_floats() {
    let lua = lua();
    let mut b = Budget::new(1000);
    let v: Value = lua.load("return {a = 3.0, b = 1.5}").eval().unwrap();
    let j = to_json(&lua, &v, &mut b).unwrap();
    assert_eq!(j["a"], serde_json::json!(3));
    assert_eq!(j["b"], serde_json::json!(1.5));
    let v: Value = lua.load("return {x = {y = 0/0}}").eval().unwrap();
    let e = to_json(&lua, &v, &mut b).unwrap_err();
    assert_eq!(e.describe("r"), "r.x.y: number is NaN");
}

#[test]
fn cycles_depth_functions_and_utf8_are_named() {
    let lua = lua();
    let mut b = Budget::new(1 << 20);
    let v: Value = lua
        .load("local t = {}; t.self = t; return t")
        .eval()
        .unwrap();
    assert!(
        to_json(&lua, &v, &mut b)
            .unwrap_err()
            .describe("r")
            .contains("cyclic")
    );
    let v: Value = lua
        .load("local t = {}; local c = t; for i = 1, 200 do c.n = {}; c = c.n end; return t")
        .eval()
        .unwrap();
    assert!(
        to_json(&lua, &v, &mut b)
            .unwrap_err()
            .describe("r")
            .contains("deeper than 128")
    );
    let v: Value = lua.load("return {f = function() end}").eval().unwrap();
    assert_eq!(
        to_json(&lua, &v, &mut b).unwrap_err().describe("r"),
        "r.f: a function cannot be part of a result"
    );
    let v: Value = lua.load(r#"return {"ok", "\255"}"#).eval().unwrap();
    assert!(
        to_json(&lua, &v, &mut b)
            .unwrap_err()
            .describe("r")
            .starts_with("r[2]: string is not valid UTF-8")
    );
    let v: Value = lua.load("return {1, 2, x = 1}").eval().unwrap();
    assert!(
        to_json(&lua, &v, &mut b)
            .unwrap_err()
            .describe("r")
            .contains("mixes")
    );
}

#[test]
fn byte_budget_caps_results() {
    let lua = lua();
    let mut b = Budget::new(10);
    let v: Value = lua.load("return {'0123456789abc'}").eval().unwrap();
    assert!(
        to_json(&lua, &v, &mut b)
            .unwrap_err()
            .describe("r")
            .contains("more than 10 bytes")
    );
}

#[test]
fn typed_names_the_bad_field() {
    let mut m = Map::new();
    m.insert("ingestedCount".into(), serde_json::json!("x"));
    let e =
        typed::<crate::contract::IngestBatchResult>(&m, || serde_json::json!({"ingestedCount": 0}))
            .unwrap_err();
    assert!(e.starts_with("`ingestedCount`"), "{e}");
}

#[test]
fn resident_sync_appends_and_reuses_tables() {
    let lua = lua();
    let mut r = Resident::new(&lua).unwrap();
    let a = Arc::new(Message::user("a"));
    let b = Arc::new(Message::user("b"));
    let ctx1 = Arc::new(vec![a.clone()]);
    let arr1 = r.sync(&lua, &ctx1).unwrap();
    let ta: Table = arr1.raw_get(1).unwrap();
    let ctx2 = Arc::new(vec![a.clone(), b.clone()]);
    let arr2 = r.sync(&lua, &ctx2).unwrap();
    assert_eq!(arr1.to_pointer(), arr2.to_pointer());
    assert_eq!(arr2.raw_len(), 2);
    // A compaction: [summary, b] reuses b's table.
    let tb: Table = arr2.raw_get(2).unwrap();
    let s = Arc::new(Message::user("summary"));
    let ctx3 = Arc::new(vec![s.clone(), b.clone()]);
    let arr3 = r.sync(&lua, &ctx3).unwrap();
    let tb3: Table = arr3.raw_get(2).unwrap();
    assert_eq!(tb.to_pointer(), tb3.to_pointer());
    assert!(Arc::ptr_eq(r.lookup(&tb3).unwrap().message(), &b));
    assert!(r.lookup(&ta).is_none());
    assert!(tb3.is_readonly() && arr3.is_readonly());
}

#[test]
fn empty_arrays_round_trip_as_arrays_and_null_becomes_nil() {
    let lua = lua();
    let v = to_lua(
        &lua,
        &serde_json::json!({"list": [], "map": {}, "gone": null}),
    )
    .unwrap();
    let Value::Table(t) = &v else {
        panic!("not a table")
    };
    assert!(t.raw_get::<Value>("gone").unwrap().is_nil());
    let mut b = Budget::new(1000);
    let back = to_json(&lua, &v, &mut b).unwrap();
    assert_eq!(back, serde_json::json!({"list": [], "map": {}}));
}
