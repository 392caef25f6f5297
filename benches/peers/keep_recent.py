#!/usr/bin/env python3
"""The "keep-recent fit" of shared/data/workloads in plain Python, and LangChain's
`trim_messages` on the same messages when langchain-core is installed: the peers
`benches/workloads.rs` measures ctxhost against, in the same run.

    python3 keep_recent.py WORKLOAD.json BUDGET SAMPLES SAMPLE_MS

The policy (README of shared/data/workloads): tokens = ceil(chars / 4) per message, chars in
code points; walk back from the newest message in units (a toolResult joins the unit of the
assistant message whose tool call it answers, so a unit grows backwards until every pending call
id has met its call); keep each unit that still fits the budget, stop at the first that does
not. The result is the newest contiguous suffix.

Prints one JSON line per implementation: its name, what it kept (messages, first index, tokens)
and SAMPLES per-call times in seconds, each the mean of as many calls as fill SAMPLE_MS. A peer
that is not installed prints {"impl": ..., "missing": "why"}.
"""
import json
import sys
import time


def tokens(text):
    return (len(text) + 3) // 4


def keep_recent(msgs, budget):
    """The policy over flat messages; returns (first index kept, tokens kept)."""
    used = 0
    first = len(msgs)
    while first > 0:
        j = first
        unit = 0
        pending = set()
        while True:
            j -= 1
            m = msgs[j]
            unit += tokens(m["text"])
            role = m["role"]
            if role == "toolResult":
                pending.add(m["tool_call_id"])
            elif role == "assistant" and pending:
                for c in m.get("tool_calls", ()):
                    pending.discard(c["id"])
            if not pending or j == 0:
                break
        if used + unit > budget:
            break
        used += unit
        first = j
    return first, used


def sample(fn, samples, sample_s):
    """Per-call times: each sample runs `fn` as often as fills `sample_s` (at least once)."""
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= sample_s / 4 or n >= 1 << 24:
            break
        n *= 2
    n = max(1, int(n * sample_s / max(dt, 1e-9)))
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n)
    return out


def langchain(msgs, budget, samples, sample_s):
    try:
        from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
        from langchain_core.messages import trim_messages
    except ImportError as e:
        return {"impl": "langchain", "missing": f"langchain-core is not installed ({e})"}
    lc = []
    for m in msgs:
        if m["role"] == "user":
            lc.append(HumanMessage(content=m["text"]))
        elif m["role"] == "assistant":
            calls = [{"id": c["id"], "name": c["name"], "args": {}} for c in m.get("tool_calls", ())]
            lc.append(AIMessage(content=m["text"], tool_calls=calls))
        else:
            lc.append(ToolMessage(content=m["text"], tool_call_id=m["tool_call_id"]))

    def count(message: BaseMessage) -> int:
        return tokens(message.content)

    def run():
        return trim_messages(lc, max_tokens=budget, token_counter=count, strategy="last")

    kept = run()
    return {
        "impl": "langchain",
        "kept": len(kept),
        "first": len(msgs) - len(kept),
        "tokens": sum(count(m) for m in kept),
        "samples": sample(run, samples, sample_s),
    }


def main():
    path, budget, samples, sample_ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    with open(path, encoding="utf-8") as f:
        msgs = json.load(f)
    first, used = keep_recent(msgs, budget)
    plain = {
        "impl": "python",
        "kept": len(msgs) - first,
        "first": first,
        "tokens": used,
        "samples": sample(lambda: keep_recent(msgs, budget), samples, sample_ms / 1000),
    }
    print(json.dumps(plain), flush=True)
    print(json.dumps(langchain(msgs, budget, samples, sample_ms / 1000)), flush=True)


if __name__ == "__main__":
    main()
