// A stand-in for `ctxhost serve --stdio` that misbehaves on purpose, for the bridge's own
// tests: it answers `initialize` and `info`, notes every lifecycle call it receives in
// $FAKE_SERVE_LOG (one method name a line), and then, as $FAKE_SERVE_MODE says, never answers
// it (`hang`) or dies before answering (`die`).

import fs from "node:fs";
import readline from "node:readline";

const mode = process.env.FAKE_SERVE_MODE ?? "hang";
const logFile = process.env.FAKE_SERVE_LOG;
const info = { id: "fake", name: "Fake", version: "0", ownsCompaction: true };

for await (const line of readline.createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const frame = JSON.parse(line);
  if (frame.id === undefined) continue;
  const reply = (result) => process.stdout.write(JSON.stringify({ jsonrpc: "2.0", id: frame.id, result }) + "\n");
  if (frame.method === "initialize") reply({ protocolVersion: "1", ctxhostVersion: "0", info });
  else if (frame.method === "info") reply(info);
  else {
    if (logFile) fs.appendFileSync(logFile, `${frame.method}\n`);
    if (mode === "die") process.exit(9);
  }
}
