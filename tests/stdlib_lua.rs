//! The Lua stdlib (`stdlib/*.lua`), exercised from Lua.
//!
//! These run on the test harness in `tests/lua_harness` (sandboxed Luau, `require` serving only
//! the embedded stdlib, the host's own token counting), not on the adapter: the stdlib does not
//! depend on anything the adapter adds beyond `host.tokens`. Input messages are frozen, so a
//! stdlib function that writes into one fails these tests.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

mod lua_harness;

use lua_harness::{Harness, build};
use mlua::{Table, Value};
use serde_json::Value as Json;

fn harness() -> Harness {
    Harness::new().expect("harness")
}

/// Runs `src` with the frozen messages as `...`; panics with the Lua error (and its line).
fn run<R: mlua::FromLuaMulti>(h: &Harness, name: &str, src: &str, messages: &[Json]) -> R {
    let ms = lua_harness::lua_messages(&h.lua, messages).expect("messages");
    h.lua
        .load(src)
        .set_name(format!("@{name}"))
        .call::<R>(ms)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Lua helpers shared by the checks below.
const PRELUDE: &str = r#"
local S = ...
local groups = require("groups")
-- Whether `list` (a subsequence of S, same tables) keeps every tool group whole and in order.
local function index_of(list)
  local pos, at = {}, 1
  for i = 1, #list do
    while at <= #S and not rawequal(S[at], list[i]) do at += 1 end
    assert(at <= #S, "message " .. i .. " is not from S or out of order")
    pos[i] = at
    at += 1
  end
  return pos
end
local function check_groups_whole(list)
  local pos = index_of(list)
  local kept = {}
  for i = 1, #pos do kept[pos[i]] = true end
  for _, g in ipairs(groups.tool_groups(S)) do
    local any, all = false, true
    for i = g.first, g.last do
      if kept[i] then any = true else all = false end
    end
    assert(not any or all, "tool group " .. g.first .. ".." .. g.last .. " was split")
  end
  return pos
end
"#;

fn with_prelude(body: &str) -> String {
    format!("{PRELUDE}\n{body}")
}

#[test]
fn tool_groups_cover_every_message_once_and_keep_results_with_their_call() {
    let h = harness();
    let s = build::session(30);
    let n: usize = run(
        &h,
        "tool_groups.lua",
        &with_prelude(
            r#"
local gs = groups.tool_groups(S)
local next_i = 1
for _, g in ipairs(gs) do
  assert(g.first == next_i, "gap or overlap at " .. g.first)
  assert(g.last >= g.first)
  if g.last > g.first then
    assert(groups.calls_tools(S[g.first]), "a multi-message group starts with a caller")
    for i = g.first + 1, g.last do assert(S[i].role == "toolResult") end
  end
  assert(S[g.first].role ~= "toolResult", "a group never starts with a result here")
  for i = g.first, g.last do assert(groups.group_start(S, i) == g.first) end
  next_i = g.last + 1
end
assert(next_i == #S + 1)
return #gs
"#,
        ),
        &s,
    );
    // 30 turns: user + reply each, plus one group per odd turn.
    assert_eq!(n, 30 * 2 + 15);
}

#[test]
fn orphan_results_stand_alone() {
    let h = harness();
    let s = vec![
        build::user("u1", "hi"),
        build::result("r0", "nope", "orphan"),
        build::calls("a1", &["c1", "c2"]),
        build::result("r1", "c1", "one"),
        build::result("r2", "c2", "two"),
        build::assistant("a2", "ok"),
    ];
    let shape: String = run(
        &h,
        "orphans.lua",
        r#"
local S = ...
local groups = require("groups")
local parts = {}
for _, g in ipairs(groups.tool_groups(S)) do parts[#parts + 1] = g.first .. "-" .. g.last end
return table.concat(parts, " ")
"#,
        &s,
    );
    assert_eq!(shape, "1-1 2-2 3-5 6-6");
}

#[test]
fn turns_start_at_user_messages() {
    let h = harness();
    let mut s = vec![
        serde_json::json!({"id": "s0", "role": "compactionSummary", "summary": "before", "tokensBefore": 100}),
    ];
    s.extend(build::session(6));
    let shape: String = run(
        &h,
        "turns.lua",
        r#"
local S = ...
local groups = require("groups")
local parts = {}
local ts = groups.turns(S)
for k, t in ipairs(ts) do
  if k > 1 then assert(S[t.first].role == "user") end
  parts[#parts + 1] = t.first .. "-" .. t.last
end
assert(ts[#ts].last == #S)
return table.concat(parts, " ")
"#,
        &s,
    );
    // The summary forms a leading turn; odd turn t has a user message, a call with 1 + t % 3
    // results, and a reply.
    assert_eq!(shape, "1-1 2-3 4-8 9-10 11-14 15-16 17-22");
}

#[test]
fn newest_first_never_exceeds_the_budget_never_splits_a_group_and_keeps_order() {
    let h = harness();
    let s = build::session(40);
    let checked: i64 = run(
        &h,
        "newest_first.lua",
        &with_prelude(
            r#"
local fit = require("fit")
local total = fit.total(S)
local checked = 0
for budget = 0, total + 200, 97 do
  for _, reserve in ipairs({0, 500}) do
    local kept, used = fit.newest_first(S, budget, { reserve = reserve })
    assert(used <= math.max(0, budget - reserve), "over budget: " .. used .. " > " .. budget .. " - " .. reserve)
    assert(used == fit.total(kept), "reported tokens are the kept messages' tokens")
    local pos = check_groups_whole(kept)
    -- One contiguous run ending at the newest message.
    if #pos > 0 then
      assert(pos[#pos] == #S, "ends at the newest message")
      for i = 2, #pos do assert(pos[i] == pos[i - 1] + 1, "contiguous") end
      -- Maximal: the next older group would not fit.
      if pos[1] > 1 then
        local g = groups.group_start(S, pos[1] - 1)
        local extra = 0
        for i = g, pos[1] - 1 do extra += host.tokens(S[i]) end
        assert(used + extra > budget - reserve, "stopped early at budget " .. budget)
      end
    end
    checked += 1
  end
end
-- Everything fits: the very same list contents.
local kept = fit.newest_first(S, total)
assert(#kept == #S)
return checked
"#,
        ),
        &s,
    );
    assert!(checked > 20, "swept {checked} budgets");
}

#[test]
fn newest_first_with_gaps_and_a_range() {
    let h = harness();
    let s = build::session(20);
    let _: () = run(
        &h,
        "newest_first_gaps.lua",
        &with_prelude(
            r#"
local fit = require("fit")
local total = fit.total(S)
for budget = 0, total, 211 do
  local a, ua = fit.newest_first(S, budget)
  local b, ub = fit.newest_first(S, budget, { gaps = true })
  assert(ub <= budget and ub >= ua, "gaps never takes less")
  check_groups_whole(b)
  -- A range: only messages 5..#S-3 (S[#S-2] starts a turn? no matter: check bounds).
  local to = #S - 1
  local c, uc = fit.newest_first(S, budget, { from = 5, to = to })
  local pos = check_groups_whole(c)
  for i = 1, #pos do assert(pos[i] >= 5 and pos[i] <= to) end
  assert(uc <= budget)
end
"#,
        ),
        &s,
    );
}

#[test]
fn squeeze_always_fits_and_keeps_pairing() {
    let h = harness();
    // A turn with a huge tool result, as in a 40,000-token file read.
    let mut s = build::session(6);
    s.push(build::user("u-big", "read the big file"));
    s.push(build::calls("a-big", &["big1", "big2"]));
    s.push(build::result("r-big1", "big1", &"B".repeat(160_000)));
    s.push(build::result("r-big2", "big2", &"é".repeat(20_000)));
    let _: () = run(
        &h,
        "squeeze.lua",
        &with_prelude(
            r#"
local fit = require("fit")
local msg = require("msg")
for budget = 0, 12000, 123 do
  local out, used = fit.squeeze(S, budget)
  assert(used <= budget, "squeeze over budget at " .. budget)
  assert(used == fit.total(out), "reported tokens")
  -- Pairing: every result directly follows its call's group.
  local open = {}
  for i = 1, #out do
    local m = out[i]
    if m.role == "toolResult" then
      assert(open[m.toolCallId], "result without its call at budget " .. budget)
      open[m.toolCallId] = nil
    else
      for id in pairs(open) do error("call " .. id .. " without its result at budget " .. budget) end
      for _, id in ipairs(msg.tool_call_ids(m)) do open[id] = true end
    end
  end
  for id in pairs(open) do error("call " .. id .. " without its result at budget " .. budget) end
  -- Text stays valid UTF-8 (utf8.len fails on broken sequences).
  for i = 1, #out do assert(utf8.len(msg.text(out[i])), "broken UTF-8") end
end
-- Fits already: the same list.
local small = { S[1], S[2] }
local out = fit.squeeze(small, 100000)
assert(rawequal(out, small))
"#,
        ),
        &s,
    );
}

#[test]
fn fresh_tail_holds_the_newest_user_turn_and_all_its_tool_replies() {
    let h = harness();
    for turns in 1..12 {
        let mut s = build::session(turns);
        // End some sessions inside a tool loop (no final reply yet).
        if turns % 3 == 0 {
            s.pop();
        }
        let _: () = run(
            &h,
            "fresh_tail.lua",
            r#"
local S = ...
local tail = require("tail")
local t = tail.fresh_tail(S)
local last_user
for i = #S, 1, -1 do if S[i].role == "user" then last_user = i break end end
assert(t == last_user, "tail starts at the newest user message: " .. t .. " vs " .. tostring(last_user))
for _, min in ipairs({0, 1, 3, 7, 100}) do
  local t2 = tail.fresh_tail(S, { minMessages = min })
  assert(t2 <= t, "stretching never drops the newest turn")
  assert(#S - t2 + 1 >= math.min(min, #S), "holds at least minMessages")
  assert(S[t2].role ~= "toolResult", "never starts with a result")
end
assert(tail.tokens(S, t) > 0)
"#,
            &s,
        );
    }
    // No user message at all: the newest tool group.
    let s = vec![
        build::assistant("a0", "hello"),
        build::calls("a1", &["c1"]),
        build::result("r1", "c1", "x"),
    ];
    let t: i64 = run(
        &h,
        "tail_no_user.lua",
        "return require('tail').fresh_tail(...)",
        &s,
    );
    assert_eq!(t, 2);
    let t: i64 = run(
        &h,
        "tail_empty.lua",
        "return require('tail').fresh_tail(...)",
        &[],
    );
    assert_eq!(t, 1);
}

#[test]
fn prune_spares_the_last_turns_and_returns_untouched_messages_as_the_same_tables() {
    let h = harness();
    let s = build::session(24);
    let _: () = run(
        &h,
        "prune.lua",
        &with_prelude(
            r#"
local prune = require("prune")
local msg = require("msg")
local fit = require("fit")
for _, keep in ipairs({0, 1, 2, 5}) do
  local out, stats = prune.tool_results(S, { keepTurns = keep, softTrimChars = 1000, headChars = 200, tailChars = 100 })
  assert(#out == #S)
  local protected = prune.protected_from(S, keep)
  local changed = 0
  for i = 1, #S do
    local same = rawequal(out[i], S[i])
    if i >= protected then
      assert(same, "message " .. i .. " in the last " .. keep .. " turns was touched")
    elseif S[i].role ~= "toolResult" or #msg.text(S[i]) <= 1000 then
      assert(same, "untouched message " .. i .. " is not the same table")
    else
      assert(not same, "long old result " .. i .. " was not trimmed")
      local before, after = msg.text(S[i]), msg.text(out[i])
      assert(#after < #before)
      assert(string.sub(after, 1, 200) == string.sub(before, 1, 200), "head kept")
      assert(string.sub(after, -100) == string.sub(before, -100), "tail kept")
      assert(out[i].id == S[i].id and out[i].toolCallId == S[i].toolCallId, "copy keeps ids")
      changed += 1
    end
  end
  assert(stats.trimmed == changed and stats.cleared == 0)
end
-- Hard clear to a budget: oldest first, until it fits.
local total = fit.total(S)
local budget = total // 3
local out, stats = prune.tool_results(S, { keepTurns = 2, budget = budget })
assert(stats.cleared > 0)
assert(stats.tokens == fit.total(out))
local seen_kept_old = false
for i = 1, prune.protected_from(S, 2) - 1 do
  if S[i].role == "toolResult" then
    local is_cleared = msg.text(out[i]) == prune.DEFAULT_PLACEHOLDER
    if not is_cleared then seen_kept_old = true end
    assert(not (is_cleared and seen_kept_old), "clears oldest first")
  end
end
-- hardClear clears every old result; pruning twice changes nothing more.
local all = prune.tool_results(S, { keepTurns = 1, hardClear = true })
local again, st2 = prune.tool_results(all, { keepTurns = 1, hardClear = true })
assert(st2.cleared == 0 and st2.trimmed == 0)
for i = 1, #all do assert(rawequal(all[i], again[i])) end
"#,
        ),
        &s,
    );
}

#[test]
fn pin_by_id_and_by_marker_and_partition_keeps_groups_whole() {
    let h = harness();
    let mut s = build::session(8);
    s.push(build::user(
        "u-pin",
        "remember: the deploy host is 10.0.0.7 [pin]",
    ));
    s.push(build::assistant("a-pin", "noted"));
    let _: () = run(
        &h,
        "pin.lua",
        &with_prelude(
            r#"
local pin = require("pin")
local state = {}
assert(pin.is_pinned(S[#S - 1], state), "marker pins")
assert(not pin.is_pinned(S[#S], state))
-- Pin a tool result: its whole group is pinned.
local r
for i = 1, #S do if S[i].role == "toolResult" then r = i break end end
pin.pin(state, S[r].id)
assert(pin.is_pinned(S[r], state))
local pinned, rest = pin.partition(S, state)
assert(#pinned + #rest == #S)
check_groups_whole(pinned)
check_groups_whole(rest)
assert(rawequal(pinned[1], S[groups.group_start(S, r)]), "the call comes along")
pin.unpin(state, S[r].id)
assert(not pin.is_pinned(S[r], state))
pin.pin(state, nil)
"#,
        ),
        &s,
    );
}

#[test]
fn msg_helpers_copy_read_and_trim_without_touching_the_original() {
    let h = harness();
    let s = vec![
        build::user("u1", "hello"),
        serde_json::json!({"id": "a1", "role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm"},
            {"type": "text", "text": "first"},
            {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "/x"}},
            {"type": "text", "text": "second"}]}),
        build::result("r1", "c1", &"ü".repeat(3000)),
        serde_json::json!({"id": "s1", "role": "compactionSummary", "summary": "earlier", "tokensBefore": 10}),
    ];
    let _: () = run(
        &h,
        "msg.lua",
        r#"
local S = ...
local msg = require("msg")
assert(msg.text(S[1]) == "hello")
assert(msg.text(S[2]) == "first\nsecond", "thinking and calls excluded")
assert(msg.text(S[4]) == "earlier")
assert(msg.is_user(S[1]) and msg.is_assistant(S[2]) and msg.is_tool_result(S[3]) and msg.is_summary(S[4]))
assert(msg.has_tool_calls(S[2]) and not msg.has_tool_calls(S[1]))
assert(table.concat(msg.tool_call_ids(S[2]), ",") == "c1")
-- copy: unfrozen, equal, deep
local c = msg.copy(S[2])
assert(not rawequal(c, S[2]) and not table.isfrozen(c) and not table.isfrozen(c.content))
c.content[2].text = "changed"
assert(S[2].content[2].text == "first")
-- with_text keeps the tool call
local w = msg.with_text(S[2], "new")
assert(msg.text(w) == "new" and msg.has_tool_calls(w) and w.id == "a1")
assert(msg.text(msg.with_text(S[1], "x")) == "x")
assert(msg.with_text(S[4], "y").summary == "y")
local u = msg.user("made up")
assert(u.id == nil and msg.text(u) == "made up")
-- trim_text / trim: within the limit, valid UTF-8, head and tail kept
local long = S[3].content[1].text
for _, max in ipairs({0, 5, 40, 100, 700, 5000}) do
  local t = msg.trim_text(long, max)
  assert(host.tokens(t) <= max, "trim_text over its limit")
  assert(utf8.len(t), "trim_text broke UTF-8")
  local m = msg.trim(S[3], max)
  if host.tokens(S[3]) <= max then assert(rawequal(m, S[3])) else
    assert(host.tokens(m) <= math.max(max, 0), "trim over its limit")
    assert(m.toolCallId == "c1" and m.id == "r1")
  end
end
assert(msg.head("aü", 2) == "a" and msg.tail("üa", 2) == "a", "never cut inside a character")
assert(msg.head("abc", 10) == "abc" and msg.tail("abc", 0) == "")
"#,
        &s,
    );
}

#[test]
fn only_stdlib_modules_resolve_and_the_sandbox_is_on() {
    let h = harness();
    let err = h
        .eval::<Value>("t.lua", "return require('io')")
        .expect_err("io is not a stdlib module");
    assert!(
        err.to_string().contains("only stdlib modules resolve"),
        "{err}"
    );
    let ok: bool = h
        .eval("t.lua", "return loadstring == nil and getfenv == nil")
        .expect("eval");
    let _ = ok; // Luau keeps these names; the adapter removes them. Not the harness's concern.
    for name in ["msg", "groups", "tail", "fit", "prune", "pin"] {
        let t: Table = h
            .eval("t.lua", &format!("return require('{name}')"))
            .expect(name);
        assert!(
            t.pairs::<String, Value>().count() > 0,
            "{name} exports functions"
        );
    }
}
