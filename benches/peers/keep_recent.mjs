// The "keep-recent fit" of shared/data/workloads in plain JavaScript (Node): a peer
// `benches/workloads.rs` measures ctxhost against, in the same run.
//
//     node keep_recent.mjs WORKLOAD.json BUDGET SAMPLES SAMPLE_MS
//
// The policy, as keep_recent.py states it: tokens = ceil(chars / 4) per message (the workloads
// hold no character outside the BMP, so `.length` counts code points); walk back from the newest
// message in units (a toolResult joins the unit of the assistant message whose tool call it
// answers); keep each unit that still fits, stop at the first that does not.
//
// Prints one JSON line: what it kept and SAMPLES per-call times in seconds, each the mean of as
// many calls as fill SAMPLE_MS.

import { readFileSync } from "node:fs";

const tokens = (text) => Math.ceil(text.length / 4);

function keepRecent(msgs, budget) {
  let used = 0;
  let first = msgs.length;
  const pending = new Set();
  while (first > 0) {
    let j = first;
    let unit = 0;
    pending.clear();
    for (;;) {
      j -= 1;
      const m = msgs[j];
      unit += tokens(m.text);
      if (m.role === "toolResult") {
        pending.add(m.tool_call_id);
      } else if (m.role === "assistant" && pending.size > 0 && m.tool_calls) {
        for (const c of m.tool_calls) pending.delete(c.id);
      }
      if (pending.size === 0 || j === 0) break;
    }
    if (used + unit > budget) break;
    used += unit;
    first = j;
  }
  return [first, used];
}

function sample(fn, samples, sampleS) {
  const now = () => Number(process.hrtime.bigint()) / 1e9;
  let n = 1;
  let dt = 0;
  for (;;) {
    const t0 = now();
    for (let i = 0; i < n; i++) fn();
    dt = now() - t0;
    if (dt >= sampleS / 4 || n >= 1 << 24) break;
    n *= 2;
  }
  n = Math.max(1, Math.floor((n * sampleS) / Math.max(dt, 1e-9)));
  const out = [];
  let sink = 0;
  for (let s = 0; s < samples; s++) {
    const t0 = now();
    for (let i = 0; i < n; i++) sink += fn()[0];
    out.push((now() - t0) / n);
  }
  if (sink === -1) console.error("unreachable");
  return out;
}

const [path, budget, samples, sampleMs] = process.argv.slice(2);
const msgs = JSON.parse(readFileSync(path, "utf8"));
const B = Number(budget);
const [first, used] = keepRecent(msgs, B);
console.log(
  JSON.stringify({
    impl: "node",
    kept: msgs.length - first,
    first,
    tokens: used,
    samples: sample(() => keepRecent(msgs, B), Number(samples), Number(sampleMs) / 1000),
  }),
);
