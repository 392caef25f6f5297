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
// Delta views (protocol 2, asked for at `initialize`): OpenClaw hands every call its whole
// transcript; the plugin sends ctxhost only what changed since what ctxhost holds (a count
// and a rolling hash of OpenClaw's messages, checked by ctxhost on every call), and rebuilds
// `assemble`'s window from OpenClaw's own message objects, which ctxhost refers to by their
// place in OpenClaw's array. See `docs/openclaw.md`, "The wire".
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

// ctxhost's answer when a delta view's base disagrees with what it holds (`data`: its view).
const VIEW_OUT_OF_SYNC = -32012;

// How many conversations' views the plugin remembers (least recently used forgotten first;
// a forgotten one costs its next call a hash of OpenClaw's array, not a resend).
const VIEWS_KEPT = 256;

// One child per OpenClaw process (module state survives the repeated register() calls).
const state = {
  starting: null, // the spawn in progress (a Promise of the child), while the state dir is found
  child: null, // { proc, pending: Map, nextId, ready: Promise<info>, buffer }
  config: null,
  runtime: null, // api.runtime: its llm.complete serves model calls outside an operation's own
  // Params of operations in flight, per session, for requests ctxhost sends back.
  live: new Map(),
  // Per conversation, what the plugin believes ctxhost holds of OpenClaw's transcript (delta
  // views): see View.
  views: new Map(),
  // Bytes written to and read from ctxhost, for the bench.
  wire: { sent: 0, received: 0 },
};

// For the plugin's own tests (.ci/e2e/bridge.test.mjs) and bench: the wire encoder and the
// child state.
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
    state.wire.received += Buffer.byteLength(chunk);
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
  write(child, encode(frame));
}

function write(child, line) {
  state.wire.sent += Buffer.byteLength(line) + 1;
  child.proc.stdin.write(line + "\n");
}

// Where a delta's messages go in a frame: they are sent as the JSON text hashed (`rawAppend`),
// spliced in rather than encoded a second time.
const APPEND_MARK = "\u0000ctxhost-append\u0000";
const APPEND_SLOT = JSON.stringify(APPEND_MARK);

function request(child, method, params, signal, timeoutMs = 0, rawAppend = null) {
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
    const line = encode({ jsonrpc: "2.0", id, method, params: params ?? {} });
    write(child, rawAppend ? line.replace(APPEND_SLOT, () => `[${rawAppend.join(",")}]`) : line);
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
    e.data = frame.error.data;
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
      capabilities: { delegateCompaction: true, llmComplete: true, deltaViews: config.deltaViews !== false },
    }, undefined, timeoutFor(config, "initialize")).then((r) => {
      child.delta = r.views === "delta";
      return r.info;
    });
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
      return await send1(child, method, params, signal, timeout);
    } catch (e) {
      if (child.alive || e.code !== undefined || e.timedOut || !RETRY_SAFE.has(method)) throw e;
      // The child died under the call: once more on a fresh one (safe: see RETRY_SAFE).
      child = await ensure(config);
      return await send1(child, method, params, signal, timeout);
    }
  } finally {
    if (key && state.live.get(key) === params) state.live.delete(key);
  }
}

// One call on `child`: as a delta view when the child speaks them and the call carries
// OpenClaw's messages, else as OpenClaw passed it.
async function send1(child, method, params, signal, timeout) {
  if (!child.delta || !VIEW_METHODS.has(method) || !conversationOf(params)) {
    return request(child, method, params, signal, timeout);
  }
  return viewCall(child, method, params, signal, timeout);
}

// ---------------------------------------------------------------------------------------------
// Delta views.
// ---------------------------------------------------------------------------------------------

// The calls that carry OpenClaw's messages: `assemble` and `afterTurn` its whole transcript,
// `ingest`/`ingestBatch` the messages it appends.
const VIEW_METHODS = new Set(["assemble", "afterTurn", "ingest", "ingestBatch"]);

function conversationOf(params) {
  return (params && (params.sessionId || params.sessionKey)) || "";
}

// What the plugin believes ctxhost holds of one conversation's transcript: OpenClaw's message
// objects in order, each one's hash and the rolling hash after it; and the last window it
// returned (a later call that starts with it is that window echoed back with the tool loop's
// new messages after it, not OpenClaw's transcript).
class View {
  constructor() {
    this.objs = [];
    this.mh = [];
    this.ph = [];
    this.window = null;
  }
  get count() {
    return this.objs.length;
  }
  hashAt(n) {
    return n > 0 ? this.ph[n - 1] : "";
  }
}

// The view of a conversation, taken out while a call changes it (a call that fails leaves
// none: the next one syncs afresh).
function viewOf(conversation) {
  const v = state.views.get(conversation) ?? null;
  state.views.delete(conversation);
  return v;
}

function keepView(conversation, v) {
  state.views.delete(conversation);
  state.views.set(conversation, v);
  while (state.views.size > VIEWS_KEPT) state.views.delete(state.views.keys().next().value);
}

// A message's hash, remembered per object: 64 bits (two 32-bit FNV-1a lanes) of its JSON as
// sent, as 16 hex digits. ctxhost never computes one: it keeps the ones it is given and
// compares.
const messageHashes = new WeakMap();

function textHash(s) {
  let a = 0x811c9dc5;
  let b = 0x050c5d1f ^ s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
    b ^= b >>> 13;
  }
  return (a >>> 0).toString(16).padStart(8, "0") + (b >>> 0).toString(16).padStart(8, "0");
}

function messageHash(m, texts) {
  const cacheable = m !== null && typeof m === "object";
  if (cacheable && !texts) {
    const h = messageHashes.get(m);
    if (h) return h;
  }
  const text = encode(m) ?? "null";
  if (texts) texts.push(text);
  const h = textHash(text);
  if (cacheable) messageHashes.set(m, h);
  return h;
}

// How many of `msgs` are the messages the view holds at the same places: the same objects,
// else (from the first other object on) the same hashes. Every place is looked at (an edit
// in place anywhere in OpenClaw's array is found), by identity, a pointer compare each. An
// equal copy takes the old object's place in the view, so the next call finds it by
// identity again (not by a hash per place from there on) and `assemble` answers with the
// object OpenClaw holds now.
function agreeing(v, msgs) {
  const n = Math.min(v.count, msgs.length);
  const objs = v.objs;
  let i = 0;
  while (i < n && msgs[i] === objs[i]) i++;
  while (i < n && (msgs[i] === objs[i] || messageHash(msgs[i]) === v.mh[i])) {
    objs[i] = msgs[i];
    i++;
  }
  return i;
}

// The hashes of `msgs` (the messages from place `from` on), chained on the view's first
// `from`, and (`sending`) their JSON texts.
function hashesFrom(v, msgs, from, sending = true) {
  const mh = [];
  const ph = [];
  const texts = sending ? [] : null;
  let prev = v.hashAt(from);
  for (const m of msgs) {
    const h = messageHash(m, texts);
    mh.push(h);
    prev = textHash(prev + h);
    ph.push(prev);
  }
  return { mh, ph, texts };
}

// The view holding `msgs` (hashed) from place `base` on (changed in place).
function extend(v, base, msgs, hashed) {
  v.objs.length = base;
  v.mh.length = base;
  v.ph.length = base;
  for (let i = 0; i < msgs.length; i++) {
    v.objs.push(msgs[i]);
    v.mh.push(hashed.mh[i]);
    v.ph.push(hashed.ph[i]);
  }
  return v;
}

// Whether `msgs` starts with the window last returned (an echo).
function echoes(v, msgs) {
  const w = v.window;
  if (!w || w.length === 0 || msgs.length < w.length) return false;
  for (let i = 0; i < w.length; i++) {
    if (msgs[i] !== w[i] && messageHash(msgs[i]) !== messageHash(w[i])) return false;
  }
  return true;
}

async function viewCall(child, method, params, signal, timeout) {
  const conversation = conversationOf(params);
  const known = viewOf(conversation);
  let v = known ?? new View();
  const { messages: _m, message: _one, ...rest } = params;
  const ingesting = method === "ingest" || method === "ingestBatch";
  // The messages from place `base` on, as the client's view has them after this call.
  let base;
  let added;
  let tail = null;
  if (ingesting) {
    if (!known) {
      // Nothing known of this conversation: as OpenClaw passed it (ctxhost then holds the
      // messages; the next view call hashes OpenClaw's array and syncs from there).
      return request(child, method, params, signal, timeout);
    }
    base = v.count;
    added = method === "ingest" ? [params.message] : Array.isArray(params.messages) ? params.messages : [];
  } else {
    const msgs = Array.isArray(params.messages) ? params.messages : [];
    base = agreeing(v, msgs);
    if (known && base < v.count && echoes(v, msgs)) {
      // The window echoed back, the tool loop's messages after it: ctxhost's view is unchanged.
      tail = msgs.slice(v.window.length);
      base = v.count;
      added = [];
    } else if (!known) {
      // Nothing known: assume ctxhost holds all of it; if not, it says what it holds.
      base = msgs.length;
      v = extend(v, 0, msgs, hashesFrom(v, msgs, 0, false));
      added = [];
    } else {
      added = msgs.slice(base);
    }
  }
  let hashed = hashesFrom(v, added, base);
  // A base this plugin believes in may still be refused (ctxhost restarted without a save,
  // another process wrote): then once more from what ctxhost says it holds, or from nothing.
  for (let attempt = 0; ; attempt++) {
    const view = { base, baseHash: base > 0 ? v.hashAt(base) : undefined, append: APPEND_MARK, hashes: hashed.ph };
    const wire = { ...rest, view };
    if (tail && method === "assemble") wire.tail = tail;
    try {
      const r = await request(child, method, wire, signal, timeout, hashed.texts);
      const answer = settle(conversation, extend(v, base, added, hashed), r?.view);
      if (method === "assemble") return rebuild(answer, r, tail ?? []);
      if (method === "ingest") return { ingested: r?.ingested ?? false };
      if (method === "ingestBatch") return { ingestedCount: r?.ingestedCount ?? 0 };
      return undefined;
    } catch (e) {
      if (e.code !== VIEW_OUT_OF_SYNC || attempt > 0) throw e;
      // The whole view this call means, hashed, so a place ctxhost names can be checked.
      const msgs = v.objs.slice(0, base).concat(added);
      const full = extend(new View(), 0, msgs, hashesFrom(new View(), msgs, 0, false));
      const held = e.data?.count ?? 0;
      if (held > 0 && held <= full.count && e.data?.hash === full.ph[held - 1]) {
        base = held;
      } else if (ingesting) {
        // OpenClaw gave this call only its new messages: sent as it passed them.
        return request(child, method, params, signal, timeout);
      } else {
        base = 0;
      }
      v = full;
      added = msgs.slice(base);
      hashed = { mh: full.mh.slice(base), ph: full.ph.slice(base), texts: added.map((m) => encode(m) ?? "null") };
      tail = null;
    }
  }
}

// Keeps the view a call left; ctxhost's answer says what it holds, and a view that disagrees
// with the plugin's is kept only as far as both agree (the next call syncs the rest).
function settle(conversation, after, held) {
  if (held && (held.count !== after.count || (held.hash ?? "") !== after.hashAt(after.count))) {
    const n = held.count <= after.count && (held.hash ?? "") === after.hashAt(held.count) ? held.count : 0;
    after.objs.length = n;
    after.mh.length = n;
    after.ph.length = n;
  }
  keepView(conversation, after);
  return after;
}

// `assemble`'s answer with its window rebuilt from OpenClaw's own objects: a number is a
// place in the view (then the tail), `[from, to)` a run of places, an object a message
// ctxhost made.
function rebuild(v, r, tail) {
  const at = (i) => (i < v.count ? v.objs[i] : tail[i - v.count]);
  const messages = [];
  for (const item of r?.window ?? []) {
    if (typeof item === "number") messages.push(at(item));
    else if (Array.isArray(item)) for (let i = item[0]; i < item[1]; i++) messages.push(at(i));
    else messages.push(item);
  }
  v.window = messages;
  const out = { messages, estimatedTokens: r?.estimatedTokens ?? 0 };
  if (r?.systemPromptAddition !== undefined) out.systemPromptAddition = r.systemPromptAddition;
  return out;
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
