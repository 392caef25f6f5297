// The OpenClaw plugin (bridges/openclaw) without OpenClaw: a fake plugin API drives it against
// the real `ctxhost serve --stdio` (CTXHOST_BIN). Run with `node --test`.

import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const { default: register, internals } = await import(path.join(HERE, "../../bridges/openclaw/index.js"));

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "ctxhost-bridge-test-"));
process.env.CTXHOST_STATE_DIR = path.join(scratch, "state");
const engine = path.join(scratch, "e2e_window.lua");
fs.writeFileSync(engine, fs.readFileSync(path.join(HERE, "e2e_window.lua"), "utf8").replaceAll("__VERSION__", "t"));

function factoryFor(config) {
  let factory = null;
  const api = { pluginConfig: config, registerContextEngine: (id, f) => ((factory = f), assert.equal(id, "ctxhost")) };
  register(api);
  register(api); // OpenClaw calls register several times: it must stay cheap and spawn nothing
  assert.equal(internals.state.child, null, "register() spawned nothing");
  return factory;
}

const history = [
  { role: "user", content: "turn-1", timestamp: 1 },
  { role: "assistant", content: [{ type: "text", text: "reply-1" }], timestamp: 2 },
  { role: "user", content: "turn-2", timestamp: 3 },
];

test("the wire encoder turns Sets into arrays and leaves out functions and abort signals", () => {
  const encoded = JSON.parse(
    internals.encode({ tools: new Set(["a", "b"]), fn: () => 1, signal: new AbortController().signal, n: 1 }),
  );
  assert.deepEqual(encoded, { tools: ["a", "b"], n: 1 });
  const cyclic = { a: 1 };
  cyclic.self = cyclic;
  assert.deepEqual(JSON.parse(internals.encode(cyclic)), { a: 1 });
});

test("one child serves every operation, and a dead child is replaced at the next call", async () => {
  const factory = factoryFor({ engine, command: process.env.CTXHOST_BIN });
  const first = await factory({});
  const second = await factory({});
  assert.equal(first.info.id, "e2e-window");
  assert.equal(first.info.transcriptSemantics.currentTurnFence, "before-current-turn-entry-v1");
  const pid = internals.state.child.proc.pid;
  const params = { sessionId: "s", sessionKey: "k", tokenBudget: 10000, prompt: "turn-2", availableTools: new Set(["x"]),
    runtimeContext: { llm: { complete: async () => "" }, abortSignal: new AbortController().signal }, messages: history };
  const r = await second.assemble(params);
  assert.equal(internals.state.child.proc.pid, pid, "the same child served both factories");
  assert.equal(r.messages.length, 2);
  assert.match(r.systemPromptAddition, /^CTXHOST-E2E t lang=lua kept 2 of 3/);
  assert.deepEqual(await first.commitTurn({ sessionKey: "k", advancementKey: "a1", messages: [] }), { status: "committed" });
  assert.deepEqual(await first.commitTurn({ sessionKey: "k", advancementKey: "a1", messages: [] }), { status: "duplicate" });

  process.kill(pid, "SIGKILL");
  // The child is unreferenced (it must not keep OpenClaw alive): poll with a timer until it is gone.
  for (let i = 0; i < 250 && internals.state.child?.proc.pid === pid; i++) await new Promise((r) => setTimeout(r, 20));
  assert.equal(internals.state.child, null, "the dead child was retired");
  const again = await second.assemble(params);
  assert.notEqual(internals.state.child.proc.pid, pid, "a new child");
  assert.match(again.systemPromptAddition, /kept 2 of 3/);
  await first.dispose();
  internals.state.child.proc.kill("SIGTERM");
});

test("over delta views the plugin sends only what changed and rebuilds the window from OpenClaw's own objects", async () => {
  internals.state.child?.proc.kill("SIGTERM");
  await noChild();
  const factory = factoryFor({ engine, command: process.env.CTXHOST_BIN });
  const engineOp = await factory({});
  assert.equal(internals.state.child.delta, true, "ctxhost agreed to delta views");
  const big = "x".repeat(20_000);
  // OpenClaw's objects carry what ctxhost does not know: it must get them back unchanged.
  const history = [
    { role: "user", content: `turn-1 ${big}`, timestamp: 1 },
    { role: "assistant", content: [{ type: "thinking", thinking: "hmm", thinkingSignature: "sig" }, { type: "text", text: "reply-1" }], timestamp: 2, provider: "p", extra: { keep: true } },
    { role: "user", content: "turn-2", timestamp: 3 },
  ];
  const key = { sessionId: "s-delta", sessionKey: "k-delta" };
  const first = await engineOp.assemble({ ...key, tokenBudget: 10000, prompt: "turn-2", messages: history });
  assert.equal(first.messages.length, 2);
  assert.equal(first.messages[0], history[1], "OpenClaw's own object, not a copy");
  assert.equal(first.messages[1], history[2]);
  history.push({ role: "assistant", content: [{ type: "text", text: "reply-2" }], timestamp: 4 });
  const before = internals.state.wire.sent;
  const second = await engineOp.assemble({ ...key, tokenBudget: 10000, prompt: "turn-3", messages: history });
  const sent = internals.state.wire.sent - before;
  assert.ok(sent < 2_000, `only the new message went to ctxhost (${sent} bytes)`);
  assert.deepEqual(second.messages, [history[2], history[3]]);
  assert.equal(second.messages[1], history[3]);
  // A rewritten history (an edit at the start): the suffix from the first change goes again.
  history[0] = { ...history[0], content: `turn-1 edited ${big}` };
  const third = await engineOp.assemble({ ...key, tokenBudget: 10000, prompt: "turn-3", messages: history });
  // ctxhost's transcript only appends: the edited message is its newest, given back as
  // OpenClaw's own object.
  assert.ok(third.messages.includes(history[0]) && third.messages.includes(history[3]), JSON.stringify(third.messages).slice(0, 300));
  const transcripts = findFiles(process.env.CTXHOST_STATE_DIR, "transcript.jsonl").map((f) => fs.readFileSync(f, "utf8"));
  const session = transcripts.find((t) => t.includes("reply-2"));
  assert.equal(session.split("\n").filter((l) => l.includes("reply-2")).length, 1, "every message stored once");
  assert.ok(session.includes("turn-1 edited"), "the rewritten message is stored");
  internals.state.child.proc.kill("SIGTERM");
});

test("the identity walk finds an equal copy by its hash, a truncation, and an edit in place anywhere in OpenClaw's array", async () => {
  internals.state.child?.proc.kill("SIGTERM");
  await noChild();
  const factory = factoryFor({ engine, command: process.env.CTXHOST_BIN });
  const engineOp = await factory({});
  const history = Array.from({ length: 40 }, (_, i) =>
    i % 2 === 0
      ? { role: "user", content: `walk-u-${i}`, timestamp: i }
      : { role: "assistant", content: [{ type: "text", text: `walk-a-${i}` }], timestamp: i });
  const key = { sessionId: "s-walk", sessionKey: "k-walk" };
  const call = () => engineOp.assemble({ ...key, tokenBudget: 10000, prompt: "p", messages: history });
  const held = () => internals.state.views.get("s-walk")?.count;
  await call();
  assert.equal(held(), 40);

  // An equal copy in place of the newest message (OpenClaw read it again): found by its hash,
  // nothing sent again, and the window gives back the object OpenClaw holds now.
  history[39] = structuredClone(history[39]);
  let before = internals.state.wire.sent;
  const copied = await call();
  assert.ok(internals.state.wire.sent - before < 1_000, `nothing sent again (${internals.state.wire.sent - before} bytes)`);
  assert.equal(copied.messages.at(-1), history[39], "the copy OpenClaw holds now, not the object it replaced");
  assert.equal(held(), 40);

  // A truncation: ctxhost's view follows it (its transcript keeps what it stored: the
  // dropped messages stay in the engine's context).
  history.length = 30;
  before = internals.state.wire.sent;
  await call();
  assert.equal(held(), 30, "ctxhost agreed to the shorter view");
  assert.ok(internals.state.wire.sent - before < 1_000, "nothing sent again for a truncation");

  // An edit in place in the middle of the same array (no new message after it): the walk
  // finds it, the suffix from it goes again, and ctxhost stores the edited message.
  history[17] = { ...history[17], content: [{ type: "text", text: "walk-a-17 EDITED-IN-PLACE" }] };
  before = internals.state.wire.sent;
  const edited = await call();
  assert.ok(internals.state.wire.sent - before > 13 * 40, "the changed suffix was sent again");
  assert.equal(held(), 30);
  assert.ok(edited.messages.includes(history[17]) || edited.messages.includes(history[29]), JSON.stringify(edited.messages).slice(0, 300));
  const transcripts = findFiles(process.env.CTXHOST_STATE_DIR, "transcript.jsonl").map((f) => fs.readFileSync(f, "utf8"));
  const session = transcripts.find((t) => t.includes("walk-u-0"));
  assert.equal(session.split("\n").filter((l) => l.includes("EDITED-IN-PLACE")).length, 1, "the edited message is stored, once");
  internals.state.child.proc.kill("SIGTERM");
});

/** Every file named `name` under `dir`. */
function findFiles(dir, name) {
  return fs
    .readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name === name)
    .map((e) => path.join(e.parentPath ?? e.path, e.name));
}

async function noChild() {
  for (let i = 0; i < 250 && internals.state.child; i++) await new Promise((r) => setTimeout(r, 20));
  assert.equal(internals.state.child, null, "the earlier child is gone");
}

test("a summary ctxhost asks of the client's model goes to OpenClaw's runtimeContext.llm.complete", async () => {
  internals.state.child?.proc.kill("SIGTERM");
  await noChild();
  const config = path.join(scratch, "client-summarizer.json5");
  fs.writeFileSync(config, '{ host: { summarizer: { kind: "client" } } }');
  const factory = factoryFor({ engine, command: process.env.CTXHOST_BIN, config });
  const engineOp = await factory({});
  const asked = [];
  // OpenClaw's LlmCompleteParams in, LlmCompleteResult out (plugin-sdk .d.ts, 2026.9.6).
  const complete = async (params) => {
    asked.push(params);
    return {
      text: "## Goal\n- SUMMARY-FROM-OPENCLAW\n## Constraints\n- None\n## Progress\n- None\n## Decisions\n- None\n## Open questions / pending\n- None\n## Exact identifiers\n- None",
      provider: "fake",
      model: "fake-1",
      agentId: "main",
      usage: { inputTokens: 120, outputTokens: 30 },
      execution: { mode: "direct-provider", owner: { kind: "provider", id: "fake" } },
      audit: { caller: { kind: "context-engine", id: "context-engine.compaction" } },
    };
  };
  const key = { sessionId: "s-sum", sessionKey: "k-sum" };
  const four = [...history, { role: "assistant", content: [{ type: "text", text: "reply-2" }], timestamp: 4 }];
  await engineOp.assemble({ ...key, tokenBudget: 10000, prompt: "turn-3", messages: four });
  const operation = new AbortController();
  const r = await engineOp.compact({ ...key, tokenBudget: 10000, force: true, compactionTarget: "budget",
    runtimeContext: { llm: { complete }, abortSignal: operation.signal } });
  assert.equal(r.compacted, true, JSON.stringify(r));
  assert.equal(asked.length, 1, "one model call");
  const [request] = asked;
  assert.equal(request.messages[0].role, "system");
  assert.match(request.messages[0].content, /handoff summary/);
  assert.ok(request.messages.every((m) => ["system", "user", "assistant"].includes(m.role) && typeof m.content === "string"));
  assert.ok(request.messages.some((m) => m.role === "user" && m.content.includes("turn-1")), "the span is in the request");
  assert.equal(typeof request.maxTokens, "number");
  assert.ok(request.signal instanceof AbortSignal && !request.signal.aborted);
  assert.equal(request.model, undefined, "a context engine may not override the model");
  assert.equal(request.agentId, undefined, "nor the agent");
  const transcripts = findFiles(process.env.CTXHOST_STATE_DIR, "transcript.jsonl").map((f) => fs.readFileSync(f, "utf8"));
  assert.ok(transcripts.some((t) => t.includes("SUMMARY-FROM-OPENCLAW")), "the model's summary is the session's compaction");

  // No model call offered (no runtimeContext.llm, no api.runtime): ctxhost is told -32010 and
  // its offline summarizer writes the summary.
  await engineOp.assemble({ ...key, sessionKey: "k-off", tokenBudget: 10000, prompt: "turn-3", messages: four });
  const off = await engineOp.compact({ ...key, sessionKey: "k-off", tokenBudget: 10000, force: true, compactionTarget: "budget" });
  assert.equal(off.compacted, true, JSON.stringify(off));
  assert.equal(asked.length, 1, "no model call without one offered");
  internals.state.child.proc.kill("SIGTERM");
});

test.after(() => fs.rmSync(scratch, { recursive: true, force: true }));

test("ctxhost's state directory is the plugin's stateDir, else CTXHOST_STATE_DIR, else ctxhost/ under OpenClaw's state directory", async () => {
  const saved = { ctxhost: process.env.CTXHOST_STATE_DIR, openclaw: process.env.OPENCLAW_STATE_DIR, home: process.env.OPENCLAW_HOME };
  try {
    assert.equal(await internals.stateDirFor({ stateDir: "/srv/ctx" }), "/srv/ctx");
    process.env.CTXHOST_STATE_DIR = "/var/ctx";
    assert.equal(await internals.stateDirFor({}), "/var/ctx");
    delete process.env.CTXHOST_STATE_DIR;
    process.env.OPENCLAW_STATE_DIR = "/home/a/profile-b";
    assert.equal(await internals.stateDirFor({}), "/home/a/profile-b/ctxhost");
    delete process.env.OPENCLAW_STATE_DIR;
    process.env.OPENCLAW_HOME = "/home/b";
    assert.equal(await internals.stateDirFor({}), "/home/b/.openclaw/ctxhost");
  } finally {
    for (const [k, v] of [["CTXHOST_STATE_DIR", saved.ctxhost], ["OPENCLAW_STATE_DIR", saved.openclaw], ["OPENCLAW_HOME", saved.home]]) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
});

/** A factory whose child is .ci/e2e/fake_serve.mjs in `mode`; returns it and its call log. */
function fakeFactory(mode, extra = {}) {
  const log = path.join(scratch, `fake-${mode}-${Date.now()}.log`);
  const command = path.join(scratch, `fake-${mode}.sh`);
  fs.writeFileSync(command, `#!/bin/sh\nFAKE_SERVE_MODE=${mode} FAKE_SERVE_LOG='${log}' exec '${process.execPath}' '${path.join(HERE, "fake_serve.mjs")}'\n`);
  fs.chmodSync(command, 0o755);
  return { factory: factoryFor({ engine, command, ...extra }), log };
}

const calls = (log) => (fs.existsSync(log) ? fs.readFileSync(log, "utf8").split("\n").filter(Boolean) : []);

test("a call ctxhost never answers fails within its timeout, and the stuck child is replaced", async () => {
  await noChild();
  const { factory, log } = fakeFactory("hang", { requestTimeoutMs: 300 });
  const engineApi = await factory({});
  const pid = internals.state.child.proc.pid;
  await assert.rejects(
    engineApi.assemble({ sessionId: "s", sessionKey: "k", messages: history, tokenBudget: 1000 }),
    /no answer to assemble within 300 ms/,
  );
  assert.deepEqual(calls(log), ["assemble"], "sent once: a call that timed out is not re-sent");
  await noChild();
  await factory({});
  assert.notEqual(internals.state.child.proc.pid, pid, "the next call got a fresh child");
  internals.state.child.proc.kill("SIGTERM");
  await noChild();
});

test("a child that dies under a call: what is safe to re-send is, a compaction is not", async () => {
  const { factory, log } = fakeFactory("die");
  const engineApi = await factory({});
  await assert.rejects(engineApi.ingest({ sessionId: "s", sessionKey: "k", message: history[0] }), /exited/);
  assert.deepEqual(calls(log), ["ingest", "ingest"], "an ingest is re-sent once to a new child");
  await noChild();
  await factory({});
  await assert.rejects(engineApi.compact({ sessionId: "s", sessionKey: "k", tokenBudget: 1000, force: true }), /exited/);
  assert.deepEqual(calls(log), ["ingest", "ingest", "compact"], "a compaction is not run twice");
  await noChild();
});
