// The bridge's whole path timed: OpenClaw's `assemble` call into this plugin's engine object
// (index.js, as OpenClaw loads it), the wire to a real `ctxhost serve --stdio`, the engine
// (scripts/recent_turns.lua), the answer back and the window rebuilt from OpenClaw's objects.
// No OpenClaw: a fake plugin API registers the engine, as .ci/e2e/bridge.test.mjs does.
//
//   node bridges/openclaw/bench.mjs --bin target/release/ctxhost [--sizes 1000,10000,100000]
//        [--calls 40] [--forms delta,full]
//
// For each form (delta views, or the whole history as protocol 1 sends it) and history size:
// - `append`: `assemble` with one new message after N messages of history (OpenClaw's array
//   keeps its objects between calls, as within one OpenClaw process), the median (p50) and
//   p90 of `--calls` calls, and the bytes on the wire per call (both directions);
// - `rewrite`: one call after the message in the middle of the history was replaced by an
//   edited copy (the resync of a rewritten history);
// - `new process`: one call of a conversation this plugin process has not seen (a new
//   `openclaw agent --local` run: the plugin hashes OpenClaw's array once).

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";

import register, { internals } from "./index.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

const bin = path.resolve(arg("bin", path.join(HERE, "../../target/release/ctxhost")));
const sizes = arg("sizes", "1000,10000,100000").split(",").map(Number);
const calls = Number(arg("calls", "40"));
const forms = arg("forms", "delta,full").split(",");
const engine = path.join(HERE, "../../scripts/recent_turns.lua");
const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), "ctxhost-bridge-bench-"));

// The serve bench's messages (cli/benches/serve.rs), as OpenClaw's objects.
function message(i) {
  const text = `message ${i}: the parser returns an error for the config value in session ${i % 97} and the tool result names the file src/lib.rs line ${i % 1000}`;
  return i % 2 === 0
    ? { role: "user", content: text, timestamp: i }
    : { role: "assistant", content: [{ type: "text", text }], timestamp: i };
}

async function engineFor(deltaViews) {
  let factory = null;
  register({ pluginConfig: { engine, command: bin, stateDir, deltaViews }, registerContextEngine: (_id, f) => (factory = f) });
  return factory({});
}

async function stopChild() {
  const child = internals.state.child;
  if (!child) return;
  child.proc.kill("SIGTERM");
  for (let i = 0; i < 500 && internals.state.child; i++) await new Promise((r) => setTimeout(r, 10));
}

async function timed(engineApi, params) {
  const wire = { ...internals.state.wire };
  const t = performance.now();
  const r = await engineApi.assemble(params);
  const ms = performance.now() - t;
  if (!Array.isArray(r.messages) || r.messages.length === 0) throw new Error(`no window: ${JSON.stringify(r).slice(0, 200)}`);
  return { ms, bytes: internals.state.wire.sent - wire.sent + internals.state.wire.received - wire.received };
}

const pct = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))];
const fmt = (ms) => (ms < 1 ? `${(ms * 1000).toFixed(0)} µs` : `${ms.toFixed(2)} ms`);
const kb = (b) => (b < 1024 ? `${b} B` : `${(b / 1024).toFixed(1)} KiB`);

console.log(`bridge bench: ${bin}, engine recent_turns.lua, ${calls} calls per size`);
for (const form of forms) {
  await stopChild();
  internals.state.views.clear();
  const engineApi = await engineFor(form === "delta");
  for (const n of sizes) {
    const sessionId = `bench-${form}-${n}`;
    const history = Array.from({ length: n }, (_, i) => message(i));
    const params = () => ({ sessionId, sessionKey: sessionId, messages: history, tokenBudget: 32_000, prompt: "next" });
    // The first call brings ctxhost the whole history (a session's first call); then the
    // calls a running session makes.
    await engineApi.assemble(params());
    const times = [];
    const bytes = [];
    for (let c = 0; c < calls; c++) {
      history.push(message(history.length));
      const r = await timed(engineApi, params());
      times.push(r.ms);
      bytes.push(r.bytes);
    }
    const mid = Math.floor(history.length / 2);
    const edited = history[mid];
    history[mid] = typeof edited.content === "string"
      ? { ...edited, content: `${edited.content} (edited)` }
      : { ...edited, content: [{ type: "text", text: `${edited.content[0].text} (edited)` }] };
    const rewrite = await timed(engineApi, params());
    internals.state.views.delete(sessionId);
    history.push(message(history.length));
    const fresh = await timed(engineApi, params());
    console.log(
      `${form.padEnd(5)} ${String(n).padStart(6)} msgs  append p50 ${fmt(pct(times, 0.5))}  p90 ${fmt(pct(times, 0.9))}` +
        `  wire ${kb(pct(bytes, 0.5))}/call  |  rewrite ${fmt(rewrite.ms)} (${kb(rewrite.bytes)})` +
        `  |  new process ${fmt(fresh.ms)} (${kb(fresh.bytes)})`,
    );
  }
}
await stopChild();
fs.rmSync(stateDir, { recursive: true, force: true });
