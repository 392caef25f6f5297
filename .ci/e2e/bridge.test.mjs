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

test.after(() => fs.rmSync(scratch, { recursive: true, force: true }));
