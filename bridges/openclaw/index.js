// OpenClaw plugin: a ctxhost context engine (one .lua / .rhai file) as OpenClaw's context engine.
//
// OpenClaw calls register() several times per process and the engine factory once per
// operation, so nothing is spawned in register(): one `ctxhost serve --stdio` child per OpenClaw
// process is spawned lazily by the factory, initialized once, reused by every operation, and
// spawned again if it dies. The wire is newline-delimited JSON-RPC 2.0 in both directions:
// lifecycle calls go to ctxhost under their OpenClaw names; ctxhost may ask back
// `runtime.delegateCompaction` (answered with the SDK's delegateCompactionToRuntime) and
// `llm.complete` (answered with OpenClaw's model call: the operation's
// `runtimeContext.llm.complete`, else `api.runtime.llm.complete`); a `$/cancelRequest` from
// ctxhost aborts the answer it no longer waits for.
//
// Plain ESM, no build step, no dependencies beyond Node and the OpenClaw SDK the host provides.

import { spawn } from "node:child_process";
import os from "node:os";
import path from "node:path";

const METHODS = [
  "bootstrap",
  "ingest",
  "ingestBatch",
  "assemble",
  "compact",
  "afterTurn",
  "commitTurn",
  "maintain",
  "prepareSubagentSpawn",
  "onSubagentEnded",
];

const CLIENT = { name: "openclaw-ctxhost-bridge", version: "0.1.0" };

// How long a call may go unanswered before it fails over to OpenClaw's error path (time
// ctxhost spends waiting on OpenClaw's own answers, a model call for a summary, does not count).
// A compaction may run a model of ctxhost's own: it gets longer. `requestTimeoutMs` and
// `compactTimeoutMs` in the plugin config override them.
const REQUEST_TIMEOUT_MS = 30_000;
const COMPACT_TIMEOUT_MS = 300_000;

// The calls a new child may be given again when the one serving them died before answering:
// ctxhost stores each message once however often a call carrying it comes, and commitTurn is
// idempotent by its advancementKey. A compaction (it would run twice) and a spawn's rollback
// (its id lived in the dead child) are not re-sent: they fail over to OpenClaw's error path.
const RETRY_SAFE = new Set(["bootstrap", "ingest", "ingestBatch", "assemble", "afterTurn", "commitTurn", "maintain", "onSubagentEnded"]);

// The answer to ctxhost's `llm.complete` when no model call is offered: ctxhost's summarizer
// then falls back to its offline one, and `host.complete` answers `reason: "unavailable"`.
const NO_CLIENT_MODEL = -32010;

// One child per OpenClaw process (module state survives the repeated register() calls).
const state = {
  starting: null, // the spawn in progress (a Promise of the child), while the state dir is found
  child: null, // { proc, pending: Map, nextId, ready: Promise<info>, buffer }
  config: null,
  runtime: null, // api.runtime: its llm.complete serves model calls outside an operation's own
  // Params of operations in flight, per session, for requests ctxhost sends back.
  live: new Map(),
};

// For the plugin's own tests (.ci/e2e/bridge.test.mjs): the wire encoder and the child state.
export const internals = { encode: (v) => encode(v), state };

function log(level, msg) {
  process.stderr.write(`[ctxhost-bridge] ${level}: ${msg}\n`);
}

// JSON for the wire: Sets become arrays; functions, abort signals and BigInts' precision
// issues are left out; a cycle is dropped rather than failing the call.
function encode(value) {
  const replacer = (seen) =>
    function (_key, v) {
      if (typeof v === "function") return undefined;
      if (typeof v === "bigint") return Number(v);
      if (typeof AbortSignal !== "undefined" && v instanceof AbortSignal) return undefined;
      if (v instanceof Set) return Array.from(v);
      if (v instanceof Map) return Object.fromEntries(v);
      if (seen && v && typeof v === "object") {
        if (seen.has(v)) return undefined;
        seen.add(v);
      }
      return v;
    };
  try {
    return JSON.stringify(value, replacer(null));
  } catch {
    return JSON.stringify(value, replacer(new WeakSet()));
  }
}

function sessionOf(params) {
  return (params && (params.sessionKey || params.sessionId || params.parentSessionKey)) || "";
}

// Where ctxhost keeps this OpenClaw installation's sessions: the plugin's `stateDir`, else
// `CTXHOST_STATE_DIR` (an operator's explicit choice), else `ctxhost/` under OpenClaw's own state
// directory (the SDK's resolveStateDir: OPENCLAW_STATE_DIR, else under OPENCLAW_HOME or the
// home directory), so two OpenClaw profiles or homes never share a conversation.
async function stateDirFor(config) {
  if (config.stateDir) return config.stateDir;
  if (process.env.CTXHOST_STATE_DIR) return process.env.CTXHOST_STATE_DIR;
  let openclaw = null;
  try {
    const paths = await import("openclaw/plugin-sdk/state-paths");
    openclaw = paths.resolveStateDir(process.env);
  } catch {
    const home = process.env.OPENCLAW_HOME || os.homedir();
    openclaw = process.env.OPENCLAW_STATE_DIR || path.join(home, ".openclaw");
  }
  return path.join(openclaw, "ctxhost");
}

// For the plugin's own tests.
internals.stateDirFor = stateDirFor;

function spawnChild(config, stateDir) {
  // Without `command`, `ctxhost` is looked up on PATH (where `cargo install --path cli` puts it).
  const command = config.command || "ctxhost";
  const args = ["serve", "--stdio", "--engine", config.engine, "--state-dir", stateDir];
  if (config.config) args.push("--config", config.config);
  const proc = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
  const child = { proc, pending: new Map(), incoming: new Map(), nextId: 1, buffer: "", alive: true };
  proc.on("error", (e) => {
    const hint = e.code === "ENOENT" && !config.command
      ? " (not on PATH: install it with `cargo install --locked --path cli` in the ctxhost clone, or set plugins.entries.ctxhost.config.command)"
      : "";
    log("error", `cannot run ${command}: ${e.message}${hint}`);
    retire(child, e);
  });
  proc.on("exit", (code, signal) => {
    if (child.alive) log("warn", `ctxhost exited (code ${code}, signal ${signal}); it restarts at the next call`);
    retire(child, new Error(`ctxhost exited (code ${code}, signal ${signal})`));
  });
  // Its output ended: no answer can come any more (the exit event may come later, or, with
  // the process unreferenced and nothing else pending, not before the calls waiting on it).
  proc.stdout.on("end", () => {
    if (child.alive) log("warn", "ctxhost closed its output; it restarts at the next call");
    retire(child, new Error("ctxhost exited (its output closed)"));
  });
  proc.stdin.on("error", () => {});
  proc.stdout.setEncoding("utf8");
  proc.stdout.on("data", (chunk) => {
    child.buffer += chunk;
    let nl;
    while ((nl = child.buffer.indexOf("\n")) >= 0) {
      const line = child.buffer.slice(0, nl);
      child.buffer = child.buffer.slice(nl + 1);
      if (line.trim()) onLine(child, line);
    }
  });
  // Neither the child nor its pipes keep OpenClaw alive; stdout is held only during a call.
  proc.unref();
  proc.stdin.unref?.();
  proc.stdout.unref?.();
  return child;
}

function retire(child, error) {
  child.alive = false;
  if (state.child === child) state.child = null;
  for (const { reject } of child.pending.values()) reject(error);
  child.pending.clear();
  for (const abort of child.incoming.values()) abort.abort();
  child.incoming.clear();
}

function holdOpen(child) {
  if (child.pending.size > 0) child.proc.stdout.ref?.();
  else child.proc.stdout.unref?.();
}

function send(child, frame) {
  child.proc.stdin.write(encode(frame) + "\n");
}

function request(child, method, params, signal, timeoutMs = 0) {
  const id = child.nextId++;
  let timer = null;
  return new Promise((resolve, reject) => {
    child.pending.set(id, { resolve, reject });
    holdOpen(child);
    if (timeoutMs > 0) {
      const tick = Math.min(1000, timeoutMs);
      let waited = 0;
      timer = setInterval(() => {
        // While ctxhost waits on one of our answers (a model call), the clock stops.
        if (child.incoming.size === 0) waited += tick;
        if (waited < timeoutMs || !child.pending.has(id)) return;
        child.pending.delete(id);
        const e = new Error(`ctxhost: no answer to ${method} within ${timeoutMs} ms`);
        e.timedOut = true;
        reject(e);
        hung(child, method, timeoutMs);
      }, tick);
      timer.unref?.();
    }
    if (signal && typeof signal.addEventListener === "function") {
      if (signal.aborted) {
        send(child, { jsonrpc: "2.0", method: "$/cancelRequest", params: { id } });
      } else {
        signal.addEventListener(
          "abort",
          () => send(child, { jsonrpc: "2.0", method: "$/cancelRequest", params: { id } }),
          { once: true },
        );
      }
    }
    send(child, { jsonrpc: "2.0", id, method, params: params ?? {} });
  }).finally(() => {
    if (timer) clearInterval(timer);
    holdOpen(child);
  });
}

// A child that left a call unanswered for its whole timeout is stuck: it is ended (it is ours,
// by its pid) so the next call starts a fresh one instead of waiting on it too.
function hung(child, method, timeoutMs) {
  if (!child.alive) return;
  log("error", `ctxhost gave no answer to ${method} within ${timeoutMs} ms; restarting it at the next call`);
  retire(child, new Error(`ctxhost was restarted: it gave no answer to ${method} within ${timeoutMs} ms`));
  try {
    child.proc.kill("SIGKILL");
  } catch {}
}

function onLine(child, line) {
  let frame;
  try {
    frame = JSON.parse(line);
  } catch {
    log("warn", `ignoring a line that is not JSON: ${line.slice(0, 200)}`);
    return;
  }
  if (frame.method && frame.id !== undefined && frame.id !== null) {
    answer(child, frame);
    return;
  }
  if (frame.method) {
    // Notifications: ctxhost gave up on one of its requests.
    if (frame.method === "$/cancelRequest") child.incoming.get(frame.params?.id)?.abort();
    return;
  }
  const waiting = child.pending.get(frame.id);
  if (!waiting) return;
  child.pending.delete(frame.id);
  if (frame.error) {
    const e = new Error(`ctxhost: ${frame.error.message}`);
    e.code = frame.error.code;
    waiting.reject(e);
  } else {
    waiting.resolve(frame.result);
  }
}

// Requests from ctxhost to OpenClaw.
async function answer(child, frame) {
  // ctxhost's `$/cancelRequest` for this request (it stopped waiting: its own caller was
  // cancelled, or its time ran out) aborts the work; the answer is then not sent.
  const abort = new AbortController();
  child.incoming.set(frame.id, abort);
  const reply = (body) => {
    child.incoming.delete(frame.id);
    if (!abort.signal.aborted) send(child, { jsonrpc: "2.0", id: frame.id, ...body });
  };
  try {
    const params = frame.params ?? {};
    const live = state.live.get(sessionOf(params));
    if (frame.method === "runtime.delegateCompaction") {
      const sdk = await import("openclaw/plugin-sdk/core");
      // The operation's own params carry what the wire cannot (abort signal, callbacks); a
      // script's host.delegateCompaction(p) may change the budget, force and instructions.
      const asked = live ? { ...live } : params;
      if (live) {
        for (const k of ["tokenBudget", "force", "compactionTarget", "customInstructions"]) {
          if (params[k] !== undefined) asked[k] = params[k];
        }
      }
      const result = await sdk.delegateCompactionToRuntime(asked);
      reply({ result: JSON.parse(encode(result ?? null)) });
      return;
    }
    if (frame.method === "llm.complete") {
      // A summary names no session: the one operation in flight is the one that asks.
      const op = live ?? (state.live.size === 1 ? state.live.values().next().value : undefined);
      const llm = modelCall(op);
      if (!llm) {
        // -32010: no client model; ctxhost falls back to its offline summarizer.
        reply({ error: { code: NO_CLIENT_MODEL, message: "the OpenClaw runtime offers no model call here" } });
        return;
      }
      const result = await llm.complete(modelRequest(params, op, abort.signal));
      reply({ result: modelAnswer(result) });
      return;
    }
    reply({ error: { code: -32601, message: `no method ${frame.method}` } });
  } catch (e) {
    reply({ error: { code: -32603, message: String(e?.message ?? e) } });
  }
}

// The model call OpenClaw 2026.9.6 offers a context engine (dist/plugin-sdk `.d.ts`:
// `ContextEngineRuntimeContext.llm?: { complete(params: LlmCompleteParams):
// Promise<LlmCompleteResult> }`, built by `resolveContextEngineCapabilities`): the
// operation's `runtimeContext.llm`, bound to the session's agent and model. OpenClaw passes it
// to compact (budget, overflow and manual), maintain and afterTurn; assemble has none, so there
// the process-wide `api.runtime.llm` answers (the default agent's model).
function modelCall(op) {
  for (const llm of [op?.runtimeContext?.llm, state.runtime?.llm]) {
    if (typeof llm?.complete === "function") return llm;
  }
  return undefined;
}

// ctxhost's `llm.complete` params ({messages: [{role, content}], maxTokens, temperature?,
// responseFormat?, timeoutMs}) as OpenClaw's `LlmCompleteParams`: messages of role
// system/user/assistant with string content (OpenClaw folds the system ones into its system
// prompt), no model or agent override (a context engine's call may not override them), and
// a signal that ends with ctxhost's wait, its timeout, or the operation's own abort.
function modelRequest(params, op, cancelled) {
  const text = (c) =>
    typeof c === "string" ? c : Array.isArray(c) ? c.map((b) => (typeof b === "string" ? b : b?.text ?? "")).join("") : "";
  const signals = [cancelled];
  if (Number.isFinite(params.timeoutMs) && params.timeoutMs > 0) signals.push(AbortSignal.timeout(params.timeoutMs));
  const opSignal = op?.abortSignal ?? op?.runtimeContext?.abortSignal;
  if (opSignal instanceof AbortSignal) signals.push(opSignal);
  const request = {
    messages: (params.messages ?? []).map((m) => ({ role: m.role, content: text(m.content) })),
    purpose: "ctxhost",
    signal: AbortSignal.any(signals),
  };
  if (Number.isFinite(params.maxTokens)) request.maxTokens = params.maxTokens;
  if (Number.isFinite(params.temperature)) request.temperature = params.temperature;
  if (params.responseFormat) request.responseFormat = params.responseFormat;
  return request;
}

// OpenClaw's `LlmCompleteResult` ({text, provider, model, usage: {inputTokens, outputTokens,
// ...}, ...}) as ctxhost reads it: {text, usage: {input, output}, model}.
function modelAnswer(r) {
  const u = r?.usage ?? {};
  const model = r?.provider && r?.model ? `${r.provider}/${r.model}` : r?.model ?? "openclaw";
  return { text: typeof r?.text === "string" ? r.text : "", usage: { input: u.inputTokens ?? 0, output: u.outputTokens ?? 0 }, model };
}

// The running, initialized child (spawned and initialized on first use, and after a crash).
async function ensure(config) {
  if (state.child && state.child.alive) return state.child;
  // One spawn however many operations ask at once while the state directory is looked up.
  state.starting ??= (async () => {
    const child = spawnChild(config, await stateDirFor(config));
    state.child = child;
    child.ready = request(child, "initialize", {
      engine: config.engine,
      config: config.config,
      clientInfo: CLIENT,
      capabilities: { delegateCompaction: true, llmComplete: true },
    }, undefined, timeoutFor(config, "initialize")).then((r) => r.info);
    return child;
  })().finally(() => {
    state.starting = null;
  });
  const child = await state.starting;
  await child.ready;
  return child;
}

function timeoutFor(config, method) {
  const ms = method === "compact" ? config.compactTimeoutMs ?? COMPACT_TIMEOUT_MS : config.requestTimeoutMs ?? REQUEST_TIMEOUT_MS;
  return Number.isFinite(ms) && ms > 0 ? ms : 0;
}

async function call(config, method, params) {
  const key = sessionOf(params);
  const signal = params?.abortSignal ?? params?.runtimeContext?.abortSignal;
  const timeout = timeoutFor(config, method);
  if (key) state.live.set(key, params);
  try {
    let child = await ensure(config);
    try {
      return await request(child, method, params, signal, timeout);
    } catch (e) {
      if (child.alive || e.code !== undefined || e.timedOut || !RETRY_SAFE.has(method)) throw e;
      // The child died under the call: once more on a fresh one (safe: see RETRY_SAFE).
      child = await ensure(config);
      return await request(child, method, params, signal, timeout);
    }
  } finally {
    if (key && state.live.get(key) === params) state.live.delete(key);
  }
}

export default function register(api) {
  const config = api.pluginConfig ?? {};
  state.config = config;
  // The runtime of a full registration (a "cli-metadata" one is a stub that throws).
  const mode = api.registrationMode;
  if (api.runtime && mode !== "cli-metadata" && (mode === "full" || !state.runtime)) state.runtime = api.runtime;
  api.registerContextEngine("ctxhost", async () => {
    if (!config.engine) throw new Error("ctxhost: plugins.entries.ctxhost.config.engine is not set");
    const child = await ensure(config);
    await child.ready;
    // Asked at every operation: a hot reload may have changed it (ownsCompaction, ...).
    const info = await request(child, "info", {}, undefined, timeoutFor(config, "info"));
    const engine = { info };
    for (const m of METHODS) engine[m] = (params) => call(config, m, params);
    // The engine's rollback stays in ctxhost: OpenClaw gets a function that asks for it.
    engine.prepareSubagentSpawn = async (params) => {
      const r = await call(config, "prepareSubagentSpawn", params);
      if (r?.rollbackId === undefined) return undefined;
      const parentSessionKey = params?.parentSessionKey;
      return {
        rollback: () =>
          call(config, "rollbackSubagentSpawn", { parentSessionKey, parentSessionId: params?.parentSessionId, rollbackId: r.rollbackId }),
      };
    };
    // ctxhost keeps the engine instance across operations; OpenClaw's per-operation dispose
    // has nothing to release.
    engine.dispose = async () => {};
    return engine;
  });
}
