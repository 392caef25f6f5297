#!/usr/bin/env python3
"""Generate examples/demo-session.jsonl: the demo transcript `ctxhost replay` plays.

A fictional day of work between a developer and a coding agent on *tidewater*,
a made-up Rust log-rotation and shipping daemon. Everything here is written for
ctxhost; nothing is taken from a recorded session.

The generator keeps a small virtual checkout of the tidewater repository, so
`read`, `edit`, `grep`, `ls`, `git diff` and `git commit` outputs stay consistent
with each other as the session edits files. It is deterministic: a seeded RNG,
a fixed start time, no clock and no environment input.

    python3 examples/demo/make_demo.py          # writes ../demo-session.jsonl, prints stats
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import json
import random
import re
import struct
import sys
import uuid
import zlib
from datetime import datetime, timedelta, timezone
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "demo-session.jsonl"
RNG = random.Random(20261102)
START = datetime(2026, 11, 2, 9, 14, 3, tzinfo=timezone.utc)
CWD = "/home/dev/src/tidewater"
SYSTEM_PROMPT_TOKENS = 5180


def det_uuid(tag: str) -> str:
    """A stable v4-shaped UUID derived from a tag."""
    h = hashlib.sha256(tag.encode()).digest()[:16]
    return str(uuid.UUID(bytes=h, version=4))


def sha1(s: str) -> str:
    return hashlib.sha1(s.encode()).hexdigest()


# ---------------------------------------------------------------------------
# Session writer
# ---------------------------------------------------------------------------


class Session:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.n = 0
        self.t = START
        self.ncall = 0
        self.user_turns = 0
        self.ctx_chars = 0
        self.header = {
            "type": "session",
            "version": 3,
            "id": det_uuid("tidewater-demo-session"),
            "timestamp": "2026-11-02T09:14:03.000Z",
            "cwd": CWD,
        }

    # time ---------------------------------------------------------------
    def wait(self, lo: float, hi: float | None = None) -> None:
        hi = lo if hi is None else hi
        self.t += timedelta(milliseconds=RNG.randint(int(lo * 1000), int(hi * 1000)))

    def _emit(self, message: dict) -> str:
        self.n += 1
        mid = f"{self.n:08x}"
        parent = f"{self.n - 1:08x}" if self.n > 1 else None
        message["timestamp"] = int(self.t.timestamp() * 1000)
        entry = {
            "type": "message",
            "id": mid,
            "parentId": parent,
            "timestamp": self.t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.t.microsecond // 1000:03d}Z",
            "message": message,
        }
        line = json.dumps(entry, ensure_ascii=False, separators=(",", ":"))
        self.lines.append(line)
        self.ctx_chars += len(json.dumps(message.get("content", ""), ensure_ascii=False))
        return mid

    # messages -----------------------------------------------------------
    def user(self, content, gap: tuple[float, float] = (70, 420), at: str | None = None) -> None:
        """A person's turn. `content` is a string or a list of blocks; `at` pins the wall clock ("HH:MM")."""
        if at:
            hh, mm = map(int, at.split(":"))
            target = self.t.replace(hour=hh, minute=mm, second=RNG.randint(0, 59), microsecond=RNG.randint(0, 999) * 1000)
            assert target > self.t, (at, self.t)
            self.t = target
        else:
            self.wait(*gap)
        self.user_turns += 1
        self._emit({"role": "user", "content": content})
        if content == "/compact":
            # What survives a compaction: the summary stands in for the history.
            self.ctx_chars = 9400

    def ai(self, text: str | None = None, calls=(), think: str | None = None, stop: str | None = None) -> None:
        """An assistant message; `calls` are tool invocations built by `Tools`.

        Each call is (name, arguments, result_text, is_error); results are written
        right after the message, in order. A call with result None gets no result
        (only for the aborted turn).
        """
        self.wait(2.5, 9) if calls else self.wait(6, 28)
        content: list[dict] = []
        if think:
            content.append({"type": "thinking", "thinking": think})
        if text:
            content.append({"type": "text", "text": text})
        ids = []
        for name, args, _res, _err in calls:
            self.ncall += 1
            cid = "call_" + sha1(f"call-{self.ncall}")[:24]
            ids.append(cid)
            content.append({"type": "toolCall", "id": cid, "name": name, "arguments": args})
        out_tokens = max(12, len(json.dumps(content, ensure_ascii=False)) // 4 + RNG.randint(0, 40))
        in_tokens = SYSTEM_PROMPT_TOKENS + self.ctx_chars // 4
        if stop is None:
            stop = "toolUse" if calls else "stop"
        self._emit(
            {
                "role": "assistant",
                "content": content,
                "model": "demo-model-1",
                "provider": "demo",
                "stopReason": stop,
                "usage": {"input": in_tokens, "output": out_tokens},
            }
        )
        for cid, (name, _args, res, err) in zip(ids, calls):
            if res is None:
                continue
            # Tools take time; cargo and git a little more.
            slow = name == "bash" and ("cargo" in _args.get("command", ""))
            self.wait(4, 38) if slow else self.wait(0.05, 1.4)
            self._emit(
                {
                    "role": "toolResult",
                    "toolCallId": cid,
                    "toolName": name,
                    "content": [{"type": "text", "text": res}],
                    "isError": bool(err),
                }
            )


# ---------------------------------------------------------------------------
# Virtual checkout + tools
# ---------------------------------------------------------------------------


class Repo:
    def __init__(self, files: dict[str, str | None], branch: str) -> None:
        self.fs = dict(files)
        self.head = dict(files)
        self.base = dict(files)
        self.branch = branch
        self.commits: list[tuple[str, str]] = []  # (full hash, subject)
        self.head_hash = "b71e09c4d2a85f3e6c1907ab44d3e2f8a5c06d19"

    # views -----------------------------------------------------------------
    def changed(self) -> list[tuple[str, str]]:
        out = []
        for p in sorted(set(self.fs) | set(self.head)):
            if p.startswith("/"):
                continue
            a, b = self.head.get(p, "\0missing"), self.fs.get(p, "\0missing")
            if a == b:
                continue
            if a == "\0missing":
                out.append(("??", p))
            elif b == "\0missing":
                out.append((" D", p))
            else:
                out.append((" M", p))
        return out

    def status_short(self) -> str:
        rows = self.changed()
        return "\n".join(f"{c} {p}" for c, p in rows) if rows else ""

    def status(self) -> str:
        rows = self.changed()
        s = [f"On branch {self.branch}"]
        mod = [p for c, p in rows if c == " M"]
        new = [p for c, p in rows if c == "??"]
        if mod:
            s += ["Changes not staged for commit:", '  (use "git add <file>..." to update what will be committed)',
                  '  (use "git restore <file>..." to discard changes in working directory)']
            s += [f"\tmodified:   {p}" for p in mod]
            s.append("")
        if new:
            s += ["Untracked files:", '  (use "git add <file>..." to include in what will be committed)']
            s += [f"\t{p}" for p in new]
            s.append("")
        if not rows:
            s.append("nothing to commit, working tree clean")
        else:
            s.append('no changes added to commit (use "git add" and/or "git commit -a")')
        return "\n".join(s)

    def _file_diff(self, p: str) -> tuple[str, int, int]:
        a = self.head.get(p)
        b = self.fs.get(p)
        al = [] if a is None else a.splitlines(keepends=True)
        bl = [] if b is None else b.splitlines(keepends=True)
        body = list(difflib.unified_diff(al, bl, "a/" + p if a is not None else "/dev/null", "b/" + p, n=3))
        ins = sum(1 for l in body if l.startswith("+") and not l.startswith("+++"))
        dels = sum(1 for l in body if l.startswith("-") and not l.startswith("---"))
        hdr = [f"diff --git a/{p} b/{p}\n"]
        if a is None:
            hdr += ["new file mode 100644\n", f"index 0000000..{sha1(b)[:7]}\n"]
        else:
            hdr += [f"index {sha1(a)[:7]}..{sha1(b or '')[:7]} 100644\n"]
        body = [l if l.endswith("\n") else l + "\n" for l in body]
        body = [re.sub(r"^(---|\+\+\+) (.*?)\s*$", r"\1 \2", l.rstrip("\n")) + "\n" if l.startswith(("---", "+++")) else l for l in body]
        return "".join(hdr + body), ins, dels

    def diff(self, paths: list[str] | None = None) -> str:
        ps = [p for c, p in self.changed() if c == " M" and (paths is None or p in paths)]
        return "".join(self._file_diff(p)[0] for p in ps).rstrip("\n")

    def diff_stat(self, include_new: bool = False) -> str:
        rows = [(c, p) for c, p in self.changed() if c == " M" or (include_new and c == "??")]
        width = max((len(p) for _, p in rows), default=0)
        tot_i = tot_d = 0
        out = []
        for _, p in rows:
            _, i, d = self._file_diff(p)
            tot_i += i
            tot_d += d
            bar = "+" * min(i, 40) + "-" * min(d, 40)
            out.append(f" {p.ljust(width)} | {i + d:>3} {bar}")
        out.append(f" {len(rows)} file{'s' if len(rows) != 1 else ''} changed, {tot_i} insertions(+), {tot_d} deletions(-)")
        return "\n".join(out)

    def range_stat(self) -> str:
        """`git diff --stat main..` summary line: base snapshot vs HEAD."""
        paths = [p for p in sorted(set(self.base) | set(self.head))
                 if not p.startswith("/") and self.base.get(p) != self.head.get(p)]
        ins = dels = 0
        for p in paths:
            a = (self.base.get(p) or "").splitlines()
            b = (self.head.get(p) or "").splitlines()
            for l in difflib.unified_diff(a, b, n=0, lineterm=""):
                if l.startswith("+") and not l.startswith("+++"):
                    ins += 1
                elif l.startswith("-") and not l.startswith("---"):
                    dels += 1
        return f" {len(paths)} files changed, {ins} insertions(+), {dels} deletions(-)"

    def commit(self, subject: str, paths: list[str] | None = None) -> tuple[str, str]:
        rows = [(c, p) for c, p in self.changed() if paths is None or p in paths or any(p.startswith(x.rstrip("/") + "/") for x in paths)]
        tot_i = tot_d = 0
        created = []
        for c, p in rows:
            _, i, d = self._file_diff(p)
            tot_i += i
            tot_d += d
            if c == "??":
                created.append(p)
            if p in self.fs:
                self.head[p] = self.fs[p]
            else:
                self.head.pop(p, None)
        full = sha1(self.head_hash + subject + str(len(self.commits)))
        self.head_hash = full
        self.commits.append((full, subject))
        n = len(rows)
        out = [f"[{self.branch} {full[:7]}] {subject.splitlines()[0]}",
               f" {n} file{'s' if n != 1 else ''} changed, {tot_i} insertion{'s' if tot_i != 1 else ''}(+), {tot_d} deletion{'s' if tot_d != 1 else ''}(-)"]
        out += [f" create mode 100644 {p}" for p in created]
        return "\n".join(out), full

    def squash(self, fixup_subject: str, target_subject: str) -> None:
        """`rebase -i --autosquash`: fold one commit into an earlier one; later commits get new hashes."""
        subjects = [s for _, s in self.commits]
        it, fi = subjects.index(target_subject), subjects.index(fixup_subject)
        assert it < fi
        parent = self.commits[it - 1][0] if it else "b71e09c4d2a85f3e6c1907ab44d3e2f8a5c06d19"
        new = self.commits[:it]
        for i, (_h, s) in enumerate(self.commits[it:], it):
            if i == fi:
                continue
            parent = sha1(parent + s + "rebased")
            new.append((parent, s))
        self.commits = new
        self.head_hash = parent

    def restore(self, p: str) -> None:
        self.fs[p] = self.head[p]


def grep_context(text: str, needle: str, before: int, after: int) -> str:
    """`grep -n -B.. -A..` for the first match."""
    ls = text.splitlines()
    i = next(n for n, l in enumerate(ls) if needle in l)
    out = []
    for n in range(max(0, i - before), min(len(ls), i + after + 1)):
        out.append(f"{n + 1}{':' if n == i else '-'}{ls[n]}")
    return "\n".join(out)


class Tools:
    """Builds tool calls against the virtual checkout; each returns (name, args, result, is_error)."""

    def __init__(self, repo: Repo) -> None:
        self.r = repo

    def _abs(self, p: str) -> str:
        return p if p.startswith("/") else f"{CWD}/{p}"

    def read(self, path: str):
        content = self.r.fs.get(path)
        if content is None:
            return ("read", {"path": path}, f"ENOENT: no such file or directory, access '{self._abs(path)}'", True)
        return ("read", {"path": path}, content, False)

    def write(self, path: str, content: str):
        self.r.fs[path] = content
        return ("write", {"path": path, "content": content},
                f"Successfully wrote {len(content.encode())} bytes to {path}", False)

    def edit(self, path: str, old: str, new: str):
        cur = self.r.fs[path]
        count = cur.count(old)
        if count != 1:
            raise SystemExit(f"edit on {path}: oldText found {count} times:\n{old}")
        self.r.fs[path] = cur.replace(old, new)
        return ("edit", {"path": path, "oldText": old, "newText": new},
                f"Successfully replaced text in {path}.", False)

    def edit_fail(self, path: str, old: str, new: str):
        assert old not in self.r.fs[path], old
        return ("edit", {"path": path, "oldText": old, "newText": new},
                f"Could not find the exact text in {path}. The old text must match exactly including all whitespace and newlines.", True)

    def bash(self, command: str, output: str, error: bool = False, code: int = 1):
        if error:
            output = (output.rstrip("\n") + f"\n\nCommand exited with code {code}").lstrip("\n")
        return ("bash", {"command": command}, output if output else "(no output)", error)

    def ls(self, path: str):
        base = "" if path in (".", "") else path.rstrip("/") + "/"
        names = set()
        for p in self.r.fs:
            if p.startswith("/") or not p.startswith(base):
                continue
            rest = p[len(base):]
            names.add(rest.split("/")[0] + ("/" if "/" in rest else ""))
        if path in (".", ""):
            names |= {".github/", ".gitignore", "target/"}
        return ("ls", {"path": path}, "\n".join(sorted(names, key=lambda s: (s.lower().lstrip("."), s))), False)

    def grep(self, pattern: str, path: str = ".", ignore_case: bool = False):
        rx = re.compile(pattern, re.I if ignore_case else 0)
        hits = []
        for p in sorted(self.r.fs):
            if self.r.fs[p] is None or p.startswith("/") and not p.startswith(path):
                continue
            if not p.startswith("/") and path not in (".", "") and not (p == path or p.startswith(path.rstrip("/") + "/")):
                continue
            if p == "Cargo.lock" and path != "Cargo.lock":
                continue
            for i, line in enumerate(self.r.fs[p].splitlines(), 1):
                if rx.search(line):
                    hits.append(f"{p}:{i}: {line}")
        args = {"pattern": pattern, "path": path}
        if ignore_case:
            args["ignoreCase"] = True
        return ("grep", args, "\n".join(hits) if hits else "No matches found", False)

    # git helpers --------------------------------------------------------------
    def git_status(self):
        return self.bash("git status", self.r.status())

    def git_diff(self, paths=None, stat=False):
        if stat:
            return self.bash("git diff --stat", self.r.diff_stat())
        cmd = "git diff" + ("" if not paths else " -- " + " ".join(paths))
        return self.bash(cmd, self.r.diff(paths))

    def git_commit(self, subject: str, paths: list[str], body: str | None = None):
        msg_args = f"-m {json.dumps(subject)}" + (f" -m {json.dumps(body)}" if body else "")
        cmd = f"git add {' '.join(paths)} && git commit {msg_args}"
        out, _full = self.r.commit(subject, paths)
        return self.bash(cmd, out)


# ---------------------------------------------------------------------------
# cargo test output
# ---------------------------------------------------------------------------

DEPS_HASH = {}


def deps_hash(name: str) -> str:
    if name not in DEPS_HASH:
        DEPS_HASH[name] = sha1("deps-" + name)[:16]
    return DEPS_HASH[name]


class Cargo:
    def __init__(self) -> None:
        self.bins: dict[str, list[str]] = {}
        self.doc: list[str] = []

    def add(self, binary: str, *names: str) -> None:
        self.bins.setdefault(binary, [])
        for n in names:
            if n not in self.bins[binary]:
                self.bins[binary].append(n)

    def test(self, filt: str | None = None, fail: dict[str, str] | None = None, compile_secs: float | None = None,
             compiling: tuple[str, ...] = ("tidewater v0.9.3 (/home/dev/src/tidewater)",), doc: bool = True,
             only: str | None = None) -> tuple[str, bool]:
        fail = fail or {}
        secs = compile_secs if compile_secs is not None else RNG.uniform(3.2, 19.0)
        out = [f"   Compiling {c}" for c in compiling]
        out.append(f"    Finished `test` profile [unoptimized + debuginfo] target(s) in {secs:.2f}s")
        failed_any = False
        order = ["lib", "main"] + sorted(b for b in self.bins if b not in ("lib", "main"))
        for b in order:
            if only and b != only:
                continue
            names = sorted(self.bins.get(b, []))
            if b == "lib":
                out.append(f"     Running unittests src/lib.rs (target/debug/deps/tidewater-{deps_hash('lib')})")
            elif b == "main":
                out.append(f"     Running unittests src/main.rs (target/debug/deps/tidewater-{deps_hash('main')})")
            else:
                stem = b.split("/")[-1].removesuffix(".rs")
                out.append(f"     Running {b} (target/debug/deps/{stem}-{deps_hash(b)})")
            run = [n for n in names if not filt or filt in n]
            out.append("")
            out.append(f"running {len(run)} test{'s' if len(run) != 1 else ''}")
            bad = []
            for n in run:
                ok = n not in fail
                out.append(f"test {n} ... {'ok' if ok else 'FAILED'}")
                if not ok:
                    bad.append(n)
            out.append("")
            if bad:
                out.append("failures:")
                out.append("")
                for n in bad:
                    out.append(f"---- {n} stdout ----")
                    out.append("")
                    out.append(fail[n].rstrip("\n"))
                    out.append("")
                out.append("")
                out.append("failures:")
                out += [f"    {n}" for n in bad]
                out.append("")
            dur = RNG.uniform(0.0, 0.09) if len(run) < 3 else RNG.uniform(0.05, 1.2)
            res = "FAILED" if bad else "ok"
            out.append(f"test result: {res}. {len(run) - len(bad)} passed; {len(bad)} failed; 0 ignored; 0 measured; "
                       f"{len(names) - len(run)} filtered out; finished in {dur:.2f}s")
            out.append("")
            if bad:
                failed_any = True
                flag = "--lib" if b == "lib" else f"--test {b.split('/')[-1].removesuffix('.rs')}"
                out.append(f"error: test failed, to rerun pass `{flag}`")
                break
        if not failed_any and doc and not only:
            run = [n for n in self.doc if not filt or filt in n]
            out.append("   Doc-tests tidewater")
            out.append("")
            out.append(f"running {len(run)} test{'s' if len(run) != 1 else ''}")
            out += [f"test {n} ... ok" for n in run]
            out.append("")
            out.append(f"test result: ok. {len(run)} passed; 0 failed; 0 ignored; 0 measured; {len(self.doc) - len(run)} "
                       f"filtered out; finished in {RNG.uniform(0.4, 2.5):.2f}s")
            out.append("")
        return "\n".join(out).rstrip("\n") + "\n", failed_any

    def count(self) -> int:
        return sum(len(v) for v in self.bins.values()) + len(self.doc)


def tiny_png() -> str:
    """A 48x20 'dashboard' thumbnail: dark panel, a flat line with one bump."""
    w, h = 48, 20
    rows = []
    for y in range(h):
        row = bytearray([0])
        for x in range(w):
            line_y = 14 - (5 if 30 <= x <= 32 else 0) - (1 if x in (29, 33) else 0)
            if y == line_y:
                row += bytes((115, 191, 105))
            elif y in (0, h - 1) or x in (0, w - 1):
                row += bytes((54, 58, 66))
            else:
                row += bytes((24, 27, 31))
        rows.append(bytes(row))
    raw = zlib.compress(b"".join(rows), 9)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + chunk(b"IDAT", raw) + chunk(b"IEND", b"")
    return base64.b64encode(png).decode()


# ---------------------------------------------------------------------------
# The tidewater checkout, as it is at 09:14 on 2026-11-02
# ---------------------------------------------------------------------------

CARGO_TOML = r'''[package]
name = "tidewater"
version = "0.9.3"
edition = "2021"
rust-version = "1.75"
description = "Rotate local log files and ship them to a collector"
license = "MIT OR Apache-2.0"
repository = "https://github.com/tidewater-rs/tidewater"
homepage = "https://docs.tidewater.dev/"
readme = "README.md"
keywords = ["logs", "logrotate", "daemon", "shipping"]
categories = ["command-line-utilities"]
exclude = ["/.github", "/benches/data"]

[lib]
path = "src/lib.rs"

[[bin]]
name = "tidewater"
path = "src/main.rs"

[dependencies]
anyhow = "1.0.79"
clap = { version = "4.4", features = ["derive", "env"] }
flate2 = "1.0.28"
humantime-serde = "1.1"
notify = { version = "6.1", default-features = false }
rusqlite = { version = "0.30", features = ["bundled"] }
serde = { version = "1.0", features = ["derive"] }
serde_json = "1.0"
thiserror = "1.0"
tokio = { version = "1.35", features = ["rt-multi-thread", "macros", "net", "time", "fs", "io-util", "signal", "sync"] }
tokio-rustls = "0.25"
rustls-pemfile = "2.0"
toml = "0.8"
tracing = "0.1"
tracing-subscriber = { version = "0.3", features = ["env-filter", "json"] }
uuid = { version = "1.6", features = ["v4"] }
webpki-roots = "0.26"

[dev-dependencies]
criterion = { version = "0.5", default-features = false, features = ["cargo_bench_support"] }
tempfile = "3.9"

[features]
default = []
# Tests that need the docker compose environment in tests/compose/.
integration = []

[[bench]]
name = "batch"
harness = false

[profile.release]
lto = "thin"
codegen-units = 4
'''

LIB_RS = r'''//! tidewater: rotate local log files and ship them to a collector.
//!
//! The daemon is two tasks joined by a bounded channel: the rotator
//! ([`rotate::run`]) tails every configured file, rotates it when its policy
//! says so, and hands new bytes to the shipper ([`ship::run`]) as chunks. The
//! shipper batches, compresses and sends them to one or more sinks. Progress
//! (per-file offsets) lives in a small SQLite database, see [`state`].

pub mod cli;
pub mod config;
pub mod rotate;
pub mod ship;
pub mod size;
pub mod state;

pub use config::Config;
'''

MAIN_RS = r'''use std::process::ExitCode;

use clap::Parser;
use tidewater::cli::{Cli, Command};
use tidewater::config::Config;
use tracing::{error, info};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    tidewater::cli::init_tracing(cli.log_format, cli.verbose);

    // `validate` must work on configs the daemon would refuse, so it runs
    // before the real loader.
    if let Some(Command::Validate) = cli.command {
        return match tidewater::cli::validate(&cli.config) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("invalid config: {e:#}");
                ExitCode::from(2)
            }
        };
    }

    let cfg = match Config::load(&cli.config) {
        Ok(cfg) => cfg,
        Err(e) => {
            error!(path = %cli.config.display(), "failed to load config: {e:#}");
            return ExitCode::from(2);
        }
    };

    let res = match cli.command.unwrap_or(Command::Run) {
        Command::Run => run(cfg).await,
        Command::Validate => unreachable!("handled above"),
        Command::RotateNow { path } => tidewater::rotate::rotate_now(&cfg, &path).await,
    };

    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cfg: Config) -> anyhow::Result<()> {
    let state = tidewater::state::State::open(&cfg.state_path)?;
    let (tx, rx) = tokio::sync::mpsc::channel(cfg.ship.queue_depth);
    info!(
        files = cfg.files.len(),
        sinks = cfg.ship.sinks.len(),
        version = env!("CARGO_PKG_VERSION"),
        "tidewater starting"
    );

    let rotator = tokio::spawn(tidewater::rotate::run(cfg.clone(), state.clone(), tx));
    let shipper = tokio::spawn(tidewater::ship::run(cfg.ship.clone(), state.clone(), rx));

    tokio::select! {
        r = rotator => r??,
        r = shipper => r??,
        _ = tokio::signal::ctrl_c() => info!("shutdown requested"),
    }
    state.flush()?;
    Ok(())
}
'''

CLI_RS = r'''//! Command line: flags, subcommands and the `validate` check.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Parser, Subcommand, ValueEnum};
use tracing_subscriber::EnvFilter;

/// Rotate local log files and ship them to a collector.
#[derive(Debug, Parser)]
#[command(name = "tidewater", version, about)]
pub struct Cli {
    /// Path to the config file.
    #[arg(short, long, env = "TIDEWATER_CONFIG", default_value = "/etc/tidewater/tidewater.toml")]
    pub config: PathBuf,

    /// Log output format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// More output (-v, -vv).
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon (the default).
    Run,
    /// Check a config file and exit.
    Validate,
    /// Rotate one file immediately, whatever its policy says.
    RotateNow {
        /// The file to rotate; it must be listed in the config.
        path: PathBuf,
    },
}

pub fn init_tracing(format: LogFormat, verbose: u8) {
    let default = match verbose {
        0 => "tidewater=info",
        1 => "tidewater=debug",
        _ => "tidewater=trace",
    };
    let filter = EnvFilter::try_from_env("TIDEWATER_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// Checks a config file without starting anything.
///
/// This deliberately works on the raw TOML so that it can point at the exact
/// key that is wrong; `Config::load` only says "invalid value".
pub fn validate(path: &Path) -> anyhow::Result<()> {
    let raw = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let doc: toml::Value = raw.parse().context("parsing TOML")?;

    let files = match doc.get("files").and_then(|f| f.as_array()) {
        Some(a) if !a.is_empty() => a,
        _ => bail!("no [[files]] entries"),
    };
    if let Some(s) = doc.get("rotate").and_then(|r| r.get("max_size")).and_then(|v| v.as_str()) {
        parse_size_lenient(s).with_context(|| format!("rotate.max_size = {s:?}"))?;
    }
    for (i, f) in files.iter().enumerate() {
        if f.get("path").and_then(|p| p.as_str()).is_none() {
            bail!("files[{i}]: missing `path`");
        }
        if let Some(s) = f.get("max_size").and_then(|v| v.as_str()) {
            parse_size_lenient(s).with_context(|| format!("files[{i}].max_size = {s:?}"))?;
        }
    }
    match doc.get("ship").and_then(|s| s.get("sinks")).and_then(|s| s.as_array()) {
        Some(sinks) if !sinks.is_empty() => {
            for (i, s) in sinks.iter().enumerate() {
                let addr = s.get("address").and_then(|a| a.as_str()).unwrap_or_default();
                if !addr.contains(':') {
                    bail!("ship.sinks[{i}].address {addr:?}: expected host:port");
                }
            }
        }
        _ => bail!("no [[ship.sinks]] entries"),
    }
    println!("{}: ok ({} files)", path.display(), files.len());
    Ok(())
}

// Accepts "10MB", "10 MB", "10mb".
fn parse_size_lenient(s: &str) -> anyhow::Result<u64> {
    let s = s.trim().to_ascii_uppercase().replace(' ', "");
    let (num, mult) = if let Some(n) = s.strip_suffix("GB") {
        (n, 1 << 30)
    } else if let Some(n) = s.strip_suffix("MB") {
        (n, 1 << 20)
    } else if let Some(n) = s.strip_suffix("KB") {
        (n, 1 << 10)
    } else if let Some(n) = s.strip_suffix('B') {
        (n, 1)
    } else {
        (s.as_str(), 1)
    };
    Ok(num.parse::<u64>()? * mult)
}
'''

SIZE_RS = r'''//! Byte sizes in the config: `512`, `64KB`, `10MB`, `2GB`.
//!
//! Units are binary: `1KB` is 1024 bytes. The config docs say so; see
//! https://docs.tidewater.dev/0.8/config/#sizes

use std::fmt;

use serde::{de, Deserialize, Deserializer};

/// A number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SizeError {
    #[error("empty size")]
    Empty,
    #[error("invalid number in size {0:?}")]
    Number(String),
    #[error("unknown unit {0:?} (expected B, KB, MB or GB)")]
    Unit(String),
    #[error("size {0:?} does not fit in 64 bits")]
    Overflow(String),
}

/// Parses a size.
///
/// ```
/// use tidewater::size::{parse_size, ByteSize};
/// assert_eq!(parse_size("64KB"), Ok(ByteSize(65536)));
/// assert_eq!(parse_size("3"), Ok(ByteSize(3)));
/// ```
pub fn parse_size(s: &str) -> Result<ByteSize, SizeError> {
    if s.is_empty() {
        return Err(SizeError::Empty);
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| SizeError::Number(s.to_string()))?;
    let mult: u64 = match unit {
        "" | "B" => 1,
        "KB" | "K" => 1 << 10,
        "MB" | "M" => 1 << 20,
        "GB" | "G" => 1 << 30,
        other => return Err(SizeError::Unit(other.to_string())),
    };
    n.checked_mul(mult).map(ByteSize).ok_or_else(|| SizeError::Overflow(s.to_string()))
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> de::Visitor<'de> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a byte count or a string like \"10MB\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v).map(ByteSize).map_err(|_| E::custom("size must not be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                parse_size(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        const UNITS: [(&str, u64); 3] = [("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)];
        for (name, n) in UNITS {
            if self.0 >= n && self.0 % n == 0 {
                return write!(f, "{}{}", self.0 / n, name);
            }
        }
        write!(f, "{}B", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_numbers_are_bytes() {
        assert_eq!(parse_size("0"), Ok(ByteSize(0)));
        assert_eq!(parse_size("512"), Ok(ByteSize(512)));
    }

    #[test]
    fn binary_units() {
        assert_eq!(parse_size("1KB"), Ok(ByteSize(1024)));
        assert_eq!(parse_size("10MB"), Ok(ByteSize(10 * 1024 * 1024)));
        assert_eq!(parse_size("2G"), Ok(ByteSize(2 << 30)));
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(parse_size(""), Err(SizeError::Empty));
        assert_eq!(parse_size("MB"), Err(SizeError::Number("MB".into())));
        assert_eq!(parse_size("10XB"), Err(SizeError::Unit("XB".into())));
    }

    #[test]
    fn overflow() {
        assert!(matches!(parse_size("99999999999GB"), Err(SizeError::Overflow(_))));
    }

    #[test]
    fn display_roundtrip() {
        for s in ["512B", "64KB", "10MB", "3GB"] {
            assert_eq!(parse_size(s).unwrap().to_string(), s);
        }
    }
}
'''

CONFIG_RS = r'''//! The config file, `/etc/tidewater/tidewater.toml` by default.
//!
//! See `tidewater.example.toml` for a commented example and
//! https://docs.tidewater.dev/0.8/config/ for the reference.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Deserialize;

use crate::size::ByteSize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where offsets are kept between restarts.
    #[serde(default = "default_state_path")]
    pub state_path: PathBuf,
    /// Defaults for every `[[files]]` entry.
    #[serde(default)]
    pub rotate: RotateDefaults,
    pub files: Vec<FileConfig>,
    pub ship: ShipConfig,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RotateDefaults {
    #[serde(default = "default_max_size")]
    pub max_size: ByteSize,
    #[serde(default, with = "humantime_serde")]
    pub max_age: Option<Duration>,
    #[serde(default = "default_keep")]
    pub keep: u32,
    #[serde(default = "default_true")]
    pub compress: bool,
    /// How often files are checked against their policy.
    #[serde(default = "default_check_interval", with = "humantime_serde")]
    pub check_interval: Duration,
}

impl Default for RotateDefaults {
    fn default() -> Self {
        RotateDefaults {
            max_size: default_max_size(),
            max_age: None,
            keep: default_keep(),
            compress: true,
            check_interval: default_check_interval(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub path: PathBuf,
    pub max_size: Option<ByteSize>,
    #[serde(default, with = "humantime_serde")]
    pub max_age: Option<Duration>,
    pub keep: Option<u32>,
    pub compress: Option<bool>,
    /// Copy then truncate instead of rename; for writers that never reopen.
    #[serde(default)]
    pub copytruncate: bool,
    /// Extra fields attached to every record from this file.
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
    /// Name of the sink to ship to; the first sink if unset.
    pub sink: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShipConfig {
    #[serde(default = "default_queue_depth")]
    pub queue_depth: usize,
    #[serde(default = "default_batch_max_records")]
    pub batch_max_records: usize,
    #[serde(default = "default_batch_max_bytes")]
    pub batch_max_bytes: ByteSize,
    #[serde(default = "default_flush_interval", with = "humantime_serde")]
    pub flush_interval: Duration,
    #[serde(default = "default_connect_timeout", with = "humantime_serde")]
    pub connect_timeout: Duration,
    #[serde(default)]
    pub backoff: BackoffConfig,
    pub sinks: Vec<SinkConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    pub name: String,
    /// `host:port` of the collector.
    pub address: String,
    #[serde(default = "default_true")]
    pub tls: bool,
    /// SNI / certificate name; the host part of `address` if unset.
    pub server_name: Option<String>,
    /// Extra CA bundle (PEM); the webpki roots are always trusted.
    pub ca_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackoffConfig {
    #[serde(default = "default_backoff_base", with = "humantime_serde")]
    pub base: Duration,
    #[serde(default = "default_backoff_max", with = "humantime_serde")]
    pub max: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig { base: default_backoff_base(), max: default_backoff_max() }
    }
}

/// Per-file settings after applying `[rotate]` defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectivePolicy {
    pub max_size: Option<u64>,
    pub max_age: Option<Duration>,
    pub keep: u32,
    pub compress: bool,
    pub copytruncate: bool,
}

impl Config {
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let raw = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let cfg: Config = toml::from_str(&raw).with_context(|| format!("parsing {}", path.display()))?;
        cfg.check()?;
        Ok(cfg)
    }

    fn check(&self) -> anyhow::Result<()> {
        if self.files.is_empty() {
            bail!("no [[files]] configured");
        }
        if self.ship.sinks.is_empty() {
            bail!("no [[ship.sinks]] configured");
        }
        for f in &self.files {
            if let Some(name) = &f.sink {
                if !self.ship.sinks.iter().any(|s| &s.name == name) {
                    bail!("{}: unknown sink {name:?}", f.path.display());
                }
            }
        }
        if self.ship.backoff.base > self.ship.backoff.max {
            bail!("ship.backoff.base must not exceed ship.backoff.max");
        }
        Ok(())
    }

    pub fn effective(&self, f: &FileConfig) -> EffectivePolicy {
        let d = &self.rotate;
        EffectivePolicy {
            max_size: Some(f.max_size.unwrap_or(d.max_size).0).filter(|&n| n > 0),
            max_age: f.max_age.or(d.max_age),
            keep: f.keep.unwrap_or(d.keep),
            compress: f.compress.unwrap_or(d.compress),
            copytruncate: f.copytruncate,
        }
    }
}

fn default_state_path() -> PathBuf {
    PathBuf::from("/var/lib/tidewater/state.db")
}
fn default_max_size() -> ByteSize {
    ByteSize(100 << 20)
}
fn default_keep() -> u32 {
    7
}
fn default_true() -> bool {
    true
}
fn default_check_interval() -> Duration {
    Duration::from_secs(1)
}
fn default_queue_depth() -> usize {
    64
}
fn default_batch_max_records() -> usize {
    512
}
fn default_batch_max_bytes() -> ByteSize {
    ByteSize(1 << 20)
}
fn default_flush_interval() -> Duration {
    Duration::from_secs(2)
}
fn default_connect_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_backoff_base() -> Duration {
    Duration::from_millis(250)
}
fn default_backoff_max() -> Duration {
    Duration::from_secs(30)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        [[files]]
        path = "/var/log/app.log"

        [ship]
        [[ship.sinks]]
        name = "eu-west"
        address = "ingest.eu-west.tidewater.dev:5044"
    "#;

    #[test]
    fn minimal_config_gets_defaults() {
        let cfg: Config = toml::from_str(MINIMAL).unwrap();
        cfg.check().unwrap();
        assert_eq!(cfg.state_path, PathBuf::from("/var/lib/tidewater/state.db"));
        assert_eq!(cfg.rotate.max_size, ByteSize(100 << 20));
        assert_eq!(cfg.ship.batch_max_records, 512);
        assert!(cfg.ship.sinks[0].tls);
    }

    #[test]
    fn per_file_overrides_win() {
        let mut cfg: Config = toml::from_str(MINIMAL).unwrap();
        cfg.files[0].max_size = Some(ByteSize(1 << 20));
        cfg.files[0].keep = Some(2);
        let e = cfg.effective(&cfg.files[0]);
        assert_eq!(e.max_size, Some(1 << 20));
        assert_eq!(e.keep, 2);
        assert!(e.compress);
    }

    #[test]
    fn zero_max_size_disables_size_rotation() {
        let mut cfg: Config = toml::from_str(MINIMAL).unwrap();
        cfg.rotate.max_size = ByteSize(0);
        assert_eq!(cfg.effective(&cfg.files[0]).max_size, None);
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let raw = format!("{MINIMAL}\nfoo = 1\n");
        assert!(toml::from_str::<Config>(&raw).is_err());
    }

    #[test]
    fn unknown_sink_is_an_error() {
        let mut cfg: Config = toml::from_str(MINIMAL).unwrap();
        cfg.files[0].sink = Some("us-east".into());
        let err = cfg.check().unwrap_err().to_string();
        assert!(err.contains("unknown sink \"us-east\""), "{err}");
    }
}
'''

ROTATE_MOD_RS = r'''//! Rotation: tail the configured files, rotate them when their policy says
//! so, and hand new data to the shipper.

mod compress;
pub mod policy;
mod watcher;

pub use policy::{Decision, Reason, RotationPolicy};
pub use watcher::{FileState, Watcher};

use std::path::Path;
use std::time::SystemTime;

use anyhow::{bail, Context};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::config::Config;
use crate::ship::Chunk;
use crate::state::State;

pub async fn run(cfg: Config, state: State, tx: mpsc::Sender<Chunk>) -> anyhow::Result<()> {
    let mut files = Vec::with_capacity(cfg.files.len());
    for f in &cfg.files {
        let policy = RotationPolicy::from_config(&cfg.effective(f));
        let offset = state.offset(&f.path)?.unwrap_or_default();
        let w = Watcher::open(&f.path, offset).with_context(|| format!("opening {}", f.path.display()))?;
        debug!(path = %f.path.display(), offset, ?policy, "watching");
        files.push((w, policy));
    }

    let mut tick = tokio::time::interval(cfg.rotate.check_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for (w, policy) in files.iter_mut() {
            for chunk in w.read_new()? {
                tx.send(chunk).await.context("shipper is gone")?;
            }
            state.set_offset(w.path(), w.state().inode, w.state().offset)?;
            match policy.decide(w.state(), SystemTime::now()) {
                Decision::Keep => {}
                Decision::Rotate(reason) => {
                    info!(path = %w.path().display(), ?reason, "rotating");
                    if let Err(e) = rotate_one(w, policy).await {
                        warn!(path = %w.path().display(), "rotation failed: {e:#}");
                    }
                }
            }
        }
    }
}

async fn rotate_one(w: &mut Watcher, policy: &RotationPolicy) -> anyhow::Result<()> {
    let base = w.path().to_path_buf();
    let keep = policy.keep;
    let compress_archives = policy.compress;
    let copytruncate = policy.copytruncate;
    let first = tokio::task::spawn_blocking(move || -> std::io::Result<_> {
        compress::shift_archives(&base, keep, compress_archives)?;
        if copytruncate {
            compress::rotate_copytruncate(&base)
        } else {
            compress::rotate_rename(&base)
        }
    })
    .await??;
    w.reopen()?;
    if policy.compress {
        tokio::task::spawn_blocking(move || compress::gzip_in_place(&first)).await??;
    }
    Ok(())
}

/// `tidewater rotate-now <path>`.
pub async fn rotate_now(cfg: &Config, path: &Path) -> anyhow::Result<()> {
    let Some(f) = cfg.files.iter().find(|f| f.path == path) else {
        bail!("{} is not in the config", path.display());
    };
    let policy = RotationPolicy::from_config(&cfg.effective(f));
    let mut w = Watcher::open(path, 0)?;
    rotate_one(&mut w, &policy).await?;
    println!("rotated {}", path.display());
    Ok(())
}
'''

WATCHER_RS = r'''//! Tailing one file: what has been read, and noticing when it was replaced.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::ship::Chunk;

/// Never hand more than this to the shipper per check tick; keeps one busy
/// file from starving the others.
const READ_BUDGET: usize = 1 << 20;

/// What the policy gets to look at.
#[derive(Debug, Clone)]
pub struct FileState {
    pub path: PathBuf,
    pub inode: u64,
    /// Bytes read and handed to the shipper so far.
    pub offset: u64,
    pub opened_at: SystemTime,
    /// Birth time, where the filesystem records it.
    pub created: Option<SystemTime>,
}

pub struct Watcher {
    file: File,
    state: FileState,
    buf: Vec<u8>,
}

impl Watcher {
    pub fn open(path: &Path, offset: u64) -> io::Result<Self> {
        let mut file = File::open(path)?;
        let meta = file.metadata()?;
        // A stored offset past the end means the file was truncated or
        // replaced while we were down; start over.
        let offset = if offset > meta.len() { 0 } else { offset };
        file.seek(SeekFrom::Start(offset))?;
        Ok(Watcher {
            file,
            state: FileState {
                path: path.to_path_buf(),
                inode: meta.ino(),
                offset,
                opened_at: SystemTime::now(),
                created: meta.created().ok(),
            },
            buf: vec![0; 64 * 1024],
        })
    }

    pub fn path(&self) -> &Path {
        &self.state.path
    }

    pub fn state(&self) -> &FileState {
        &self.state
    }

    /// Reads what was appended since the last call, up to `READ_BUDGET`.
    /// Only whole lines are handed out; a trailing partial line is re-read
    /// next time.
    pub fn read_new(&mut self) -> io::Result<Vec<Chunk>> {
        let mut out = Vec::new();
        let mut budget = READ_BUDGET;
        while budget > 0 {
            let want = self.buf.len().min(budget);
            let n = self.file.read(&mut self.buf[..want])?;
            if n == 0 {
                break;
            }
            let Some(last_nl) = self.buf[..n].iter().rposition(|&b| b == b'\n') else {
                self.file.seek(SeekFrom::Current(-(n as i64)))?;
                break;
            };
            let whole = last_nl + 1;
            if whole < n {
                self.file.seek(SeekFrom::Current(-((n - whole) as i64)))?;
            }
            out.push(Chunk::new(self.state.path.clone(), self.state.offset, self.buf[..whole].to_vec()));
            self.state.offset += whole as u64;
            budget -= whole.min(budget);
        }
        Ok(out)
    }

    /// Opens the path again after a rotation; the new file starts empty.
    pub fn reopen(&mut self) -> io::Result<()> {
        *self = Watcher::open(&self.state.path, 0)?;
        Ok(())
    }
}
'''

POLICY_RS = r'''//! When to rotate a file.
//!
//! A policy is built once per configured file from the effective settings
//! (per-file values override the `[rotate]` defaults). `decide` runs on every
//! check tick for every file, so it must stay cheap: it only looks at the
//! `FileState` the watcher already has.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::config::EffectivePolicy;
use crate::rotate::watcher::FileState;

/// Files smaller than this are never rotated by age; an hourly policy on a
/// quiet file would otherwise leave a trail of empty archives.
const MIN_SIZE_FOR_AGE: u64 = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Keep,
    Rotate(Reason),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Size { size: u64, limit: u64 },
    Age { age: Duration, limit: Duration },
    Forced,
}

#[derive(Debug, Clone)]
pub struct RotationPolicy {
    max_size: Option<u64>,
    max_age: Option<Duration>,
    pub keep: u32,
    pub compress: bool,
    pub copytruncate: bool,
}

impl RotationPolicy {
    pub fn from_config(e: &EffectivePolicy) -> Self {
        RotationPolicy {
            max_size: e.max_size,
            max_age: e.max_age,
            keep: e.keep,
            compress: e.compress,
            copytruncate: e.copytruncate,
        }
    }

    pub fn decide(&self, st: &FileState, now: SystemTime) -> Decision {
        if let Some(limit) = self.max_size {
            // The watcher keeps `offset` current, so this is the file size.
            let size = st.offset;
            if size >= limit {
                return Decision::Rotate(Reason::Size { size, limit });
            }
        }
        if let Some(limit) = self.max_age {
            let born = st.created.unwrap_or(st.opened_at);
            // A clock that went backwards is not an age.
            let age = now.duration_since(born).unwrap_or(Duration::ZERO);
            if age >= limit && st.offset >= MIN_SIZE_FOR_AGE {
                return Decision::Rotate(Reason::Age { age, limit });
            }
        }
        Decision::Keep
    }

    /// Archive name for generation `n`: `app.log.1`, `app.log.2.gz`, ...
    pub fn archive_name(&self, base: &Path, n: u32) -> PathBuf {
        let mut name = base.as_os_str().to_owned();
        name.push(format!(".{n}"));
        if self.compress && n > 1 {
            name.push(".gz");
        }
        PathBuf::from(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_size: Option<u64>, max_age: Option<u64>) -> RotationPolicy {
        RotationPolicy {
            max_size,
            max_age: max_age.map(Duration::from_secs),
            keep: 3,
            compress: true,
            copytruncate: false,
        }
    }

    fn st(offset: u64, age_secs: u64) -> FileState {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        FileState {
            path: PathBuf::from("/var/log/app.log"),
            inode: 42,
            offset,
            opened_at: now - Duration::from_secs(age_secs),
            created: None,
        }
    }

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    #[test]
    fn keeps_small_file() {
        assert_eq!(policy(Some(1000), None).decide(&st(999, 0), now()), Decision::Keep);
    }

    #[test]
    fn rotates_at_size_limit() {
        assert_eq!(
            policy(Some(1000), None).decide(&st(1000, 0), now()),
            Decision::Rotate(Reason::Size { size: 1000, limit: 1000 })
        );
    }

    #[test]
    fn rotates_by_age() {
        let d = policy(None, Some(3600)).decide(&st(10, 3601), now());
        assert!(matches!(d, Decision::Rotate(Reason::Age { .. })), "{d:?}");
    }

    #[test]
    fn age_ignored_for_empty_files() {
        assert_eq!(policy(None, Some(60)).decide(&st(0, 7200), now()), Decision::Keep);
    }

    #[test]
    fn clock_going_backwards_is_not_an_age() {
        let mut s = st(10, 0);
        s.opened_at = now() + Duration::from_secs(600);
        assert_eq!(policy(None, Some(60)).decide(&s, now()), Decision::Keep);
    }

    #[test]
    fn archive_names() {
        let p = policy(None, None);
        let base = Path::new("/var/log/app.log");
        assert_eq!(p.archive_name(base, 1), PathBuf::from("/var/log/app.log.1"));
        assert_eq!(p.archive_name(base, 2), PathBuf::from("/var/log/app.log.2.gz"));
    }
}
'''

COMPRESS_RS = r'''//! Moving archives into place and gzipping them. All blocking; callers run
//! these on the blocking pool.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter};
use std::path::{Path, PathBuf};

use flate2::write::GzEncoder;
use flate2::Compression;

fn archive_path(base: &Path, n: u32, gz: bool) -> PathBuf {
    let mut name = base.as_os_str().to_owned();
    name.push(format!(".{n}"));
    if gz {
        name.push(".gz");
    }
    PathBuf::from(name)
}

/// Shifts `app.log.N[.gz]` to `N+1`, dropping whatever falls past `keep`.
pub fn shift_archives(base: &Path, keep: u32, compress: bool) -> io::Result<()> {
    for n in (1..=keep).rev() {
        for gz in [false, true] {
            let from = archive_path(base, n, gz);
            if !from.exists() {
                continue;
            }
            if n == keep {
                fs::remove_file(&from)?;
            } else {
                // `.1` is gzipped right after the rotation, so from `.2` on
                // archives keep whatever suffix they already have.
                let _ = compress;
                let to = archive_path(base, n + 1, gz);
                fs::rename(&from, &to)?;
            }
        }
    }
    Ok(())
}

/// Renames the live file to `.1` and creates a fresh, empty live file.
pub fn rotate_rename(base: &Path) -> io::Result<PathBuf> {
    let first = archive_path(base, 1, false);
    fs::rename(base, &first)?;
    OpenOptions::new().write(true).create_new(true).open(base)?;
    Ok(first)
}

/// Copies the live file to `.1` and truncates it in place, for writers that
/// keep their descriptor open forever. Lines written between the copy and
/// the truncate are lost; the docs say so.
pub fn rotate_copytruncate(base: &Path) -> io::Result<PathBuf> {
    let first = archive_path(base, 1, false);
    fs::copy(base, &first)?;
    OpenOptions::new().write(true).open(base)?.set_len(0)?;
    Ok(first)
}

/// Gzips `path` to `path.gz` and removes the original.
pub fn gzip_in_place(path: &Path) -> io::Result<PathBuf> {
    let mut gz_name = path.as_os_str().to_owned();
    gz_name.push(".gz");
    let gz_path = PathBuf::from(gz_name);
    let tmp = gz_path.with_extension("gz.tmp");
    {
        let mut src = BufReader::new(File::open(path)?);
        let dst = BufWriter::new(File::create(&tmp)?);
        let mut enc = GzEncoder::new(dst, Compression::default());
        io::copy(&mut src, &mut enc)?;
        enc.finish()?.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    }
    fs::rename(&tmp, &gz_path)?;
    fs::remove_file(path)?;
    Ok(gz_path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rename_leaves_empty_live_file() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("app.log");
        fs::write(&base, "one\ntwo\n").unwrap();
        let first = rotate_rename(&base).unwrap();
        assert_eq!(fs::read_to_string(first).unwrap(), "one\ntwo\n");
        assert_eq!(fs::metadata(&base).unwrap().len(), 0);
    }

    #[test]
    fn shift_drops_oldest() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("app.log");
        for n in 1..=3 {
            fs::write(archive_path(&base, n, false), format!("{n}")).unwrap();
        }
        shift_archives(&base, 3, false).unwrap();
        assert!(!archive_path(&base, 1, false).exists());
        assert_eq!(fs::read_to_string(archive_path(&base, 2, false)).unwrap(), "1");
        assert_eq!(fs::read_to_string(archive_path(&base, 3, false)).unwrap(), "2");
    }

    #[test]
    fn gzip_replaces_original() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("app.log.1");
        fs::write(&p, "x".repeat(10_000)).unwrap();
        let gz = gzip_in_place(&p).unwrap();
        assert!(!p.exists());
        assert!(fs::metadata(gz).unwrap().len() < 200);
    }
}
'''

SHIP_MOD_RS = r'''//! Shipping: batch chunks from the rotator and send them to the sinks.

mod backoff;
mod batch;
mod client;

pub use backoff::Backoff;
pub use batch::{Batch, Chunk};
pub use client::Client;

use std::collections::HashMap;
use std::time::Instant;

use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::config::ShipConfig;
use crate::state::State;

pub async fn run(cfg: ShipConfig, state: State, mut rx: mpsc::Receiver<Chunk>) -> anyhow::Result<()> {
    let tls = client::tls_config(&cfg.sinks)?;
    let mut clients: HashMap<String, Client> = cfg
        .sinks
        .iter()
        .map(|s| (s.name.clone(), Client::new(s.clone(), &cfg, tls.clone())))
        .collect();
    let default_sink = cfg.sinks[0].name.clone();

    let mut batch = Batch::new(cfg.batch_max_records, cfg.batch_max_bytes.0 as usize);
    let mut flush = tokio::time::interval(cfg.flush_interval);
    let mut last_flush = Instant::now();
    loop {
        tokio::select! {
            chunk = rx.recv() => {
                let Some(chunk) = chunk else { break };
                if batch.push(chunk) {
                    send(&mut clients, &default_sink, &mut batch, &state).await?;
                    last_flush = Instant::now();
                }
            }
            _ = flush.tick() => {
                if !batch.is_empty() && last_flush.elapsed() >= cfg.flush_interval {
                    send(&mut clients, &default_sink, &mut batch, &state).await?;
                    last_flush = Instant::now();
                }
            }
        }
    }
    if !batch.is_empty() {
        send(&mut clients, &default_sink, &mut batch, &state).await?;
    }
    debug!("shipper done");
    Ok(())
}

async fn send(
    clients: &mut HashMap<String, Client>,
    sink: &str,
    batch: &mut Batch,
    state: &State,
) -> anyhow::Result<()> {
    let full = std::mem::replace(batch, batch.empty_like());
    let client = clients.get_mut(sink).expect("sink exists");
    if let Err(e) = client.send(&full).await {
        warn!(sink, records = full.len(), "giving up on batch: {e:#}");
        return Err(e);
    }
    for (path, end) in full.high_water_marks() {
        state.set_shipped(&path, end)?;
    }
    Ok(())
}
'''

CLIENT_RS = r'''//! One connection to one sink: framing, TLS and reconnects.
//!
//! Wire format (collector protocol v2): a frame is a 4-byte big-endian
//! length, a 16-byte request id, then the gzip payload. The collector answers
//! every frame with one status byte: 0 = stored, 1 = retry later, 2 = rejected.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{self, RootCertStore};
use tokio_rustls::{client::TlsStream, TlsConnector};
use tracing::{debug, info, warn};

use super::backoff::Backoff;
use super::batch::Batch;
use crate::config::{ShipConfig, SinkConfig};

const STATUS_STORED: u8 = 0;
const STATUS_RETRY: u8 = 1;
const STATUS_REJECTED: u8 = 2;

enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

pub struct Client {
    sink: SinkConfig,
    tls: Option<Arc<rustls::ClientConfig>>,
    connect_timeout: Duration,
    backoff: Backoff,
    conn: Option<Conn>,
    peer: Option<std::net::SocketAddr>,
    last_io: Instant,
}

pub fn tls_config(sinks: &[SinkConfig]) -> anyhow::Result<Option<Arc<rustls::ClientConfig>>> {
    if !sinks.iter().any(|s| s.tls) {
        return Ok(None);
    }
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for s in sinks.iter().filter_map(|s| s.ca_file.as_ref()) {
        let pem = std::fs::read(s).with_context(|| format!("reading {}", s.display()))?;
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            roots.add(cert?)?;
        }
    }
    let cfg = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    Ok(Some(Arc::new(cfg)))
}

impl Client {
    pub fn new(sink: SinkConfig, cfg: &ShipConfig, tls: Option<Arc<rustls::ClientConfig>>) -> Self {
        Client {
            sink,
            tls,
            connect_timeout: cfg.connect_timeout,
            backoff: Backoff::new(cfg.backoff.base, cfg.backoff.max),
            conn: None,
            peer: None,
            last_io: Instant::now(),
        }
    }

    async fn connect(&mut self) -> anyhow::Result<()> {
        let addr = self.sink.address.as_str();
        let started = Instant::now();
        let stream = tokio::time::timeout(self.connect_timeout, TcpStream::connect(addr))
            .await
            .with_context(|| format!("connecting to {addr}: timed out"))?
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        let peer = stream.peer_addr()?;
        let conn = if self.sink.tls {
            let host = self.sink.server_name.clone().unwrap_or_else(|| host_part(addr).to_string());
            let name = ServerName::try_from(host.clone()).with_context(|| format!("bad server name {host:?}"))?;
            let tls = TlsConnector::from(self.tls.clone().expect("tls config built for tls sinks"));
            Conn::Tls(Box::new(tls.connect(name, stream).await?))
        } else {
            Conn::Plain(stream)
        };
        info!(
            sink = %self.sink.name,
            host = addr,
            %peer,
            tls = self.sink.tls,
            handshake_ms = started.elapsed().as_millis() as u64,
            "connected"
        );
        self.conn = Some(conn);
        self.peer = Some(peer);
        self.last_io = Instant::now();
        Ok(())
    }

    /// Sends one batch, reconnecting with backoff until the collector has it.
    pub async fn send(&mut self, batch: &Batch) -> anyhow::Result<()> {
        let payload = batch.encode()?;
        loop {
            if self.conn.is_none() {
                if let Err(e) = self.connect().await {
                    let delay = self.backoff.next_delay();
                    warn!(sink = %self.sink.name, error = %e, delay_ms = delay.as_millis() as u64, "connect failed");
                    tokio::time::sleep(delay).await;
                    continue;
                }
            }
            let idle = self.last_io.elapsed();
            match self.exchange(batch.id(), &payload).await {
                Ok(STATUS_STORED) => {
                    debug!(request_id = %batch.id(), records = batch.len(), bytes = payload.len(), "batch stored");
                    self.backoff.reset();
                    return Ok(());
                }
                Ok(STATUS_RETRY) => {
                    let delay = self.backoff.next_delay();
                    info!(request_id = %batch.id(), delay_ms = delay.as_millis() as u64, "collector asked us to retry");
                    tokio::time::sleep(delay).await;
                }
                Ok(STATUS_REJECTED) => bail!("collector rejected batch {}", batch.id()),
                Ok(other) => bail!("collector sent unknown status {other}"),
                Err(e) => {
                    warn!(
                        request_id = %batch.id(),
                        error = %e,
                        idle_ms = idle.as_millis() as u64,
                        peer = ?self.peer,
                        "write failed, reconnecting"
                    );
                    self.conn = None;
                    let delay = self.backoff.next_delay();
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    async fn exchange(&mut self, id: uuid::Uuid, payload: &[u8]) -> io::Result<u8> {
        let mut frame = Vec::with_capacity(20 + payload.len());
        frame.extend_from_slice(&(payload.len() as u32 + 16).to_be_bytes());
        frame.extend_from_slice(id.as_bytes());
        frame.extend_from_slice(payload);
        let mut status = [0u8; 1];
        match self.conn.as_mut().expect("connected") {
            Conn::Plain(s) => {
                s.write_all(&frame).await?;
                s.read_exact(&mut status).await?;
            }
            Conn::Tls(s) => {
                s.write_all(&frame).await?;
                s.flush().await?;
                s.read_exact(&mut status).await?;
            }
        }
        self.last_io = Instant::now();
        Ok(status[0])
    }
}

fn host_part(addr: &str) -> &str {
    match addr.rsplit_once(':') {
        Some((host, _port)) => host.trim_start_matches('[').trim_end_matches(']'),
        None => addr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_part_strips_port() {
        assert_eq!(host_part("ingest.eu-west.tidewater.dev:5044"), "ingest.eu-west.tidewater.dev");
        assert_eq!(host_part("10.20.4.17:5044"), "10.20.4.17");
        assert_eq!(host_part("[fd00::17]:5044"), "fd00::17");
    }
}
'''

BATCH_RS = r'''//! Batches: what the rotator hands over (`Chunk`) and what goes on the wire.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use flate2::write::GzEncoder;
use flate2::Compression;

/// Whole lines from one file, starting at `offset`.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub path: PathBuf,
    pub offset: u64,
    pub data: Vec<u8>,
}

impl Chunk {
    pub fn new(path: PathBuf, offset: u64, data: Vec<u8>) -> Self {
        Chunk { path, offset, data }
    }

    pub fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }
}

#[derive(Debug)]
pub struct Batch {
    id: uuid::Uuid,
    chunks: Vec<Chunk>,
    records: usize,
    bytes: usize,
    max_records: usize,
    max_bytes: usize,
}

impl Batch {
    pub fn new(max_records: usize, max_bytes: usize) -> Self {
        Batch { id: uuid::Uuid::new_v4(), chunks: Vec::new(), records: 0, bytes: 0, max_records, max_bytes }
    }

    pub fn empty_like(&self) -> Self {
        Batch::new(self.max_records, self.max_bytes)
    }

    pub fn id(&self) -> uuid::Uuid {
        self.id
    }

    /// Adds a chunk; returns true when the batch is full and should be sent.
    pub fn push(&mut self, chunk: Chunk) -> bool {
        self.records += chunk.data.iter().filter(|&&b| b == b'\n').count();
        self.bytes += chunk.data.len();
        self.chunks.push(chunk);
        self.records >= self.max_records || self.bytes >= self.max_bytes
    }

    pub fn len(&self) -> usize {
        self.records
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// The furthest offset shipped per file, for the state db.
    pub fn high_water_marks(&self) -> BTreeMap<PathBuf, u64> {
        let mut m = BTreeMap::new();
        for c in &self.chunks {
            let e = m.entry(c.path.clone()).or_insert(0);
            *e = (*e).max(c.end());
        }
        m
    }

    /// Newline-delimited records, gzipped.
    pub fn encode(&self) -> std::io::Result<Vec<u8>> {
        let mut enc = GzEncoder::new(Vec::with_capacity(self.bytes / 4), Compression::best());
        for c in &self.chunks {
            enc.write_all(&c.data)?;
        }
        enc.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(path: &str, offset: u64, lines: usize) -> Chunk {
        Chunk::new(PathBuf::from(path), offset, "x\n".repeat(lines).into_bytes())
    }

    #[test]
    fn full_by_records() {
        let mut b = Batch::new(10, 1 << 20);
        assert!(!b.push(chunk("/a", 0, 9)));
        assert!(b.push(chunk("/a", 18, 1)));
    }

    #[test]
    fn full_by_bytes() {
        let mut b = Batch::new(1000, 8);
        assert!(b.push(chunk("/a", 0, 4)));
    }

    #[test]
    fn high_water_marks_per_file() {
        let mut b = Batch::new(1000, 1 << 20);
        b.push(chunk("/a", 0, 2));
        b.push(chunk("/b", 100, 1));
        b.push(chunk("/a", 4, 3));
        let m = b.high_water_marks();
        assert_eq!(m[&PathBuf::from("/a")], 10);
        assert_eq!(m[&PathBuf::from("/b")], 102);
    }

    #[test]
    fn encode_roundtrip() {
        use std::io::Read;
        let mut b = Batch::new(1000, 1 << 20);
        b.push(chunk("/a", 0, 3));
        let gz = b.encode().unwrap();
        let mut s = String::new();
        flate2::read::GzDecoder::new(gz.as_slice()).read_to_string(&mut s).unwrap();
        assert_eq!(s, "x\nx\nx\n");
    }
}
'''

BACKOFF_RS = r'''//! Retry delays for reconnects and `retry later` answers.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff { base, max, attempt: 0 }
    }

    /// base, 2*base, 4*base, ... capped at `max`.
    pub fn next_delay(&mut self) -> Duration {
        let exp = self.base * 2u32.pow(self.attempt.min(16));
        self.attempt += 1;
        exp.min(self.max)
    }

    /// Called after a success: the next failure starts from `base` again.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_then_caps() {
        let mut b = Backoff::new(Duration::from_millis(250), Duration::from_secs(2));
        let got: Vec<_> = (0..6).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(got, [250, 500, 1000, 2000, 2000, 2000]);
    }

    #[test]
    fn reset_starts_over() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
        b.next_delay();
        b.next_delay();
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(100));
    }
}
'''

STATE_RS = r'''//! Persistent state: per-file read/ship offsets and a small key-value table.
//!
//! The schema lives in `migrations/` and is applied in order at startup; the
//! applied version is kept in `PRAGMA user_version`. Migrations are append-only
//! and shipped in released binaries, so an existing file must never change.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use rusqlite::{params, Connection, OptionalExtension};

const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_init.sql"),
    include_str!("../migrations/0002_kv.sql"),
    include_str!("../migrations/0003_shipped_offset.sql"),
];

#[derive(Clone)]
pub struct State {
    conn: Arc<Mutex<Connection>>,
}

impl State {
    pub fn open(path: &Path) -> anyhow::Result<State> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let conn = Connection::open(path).with_context(|| format!("opening {}", path.display()))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        migrate(&conn)?;
        Ok(State { conn: Arc::new(Mutex::new(conn)) })
    }

    #[cfg(test)]
    pub fn in_memory() -> State {
        let conn = Connection::open_in_memory().unwrap();
        migrate(&conn).unwrap();
        State { conn: Arc::new(Mutex::new(conn)) }
    }

    pub fn offset(&self, path: &Path) -> anyhow::Result<Option<u64>> {
        let conn = self.conn.lock().unwrap();
        let v: Option<i64> = conn
            .query_row("SELECT offset FROM offsets WHERE path = ?1", [path_key(path)], |r| r.get(0))
            .optional()?;
        Ok(v.map(|v| v as u64))
    }

    pub fn set_offset(&self, path: &Path, inode: u64, offset: u64) -> anyhow::Result<()> {
        let conn = self.conn.lock().unwrap();
        conn.execute(
            "INSERT INTO offsets (path, inode, offset, updated_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(path) DO UPDATE SET inode = ?2, offset = ?3, updated_at = ?4",
            params![path_key(path), inode as i64, offset as i64, now_secs()],
        )?;
        Ok(())
    }

    pub fn set_shipped(&self, path: &Path, shipped: u64) -> anyhow::Result<()> {
        let conn = self.conn.lock().unwrap();
        conn.execute(
            "UPDATE offsets SET shipped = ?2, updated_at = ?3 WHERE path = ?1",
            params![path_key(path), shipped as i64, now_secs()],
        )?;
        Ok(())
    }

    pub fn kv_get(&self, key: &str) -> anyhow::Result<Option<String>> {
        let conn = self.conn.lock().unwrap();
        Ok(conn.query_row("SELECT value FROM kv WHERE key = ?1", [key], |r| r.get(0)).optional()?)
    }

    pub fn kv_set(&self, key: &str, value: &str) -> anyhow::Result<()> {
        let conn = self.conn.lock().unwrap();
        conn.execute(
            "INSERT INTO kv (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = ?2",
            params![key, value],
        )?;
        Ok(())
    }

    pub fn flush(&self) -> anyhow::Result<()> {
        let conn = self.conn.lock().unwrap();
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")?;
        Ok(())
    }
}

fn migrate(conn: &Connection) -> anyhow::Result<()> {
    let current: usize = conn.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0))? as usize;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        conn.execute_batch(sql).with_context(|| format!("applying migration {}", i + 1))?;
        conn.pragma_update(None, "user_version", (i + 1) as i64)?;
    }
    Ok(())
}

fn path_key(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn now_secs() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_roundtrip() {
        let s = State::in_memory();
        let p = Path::new("/var/log/app.log");
        assert_eq!(s.offset(p).unwrap(), None);
        s.set_offset(p, 7, 1234).unwrap();
        assert_eq!(s.offset(p).unwrap(), Some(1234));
        s.set_offset(p, 7, 2000).unwrap();
        assert_eq!(s.offset(p).unwrap(), Some(2000));
    }

    #[test]
    fn kv_roundtrip() {
        let s = State::in_memory();
        assert_eq!(s.kv_get("a").unwrap(), None);
        s.kv_set("a", "1").unwrap();
        s.kv_set("a", "2").unwrap();
        assert_eq!(s.kv_get("a").unwrap().as_deref(), Some("2"));
    }

    #[test]
    fn migrations_are_idempotent() {
        let conn = Connection::open_in_memory().unwrap();
        migrate(&conn).unwrap();
        migrate(&conn).unwrap();
        let v: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!(v as usize, MIGRATIONS.len());
    }
}
'''

MIG_1 = r'''-- 0001: per-file read offsets.
CREATE TABLE offsets (
    path       TEXT    PRIMARY KEY,
    inode      INTEGER NOT NULL,
    offset     INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
'''

MIG_2 = r'''-- 0002: free-form key/value pairs for components that need a little state
-- (first used for the collector session token; see #288).
CREATE TABLE kv (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
'''

MIG_3 = r'''-- 0003: how far each file has been acknowledged by the collector, separate
-- from how far it has been read (#351).
ALTER TABLE offsets ADD COLUMN shipped INTEGER NOT NULL DEFAULT 0;
'''

EXAMPLE_TOML = r'''# tidewater example configuration.
# Reference: https://docs.tidewater.dev/0.8/config/
#
# Sizes accept B, KB, MB and GB (binary: 1KB = 1024 bytes).
# Durations use humantime syntax: "90s", "15m", "1h 30m", "7d".

state_path = "/var/lib/tidewater/state.db"

[rotate]
max_size = "100MB"
# max_age = "1d"
keep = 7
compress = true
check_interval = "1s"

[[files]]
path = "/var/log/nginx/access.log"
max_size = "250MB"
keep = 14
fields = { service = "nginx", kind = "access" }

[[files]]
path = "/var/log/nginx/error.log"
max_age = "1d"
fields = { service = "nginx", kind = "error" }

[[files]]
# An app that never reopens its log file.
path = "/var/log/legacy/billing.log"
copytruncate = true
sink = "archive"

[ship]
queue_depth = 64
batch_max_records = 512
batch_max_bytes = "1MB"
flush_interval = "2s"
connect_timeout = "10s"

[ship.backoff]
base = "250ms"
max = "30s"

[[ship.sinks]]
name = "eu-west"
address = "ingest.eu-west.tidewater.dev:5044"

[[ship.sinks]]
name = "archive"
address = "10.20.9.3:5044"
tls = false
'''

CONFIG_MD = r'''# Configuration

tidewater reads one TOML file, `/etc/tidewater/tidewater.toml` unless
`--config` or `TIDEWATER_CONFIG` says otherwise. `tidewater validate` checks a
file without starting the daemon.

A complete example lives in [`tidewater.example.toml`](../tidewater.example.toml).
The rendered reference is at https://docs.tidewater.dev/0.8/config/.

## Sizes

Sizes are strings such as `"512"`, `"64KB"`, `"100MB"` or `"2GB"`, or plain
integers (bytes). Units are binary: `1KB` is 1024 bytes.

## Durations

Durations use [humantime](https://docs.rs/humantime/latest/humantime/fn.parse_duration.html)
syntax: `"250ms"`, `"90s"`, `"1h 30m"`, `"7d"`.

## Top level

| key          | default                        | meaning                                 |
|--------------|--------------------------------|-----------------------------------------|
| `state_path` | `/var/lib/tidewater/state.db`  | SQLite file for offsets between restarts |

## `[rotate]`

Defaults for every `[[files]]` entry; each key can be overridden per file.

| key              | default   | meaning                                                   |
|------------------|-----------|-----------------------------------------------------------|
| `max_size`       | `"100MB"` | rotate once the file reaches this size; `0` disables      |
| `max_age`        | unset     | rotate once the file is this old (and not empty)          |
| `keep`           | `7`       | archives to keep (`app.log.1` ... `app.log.7.gz`)         |
| `compress`       | `true`    | gzip archives from `.1` on                                |
| `check_interval` | `"1s"`    | how often files are checked                               |

## `[[files]]`

| key            | default      | meaning                                                   |
|----------------|--------------|-----------------------------------------------------------|
| `path`         | required     | the live log file                                         |
| `copytruncate` | `false`      | copy + truncate instead of rename (writer never reopens)  |
| `fields`       | `{}`         | extra fields attached to every record                     |
| `sink`         | first sink   | which `[[ship.sinks]]` entry to ship to                   |

Plus any `[rotate]` key.

## `[ship]`

| key                 | default  | meaning                                           |
|---------------------|----------|---------------------------------------------------|
| `queue_depth`       | `64`     | chunks buffered between rotator and shipper       |
| `batch_max_records` | `512`    | send a batch once it has this many lines          |
| `batch_max_bytes`   | `"1MB"`  | ... or this many bytes                            |
| `flush_interval`    | `"2s"`   | send a partial batch after this long              |
| `connect_timeout`   | `"10s"`  | TCP connect + TLS handshake limit                 |

### `[ship.backoff]`

| key    | default   | meaning                          |
|--------|-----------|----------------------------------|
| `base` | `"250ms"` | first retry delay                |
| `max`  | `"30s"`   | upper bound for any retry delay  |

### `[[ship.sinks]]`

| key           | default          | meaning                                         |
|---------------|------------------|-------------------------------------------------|
| `name`        | required         | referenced by `files.sink`                      |
| `address`     | required         | `host:port` of the collector                    |
| `tls`         | `true`           | TLS with the webpki roots (+ `ca_file`)         |
| `server_name` | host of address  | SNI / certificate name                          |
| `ca_file`     | unset            | extra PEM bundle to trust                       |
'''

CHANGELOG_MD = r'''# Changelog

All notable changes to this project are documented here. The format follows
[Keep a Changelog](https://keepachangelog.com/en/1.1.0/) and the project
adheres to [Semantic Versioning](https://semver.org/spec/v2.0.0.html).

## [Unreleased]

## [0.9.3] - 2026-10-21

### Fixed
- `copytruncate` files no longer lose the first line after a rotation when
  the writer is mid-line (#398).
- The shipper no longer double-sends a batch when the collector answers
  `retry` and the connection drops in the same second (#402).

## [0.9.2] - 2026-09-30

### Added
- `ship.sinks[].ca_file` to trust a private CA in addition to the webpki roots (#377).

### Fixed
- `tidewater validate` exits with status 2 on invalid configs, as documented (#381).

## [0.9.1] - 2026-09-02

### Fixed
- Offsets are written after every check tick instead of only on shutdown, so a
  crash no longer re-ships up to a full file (#351).

## [0.9.0] - 2026-08-12

### Added
- Multiple sinks; `files[].sink` picks one (#329).
- `--log-format json`.

### Changed
- State moved from a JSON file to SQLite (`state_path`); the old file is
  imported on first start and then ignored.

[Unreleased]: https://github.com/tidewater-rs/tidewater/compare/v0.9.3...HEAD
[0.9.3]: https://github.com/tidewater-rs/tidewater/compare/v0.9.2...v0.9.3
[0.9.2]: https://github.com/tidewater-rs/tidewater/compare/v0.9.1...v0.9.2
[0.9.1]: https://github.com/tidewater-rs/tidewater/compare/v0.9.0...v0.9.1
[0.9.0]: https://github.com/tidewater-rs/tidewater/releases/tag/v0.9.0
'''

README_MD = r'''# tidewater

Rotate local log files and ship them to a collector, in one small daemon.

[![CI](https://github.com/tidewater-rs/tidewater/actions/workflows/ci.yml/badge.svg)](https://github.com/tidewater-rs/tidewater/actions/workflows/ci.yml)
[![crates.io](https://img.shields.io/crates/v/tidewater.svg)](https://crates.io/crates/tidewater)

- size- and age-based rotation with gzip and `copytruncate`
- at-least-once shipping over TLS to one or more collectors
- offsets in SQLite, so restarts neither lose nor re-send much

## Install

    cargo install tidewater --locked

Packages for Debian and Alpine are attached to every
[release](https://github.com/tidewater-rs/tidewater/releases).

## Quick start

    sudo mkdir -p /etc/tidewater
    sudo cp tidewater.example.toml /etc/tidewater/tidewater.toml
    tidewater validate
    sudo systemctl enable --now tidewater

The full configuration reference is at https://docs.tidewater.dev/0.8/config/
and the operations guide at https://docs.tidewater.dev/0.8/ops/.

## Minimum supported Rust version

1.75. Raising it is a minor-version change and is noted in the changelog.

## License

MIT or Apache-2.0, at your option.
'''

CI_YML = r'''name: CI
on:
  push:
    branches: [main]
  pull_request:

env:
  CARGO_TERM_COLOR: always

jobs:
  test:
    strategy:
      matrix:
        os: [ubuntu-24.04, macos-14]
    runs-on: ${{ matrix.os }}
    steps:
      - uses: actions/checkout@v4
      - uses: dtolnay/rust-toolchain@stable
      - uses: Swatinem/rust-cache@v2
      - run: cargo test --workspace --locked

  msrv:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
      - uses: dtolnay/rust-toolchain@1.75.0
      - run: cargo check --workspace --locked --all-targets

  lint:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
      - uses: dtolnay/rust-toolchain@stable
        with:
          components: clippy, rustfmt
      - run: cargo fmt --check
      - run: cargo clippy --workspace --all-targets -- -D warnings
'''

TESTS_ROTATE = r'''//! End-to-end rotation on a real directory.

use std::fs;
use std::io::Write;
use std::path::Path;

use tidewater::rotate::{Decision, Watcher};

fn append(path: &Path, s: &str) {
    fs::OpenOptions::new().append(true).open(path).unwrap().write_all(s.as_bytes()).unwrap();
}

#[test]
fn watcher_reads_whole_lines_only() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("app.log");
    fs::write(&p, "").unwrap();
    let mut w = Watcher::open(&p, 0).unwrap();
    append(&p, "one\ntw");
    let chunks = w.read_new().unwrap();
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].data, b"one\n");
    append(&p, "o\n");
    let chunks = w.read_new().unwrap();
    assert_eq!(chunks[0].data, b"two\n");
    assert_eq!(w.state().offset, 8);
}

#[test]
fn stored_offset_past_end_starts_over() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("app.log");
    fs::write(&p, "short\n").unwrap();
    let w = Watcher::open(&p, 10_000).unwrap();
    assert_eq!(w.state().offset, 0);
}

#[test]
fn keep_is_the_default_decision() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("app.log");
    fs::write(&p, "x\n").unwrap();
    let w = Watcher::open(&p, 0).unwrap();
    let policy = tidewater::rotate::RotationPolicy::from_config(&tidewater::config::EffectivePolicy {
        max_size: Some(1 << 20),
        max_age: None,
        keep: 3,
        compress: false,
        copytruncate: false,
    });
    assert_eq!(policy.decide(w.state(), std::time::SystemTime::now()), Decision::Keep);
}
'''

TESTS_CLI = r'''//! `tidewater validate` against files on disk.

use std::process::Command;

fn validate(toml: &str) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.toml");
    std::fs::write(&p, toml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tidewater"))
        .args(["--config", p.to_str().unwrap(), "validate"])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const OK: &str = r#"
[[files]]
path = "/var/log/app.log"

[ship]
[[ship.sinks]]
name = "eu-west"
address = "ingest.eu-west.tidewater.dev:5044"
"#;

#[test]
fn accepts_minimal_config() {
    let (code, out, _) = validate(OK);
    assert_eq!(code, 0);
    assert!(out.contains("ok (1 files)"), "{out}");
}

#[test]
fn missing_files_is_exit_2() {
    let (code, _, err) = validate("[ship]\n[[ship.sinks]]\nname='a'\naddress='b:1'\n");
    assert_eq!(code, 2);
    assert!(err.contains("no [[files]] entries"), "{err}");
}

#[test]
fn address_needs_a_port() {
    let (code, _, err) = validate(&OK.replace(":5044", ""));
    assert_eq!(code, 2);
    assert!(err.contains("expected host:port"), "{err}");
}

#[test]
fn bad_size_names_the_key() {
    let (code, _, err) = validate(&OK.replace("path = \"/var/log/app.log\"", "path = \"/var/log/app.log\"\nmax_size = \"ten\""));
    assert_eq!(code, 2);
    assert!(err.contains("files[0].max_size"), "{err}");
}
'''

TESTS_SHIP = r'''//! The client against a fake collector on localhost.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

mod fake {
    use super::*;

    /// Accepts connections and answers every frame with the given statuses in turn.
    pub async fn collector(statuses: Vec<u8>) -> (String, tokio::task::JoinHandle<usize>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let h = tokio::spawn(async move {
            let mut frames = 0;
            let mut statuses = statuses.into_iter();
            'outer: loop {
                let (mut s, _) = l.accept().await.unwrap();
                loop {
                    let mut len = [0u8; 4];
                    if s.read_exact(&mut len).await.is_err() {
                        continue 'outer;
                    }
                    let mut body = vec![0; u32::from_be_bytes(len) as usize];
                    s.read_exact(&mut body).await.unwrap();
                    frames += 1;
                    match statuses.next() {
                        Some(st) => s.write_all(&[st]).await.unwrap(),
                        None => break 'outer,
                    }
                }
            }
            frames
        });
        (addr, h)
    }
}

fn ship_cfg(addr: &str) -> tidewater::config::ShipConfig {
    toml::from_str(&format!(
        "backoff = {{ base = \"10ms\", max = \"50ms\" }}\n[[sinks]]\nname = \"t\"\naddress = \"{addr}\"\ntls = false\n"
    ))
    .unwrap()
}

#[tokio::test]
async fn stored_on_first_try() {
    let (addr, h) = fake::collector(vec![0]).await;
    let cfg = ship_cfg(&addr);
    let mut c = tidewater::ship::Client::new(cfg.sinks[0].clone(), &cfg, None);
    let mut b = tidewater::ship::Batch::new(10, 1 << 20);
    b.push(tidewater::ship::Chunk::new("/a".into(), 0, b"x\n".to_vec()));
    c.send(&b).await.unwrap();
    drop(c);
    assert_eq!(h.await.unwrap(), 1);
}

#[tokio::test]
async fn retry_status_is_retried() {
    let (addr, h) = fake::collector(vec![1, 1, 0]).await;
    let cfg = ship_cfg(&addr);
    let mut c = tidewater::ship::Client::new(cfg.sinks[0].clone(), &cfg, None);
    let mut b = tidewater::ship::Batch::new(10, 1 << 20);
    b.push(tidewater::ship::Chunk::new("/a".into(), 0, b"x\n".to_vec()));
    tokio::time::timeout(Duration::from_secs(2), c.send(&b)).await.unwrap().unwrap();
    drop(c);
    assert_eq!(h.await.unwrap(), 3);
}

#[tokio::test]
async fn rejected_is_an_error() {
    let (addr, _h) = fake::collector(vec![2]).await;
    let cfg = ship_cfg(&addr);
    let mut c = tidewater::ship::Client::new(cfg.sinks[0].clone(), &cfg, None);
    let mut b = tidewater::ship::Batch::new(10, 1 << 20);
    b.push(tidewater::ship::Chunk::new("/a".into(), 0, b"x\n".to_vec()));
    let err = c.send(&b).await.unwrap_err().to_string();
    assert!(err.contains("rejected"), "{err}");
}
'''

BENCH_RS = r'''use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tidewater::ship::{Batch, Chunk};

fn sample() -> Vec<u8> {
    include_bytes!("data/nginx-access-1k.log").to_vec()
}

fn encode(c: &mut Criterion) {
    let data = sample();
    let mut g = c.benchmark_group("batch");
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.bench_function("encode_1k_lines", |b| {
        b.iter_batched(
            || {
                let mut batch = Batch::new(10_000, 64 << 20);
                batch.push(Chunk::new("/var/log/nginx/access.log".into(), 0, data.clone()));
                batch
            },
            |batch| batch.encode().unwrap(),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, encode);
criterion_main!(benches);
'''

LOCK_PACKAGES = """
addr2line 0.21.0 gimli
adler 1.0.2
aho-corasick 1.1.2 memchr
anstream 0.6.11 anstyle,anstyle-parse,anstyle-query,colorchoice,utf8parse
anstyle 1.0.4
anstyle-parse 0.2.3 utf8parse
anstyle-query 1.0.2
anyhow 1.0.79
autocfg 1.1.0
backtrace 0.3.69 addr2line,cc,cfg-if,libc,miniz_oxide,object,rustc-demangle
base64 0.21.7
bitflags 2.4.2
bytes 1.5.0
cc 1.0.83 libc
cfg-if 1.0.0
clap 4.4.18 clap_builder,clap_derive
clap_builder 4.4.18 anstream,anstyle,clap_lex,strsim
clap_derive 4.4.7 heck,proc-macro2,quote,syn
clap_lex 0.6.0
colorchoice 1.0.0
crc32fast 1.3.2 cfg-if
criterion 0.5.1 anes,cast,ciborium,clap,criterion-plot,is-terminal,itertools,num-traits,once_cell,oorandom,regex,serde,serde_derive,serde_json,tinytemplate,walkdir
equivalent 1.0.1
errno 0.3.8 libc
fallible-iterator 0.3.0
fallible-streaming-iterator 0.1.9
fastrand 2.0.1
filetime 0.2.23 cfg-if,libc
flate2 1.0.28 crc32fast,miniz_oxide
getrandom 0.2.12 cfg-if,libc,wasi
gimli 0.28.1
hashbrown 0.14.3 ahash,allocator-api2
hashlink 0.8.4 hashbrown
heck 0.4.1
hermit-abi 0.3.4
humantime 2.1.0
humantime-serde 1.1.1 humantime,serde
indexmap 2.1.0 equivalent,hashbrown
inotify 0.9.6 bitflags,inotify-sys,libc
inotify-sys 0.1.5 libc
itoa 1.0.10
lazy_static 1.4.0
libc 0.2.152
libsqlite3-sys 0.27.0 cc,pkg-config,vcpkg
linux-raw-sys 0.4.13
lock_api 0.4.11 autocfg,scopeguard
log 0.4.20
matchers 0.1.0 regex-automata
memchr 2.7.1
miniz_oxide 0.7.1 adler
mio 0.8.10 libc,log,wasi,windows-sys
notify 6.1.1 bitflags,filetime,inotify,libc,log,mio,walkdir,windows-sys
nu-ansi-term 0.46.0 overload,winapi
num_cpus 1.16.0 hermit-abi,libc
object 0.32.2 memchr
once_cell 1.19.0
overload 0.1.1
parking_lot 0.12.1 lock_api,parking_lot_core
parking_lot_core 0.9.9 cfg-if,libc,redox_syscall,smallvec,windows-targets
pin-project-lite 0.2.13
pkg-config 0.3.29
proc-macro2 1.0.78 unicode-ident
quote 1.0.35 proc-macro2
regex 1.10.3 aho-corasick,memchr,regex-automata,regex-syntax
regex-automata 0.4.5 aho-corasick,memchr,regex-syntax
regex-syntax 0.8.2
ring 0.17.7 cc,getrandom,libc,spin,untrusted,windows-sys
rusqlite 0.30.0 bitflags,fallible-iterator,fallible-streaming-iterator,hashlink,libsqlite3-sys,smallvec
rustc-demangle 0.1.23
rustix 0.38.30 bitflags,errno,libc,linux-raw-sys,windows-sys
rustls 0.22.2 log,ring,rustls-pki-types,rustls-webpki,subtle,zeroize
rustls-pemfile 2.0.0 base64,rustls-pki-types
rustls-pki-types 1.1.0
rustls-webpki 0.102.1 ring,rustls-pki-types,untrusted
ryu 1.0.16
same-file 1.0.6 winapi-util
scopeguard 1.2.0
serde 1.0.195 serde_derive
serde_derive 1.0.195 proc-macro2,quote,syn
serde_json 1.0.111 itoa,ryu,serde
serde_spanned 0.6.5 serde
sharded-slab 0.1.7 lazy_static
signal-hook-registry 1.4.1 libc
smallvec 1.13.1
socket2 0.5.5 libc,windows-sys
spin 0.9.8
strsim 0.10.0
subtle 2.5.0
syn 2.0.48 proc-macro2,quote,unicode-ident
tempfile 3.9.0 cfg-if,fastrand,redox_syscall,rustix,windows-sys
thiserror 1.0.56 thiserror-impl
thiserror-impl 1.0.56 proc-macro2,quote,syn
thread_local 1.1.7 cfg-if,once_cell
tidewater 0.9.3 anyhow,clap,criterion,flate2,humantime-serde,notify,rusqlite,rustls-pemfile,serde,serde_json,tempfile,thiserror,tokio,tokio-rustls,toml,tracing,tracing-subscriber,uuid,webpki-roots
tokio 1.35.1 backtrace,bytes,libc,mio,num_cpus,parking_lot,pin-project-lite,signal-hook-registry,socket2,tokio-macros,windows-sys
tokio-macros 2.2.0 proc-macro2,quote,syn
tokio-rustls 0.25.0 rustls,rustls-pki-types,tokio
toml 0.8.8 serde,serde_spanned,toml_datetime,toml_edit
toml_datetime 0.6.5 serde
toml_edit 0.21.0 indexmap,serde,serde_spanned,toml_datetime,winnow
tracing 0.1.40 pin-project-lite,tracing-attributes,tracing-core
tracing-attributes 0.1.27 proc-macro2,quote,syn
tracing-core 0.1.32 once_cell,valuable
tracing-log 0.2.0 log,once_cell,tracing-core
tracing-serde 0.1.3 serde,tracing-core
tracing-subscriber 0.3.18 matchers,nu-ansi-term,once_cell,regex,serde,serde_json,sharded-slab,smallvec,thread_local,tracing,tracing-core,tracing-log,tracing-serde
unicode-ident 1.0.12
untrusted 0.9.0
utf8parse 0.2.1
uuid 1.7.0 getrandom
valuable 0.1.0
vcpkg 0.2.15
walkdir 2.4.0 same-file,winapi-util
webpki-roots 0.26.0 rustls-pki-types
winnow 0.5.34 memchr
zeroize 1.7.0
"""


def lock_entries() -> list[tuple[str, str, list[str]]]:
    out = []
    for line in LOCK_PACKAGES.strip().splitlines():
        parts = line.split()
        out.append((parts[0], parts[1], parts[2].split(",") if len(parts) > 2 else []))
    return out


def cargo_lock() -> str:
    s = ["# This file is automatically @generated by Cargo.", "# It is not intended for manual editing.", "version = 3", ""]
    for name, ver, deps in lock_entries():
        s += ["[[package]]", f'name = "{name}"', f'version = "{ver}"']
        if name != "tidewater":
            s.append('source = "registry+https://github.com/rust-lang/crates.io-index"')
            s.append(f'checksum = "{hashlib.sha256(f"{name}-{ver}".encode()).hexdigest()}"')
        if deps:
            s.append("dependencies = [")
            s += [f' "{d}",' for d in sorted(deps)]
            s.append("]")
        s.append("")
    return "\n".join(s)


COMPILING_ALL = [f"{n} v{v}" for n, v, _ in lock_entries() if n not in ("tidewater",) and not n.startswith(("windows", "winapi", "wasi", "hermit", "redox"))]
random.Random(7).shuffle(COMPILING_ALL)
COMPILING_ALL = tuple(COMPILING_ALL)


# ---------------------------------------------------------------------------
# Last night's ship log from the staging box (tw-staging-02)
# ---------------------------------------------------------------------------


class ShipLog:
    def __init__(self) -> None:
        rng = random.Random(412)
        t = datetime(2026, 11, 1, 22, 40, 2, 118000, tzinfo=timezone.utc)
        lines = []
        self.resets: list[tuple[str, str, str, int]] = []  # (ts, request_id, peer, idle_ms)
        self.quiet_ok: list[int] = []  # idle_ms of quiet gaps that survived
        peers = ["10.20.4.17:5044", "10.20.4.18:5044"]
        peer = peers[0]

        def ts() -> str:
            return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond:06d}Z"

        def rid() -> str:
            return str(uuid.UUID(int=rng.getrandbits(128), version=4))

        lines.append(f"{ts()}  INFO tidewater: tidewater starting files=4 sinks=2 version=\"0.9.3\"")
        t += timedelta(milliseconds=212)
        lines.append(f"{ts()}  INFO tidewater::ship::client: connected sink=eu-west host=\"ingest.eu-west.tidewater.dev:5044\" peer={peer} tls=true handshake_ms=38")
        t += timedelta(milliseconds=9)
        lines.append(f"{ts()}  INFO tidewater::ship::client: connected sink=archive host=\"10.20.9.3:5044\" peer=10.20.9.3:5044 tls=false handshake_ms=1")
        # Busy stretches with batches every few seconds, separated by quiet gaps.
        # Busy stretches (a batch every few seconds) separated by quiet gaps on the eu-west sink.
        pattern = [(12, 4), (1, 75), (9, 5), (1, 52), (6, 3), (1, 68), (11, 6), (1, 91), (5, 4), (1, 57), (8, 2),
                   (1, 70), (10, 5), (1, 130), (4, 3), (1, 63), (9, 4), (1, 84), (6, 5)]
        last_io = t
        for n, gap in pattern:
            quiet = gap > 40
            if quiet:
                t += timedelta(milliseconds=rng.randint(2000, 9000))
                lines.append(f"{ts()} DEBUG tidewater::rotate: offset saved path=\"/var/log/legacy/billing.log\" offset={rng.randint(10**6, 9 * 10**6)}")
            for _ in range(n):
                if quiet:
                    t = last_io + timedelta(milliseconds=rng.randint(int(gap * 960), int(gap * 1040)))
                else:
                    t += timedelta(milliseconds=rng.randint(int(gap * 700), int(gap * 1300)))
                idle_ms = int((t - last_io).total_seconds() * 1000)
                r = rid()
                recs = rng.choice([512, 512, 512, 388, 451, 512, 97])
                nbytes = recs * rng.randint(290, 420)
                if idle_ms > 60000:
                    err = rng.choice(["Connection reset by peer (os error 104)"] * 3 + ["Broken pipe (os error 32)"])
                    lines.append(f"{ts()}  WARN tidewater::ship::client: write failed, reconnecting request_id={r} error=\"{err}\" idle_ms={idle_ms} peer=Some({peer})")
                    self.resets.append((ts(), r, peer, idle_ms))
                    t += timedelta(milliseconds=250 + rng.randint(0, 4))
                    peer = peers[rng.randint(0, 1)]
                    lines.append(f"{ts()}  INFO tidewater::ship::client: connected sink=eu-west host=\"ingest.eu-west.tidewater.dev:5044\" peer={peer} tls=true handshake_ms={rng.randint(31, 64)}")
                    t += timedelta(milliseconds=rng.randint(20, 90))
                elif quiet:
                    self.quiet_ok.append(idle_ms)
                lat = rng.randint(18, 140)
                t += timedelta(milliseconds=lat)
                lines.append(f"{ts()} DEBUG tidewater::ship::client: batch stored request_id={r} records={recs} bytes={nbytes // 6}")
                last_io = t
                if rng.random() < 0.12:
                    t += timedelta(milliseconds=rng.randint(100, 900))
                    lines.append(f"{ts()} DEBUG tidewater::rotate: offset saved path=\"/var/log/nginx/access.log\" offset={rng.randint(10**7, 9 * 10**7)}")
        t += timedelta(seconds=4)
        lines.append(f"{ts()}  INFO tidewater::rotate: rotating path=\"/var/log/nginx/access.log\" reason=Size {{ size: 262144003, limit: 262144000 }}")
        t += timedelta(milliseconds=1840)
        lines.append(f"{ts()} DEBUG tidewater::rotate: archive compressed path=\"/var/log/nginx/access.log.1.gz\" ratio=0.094")
        self.text = "\n".join(lines) + "\n"
        self.lines = lines


def reporter_attachment() -> str:
    """What the #412 reporter attached: ls output and a debug log showing the read offset lagging."""
    rng = random.Random(4120)
    out = ["$ ls -l /srv/shop/logs/",
           "-rw-r--r-- 1 shop shop 356515840 Oct 28 14:02 app.log",
           "-rw-r--r-- 1 shop shop  14982817 Oct 28 03:10 app.log.1.gz",
           "-rw-r--r-- 1 shop shop  15203348 Oct 27 03:12 app.log.2.gz",
           "",
           "$ grep -A3 'app.log' /etc/tidewater/tidewater.toml",
           'path = "/srv/shop/logs/app.log"',
           'max_size = "100MB"',
           "keep = 5",
           "",
           "$ journalctl -u tidewater --since 13:58 -o cat | grep app.log"]
    t = datetime(2026, 10, 28, 13, 58, 0, 412000, tzinfo=timezone.utc)
    offset = 171_442_176
    size = 268_004_311
    for _ in range(48):
        t += timedelta(milliseconds=1000 + rng.randint(-3, 9))
        offset += 1 << 20
        size += rng.randint(5_600_000, 6_500_000) if rng.random() > 0.2 else rng.randint(900_000, 1_400_000)
        out.append(f"{t.strftime('%Y-%m-%dT%H:%M:%S.')}{t.microsecond:06d}Z DEBUG tidewater::rotate: offset saved "
                   f'path="/srv/shop/logs/app.log" offset={offset}')
        if rng.random() < 0.25:
            out.append(f"{t.strftime('%Y-%m-%dT%H:%M:%S.')}{t.microsecond + 1311:06d}Z DEBUG tidewater::ship::client: "
                       f"batch stored request_id={uuid.UUID(int=rng.getrandbits(128), version=4)} records=512 bytes={rng.randint(180000, 240000)}")
    out.append(f"$ stat -c %s /srv/shop/logs/app.log\n{size}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------
# journalctl -o json sample
# ---------------------------------------------------------------------------


def journal_sample(n: int) -> str:
    rng = random.Random(440)
    boot = "3c1f0a7e9b2d4c58a6e1f09d7b3a2c44"
    machine = "e5a9c0d1b7f3462a8c0e1d2f3a4b5c6d"
    t = 1793866812_118233
    out = []
    msgs = [
        '10.20.4.51 - - [02/Nov/2026:16:20:12 +0000] "GET /healthz HTTP/1.1" 200 2 "-" "kube-probe/1.31"',
        '10.20.7.9 - - [02/Nov/2026:16:20:12 +0000] "POST /api/v2/events HTTP/1.1" 202 0 "-" "tidewater-bench/0.1"',
        '2026/11/02 16:20:13 [warn] 1187#1187: *88120 upstream response is buffered to a temporary file /var/cache/nginx/proxy_temp/4/31/0000000314',
        '10.20.4.52 - - [02/Nov/2026:16:20:13 +0000] "GET /metrics HTTP/1.1" 200 18244 "-" "Prometheus/2.54.1"',
    ]
    for i in range(n):
        t += rng.randint(20_000, 900_000)
        cur = f"s={boot[:8]}d1c84e0f9a2b3c4d5e6f7a8b;i={0x3a1f2 + i:x};b={boot};m={t - 1793800000_000000:x};t={t:x};x={rng.getrandbits(64):016x}"
        msg = msgs[rng.randint(0, len(msgs) - 1)]
        rec = {
            "__CURSOR": cur,
            "__REALTIME_TIMESTAMP": str(t),
            "__MONOTONIC_TIMESTAMP": str(t - 1793800000_000000),
            "_BOOT_ID": boot,
            "_MACHINE_ID": machine,
            "_HOSTNAME": "tw-staging-02",
            "PRIORITY": "4" if "[warn]" in msg else "6",
            "SYSLOG_FACILITY": "3",
            "SYSLOG_IDENTIFIER": "nginx",
            "_PID": "1187",
            "_UID": "33",
            "_GID": "33",
            "_COMM": "nginx",
            "_EXE": "/usr/sbin/nginx",
            "_SYSTEMD_UNIT": "nginx.service",
            "_TRANSPORT": "stdout",
            "MESSAGE": msg,
        }
        if i == 3:
            # journald encodes messages that are not valid UTF-8 as byte arrays
            rec["MESSAGE"] = list(b"GET /search?q=caf\xe9 HTTP/1.1")
        out.append(json.dumps(rec, separators=(",", ":")))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------
# Story helpers
# ---------------------------------------------------------------------------

OPS_MD = r'''# Operations

## systemd

The packages install `tidewater.service`, which runs `tidewater run` as root
(it has to rename files owned by other users). Reload the config with
`systemctl restart tidewater`; offsets survive restarts.

## Rotating by hand

    tidewater rotate-now /var/log/nginx/access.log

rotates one file immediately, whatever its policy says. The file must be
listed in the config. Useful before a deploy that changes the log format.

## Checking a config

    tidewater validate --config /etc/tidewater/tidewater.toml

exits 0 when the file is usable and 2 otherwise, printing the offending key.

## Logs

tidewater logs to stderr (journald under systemd). `-v` / `-vv` or
`TIDEWATER_LOG=tidewater=debug` for more. `--log-format json` for machines.
'''

COMPOSE_YML = r'''# Integration environment: `cargo test --features integration`.
services:
  zookeeper:
    image: bitnami/zookeeper:3.9
    environment:
      ALLOW_ANONYMOUS_LOGIN: "yes"
  kafka:
    image: bitnami/kafka:3.7
    depends_on: [zookeeper]
    environment:
      KAFKA_CFG_ZOOKEEPER_CONNECT: zookeeper:2181
      ALLOW_PLAINTEXT_LISTENER: "yes"
  collector:
    image: ghcr.io/tidewater-rs/collector:0.6.1
    depends_on: [kafka]
    ports: ["15044:5044"]
    volumes:
      - ./collector.toml:/etc/collector/collector.toml:ro
'''


def initial_files(log: ShipLog) -> dict[str, str | None]:
    return {
        ".github/workflows/ci.yml": CI_YML,
        "Cargo.lock": cargo_lock(),
        "Cargo.toml": CARGO_TOML,
        "CHANGELOG.md": CHANGELOG_MD,
        "LICENSE-APACHE": None,
        "LICENSE-MIT": None,
        "README.md": README_MD,
        "rustfmt.toml": "max_width = 120\n",
        "tidewater.example.toml": EXAMPLE_TOML,
        "benches/batch.rs": BENCH_RS,
        "benches/data/nginx-access-1k.log": None,
        "docs/config.md": CONFIG_MD,
        "docs/ops.md": OPS_MD,
        "migrations/0001_init.sql": MIG_1,
        "migrations/0002_kv.sql": MIG_2,
        "migrations/0003_shipped_offset.sql": MIG_3,
        "src/cli.rs": CLI_RS,
        "src/config.rs": CONFIG_RS,
        "src/lib.rs": LIB_RS,
        "src/main.rs": MAIN_RS,
        "src/rotate/compress.rs": COMPRESS_RS,
        "src/rotate/mod.rs": ROTATE_MOD_RS,
        "src/rotate/policy.rs": POLICY_RS,
        "src/rotate/watcher.rs": WATCHER_RS,
        "src/ship/backoff.rs": BACKOFF_RS,
        "src/ship/batch.rs": BATCH_RS,
        "src/ship/client.rs": CLIENT_RS,
        "src/ship/mod.rs": SHIP_MOD_RS,
        "src/size.rs": SIZE_RS,
        "src/state.rs": STATE_RS,
        "tests/cli_validate.rs": TESTS_CLI,
        "tests/compose/collector.toml": None,
        "tests/compose/docker-compose.yml": COMPOSE_YML,
        "tests/rotate_policy.rs": TESTS_ROTATE,
        "tests/ship_retry.rs": TESTS_SHIP,
        "/var/log/tidewater/ship.log": log.text,
    }


class X:
    """Everything the story needs, in one place."""

    def __init__(self) -> None:
        self.S = Session()
        self.log = ShipLog()
        self.R = Repo(initial_files(self.log), "main")
        self.T = Tools(self.R)
        self.C = Cargo()
        c = self.C
        c.add("lib",
              "config::tests::minimal_config_gets_defaults", "config::tests::per_file_overrides_win",
              "config::tests::zero_max_size_disables_size_rotation", "config::tests::unknown_keys_are_rejected",
              "config::tests::unknown_sink_is_an_error",
              "rotate::compress::tests::rename_leaves_empty_live_file", "rotate::compress::tests::shift_drops_oldest",
              "rotate::compress::tests::gzip_replaces_original",
              "rotate::policy::tests::keeps_small_file", "rotate::policy::tests::rotates_at_size_limit",
              "rotate::policy::tests::rotates_by_age", "rotate::policy::tests::age_ignored_for_empty_files",
              "rotate::policy::tests::clock_going_backwards_is_not_an_age", "rotate::policy::tests::archive_names",
              "ship::backoff::tests::doubles_then_caps", "ship::backoff::tests::reset_starts_over",
              "ship::batch::tests::full_by_records", "ship::batch::tests::full_by_bytes",
              "ship::batch::tests::high_water_marks_per_file", "ship::batch::tests::encode_roundtrip",
              "ship::client::tests::host_part_strips_port",
              "size::tests::plain_numbers_are_bytes", "size::tests::binary_units", "size::tests::rejects_garbage",
              "size::tests::overflow", "size::tests::display_roundtrip",
              "state::tests::offsets_roundtrip", "state::tests::kv_roundtrip", "state::tests::migrations_are_idempotent")
        c.add("main")
        c.add("tests/cli_validate.rs", "accepts_minimal_config", "missing_files_is_exit_2", "address_needs_a_port",
              "bad_size_names_the_key")
        c.add("tests/rotate_policy.rs", "watcher_reads_whole_lines_only", "stored_offset_past_end_starts_over",
              "keep_is_the_default_decision")
        c.add("tests/ship_retry.rs", "stored_on_first_try", "retry_status_is_retried", "rejected_is_an_error")
        c.doc = ["src/size.rs - size::parse_size (line 29)"]

    def line(self, path: str, needle: str) -> int:
        for i, l in enumerate(self.R.fs[path].splitlines(), 1):
            if needle in l:
                return i
        raise SystemExit(f"{needle!r} not in {path}")

    def col(self, path: str, needle: str) -> int:
        for l in self.R.fs[path].splitlines():
            if needle in l:
                return l.index(needle) + 1
        raise SystemExit(f"{needle!r} not in {path}")

    def src_line(self, path: str, needle: str) -> str:
        for l in self.R.fs[path].splitlines():
            if needle in l:
                return l
        raise SystemExit(f"{needle!r} not in {path}")

    def cargo_test(self, cmd: str = "cargo test --workspace", tail: int | None = None, **kw):
        out, failed = self.C.test(**kw)
        if tail:
            cmd = f"{cmd} 2>&1 | tail -n {tail}"
            out = "\n".join(out.rstrip("\n").splitlines()[-tail:]) + "\n"
            return self.T.bash(cmd, out)
        return self.T.bash(cmd, out, error=failed, code=101)

    def rustc_error(self, cmd: str, code: str, msg: str, path: str, needle: str, label: str, extra: str = "",
                    what: str = "lib test", underline: str | None = None, help_: str = "") -> tuple:
        ln = self.line(path, needle)
        src = self.src_line(path, needle)
        target = underline or needle
        c = src.index(target)
        w = len(str(ln))
        pad = " " * w
        out = [f"   Compiling tidewater v0.9.3 ({CWD})",
               f"error[{code}]: {msg}",
               f"{pad}--> {path}:{ln}:{c + 1}",
               f"{pad} |",
               f"{ln} | {src}",
               f"{pad} | {' ' * c}{'^' * len(target)} {label}"]
        if extra:
            out += [f"{pad} |", extra.rstrip("\n")]
        if help_:
            out += [f"{pad} |", help_.rstrip("\n")]
        out += ["", f"For more information about this error, try `rustc --explain {code}`.",
                f"error: could not compile `tidewater` ({what}) due to 1 previous error"]
        return self.T.bash(cmd, "\n".join(out) + "\n", error=True, code=101)


# ---------------------------------------------------------------------------
# 09:14 - #412, size-based rotation
# ---------------------------------------------------------------------------


def morning_412(x: X) -> None:
    S, T, R, C = x.S, x.T, x.R, x.C

    S.user("morning. main thing today is #412 https://github.com/tidewater-rs/tidewater/issues/412 - size based "
           "rotation kicks in way too late when several processes write to the same file. before you touch anything "
           "get oriented in the repo, we havent worked on this codebase together before", gap=(0, 0))
    S.ai("I'll start with the layout and the manifest, then the rotation code.",
         calls=[T.ls("."), T.read("Cargo.toml")])
    S.ai(calls=[T.ls("src"), T.ls("src/rotate"), T.read("src/lib.rs")])
    S.ai(calls=[T.read("README.md"), T.read("CHANGELOG.md")])
    S.ai(text="Config next, since the rotation policy is built from it.", calls=[T.read("src/config.rs")])
    S.ai(calls=[T.read("src/main.rs"), T.read("src/ship/mod.rs")])
    S.ai(calls=[T.read(".github/workflows/ci.yml")])
    S.ai(calls=[T.read("src/rotate/mod.rs")])
    S.ai(think="run() builds a Watcher + RotationPolicy per file, ticks every check_interval, read_new() then decide(). "
               "decide gets w.state(). Need to see what FileState holds and what decide compares against max_size.",
         calls=[T.read("src/rotate/policy.rs")])
    S.ai(calls=[T.read("src/rotate/watcher.rs")])
    S.ai(think="There it is. policy.decide: `let size = st.offset;` with the comment claiming the watcher keeps offset "
               "current. But offset only advances in read_new(), which stops after READ_BUDGET = 1 MiB per tick. "
               "check_interval defaults to 1s. So whenever writers append more than ~1 MiB/s, offset falls behind the "
               "real file length and size-based rotation triggers late - it only catches up when traffic drops. "
               "Multiple writers make >1 MiB/s much more likely, which matches the report.\n\n"
               "Second thing: rotate_one renames and then w.reopen() opens the new file at offset 0. Anything between "
               "offset and the old EOF is never read. Today that's masked because rotation only happens once offset "
               "reached max_size (i.e. when we've caught up-ish). If I fix decide() to use the real length, rotation "
               "happens while we're behind, and the unread tail of the old file would be dropped. So the fix needs a "
               "drain of the old descriptor before reopen.",
         text="Here's the lay of the land.\n\n"
              "**Layout.** `tidewater` is a lib + bin crate (`src/lib.rs`, `src/main.rs`). Two tasks joined by a bounded "
              "channel: `rotate::run` tails every configured file and hands `Chunk`s to `ship::run`, which batches, "
              "gzips and sends them to the sinks. Offsets live in SQLite (`src/state.rs`, schema in `migrations/`). "
              "Config is `src/config.rs` + `src/size.rs`; MSRV is declared as `rust-version = \"1.75\"`.\n\n"
              "**Rotation path.** `rotate::run` ticks every `rotate.check_interval` (default 1s). Per file it calls "
              "`Watcher::read_new()` then `RotationPolicy::decide(w.state(), now)`.\n\n"
              "**Likely cause of #412.** In `src/rotate/policy.rs`:\n\n"
              "```rust\n// The watcher keeps `offset` current, so this is the file size.\nlet size = st.offset;\n```\n\n"
              "but `offset` is *how far we have read*, and `read_new()` in `src/rotate/watcher.rs` stops after "
              "`READ_BUDGET` (1 MiB) per tick. With the default 1s tick, any file growing faster than ~1 MiB/s makes "
              "`offset` trail the real length, and size rotation fires late - only once traffic drops enough for the "
              "reader to catch up. Several writers on one file is exactly how you get there.\n\n"
              "**A trap for the fix.** `rotate_one()` renames the file and immediately `reopen()`s at offset 0. The "
              "bytes between our offset and the old EOF are never read. Today that rarely matters because we only "
              "rotate once we've nearly caught up; once rotation follows the real length it will happen while we're "
              "behind, so we'd need to drain the old descriptor (it still points at `app.log.1` after the rename) "
              "before reopening.\n\nI haven't changed anything. Want me to go ahead along those lines?")

    S.user("ground rules before you change stuff:\n"
           "- never touch anything in migrations/ , those files ship inside released binaries\n"
           "- MSRV is 1.75 and CI checks it\n"
           "- no new dependencies without asking me first\n"
           "- tests: `cargo test --workspace`\n\n"
           "the reporter says files get to ~340MB with max_size=100MB, two app instances writing ~3MB/s each. "
           "this is what they attached to the issue:\n\n```\n" + reporter_attachment() + "```\n"
           "that fits your theory right?")
    S.ai(think="2 x 3 MB/s = 6 MB/s vs 1 MiB read per tick -> offset falls behind ~5 MB every second during peaks. "
               "Rotation fires only when offset reaches 100MB, by which time the file is several times larger. "
               "340MB is plausible. Run the baseline tests first so I know what green looks like.",
         text="Noted: `migrations/` is off limits, MSRV 1.75, no new deps without asking, `cargo test --workspace`.\n\n"
              "Yes, the numbers fit: 6 MB/s in, 1 MiB/s read, so during peaks the read offset falls ~5 MB further behind "
              "every second, and `decide()` only sees 100 MB once the reader has caught up that far - by then the file is "
              "a few hundred MB. Baseline test run first:",
         calls=[x.cargo_test(compiling=COMPILING_ALL + (f"tidewater v0.9.3 ({CWD})",), compile_secs=48.31)])
    S.ai(text=f"Baseline is green: {C.count()} tests (29 unit, 10 integration, 1 doctest).\n\n"
              "Plan for #412:\n"
              "1. `FileState` gets a `len` field, refreshed with `fstat` on our own descriptor at the start of every "
              "`read_new()` (one syscall per file per tick).\n"
              "2. `decide()` uses `max(len, offset)` for size.\n"
              "3. `Watcher::drain()` reads the rest of the old descriptor without the budget; `rotate_one()` calls it "
              "after the rename and before `reopen()`, and `run()` ships what it returns.\n"
              "4. Regression test with 3 MiB written in one tick against a 2 MiB limit.\n\nShall I?")

    S.user("wait, before you write it. the drained tail goes through the normal batch path. does the shipped offset "
           "bookkeeping survive that? state has offset and shipped per path")
    S.ai(calls=[T.read("src/ship/batch.rs"), T.read("src/state.rs")])
    S.ai(think="ship::send -> batch.high_water_marks() -> BTreeMap<PathBuf, u64> with max(end) per path -> "
               "state.set_shipped(path, end). Keyed by path only. After a rename rotation the same path names a new "
               "file whose offsets restart at 0. If one batch holds the drained tail of the old file (ends near "
               "340MB) and the first lines of the new file (end ~ a few KB), max() picks the old file's end and "
               "writes shipped = 340MB for the new file. Also rotate::run writes set_offset(path, inode, offset) every "
               "tick, so `offset` gets reset to the new file's small offset while `shipped` stays huge. shipped > "
               "offset afterwards. Is shipped used for resuming? Watcher::open uses state.offset() (the read offset), "
               "not shipped, so resume is unaffected, but shipped is wrong until the new file passes 340MB. Today the "
               "same thing can already happen when a batch spans a rotation; the drain just makes it more likely. "
               "Proper fix: key by (path, inode) or split the batch at a rotation. Not a blocker for #412.",
         text="Good question. Mostly yes, with one wrinkle that already exists today and the drain makes more likely.\n\n"
              "`ship::send` takes `Batch::high_water_marks()`, which is **keyed by path only** (`max(end)` per path), "
              "and writes it with `State::set_shipped(path, end)`. After a rename rotation the same path names a new "
              "file whose offsets restart at 0. If one batch contains the drained tail of the old file (ending near "
              "340 MB) *and* the first lines of the new file, `max()` picks the old file's end and `shipped` is set to "
              "~340 MB for the new file, while `rotate::run` resets `offset` to the new file's small value on the next "
              "tick.\n\nConsequences:\n"
              "- **Resume after restart is unaffected**: `Watcher::open` resumes from `offset` (what we read), not "
              "`shipped`.\n"
              "- `shipped` is wrong (larger than `offset`) until the new file grows past the old size. Nothing reads it "
              "today except humans with `sqlite3`.\n\n"
              "The proper fix is keying the marks by `(path, inode)` or cutting the batch at a rotation. It isn't needed "
              "for #412, so I'd note it and move on.")
    S.user("ok note it, not today. go ahead with the plan")
    S.ai(calls=[T.edit("src/rotate/watcher.rs",
                       "    /// Bytes read and handed to the shipper so far.\n    pub offset: u64,\n",
                       "    /// Bytes read and handed to the shipper so far.\n    pub offset: u64,\n"
                       "    /// Length of the open file at the last check (fstat on our descriptor).\n"
                       "    /// Runs far ahead of `offset` when writers outpace the read budget.\n"
                       "    pub len: u64,\n")])
    S.ai(calls=[T.edit("src/rotate/watcher.rs",
                       "                offset,\n                opened_at: SystemTime::now(),",
                       "                offset,\n                len: meta.len(),\n                opened_at: SystemTime::now(),"),
                T.edit("src/rotate/watcher.rs",
                       "    pub fn read_new(&mut self) -> io::Result<Vec<Chunk>> {\n        let mut out = Vec::new();\n"
                       "        let mut budget = READ_BUDGET;\n",
                       "    pub fn read_new(&mut self) -> io::Result<Vec<Chunk>> {\n"
                       "        self.state.len = self.file.metadata()?.len();\n"
                       "        self.read_up_to(READ_BUDGET)\n    }\n\n"
                       "    /// Reads everything left in the file we have open, ignoring the budget.\n"
                       "    /// Used right after a rename rotation: our descriptor still points at the\n"
                       "    /// archived file, so whatever the shipper hasn't seen is still readable.\n"
                       "    pub fn drain(&mut self) -> io::Result<Vec<Chunk>> {\n"
                       "        self.read_up_to(usize::MAX)\n    }\n\n"
                       "    fn read_up_to(&mut self, limit: usize) -> io::Result<Vec<Chunk>> {\n"
                       "        let mut out = Vec::new();\n        let mut budget = limit;\n")])
    S.ai(calls=[T.edit("src/rotate/policy.rs",
                       "            // The watcher keeps `offset` current, so this is the file size.\n"
                       "            let size = st.offset;\n",
                       "            // `offset` is only how far we have read; with fast or several\n"
                       "            // writers it trails the real length by a lot (#412).\n"
                       "            let size = st.len.max(st.offset);\n")])
    S.ai(text="Now the drain in `rotate_one()`. `rotate-now` runs as a separate process with a fresh watcher at offset 0, "
              "so draining there would read the whole file into memory for nothing; I'll make it a parameter.",
         calls=[T.edit("src/rotate/mod.rs",
                       "async fn rotate_one(w: &mut Watcher, policy: &RotationPolicy) -> anyhow::Result<()> {",
                       "/// Rotates `w`'s file. With `drain`, returns whatever was still unread in the\n"
                       "/// old file so the caller can ship it.\n"
                       "async fn rotate_one(w: &mut Watcher, policy: &RotationPolicy, drain: bool) -> anyhow::Result<Vec<Chunk>> {"),
                T.edit("src/rotate/mod.rs",
                       "    .await??;\n    w.reopen()?;\n    if policy.compress {\n"
                       "        tokio::task::spawn_blocking(move || compress::gzip_in_place(&first)).await??;\n    }\n    Ok(())\n}",
                       "    .await??;\n"
                       "    // After a rename our descriptor still points at `.1`: read what the\n"
                       "    // shipper hasn't seen before letting go of it. copytruncate has already\n"
                       "    // lost that race, there is nothing left to drain.\n"
                       "    let drained = if drain && !copytruncate { w.drain()? } else { Vec::new() };\n"
                       "    w.reopen()?;\n    if policy.compress {\n"
                       "        tokio::task::spawn_blocking(move || compress::gzip_in_place(&first)).await??;\n    }\n"
                       "    Ok(drained)\n}"),
                T.edit("src/rotate/mod.rs",
                       "                    if let Err(e) = rotate_one(w, policy).await {\n"
                       "                        warn!(path = %w.path().display(), \"rotation failed: {e:#}\");\n"
                       "                    }\n",
                       "                    match rotate_one(w, policy, true).await {\n"
                       "                        Ok(drained) => {\n"
                       "                            if drained.len() > 0 {\n"
                       "                                debug!(path = %w.path().display(), chunks = drained.len(), \"shipping tail of rotated file\");\n"
                       "                            }\n"
                       "                            for chunk in drained {\n"
                       "                                tx.send(chunk).await.context(\"shipper is gone\")?;\n"
                       "                            }\n"
                       "                        }\n"
                       "                        Err(e) => warn!(path = %w.path().display(), \"rotation failed: {e:#}\"),\n"
                       "                    }\n"),
                T.edit("src/rotate/mod.rs",
                       "    rotate_one(&mut w, &policy).await?;\n",
                       "    rotate_one(&mut w, &policy, false).await?;\n")])
    S.ai(calls=[x.rustc_error("cargo test --workspace", "E0063", "missing field `len` in initializer of `FileState`",
                              "src/rotate/policy.rs", "        FileState {", "missing `len`", underline="FileState")])
    S.ai(text="The test helper in `policy.rs` builds a `FileState` by hand.",
         calls=[T.edit("src/rotate/policy.rs",
                       "            offset,\n            opened_at: now - Duration::from_secs(age_secs),",
                       "            offset,\n            len: offset,\n            opened_at: now - Duration::from_secs(age_secs),")])
    t412 = r'''//! Regression tests for https://github.com/tidewater-rs/tidewater/issues/412:
//! size-based rotation must follow the file's real length, not how far the
//! shipper has read, and a rotation must not lose the unread tail.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::linux::fs::MetadataExt;
use std::path::Path;
use std::time::SystemTime;

use tidewater::config::EffectivePolicy;
use tidewater::rotate::{Decision, Reason, RotationPolicy, Watcher};

const MIB: u64 = 1 << 20;

fn policy(max_size: u64) -> RotationPolicy {
    RotationPolicy::from_config(&EffectivePolicy {
        max_size: Some(max_size),
        max_age: None,
        keep: 3,
        compress: false,
        copytruncate: false,
    })
}

/// Appends `bytes` of 1 KiB lines, like a second writer would.
fn write_lines(path: &Path, bytes: u64) {
    let line = "x".repeat(1023) + "\n";
    let mut f = OpenOptions::new().append(true).open(path).unwrap();
    for _ in 0..bytes / 1024 {
        f.write_all(line.as_bytes()).unwrap();
    }
}

#[test]
fn rotates_on_file_length_not_read_offset() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("app.log");
    fs::write(&p, "").unwrap();
    let w = Watcher::open(&p, 0).unwrap();

    // Three seconds' worth of two busy writers in one tick: more than the
    // 1 MiB the watcher reads per tick.
    write_lines(&p, 3 * MIB);

    let d = policy(2 * MIB).decide(w.state(), SystemTime::now());
    assert_eq!(d, Decision::Rotate(Reason::Size { size: 3 * MIB, limit: 2 * MIB }));
}

#[test]
fn drain_reads_past_the_budget_after_rename() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("app.log");
    fs::write(&p, "").unwrap();
    let mut w = Watcher::open(&p, 0).unwrap();
    write_lines(&p, 3 * MIB);

    let read: u64 = w.read_new().unwrap().iter().map(|c| c.data.len() as u64).sum();
    assert_eq!(read, MIB);

    // Rotate by rename, as rotate_one does; the watcher still holds the old file.
    let ino = fs::metadata(&p).unwrap().st_ino();
    fs::rename(&p, dir.path().join("app.log.1")).unwrap();
    fs::write(&p, "").unwrap();

    let rest: u64 = w.drain().unwrap().iter().map(|c| c.data.len() as u64).sum();
    assert_eq!(read + rest, 3 * MIB);
    assert_eq!(w.state().inode, ino);
}
'''
    S.ai(text="Now the regression test, as its own file so it can carry the issue link.",
         calls=[T.write("tests/rotate_issue_412.rs", t412)])
    C.add("tests/rotate_issue_412.rs", "rotates_on_file_length_not_read_offset", "drain_reads_past_the_budget_after_rename")
    ln = x.line("tests/rotate_issue_412.rs", "assert_eq!(d, Decision::Rotate")
    S.ai(calls=[x.cargo_test(tail=30, fail={"rotates_on_file_length_not_read_offset":
        f"thread 'rotates_on_file_length_not_read_offset' panicked at tests/rotate_issue_412.rs:{ln}:5:\n"
        "assertion `left == right` failed\n  left: Keep\n right: Rotate(Size { size: 3145728, limit: 2097152 })\n"
        "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace"})])
    S.ai(think="Keep: len is still 0 because the test never called read_new() after writing. Watcher::open ran on an "
               "empty file; len is refreshed in read_new(). That's the order run() uses (read_new, then decide), so the "
               "test is wrong, not the code. Fix the test to mirror the loop.",
         text="The unit tests pass; the new test fails because it calls `decide()` without a `read_new()` first, so `len` "
              "is still the length at open (0). In `rotate::run` every tick does `read_new()` then `decide()`, so the test "
              "should do the same.",
         calls=[T.edit("tests/rotate_issue_412.rs",
                       "    let w = Watcher::open(&p, 0).unwrap();\n\n    // Three seconds'",
                       "    let mut w = Watcher::open(&p, 0).unwrap();\n\n    // Three seconds'"),
                T.edit("tests/rotate_issue_412.rs",
                       "    write_lines(&p, 3 * MIB);\n\n    let d = policy",
                       "    write_lines(&p, 3 * MIB);\n\n    // One tick, same order as rotate::run: read (1 MiB of it), then decide.\n"
                       "    let read: usize = w.read_new().unwrap().iter().map(|c| c.data.len()).sum();\n"
                       "    assert_eq!(read as u64, MIB);\n    let d = policy")])
    S.ai(calls=[x.cargo_test()])
    S.ai(text="All green, including the two new tests in `tests/rotate_issue_412.rs`.\n\n"
              "Changes:\n"
              "- `src/rotate/watcher.rs`: `FileState::len` (fstat on our descriptor at the start of each `read_new()`), "
              "`Watcher::drain()`, and the read loop moved into `read_up_to(limit)`.\n"
              "- `src/rotate/policy.rs`: size check uses `st.len.max(st.offset)`.\n"
              "- `src/rotate/mod.rs`: `rotate_one(.., drain)` returns the unread tail of the old file; `run()` ships it "
              "before continuing; `rotate-now` passes `drain = false`.\n\n"
              "One gap I'm aware of: `drain()` only hands out whole lines, so a trailing partial line in the rotated file "
              "(writer killed mid-line) is still dropped. That was true before too; I'd leave it for a follow-up.")

    S.user("does max_age have the same problem?")
    S.ai(calls=[T.read("src/rotate/policy.rs")])
    S.ai(think="Age path: born = created.unwrap_or(opened_at); age check also requires st.offset >= MIN_SIZE_FOR_AGE. "
               "Age itself doesn't depend on offset, so no lateness. But the MIN_SIZE guard uses offset: a file that has "
               "data but where we haven't read anything yet (e.g. just restarted with budget exhausted on other... no, "
               "budget is per file) - mostly fine, but for consistency it should be len too. Offset can be 0 with "
               "len > 0 if we open a file with stored offset... edge case.\n\n"
               "Separate issue: opened_at is SystemTime::now() at Watcher::open, and created is None on filesystems "
               "without birth time (older kernels, some overlayfs/NFS setups). Then the age restarts on every daemon "
               "restart, and reopen() after rotation too (correct there). With frequent restarts (deploys), a max_age = "
               "1d file might never rotate by age.",
         text="Mostly no. The age itself comes from `created` (birth time) or `opened_at`, neither of which depends on "
              "how far we've read, so age rotation isn't late the way size rotation was.\n\n"
              "Two smaller things in the same function:\n\n"
              "1. The \"don't rotate empty files by age\" guard is `st.offset >= MIN_SIZE_FOR_AGE`, i.e. it asks whether "
              "we've *read* something, not whether the file has something. Right after a restart with a stored offset "
              "equal to the old length, a file that received new data would be treated as empty until the next read. "
              "It should use the same `len.max(offset)`.\n"
              "2. When the filesystem doesn't record a birth time (`created` is `None`: older kernels, some overlayfs and "
              "NFS mounts), the age falls back to `opened_at`, which is reset on every daemon restart. A `max_age = \"1d\"` "
              "file on a box that's redeployed daily would never rotate by age. Fixing that properly means persisting "
              "the first-seen time somewhere, which touches the state schema.")

    S.user("fix 1. leave 2 but write it down, ill file an issue for it. no schema changes today obviously")
    S.ai(calls=[T.edit("src/rotate/policy.rs",
                       "            if age >= limit && st.offset >= MIN_SIZE_FOR_AGE {",
                       "            if age >= limit && st.len.max(st.offset) >= MIN_SIZE_FOR_AGE {"),
                T.edit("src/rotate/policy.rs",
                       "    #[test]\n    fn clock_going_backwards_is_not_an_age() {",
                       "    #[test]\n    fn age_counts_unread_bytes() {\n"
                       "        let mut s = st(0, 7200);\n        s.len = 500;\n"
                       "        let d = policy(None, Some(60)).decide(&s, now());\n"
                       "        assert!(matches!(d, Decision::Rotate(Reason::Age { .. })), \"{d:?}\");\n    }\n\n"
                       "    #[test]\n    fn clock_going_backwards_is_not_an_age() {")])
    C.add("lib", "rotate::policy::tests::age_counts_unread_bytes")
    S.ai(calls=[x.cargo_test("cargo test --workspace policy", filt="policy")])
    S.ai(text="Done, `age_counts_unread_bytes` covers it.\n\nFor your issue, a draft:\n\n"
              "> **Age-based rotation restarts its clock on every daemon restart when birth time is unavailable**\n>\n"
              "> `RotationPolicy::decide` computes the age from `FileState::created`, falling back to `opened_at` "
              "(`SystemTime::now()` in `Watcher::open`). On filesystems without birth time, `created` is `None`, so a "
              "restart resets the age. With `max_age = \"1d\"` and daily deploys, files never rotate by age. Fix: persist "
              "first-seen time per (path, inode) in the state db; needs a new migration.")

    S.user("ok commit it. conventional commits, reference the issue. branch fix/412-size-rotation")
    checkout = T.bash("git checkout -b fix/412-size-rotation", "Switched to a new branch 'fix/412-size-rotation'")
    R.branch = "fix/412-size-rotation"
    S.ai(calls=[checkout, T.git_status()])
    S.ai(calls=[T.git_diff(stat=True)])
    S.ai(text="Reviewing the full diff once before committing.", calls=[T.git_diff()])
    S.ai(calls=[T.git_commit("fix(rotate): rotate on the file's real size, not the read offset (#412)",
                             ["src/rotate", "tests/rotate_issue_412.rs"],
                             body="decide() compared max_size against how far the watcher had read, which trails the "
                                  "real length by up to everything written above the 1 MiB/tick read budget. Use "
                                  "fstat on our descriptor instead, and drain the old descriptor after a rename so the "
                                  "unread tail is still shipped.\n\nFixes #412")])
    S.ai(text=f"Committed on `fix/412-size-rotation` as `{R.commits[-1][0][:7]}`: "
              "`fix(rotate): rotate on the file's real size, not the read offset (#412)` with a `Fixes #412` trailer.")


# ---------------------------------------------------------------------------
# 10:05 - the shipper and the new load balancer: TCP keepalive
# ---------------------------------------------------------------------------


def keepalive(x: X) -> None:
    S, T, R, C, log = x.S, x.T, x.R, x.C, x.log

    S.user("next: the shipper. since the LB change on friday ingest.eu-west.tidewater.dev keeps dropping us. I copied "
           "last nights log from the staging box to /var/log/tidewater/ship.log, have a look", at="10:12")
    S.ai(calls=[T.read("/var/log/tidewater/ship.log")])
    S.ai(calls=[T.grep("write failed|connected sink=eu-west", "/var/log/tidewater/ship.log")])
    resets = log.resets
    rows = "\n".join(f"| {ts[11:19]} | `{rid}` | {peer} | {idle / 1000:.1f}s |" for ts, rid, peer, idle in resets)
    ok = ", ".join(f"{ms / 1000:.0f}s" for ms in log.quiet_ok)
    S.ai(think="Every WARN has idle_ms > 60000. Quiet gaps below a minute survived. Classic idle timeout on the LB: it "
               "drops the flow silently, and we only find out when we next write (RST / EPIPE). The retry resends the same "
               "request id after reconnect and it gets stored, so no loss, but each one costs a reconnect + TLS handshake "
               "and the batch latency. Fix options: TCP keepalive below the LB timeout, or reconnect proactively if idle "
               "> N. Keepalive only helps if the LB forwards/accounts probes: L4 pass-through yes, an L4 proxy that "
               "terminates TCP (envoy tcp_proxy, haproxy mode tcp) only counts payload bytes.",
         text=f"The pattern is very regular. {len(resets)} write failures on the eu-west sink, and every one of them comes "
              "after more than 60 s without traffic on that connection:\n\n"
              "| time (UTC) | request_id | peer | idle |\n|---|---|---|---|\n" + rows + "\n\n"
              f"The quiet gaps that stayed under a minute ({ok}) went through fine. So the new LB has a **60 s idle "
              "timeout** and drops the flow without telling us; we only notice on the next write (`ECONNRESET` / "
              "`EPIPE`). Nothing is lost: after reconnecting, the same batch (same `request_id`) is sent again and "
              "stored, which the DEBUG line right after each WARN shows. The cost is a reconnect + TLS handshake and a "
              "delayed batch each time, and it will get worse with more quiet sinks.\n\n"
              "Two ways out:\n"
              "1. **TCP keepalive** below 60 s (say 30 s). Cheap and invisible to the collector, *but* it only helps if "
              "the LB passes the probes through (L4 pass-through). An L4 proxy that terminates TCP (Envoy `tcp_proxy`, "
              "HAProxy `mode tcp`) only counts payload bytes and would still cut us off.\n"
              "2. **Reconnect proactively** when a connection has been idle longer than a configured limit. Works with "
              "any LB, costs a handshake per quiet period.\n\n"
              "Do you know what kind of LB it is?")

    S.user("L4 passthrough (octavia), probes count. LB team confirmed 60s idle timeout. can we do keepalive without a "
           "new dep? tokio doesnt expose the interval iirc")
    S.ai(calls=[T.grep("keepalive|TcpSocket|socket2", "src"), T.grep('^name = "(socket2|libc)"', "Cargo.lock")])
    S.ai(calls=[T.bash("grep -n -B1 -A14 'name = \"tokio\"' Cargo.lock",
                       grep_context(R.fs["Cargo.lock"], 'name = "tokio"', 1, 14))])
    S.ai(text="Right, tokio can't do it on its own: `TcpStream` has no keepalive setter, and `TcpSocket::set_keepalive(bool)` "
              "only flips `SO_KEEPALIVE`. The probe timing then comes from the kernel defaults "
              "(`net.ipv4.tcp_keepalive_time` = 7200 s on Linux), which is useless against a 60 s timeout. Setting "
              "`TCP_KEEPIDLE`/`TCP_KEEPINTVL`/`TCP_KEEPCNT` per socket needs either `socket2` or raw `libc` calls.\n\n"
              "Both are already in `Cargo.lock`: tokio depends on `socket2 0.5.5` and `libc`. Adding `socket2` as a "
              "direct dependency therefore builds nothing new and doesn't change the lock file's package set; it gives us "
              "`SockRef::from(&stream).set_tcp_keepalive(..)` on a tokio stream. Raw `libc` would be more `unsafe` code "
              "for the same result.\n\nIt's still a new line in `[dependencies]`, so: OK to add `socket2 = \"0.5.5\"`?")

    S.user("socket2 is fine since its already in the tree. pin it to what the lock has. config key `ship.keepalive_secs`, "
           "default 30, 0 disables")
    S.ai(calls=[T.edit("Cargo.toml", 'serde_json = "1.0"\n', 'serde_json = "1.0"\nsocket2 = "0.5.5"\n'),
                T.read("src/ship/client.rs")])
    # cargo records the new direct dependency in the lock file on the next build
    R.fs["Cargo.lock"] = R.fs["Cargo.lock"].replace(' "serde_json",\n "tempfile",', ' "serde_json",\n "socket2",\n "tempfile",', 1)
    S.ai(text="And the config struct, to put the key next to the other `[ship]` settings.", calls=[T.read("src/config.rs")])
    S.ai(calls=[T.edit("src/config.rs",
                       "    #[serde(default = \"default_connect_timeout\", with = \"humantime_serde\")]\n"
                       "    pub connect_timeout: Duration,\n    #[serde(default)]\n    pub backoff: BackoffConfig,\n",
                       "    #[serde(default = \"default_connect_timeout\", with = \"humantime_serde\")]\n"
                       "    pub connect_timeout: Duration,\n"
                       "    /// Seconds of idle before TCP keepalive probes start; 0 disables.\n"
                       "    #[serde(default = \"default_keepalive_secs\")]\n    pub keepalive_secs: u64,\n"
                       "    #[serde(default)]\n    pub backoff: BackoffConfig,\n"),
                T.edit("src/config.rs",
                       "fn default_backoff_base() -> Duration {",
                       "fn default_keepalive_secs() -> u64 {\n    30\n}\nfn default_backoff_base() -> Duration {"),
                T.edit("src/config.rs",
                       "    #[test]\n    fn unknown_keys_are_rejected() {",
                       "    #[test]\n    fn keepalive_defaults_to_30s() {\n"
                       "        let cfg: Config = toml::from_str(MINIMAL).unwrap();\n"
                       "        assert_eq!(cfg.ship.keepalive_secs, 30);\n    }\n\n"
                       "    #[test]\n    fn unknown_keys_are_rejected() {")])
    C.add("lib", "config::tests::keepalive_defaults_to_30s")
    S.ai(calls=[T.edit("src/ship/client.rs", "    connect_timeout: Duration,\n    backoff: Backoff,",
                       "    connect_timeout: Duration,\n    keepalive: Option<Duration>,\n    backoff: Backoff,"),
                T.edit("src/ship/client.rs", "            connect_timeout: cfg.connect_timeout,\n",
                       "            connect_timeout: cfg.connect_timeout,\n"
                       "            keepalive: (cfg.keepalive_secs > 0).then(|| Duration::from_secs(cfg.keepalive_secs)),\n"),
                T.edit("src/ship/client.rs",
                       "            Conn::Plain(stream)\n        };\n        info!(",
                       "            Conn::Plain(stream)\n        };\n"
                       "        if let Some(idle) = self.keepalive {\n"
                       "            // Probes count as traffic for L4 load balancers with an idle timeout.\n"
                       "            let ka = socket2::TcpKeepalive::new().with_time(idle).with_interval(idle / 3).with_retries(3);\n"
                       "            socket2::SockRef::from(&stream).set_tcp_keepalive(&ka)?;\n        }\n        info!(")])
    p = "src/ship/client.rs"
    l_let, l_mv, l_use = x.line(p, "let stream = tokio::time::timeout"), x.line(p, "tls.connect(name, stream)"), x.line(p, "SockRef::from(&stream)")
    w = len(str(l_use))
    pad = " " * w
    err = (f"   Compiling socket2 v0.5.5\n   Compiling tidewater v0.9.3 ({CWD})\n"
           "error[E0382]: borrow of moved value: `stream`\n"
           f"{pad}--> {p}:{l_use}:{x.col(p, '&stream') + 1}\n{pad} |\n"
           f"{str(l_let).rjust(w)} | {x.src_line(p, 'let stream = tokio::time::timeout')}\n"
           f"{pad} |             ------ move occurs because `stream` has type `tokio::net::TcpStream`, which does not implement the `Copy` trait\n"
           "...\n"
           f"{str(l_mv).rjust(w)} | {x.src_line(p, 'tls.connect(name, stream)')}\n"
           f"{pad} | {' ' * (x.col(p, 'stream).await') - 1)}------ value moved here\n"
           "...\n"
           f"{str(l_use).rjust(w)} | {x.src_line(p, 'SockRef::from(&stream)')}\n"
           f"{pad} | {' ' * (x.col(p, '&stream') - 1)}^^^^^^^ value borrowed here after move\n\n"
           "For more information about this error, try `rustc --explain E0382`.\n"
           "error: could not compile `tidewater` (lib) due to 1 previous error\n"
           "warning: build failed, waiting for other jobs to finish...\n"
           "error: could not compile `tidewater` (lib test) due to 1 previous error\n")
    S.ai(calls=[T.bash("cargo test --workspace", err, error=True, code=101)])
    S.ai(text="The TLS connector takes the stream by value, so the keepalive has to be set before the handshake. Moving it "
              "next to `set_nodelay`.",
         calls=[T.edit(p, "        if let Some(idle) = self.keepalive {\n"
                          "            // Probes count as traffic for L4 load balancers with an idle timeout.\n"
                          "            let ka = socket2::TcpKeepalive::new().with_time(idle).with_interval(idle / 3).with_retries(3);\n"
                          "            socket2::SockRef::from(&stream).set_tcp_keepalive(&ka)?;\n        }\n        info!(",
                       "        info!("),
                T.edit(p, "        stream.set_nodelay(true)?;\n",
                       "        stream.set_nodelay(true)?;\n"
                       "        if let Some(idle) = self.keepalive {\n"
                       "            // Probes count as traffic for L4 load balancers with an idle timeout.\n"
                       "            let ka = socket2::TcpKeepalive::new().with_time(idle).with_interval(idle / 3).with_retries(3);\n"
                       "            socket2::SockRef::from(&stream).set_tcp_keepalive(&ka)?;\n        }\n")])
    S.ai(calls=[x.cargo_test()])
    S.ai(text="Green. Docs and the example config next.",
         calls=[T.edit("docs/config.md",
                       "| `connect_timeout`   | `\"10s\"`  | TCP connect + TLS handshake limit                 |\n",
                       "| `connect_timeout`   | `\"10s\"`  | TCP connect + TLS handshake limit                 |\n"
                       "| `keepalive_secs`    | `30`     | idle seconds before TCP keepalive probes; `0` disables |\n"),
                T.edit("tidewater.example.toml", 'connect_timeout = "10s"\n',
                       'connect_timeout = "10s"\n# Keep connections alive through load balancers with idle timeouts.\nkeepalive_secs = 30\n')])
    S.ai(text="Done:\n"
              "- `Cargo.toml`: `socket2 = \"0.5.5\"` (already in the lock, nothing new gets built).\n"
              "- `src/config.rs`: `ship.keepalive_secs`, default 30, `0` disables; test `keepalive_defaults_to_30s`.\n"
              "- `src/ship/client.rs`: after connect, `TCP_KEEPIDLE` = 30 s, `TCP_KEEPINTVL` = 10 s, `TCP_KEEPCNT` = 3, "
              "set before the TLS handshake. With those numbers a dead peer is noticed after about a minute of "
              "silence instead of on the next write.\n"
              "- `docs/config.md` and `tidewater.example.toml` updated.")

    S.user("hmm, everything else in [ship] is a humantime duration. make it `keepalive = \"30s\"`, \"0s\" disables. BUT "
           "keep keepalive_secs working too, I already gave that name to the platform team this morning and they might "
           "have put it in the helm values already")
    S.ai(think="serde(alias) won't do: alias maps a second name onto the same field and the same deserializer, but "
               "keepalive_secs is an integer and humantime_serde only accepts strings like \"30s\". So two fields: "
               "keepalive: Option<Duration> (humantime) and keepalive_secs: Option<u64>, resolved in a method, error if "
               "both are set. Validate it in Config::check so a bad combination fails at load.",
         text="A plain `#[serde(alias)]` won't work here: an alias shares the field's deserializer, and "
              "`humantime_serde` rejects a bare integer like `keepalive_secs = 30`. I'll keep two fields, resolve them "
              "in one place, and make setting both an error at load time.",
         calls=[T.edit("src/config.rs",
                       "    /// Seconds of idle before TCP keepalive probes start; 0 disables.\n"
                       "    #[serde(default = \"default_keepalive_secs\")]\n    pub keepalive_secs: u64,\n",
                       "    /// Idle time before TCP keepalive probes start; \"0s\" disables. Use\n"
                       "    /// [`ShipConfig::keepalive`] to read it.\n"
                       "    #[serde(default, with = \"humantime_serde\")]\n    pub keepalive: Option<Duration>,\n"
                       "    /// Older spelling of `keepalive`, in whole seconds.\n"
                       "    #[serde(default)]\n    pub keepalive_secs: Option<u64>,\n"),
                T.edit("src/config.rs",
                       "fn default_keepalive_secs() -> u64 {\n    30\n}\n",
                       "fn default_keepalive() -> Duration {\n    Duration::from_secs(30)\n}\n"),
                T.edit("src/config.rs",
                       "fn default_state_path() -> PathBuf {",
                       "impl ShipConfig {\n"
                       "    /// The keepalive idle time, from `keepalive` or the older `keepalive_secs`;\n"
                       "    /// `None` when disabled.\n"
                       "    pub fn keepalive(&self) -> anyhow::Result<Option<Duration>> {\n"
                       "        let d = match (self.keepalive, self.keepalive_secs) {\n"
                       "            (Some(_), Some(_)) => bail!(\"set either ship.keepalive or ship.keepalive_secs, not both\"),\n"
                       "            (Some(d), None) => d,\n"
                       "            (None, Some(secs)) => Duration::from_secs(secs),\n"
                       "            (None, None) => default_keepalive(),\n"
                       "        };\n"
                       "        Ok(Some(d).filter(|d| !d.is_zero()))\n    }\n}\n\n"
                       "fn default_state_path() -> PathBuf {"),
                T.edit("src/config.rs",
                       "        if self.ship.backoff.base > self.ship.backoff.max {",
                       "        self.ship.keepalive()?;\n        if self.ship.backoff.base > self.ship.backoff.max {")])
    S.ai(calls=[T.edit("src/config.rs",
                       "    #[test]\n    fn keepalive_defaults_to_30s() {\n"
                       "        let cfg: Config = toml::from_str(MINIMAL).unwrap();\n"
                       "        assert_eq!(cfg.ship.keepalive_secs, 30);\n    }\n",
                       "    #[test]\n    fn keepalive_spellings() {\n"
                       "        let ka = |extra: &str| {\n"
                       "            let raw = MINIMAL.replace(\"[ship]\\n\", &format!(\"[ship]\\n{extra}\\n\"));\n"
                       "            toml::from_str::<Config>(&raw).unwrap().ship.keepalive()\n        };\n"
                       "        assert_eq!(ka(\"\").unwrap(), Some(Duration::from_secs(30)));\n"
                       "        assert_eq!(ka(\"keepalive = \\\"45s\\\"\").unwrap(), Some(Duration::from_secs(45)));\n"
                       "        assert_eq!(ka(\"keepalive_secs = 20\").unwrap(), Some(Duration::from_secs(20)));\n"
                       "        assert_eq!(ka(\"keepalive = \\\"0s\\\"\").unwrap().is_none(), true);\n"
                       "        assert_eq!(ka(\"keepalive_secs = 0\").unwrap().is_none(), true);\n"
                       "        assert!(ka(\"keepalive = \\\"10s\\\"\\nkeepalive_secs = 10\").is_err());\n    }\n"),
                T.edit("src/ship/client.rs",
                       "            keepalive: (cfg.keepalive_secs > 0).then(|| Duration::from_secs(cfg.keepalive_secs)),\n",
                       "            // Config::check has already rejected an invalid combination.\n"
                       "            keepalive: cfg.keepalive().ok().flatten(),\n")])
    C.bins["lib"].remove("config::tests::keepalive_defaults_to_30s")
    C.add("lib", "config::tests::keepalive_spellings")
    S.ai(calls=[T.edit("docs/config.md",
                       "| `keepalive_secs`    | `30`     | idle seconds before TCP keepalive probes; `0` disables |\n",
                       "| `keepalive`         | `\"30s\"`  | idle time before TCP keepalive probes; `\"0s\"` disables |\n\n"
                       "`keepalive_secs = 30` (whole seconds) is accepted as an older spelling of\n"
                       "`keepalive`; setting both is an error.\n"),
                T.edit("tidewater.example.toml", "keepalive_secs = 30\n", 'keepalive = "30s"\n'),
                x.cargo_test()])
    S.ai(text="Switched to `ship.keepalive = \"30s\"` (humantime, `\"0s\"` disables). `ship.keepalive_secs = N` still works; "
              "both set at once fails at load with `set either ship.keepalive or ship.keepalive_secs, not both`. "
              "`ShipConfig::keepalive()` is the single place that resolves them; `keepalive_spellings` covers all "
              "combinations. Docs and example updated. Tests green.")

    S.user("run clippy too, CI has -D warnings")
    p1, p2 = "src/rotate/mod.rs", "src/config.rs"
    l1, c1 = x.line(p1, "if drained.len() > 0"), x.col(p1, "drained.len() > 0")
    l2, c2 = x.line(p2, 'keepalive = \\"0s\\"").unwrap().is_none(), true'), x.col(p2, "assert_eq!(ka(\"keepalive = \\\"0s")
    l3 = x.line(p2, "keepalive_secs = 0\").unwrap().is_none(), true")
    s2 = x.src_line(p2, 'keepalive = \\"0s\\"").unwrap().is_none(), true')
    s3 = x.src_line(p2, "keepalive_secs = 0\").unwrap().is_none(), true")
    w = 4
    clippy = (f"    Checking socket2 v0.5.5\n    Checking tidewater v0.9.3 ({CWD})\n"
              "error: length comparison to zero\n"
              f"  --> {p1}:{l1}:{c1}\n   |\n{l1:<3}| {x.src_line(p1, 'if drained.len() > 0')}\n"
              f"   | {' ' * (c1 - 1)}{'^' * len('drained.len() > 0')} help: using `!is_empty` is clearer and more explicit: `!drained.is_empty()`\n"
              "   |\n   = help: for further information visit https://rust-lang.github.io/rust-clippy/master/index.html#len_zero\n"
              "   = note: `-D clippy::len-zero` implied by `-D warnings`\n"
              "   = help: to override `-D warnings` add `#[allow(clippy::len_zero)]`\n\n"
              "error: used `assert_eq!` with a literal bool\n"
              f"   --> {p2}:{l2}:{c2}\n    |\n{l2:<4}| {s2}\n    | {' ' * (c2 - 1)}{'^' * (len(s2.strip()))}\n"
              "    |\n    = help: for further information visit https://rust-lang.github.io/rust-clippy/master/index.html#bool_assert_comparison\n"
              "    = note: `-D clippy::bool-assert-comparison` implied by `-D warnings`\n"
              "    = help: to override `-D warnings` add `#[allow(clippy::bool_assert_comparison)]`\n"
              "help: replace it with `assert!(..)`\n    |\n"
              f"{l2:<4}-         {s2.strip()}\n{l2:<4}+         assert!(ka(\"keepalive = \\\"0s\\\"\").unwrap().is_none());\n    |\n\n"
              "error: used `assert_eq!` with a literal bool\n"
              f"   --> {p2}:{l3}:{c2}\n    |\n{l3:<4}| {s3}\n    | {' ' * (c2 - 1)}{'^' * (len(s3.strip()))}\n"
              "    |\n    = help: for further information visit https://rust-lang.github.io/rust-clippy/master/index.html#bool_assert_comparison\n\n"
              "error: could not compile `tidewater` (lib test) due to 3 previous errors\n")
    S.ai(calls=[T.bash("cargo clippy --workspace --all-targets -- -D warnings", clippy, error=True, code=101)])
    S.ai(text="Three lints: one in the #412 change (already committed), two in the new keepalive test.",
         calls=[T.edit(p1, "if drained.len() > 0 {", "if !drained.is_empty() {"),
                T.edit(p2, '        assert_eq!(ka("keepalive = \\"0s\\"").unwrap().is_none(), true);\n'
                           '        assert_eq!(ka("keepalive_secs = 0").unwrap().is_none(), true);\n',
                       '        assert!(ka("keepalive = \\"0s\\"").unwrap().is_none());\n'
                       '        assert!(ka("keepalive_secs = 0").unwrap().is_none());\n')])
    S.ai(calls=[T.bash("cargo clippy --workspace --all-targets -- -D warnings && cargo fmt --check",
                       f"    Checking tidewater v0.9.3 ({CWD})\n    Finished `dev` profile [unoptimized + debuginfo] target(s) in 3.71s")])
    S.ai(text="Clippy and `cargo fmt --check` are clean now. Note the `len_zero` fix is in `src/rotate/mod.rs`, i.e. it "
              "belongs to the #412 commit that's already made; I'll keep it as a separate small commit unless you want it "
              "folded in.")


# ---------------------------------------------------------------------------
# 11:45 - staging screenshot, commits, backoff with jitter, the aborted run
# ---------------------------------------------------------------------------

BACKOFF_NEW = r'''//! Retry delays for reconnects and `retry later` answers.
//!
//! Decorrelated jitter, as in
//! https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/ :
//! each delay is drawn from `[base, 3 * previous]` and capped at `max`. A
//! success halves the previous delay instead of resetting it, so a collector
//! that flaps between up and down is not hit at `base` after every short
//! success.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    prev: Duration,
    rng: XorShift64,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Self::with_seed(base, max, seed_from_std())
    }

    /// A reproducible sequence, for tests.
    pub fn with_seed(base: Duration, max: Duration, seed: u64) -> Self {
        Backoff { base, max, prev: base, rng: XorShift64::new(seed) }
    }

    pub fn next_delay(&mut self) -> Duration {
        let hi = self.prev * 3;
        let d = self.rng.between(self.base, hi).min(self.max);
        self.prev = d;
        d
    }

    /// Called after a success: decay towards `base` instead of starting over.
    pub fn on_success(&mut self) {
        self.prev = (self.prev / 2).max(self.base);
    }
}

/// xorshift64*. Only good for spreading retries, which is all it does here.
#[derive(Debug, Clone)]
struct XorShift64(u64);

impl XorShift64 {
    fn new(seed: u64) -> Self {
        // Zero is the one state xorshift never leaves.
        XorShift64(seed | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Roughly uniform in `[lo, hi]`, nanosecond resolution.
    fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        if hi <= lo {
            return lo;
        }
        let span = (hi - lo).as_nanos().min(u64::MAX as u128 - 1) as u64;
        lo + Duration::from_nanos(self.next() % (span + 1))
    }
}

/// A per-process random seed without a dependency: std seeds the keys of
/// `RandomState` from the OS.
fn seed_from_std() -> u64 {
    RandomState::new().build_hasher().finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_millis(250);
    const MAX: Duration = Duration::from_secs(30);

    #[test]
    fn stays_within_bounds() {
        for seed in 0..200 {
            let mut b = Backoff::with_seed(BASE, MAX, seed);
            for _ in 0..50 {
                let d = b.next_delay();
                assert!(d >= BASE && d <= MAX, "seed {seed}: {d:?}");
            }
        }
    }

    #[test]
    fn grows_on_repeated_failure() {
        let mut b = Backoff::with_seed(BASE, MAX, 7);
        let first = b.next_delay();
        let later = (0..20).map(|_| b.next_delay()).max().unwrap();
        assert!(later > first * 4, "{first:?} -> {later:?}");
    }

    #[test]
    fn success_decays_instead_of_resetting() {
        let mut b = Backoff::with_seed(BASE, MAX, 7);
        for _ in 0..20 {
            b.next_delay();
        }
        let before = b.prev;
        b.on_success();
        assert_eq!(b.prev, (before / 2).max(BASE));
        assert!(b.prev > BASE);
    }

    #[test]
    fn huge_cap_does_not_overflow() {
        let mut b = Backoff::with_seed(BASE, Duration::MAX, 1);
        for _ in 0..200 {
            b.next_delay();
        }
    }

    #[test]
    fn seeds_differ() {
        assert_ne!(seed_from_std(), seed_from_std());
    }
}
'''


def backoff(x: X) -> None:
    S, T, R, C = x.S, x.T, x.R, x.C

    S.user([{"type": "text", "text": "deployed a build of your working tree to staging at 11:20. reconnects went flat, nice. "
                                     "but whats that bump around 11:40?"},
            {"type": "image", "data": tiny_png(), "mimeType": "image/png"}], at="11:51")
    S.ai(think="The screenshot is tiny: a dark panel with a single green series, flat with one narrow bump in the right "
               "half. No axis labels readable, no legend. I can't tell which metric it is or read values. Don't invent "
               "numbers. What could cause a single reconnect after keepalive is on: a backend going away (keepalive "
               "detects a dead peer after idle + interval*count = 30 + 3*10 = 60 s and the next write fails with "
               "ETIMEDOUT), a collector restart, or an LB member change. Ask for the log lines around 11:40.",
         text="The image comes through very small: I can make out one series that is flat except for a single narrow bump "
              "in the right half, but no axis labels or values, so I can't tell you how big it is or which panel it is.\n\n"
              "If that's the reconnect counter, one bump after the change is consistent with keepalive doing its job "
              "rather than with the idle timeout coming back: the old failure mode produced a reconnect after *every* "
              "quiet minute, which would look like a comb, not a single bump. A single event usually means the peer really "
              "went away (collector restart, LB member replaced); with 30 s idle + 3 probes 10 s apart, a dead peer is "
              "detected within about a minute and the next write fails with `ETIMEDOUT` instead of `ECONNRESET`.\n\n"
              "Can you paste the `tidewater::ship` lines from staging between 11:38 and 11:42? "
              "`journalctl -u tidewater --since 11:38 --until 11:42` should do.")

    S.user("```\n"
           "2026-11-02T11:39:41.207311Z  WARN tidewater::ship::client: write failed, reconnecting "
           "request_id=f3a0c7d2-5b1e-4c9a-8e47-2d6b90a13c55 error=\"Connection timed out (os error 110)\" idle_ms=2210 "
           "peer=Some(10.20.4.18:5044)\n"
           "2026-11-02T11:39:41.461902Z  INFO tidewater::ship::client: connected sink=eu-west "
           "host=\"ingest.eu-west.tidewater.dev:5044\" peer=10.20.4.17:5044 tls=true handshake_ms=44\n"
           "2026-11-02T11:39:41.530118Z DEBUG tidewater::ship::client: batch stored "
           "request_id=f3a0c7d2-5b1e-4c9a-8e47-2d6b90a13c55 records=512 bytes=30977\n"
           "```\n"
           "LB team says they replaced the amphora behind .18 at 11:38")
    S.ai(text="That's the good kind of reconnect. `10.20.4.18:5044` disappeared when the amphora was replaced at 11:38; the "
              "keepalive probes went unanswered, the kernel declared the connection dead (`os error 110`, `ETIMEDOUT`), and "
              "the next write 2.2 s later failed immediately instead of hanging. We reconnected to `10.20.4.17:5044` and "
              "the same batch (`f3a0c7d2-5b1e-4c9a-8e47-2d6b90a13c55`) was stored 70 ms later. Without keepalive that write "
              "would have gone into a dead connection and waited for TCP retransmits to give up, which takes ~15 minutes "
              "with Linux defaults (`tcp_retries2` = 15).")

    S.user("ok makes sense. commit the keepalive stuff. clippy fix as its own commit is fine for now")
    S.ai(calls=[T.git_status(), T.git_diff()])
    S.ai(calls=[T.git_commit("style(rotate): clippy len_zero in rotate::run", ["src/rotate/mod.rs"])])
    S.ai(calls=[T.git_commit("feat(ship): TCP keepalive on collector connections",
                             ["Cargo.toml", "Cargo.lock", "src/config.rs", "src/ship/client.rs", "docs/config.md",
                              "tidewater.example.toml"],
                             body="Load balancers with an idle timeout (60s on the new eu-west LB) silently drop quiet "
                                  "connections; we only noticed on the next write. Probe after `ship.keepalive` (default "
                                  "30s, \"0s\" disables; `keepalive_secs` accepted as an older spelling). socket2 was "
                                  "already in the dependency tree via tokio.")])
    c1, c2 = R.commits[-2][0][:7], R.commits[-1][0][:7]
    S.ai(text=f"Two commits on `fix/412-size-rotation`:\n- `{c1}` style(rotate): clippy len_zero in rotate::run\n"
              f"- `{c2}` feat(ship): TCP keepalive on collector connections\n\nWorking tree is clean.")

    S.user("next: backoff. reset() after every success means a flapping collector gets hit at 250ms over and over. do "
           "decorrelated jitter like https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/ and "
           "dont fully reset on success, decay it", at="12:06")
    S.ai(calls=[T.read("src/ship/backoff.rs"), T.grep("backoff\\.", "src")])
    S.ai(calls=[T.grep('^name = "(rand|fastrand|getrandom|rand_core)"', "Cargo.lock")])
    S.ai(think="Jitter needs randomness. rand isn't in the tree; fastrand (via tempfile, dev only) and getrandom (via "
               "uuid/ring) are. Using either directly is a new direct dep -> would have to ask. For spreading retries a "
               "tiny xorshift is enough; seed it from RandomState, which std seeds from the OS. No dep, no unsafe.\n\n"
               "Decorrelated jitter: sleep = min(cap, random_between(base, prev * 3)). On success: prev = max(base, "
               "prev / 2). Rename reset() -> on_success() so the semantics change is visible at call sites. Keep a "
               "with_seed constructor for deterministic tests.",
         text="Jitter needs a random source, and `rand` isn't in the tree. `getrandom` (via `uuid`/`ring`) and `fastrand` "
              "(via `tempfile`, dev-only) are, but using them directly would be a new direct dependency. For spreading "
              "retries a 10-line xorshift is plenty, seeded from `std::collections::hash_map::RandomState`, which std "
              "seeds from the OS. No new dependency, no `unsafe`.\n\nI'm also renaming `reset()` to `on_success()` since "
              "it no longer resets.",
         calls=[T.write("src/ship/backoff.rs", BACKOFF_NEW)])
    C.bins["lib"].remove("ship::backoff::tests::doubles_then_caps")
    C.bins["lib"].remove("ship::backoff::tests::reset_starts_over")
    C.add("lib", "ship::backoff::tests::stays_within_bounds", "ship::backoff::tests::grows_on_repeated_failure",
          "ship::backoff::tests::success_decays_instead_of_resetting", "ship::backoff::tests::huge_cap_does_not_overflow",
          "ship::backoff::tests::seeds_differ")
    ln = x.line("src/ship/backoff.rs", "pub struct Backoff {")
    S.ai(calls=[x.rustc_error("cargo test --workspace", "E0599", "no method named `reset` found for struct `Backoff` in the current scope",
                              "src/ship/client.rs", "self.backoff.reset();", "method not found in `Backoff`", underline="reset",
                              extra=f"    |\n   ::: src/ship/backoff.rs:{ln}:1\n    |\n{ln:<4}| pub struct Backoff {{\n    | ------------------ method `reset` not found for this struct",
                              what="lib")])
    S.ai(calls=[T.edit("src/ship/client.rs", "                    self.backoff.reset();\n",
                       "                    self.backoff.on_success();\n")])
    ln = x.line("src/ship/backoff.rs", "let hi = self.prev * 3;")
    S.ai(calls=[x.cargo_test(tail=25, fail={"ship::backoff::tests::huge_cap_does_not_overflow":
        f"thread 'ship::backoff::tests::huge_cap_does_not_overflow' panicked at src/ship/backoff.rs:{ln}:18:\n"
        "overflow when multiplying duration by scalar\n"
        "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace"})])
    S.ai(text="That's what the test is there for: with `max = Duration::MAX`, `prev` keeps growing and `prev * 3` panics. "
              "A cap that large is silly, but a panic in the shipper is worse than a silly delay. `saturating_mul` is "
              "stable since 1.53, fine for our MSRV.",
         calls=[T.edit("src/ship/backoff.rs", "        let hi = self.prev * 3;\n",
                       "        let hi = self.prev.saturating_mul(3);\n")])
    S.ai(calls=[x.cargo_test()])
    S.ai(text="All green. Summary of `src/ship/backoff.rs`:\n"
              "- `next_delay()`: uniform in `[base, 3 * prev]`, capped at `max` (decorrelated jitter).\n"
              "- `on_success()` (was `reset()`): `prev = max(base, prev / 2)`, so a flapping collector sees delays "
              "shrink gradually instead of snapping back to 250 ms.\n"
              "- RNG: xorshift64* seeded from `RandomState`; `Backoff::with_seed` for tests.\n"
              "- Tests: bounds over 200 seeds, growth, decay, `Duration::MAX` cap without overflow.")

    S.user("run the integration suite against the compose env too, want to see retries against the real collector image")
    S.ai(calls=[T.ls("tests/compose"), T.read("tests/compose/docker-compose.yml")])
    S.ai(text="The suite needs the compose environment (collector + Kafka). Bringing it up first.",
         calls=[T.bash("docker compose -f tests/compose/docker-compose.yml up -d",
                       "[+] Running 5/5\n"
                       " ✔ Network compose_default        Created                                    0.1s \n"
                       " ✔ Container compose-zookeeper-1  Started                                    0.7s \n"
                       " ✔ Container compose-kafka-1      Started                                    1.2s \n"
                       " ✔ Container compose-collector-1  Started                                    1.6s \n")])
    S.ai(text="Up. Running the integration tests serially since they share one collector.",
         calls=[("bash", {"command": "cargo test --workspace --features integration -- --test-threads=1"}, None, False)],
         stop="aborted")

    S.user("stop. that waits for kafka and takes 15 min. never run the integration suite unless I explicitly ask for it. "
           "take the compose env down", gap=(50, 80))
    S.ai(calls=[T.bash("docker compose -f tests/compose/docker-compose.yml down",
                       "[+] Running 5/5\n"
                       " ✔ Container compose-collector-1  Removed                                    0.4s \n"
                       " ✔ Container compose-kafka-1      Removed                                    1.9s \n"
                       " ✔ Container compose-zookeeper-1  Removed                                    0.6s \n"
                       " ✔ Network compose_default        Removed                                    0.2s \n")])
    S.ai(text="Stopped and torn down; nothing from the integration run was left behind. Noted: no `--features "
              "integration` unless you ask for it explicitly. The regular suite was green after the backoff change.")

    S.user("commit backoff")
    S.ai(calls=[T.git_diff(stat=True)])
    S.ai(calls=[T.git_diff(["src/ship/client.rs"])])
    S.ai(calls=[T.git_commit("feat(ship): decorrelated jitter backoff that decays on success",
                             ["src/ship/backoff.rs", "src/ship/client.rs"],
                             body="A success used to reset the delay to `base`, so a collector flapping between up and "
                                  "down got a reconnect every 250ms. Delays are now drawn from [base, 3*prev] and halve "
                                  "on success. The RNG is an in-tree xorshift seeded from RandomState; no new "
                                  "dependency.")])
    S.ai(text=f"Committed as `{R.commits[-1][0][:7]}`.")


# ---------------------------------------------------------------------------
# 13:20 - #431 from Osaka (Japanese report), then /compact
# ---------------------------------------------------------------------------

JA_REPORT = """タイトル: ローテーション後にアプリがログファイルに書き込めなくなる

tidewater 0.9.2 を root で動かしています（Ubuntu 24.04、systemd のユニットはパッケージ付属のもの）。
毎晩 03:00 のローテーション直後から、アプリ（webapp ユーザーで実行）が次のエラーを出し続けます:

```
2026-10-30 03:00:01 [ERROR] ログファイルを開けませんでした: /var/log/アプリ/出力.log: 許可がありません (os error 13)
```

ローテーション後の ls -l:

```
-rw-r----- 1 webapp webapp 104857600 10月 30 03:00 出力.log.1
-rw-r--r-- 1 root   root           0 10月 30 03:00 出力.log
```

logrotate の `create` のように、元のファイルの所有者とパーミッションを引き継いでほしいです。
今はアプリを再起動する前に手で chown しています。設定で回避する方法はありますか？"""

JA_REPLY = """ご報告ありがとうございます。原因を確認しました。

tidewater はローテーション時に新しいログファイルを作成しますが、元のファイルの所有者・グループ・パーミッションを引き継いでいませんでした。そのため root 所有の `出力.log` が作られ、webapp ユーザーのアプリから開けなくなっていました。

修正では、logrotate の `create` と同じように、新しいファイルに元のファイルの所有者・グループ・パーミッションをそのまま設定します。0.10 に含まれる予定です。

それまでの回避策としては、該当ファイルに `copytruncate = true` を設定してください（ファイル自体を作り直さないため、所有者は変わりません）。ただし、コピーと切り詰めの間に書き込まれた数行が失われる可能性があります。"""


def issue_431(x: X) -> None:
    S, T, R, C, log = x.S, x.T, x.R, x.C, x.log

    S.user("got this on #431 https://github.com/tidewater-rs/tidewater/issues/431 from a user in osaka, my japanese "
           "isnt good enough for the details. translate + check pls:\n\n" + JA_REPORT, at="13:24")
    S.ai(think="Translation: Title: after rotation the app can't write to its log file. Running tidewater 0.9.2 as root "
               "(Ubuntu 24.04, packaged unit). Right after the nightly 03:00 rotation the app (running as webapp) keeps "
               "logging: 'could not open log file: /var/log/アプリ/出力.log: permission denied (os error 13)'. ls shows "
               ".1 as webapp:webapp 0640, new live file root:root 0644. Wants owner and permissions carried over like "
               "logrotate's create. Currently chowns by hand before restarting the app. Asks for a config workaround.\n\n"
               "Check compress.rs rotate_rename: OpenOptions::new().write(true).create_new(true).open(base) -> owner is "
               "the tidewater process (root), mode 0666 & ~umask(022) = 0644. Exactly what they see. Also 0644 would make "
               "the log world-readable while the original was 0640, a small information leak as well.",
         text="Translation:\n\n"
              "> **Title: The app can no longer write to its log file after rotation**\n>\n"
              "> I run tidewater 0.9.2 as root (Ubuntu 24.04, the unit file from the package). Right after the nightly "
              "03:00 rotation the app (running as user `webapp`) keeps logging:\n>\n"
              "> `[ERROR] Could not open log file: /var/log/アプリ/出力.log: Permission denied (os error 13)`\n>\n"
              "> `ls -l` after the rotation: `出力.log.1` is `webapp webapp` with `-rw-r-----`; the new `出力.log` is "
              "`root root` with `-rw-r--r--` and size 0.\n>\n"
              "> I'd like the owner and permissions of the original file to be carried over, like logrotate's `create`. "
              "Right now I chown by hand before restarting the app. Is there a config workaround?\n\n"
              "(`アプリ` = \"app\", `出力` = \"output\"; the path itself is fine, we only handle it as a `Path`.)\n\n"
              "Checking the code:",
         calls=[T.read("src/rotate/compress.rs"), T.read("src/rotate/mod.rs")])
    S.ai(text="Confirmed. `rotate_rename()` creates the new live file with\n\n"
              "```rust\nOpenOptions::new().write(true).create_new(true).open(base)?;\n```\n\n"
              "so it belongs to whoever runs tidewater (root under the packaged unit) and gets `0666 & ~umask` = `0644`. "
              "That's exactly the `root root -rw-r--r--` in their listing. Two problems, really: the app can't write, "
              "and a `0640` log just became world-readable.\n\n"
              "Workaround for them today: `copytruncate = true` on that file. It never recreates the file, so owner and "
              "mode stay, at the cost of possibly losing lines written between the copy and the truncate.\n\n"
              "Fix: stat the old file before the rename and give the new one the same uid, gid and permission bits.")

    S.user("fix it like logrotate's create default: same owner+mode as the old file. std has chown now right? were on 1.75")
    S.ai(text="Yes: `std::os::unix::fs::chown`, `fchown` and `lchown` are stable since 1.73. I'll use `fchown` on the handle "
              "we just created, so there's no window where the path could be swapped underneath us.",
         calls=[T.edit("src/rotate/compress.rs", "use std::io::{self, BufReader, BufWriter};\n",
                       "use std::io::{self, BufReader, BufWriter};\n"
                       "use std::os::unix::fs::{fchown, MetadataExt, OpenOptionsExt, PermissionsExt};\n"),
                T.edit("src/rotate/compress.rs",
                       "/// Renames the live file to `.1` and creates a fresh, empty live file.\n"
                       "pub fn rotate_rename(base: &Path) -> io::Result<PathBuf> {\n"
                       "    let first = archive_path(base, 1, false);\n    fs::rename(base, &first)?;\n"
                       "    OpenOptions::new().write(true).create_new(true).open(base)?;\n    Ok(first)\n}\n",
                       "/// Renames the live file to `.1` and creates a fresh, empty live file with\n"
                       "/// the old file's owner, group and permissions, like logrotate's `create`.\n"
                       "/// Without this the new file belongs to whoever runs tidewater (usually\n"
                       "/// root) and the application can't open it any more (#431).\n"
                       "pub fn rotate_rename(base: &Path) -> io::Result<PathBuf> {\n"
                       "    let first = archive_path(base, 1, false);\n    let meta = fs::metadata(base)?;\n"
                       "    fs::rename(base, &first)?;\n"
                       "    let f = OpenOptions::new().write(true).create_new(true).mode(meta.mode() & 0o7777).open(base)?;\n"
                       "    fchown(&f, Some(meta.uid()), Some(meta.gid()))?;\n    Ok(first)\n}\n"),
                T.edit("src/rotate/compress.rs",
                       "    #[test]\n    fn shift_drops_oldest() {",
                       "    #[test]\n    fn rename_keeps_owner_and_mode() {\n"
                       "        let dir = tempfile::tempdir().unwrap();\n"
                       "        // The reporter's file name from #431.\n"
                       "        let base = dir.path().join(\"出力.log\");\n"
                       "        fs::write(&base, \"一行目\\n\").unwrap();\n"
                       "        fs::set_permissions(&base, fs::Permissions::from_mode(0o664)).unwrap();\n"
                       "        let before = fs::metadata(&base).unwrap();\n"
                       "        rotate_rename(&base).unwrap();\n"
                       "        let after = fs::metadata(&base).unwrap();\n"
                       "        assert_eq!(after.mode() & 0o7777, 0o664);\n"
                       "        assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));\n"
                       "        assert_eq!(after.len(), 0);\n    }\n\n"
                       "    #[test]\n    fn shift_drops_oldest() {")])
    C.add("lib", "rotate::compress::tests::rename_keeps_owner_and_mode")
    ln = x.line("src/rotate/compress.rs", "assert_eq!(after.mode() & 0o7777, 0o664);")
    S.ai(calls=[x.cargo_test("cargo test --workspace compress", filt="compress", fail={
        "rotate::compress::tests::rename_keeps_owner_and_mode":
        f"thread 'rotate::compress::tests::rename_keeps_owner_and_mode' panicked at src/rotate/compress.rs:{ln}:9:\n"
        "assertion `left == right` failed\n  left: 420\n right: 436\n"
        "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace"})])
    S.ai(think="420 = 0o644, 436 = 0o664. The mode passed to open() is masked by the process umask (022 here), so group "
               "write was dropped. The reporter's 0640 would survive a 022 umask, but 0664 or 0660 wouldn't. fchmod via "
               "File::set_permissions isn't subject to umask. Order: fchown first, then chmod, because chown may clear "
               "setuid/setgid bits. Create with 0o600 so the file is never more open than intended in between.",
         text="`420` is `0o644` and `436` is `0o664`: the mode given to `open()` is filtered through the process umask "
              "(`022` here), so group-write got dropped. The reporter's `0640` would have survived, but `0660` wouldn't. "
              "`File::set_permissions` (fchmod) isn't subject to the umask, so: create with `0600`, `fchown`, then set "
              "the exact bits (chown first, since it can clear setuid/setgid).",
         calls=[T.edit("src/rotate/compress.rs",
                       "    let f = OpenOptions::new().write(true).create_new(true).mode(meta.mode() & 0o7777).open(base)?;\n"
                       "    fchown(&f, Some(meta.uid()), Some(meta.gid()))?;\n",
                       "    // Start private; open()'s mode is filtered by the umask, fchmod is not.\n"
                       "    let f = OpenOptions::new().write(true).create_new(true).mode(0o600).open(base)?;\n"
                       "    fchown(&f, Some(meta.uid()), Some(meta.gid()))?;\n"
                       "    f.set_permissions(fs::Permissions::from_mode(meta.mode() & 0o7777))?;\n")])
    S.ai(calls=[x.cargo_test()])
    S.ai(text="Green. `rotate_rename()` now stats the live file, renames it, creates the new one `0600`, `fchown`s it to the "
              "old uid/gid and then sets the old permission bits exactly. The test uses the reporter's `出力.log` name and "
              "a `0664` mode so the umask case is covered. When tidewater doesn't run as root and the file belongs to "
              "someone else, `fchown` fails with `EPERM` and the rotation is reported as failed, which is better than "
              "silently producing a file the app can't open.")

    S.user("reply to them on the issue, in japanese. short + polite, say the fix lands in 0.10 and mention the "
           "copytruncate workaround")
    S.ai(text="Here's a reply you can paste:\n\n---\n\n" + JA_REPLY + "\n\n---\n\n"
              "Roughly: thanks; we found the cause (the new file didn't inherit owner/group/permissions, so a root-owned "
              "`出力.log` was created); the fix copies them like logrotate's `create` and ships in 0.10; until then use "
              "`copytruncate = true`, with the caveat that a few lines written between copy and truncate can be lost.")

    S.user("thx. commit")
    S.ai(calls=[T.git_diff()])
    S.ai(calls=[T.git_commit("fix(rotate): keep owner, group and mode of the live file on rename rotation (#431)",
                             ["src/rotate/compress.rs"],
                             body="The new live file was created by the tidewater process (root under the packaged "
                                  "unit) with 0666 & ~umask, so applications running as another user could no longer "
                                  "open it, and 0640 logs became world-readable. Copy uid/gid and permission bits from "
                                  "the old file, like logrotate's `create`.\n\nFixes #431")])
    S.ai(text=f"Committed as `{R.commits[-1][0][:7]}` with `Fixes #431`.")

    S.user("how many tests do we have now vs this morning")
    out, _ = C.test(compile_secs=0.31, compiling=())
    res = "\n".join(l for l in out.splitlines() if l.startswith("test result"))
    S.ai(calls=[T.bash("cargo test --workspace 2>&1 | grep -E '^test result'", res)])
    S.ai(text=f"{C.count()} now vs 40 this morning: +2 in `tests/rotate_issue_412.rs`, +1 `age_counts_unread_bytes`, "
              "+1 `keepalive_spellings`, +3 net in backoff (5 new, 2 replaced), +1 `rename_keeps_owner_and_mode`.")

    S.user("/compact", at="14:21")
    S.ai(text="Compacted. Picking up from here: branch `fix/412-size-rotation`, working tree clean, all tests green; "
              "ground rules unchanged (no edits in `migrations/`, MSRV 1.75, ask before new deps, no integration suite "
              "unless asked).")

    S.user("the LB team wants one concrete request id from last nights resets to trace on their side. whats the first "
           "one again?")
    S.ai(text="I no longer have the table from earlier in context, so I'll pull it from the log again.",
         calls=[T.grep("write failed", "/var/log/tidewater/ship.log")])
    ts, rid, peer, idle = log.resets[0]
    S.ai(text=f"First reset last night:\n\n- time: `{ts}`\n- request_id: `{rid}`\n- backend: `{peer}` "
              f"(via `ingest.eu-west.tidewater.dev`)\n- idle before the write: {idle} ms\n- error: `Connection reset by peer "
              "(os error 104)`\n\nThe same request id appears again in the `batch stored` line right after the reconnect, "
              "so they should see it on the new backend as a successful frame too.")

    S.user("and how many per backend ip")
    per = {}
    for _, _, p, _ in log.resets:
        per[p] = per.get(p, 0) + 1
    out = "\n".join(f"{n:>7} {p})" for p, n in sorted(per.items(), key=lambda kv: -kv[1]))
    S.ai(calls=[T.bash("grep 'write failed' /var/log/tidewater/ship.log | grep -o 'peer=Some([0-9.:]*)' | sort | uniq -c | sort -rn",
                       "\n".join(f"{n:>7} peer=Some({p})" for p, n in sorted(per.items(), key=lambda kv: -kv[1])))])
    S.ai(text="\n".join(f"- `{p}`: {n}" for p, n in sorted(per.items(), key=lambda kv: -kv[1])) +
              f"\n\n{len(log.resets)} in total, spread over both backends, which fits an LB-wide idle timeout rather than "
              "one bad member.")

    S.user("anything else odd in that log besides the resets? they asked")
    S.ai(calls=[T.read("/var/log/tidewater/ship.log")])
    S.ai(text="Read through the whole file again. Nothing else that points at the network:\n\n"
              "- Every `write failed` is followed within ~0.3 s by `connected` and a `batch stored` with the same "
              "`request_id`, so no batch was lost or rejected; no `collector asked us to retry`, no `rejected`.\n"
              "- TLS handshakes stay between roughly 30 and 65 ms on both `10.20.4.17:5044` and `10.20.4.18:5044`, so "
              "neither backend is slow.\n"
              "- The `archive` sink (`10.20.9.3:5044`, plain TCP, not behind the LB) never reconnects in the whole "
              "window.\n"
              "- The last lines show a normal size rotation of `/var/log/nginx/access.log` at 250 MiB with a 0.094 "
              "gzip ratio.\n\n"
              "So from our side it's only the idle resets.")


# ---------------------------------------------------------------------------
# 14:35 - `tidewater status`, MSRV, rotate alias, macOS CI
# ---------------------------------------------------------------------------

STATE_STATUS = r'''
/// One row of the `offsets` table, as `tidewater status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FileOffsets {
    pub path: String,
    pub inode: u64,
    /// Bytes read from the file.
    pub offset: u64,
    /// Bytes acknowledged by the collector.
    pub shipped: u64,
    /// Unix seconds of the last update.
    pub updated_at: i64,
}
'''

STATUS_FN = r'''
/// `tidewater status`: what the state database knows about each file.
pub fn status(cfg: &Config, json: bool) -> anyhow::Result<()> {
    let state = State::open_read_only(&cfg.state_path)
        .inspect_err(|_| eprintln!("hint: state_path is {}", cfg.state_path.display()))?;
    let rows = state.all_offsets()?;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &rows)?;
        writeln!(out)?;
    } else {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
        out.write_all(render_table(&rows, now).as_bytes())?;
    }
    for f in &cfg.files {
        let p = f.path.to_string_lossy();
        if !rows.iter().any(|r| r.path == p) {
            eprintln!("note: {p} is configured but has no state yet");
        }
    }
    Ok(())
}

fn render_table(rows: &[FileOffsets], now: i64) -> String {
    let w = rows.iter().map(|r| r.path.chars().count()).max().unwrap_or(0).max(4);
    let mut s = format!("{:<w$}  {:>9}  {:>10}  {:>10}  {:>10}  UPDATED\n", "PATH", "INODE", "READ", "SHIPPED", "LAG");
    for r in rows {
        s += &format!(
            "{:<w$}  {:>9}  {:>10}  {:>10}  {:>10}  {}s ago\n",
            r.path,
            r.inode,
            human(r.offset),
            human(r.shipped),
            human(r.offset.saturating_sub(r.shipped)),
            (now - r.updated_at).max(0)
        );
    }
    s
}

/// 1536 -> "1.5 KiB"; exact bytes below 1 KiB.
fn human(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(path: &str, offset: u64, shipped: u64) -> FileOffsets {
        FileOffsets { path: path.into(), inode: 1835042, offset, shipped, updated_at: 1_800_000_000 }
    }

    #[test]
    fn table_lines_up() {
        let t = render_table(&[row("/var/log/a.log", 2048, 1024), row("/var/log/nginx/access.log", 5 << 20, 5 << 20)], 1_800_000_004);
        let lines: Vec<_> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].starts_with("/var/log/a.log             "), "{t}");
        assert!(lines[1].contains("2.0 KiB") && lines[1].ends_with("4s ago"), "{t}");
        assert!(lines[2].contains("5.0 MiB") && lines[2].contains("0 B"), "{t}");
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(183 << 20), "183.0 MiB");
    }
}
'''


def status_cmd(x: X) -> None:
    S, T, R, C = x.S, x.T, x.R, x.C

    S.user("new subcommand: `tidewater status` printing each file's read offset, shipped offset, inode and last update "
           "from the state db. table by default, --json for scripts. theres a copy of the staging state db at "
           "/tmp/staging-state.db if you want to try it")
    S.ai(text="Context was compacted, so I'll re-read the pieces involved: the state module, the schema, and the CLI.",
         calls=[T.read("src/state.rs")])
    S.ai(calls=[T.read("migrations/0001_init.sql"), T.read("migrations/0002_kv.sql"), T.read("migrations/0003_shipped_offset.sql")])
    S.ai(calls=[T.read("src/cli.rs")])
    S.ai(calls=[T.read("src/main.rs"), T.read("src/config.rs")])
    S.ai(think="Schema has everything: offsets(path, inode, offset, updated_at) + shipped from 0003. No schema change "
               "needed, good (migrations/ is off limits anyway).\n\n"
               "State::open() runs migrations and sets WAL pragmas, i.e. it writes. `status` may run while the daemon is "
               "up, or against an older db file; it must not migrate anything. Add State::open_read_only with "
               "SQLITE_OPEN_READ_ONLY, no migrate. WAL allows a reader alongside the daemon's writer.\n\n"
               "Pieces: FileOffsets (Serialize) + all_offsets() ordered by path in state.rs; Command::Status { json } "
               "in cli.rs; status() + render_table() + human(); main.rs dispatch.",
         text="The schema already has everything (`offsets.path/inode/offset/updated_at` plus `shipped` from 0003), so no "
              "schema change. One design point: `State::open()` runs migrations and sets pragmas, i.e. it writes. "
              "`status` may run next to the daemon or against an older file, so I'll add a read-only open that never "
              "migrates.",
         calls=[T.edit("src/state.rs", "use rusqlite::{params, Connection, OptionalExtension};\n",
                       "use rusqlite::{params, Connection, OpenFlags, OptionalExtension};\n"),
                T.edit("src/state.rs", "#[derive(Clone)]\npub struct State {",
                       STATE_STATUS.lstrip("\n") + "\n#[derive(Clone)]\npub struct State {"),
                T.edit("src/state.rs", "    #[cfg(test)]\n    pub fn in_memory() -> State {",
                       "    /// Opens an existing database without migrating or writing anything, for\n"
                       "    /// `tidewater status`. Works next to a running daemon (WAL).\n"
                       "    pub fn open_read_only(path: &Path) -> anyhow::Result<State> {\n"
                       "        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)\n"
                       "            .with_context(|| format!(\"opening {} read-only\", path.display()))?;\n"
                       "        Ok(State { conn: Arc::new(Mutex::new(conn)) })\n    }\n\n"
                       "    #[cfg(test)]\n    pub fn in_memory() -> State {"),
                T.edit("src/state.rs", "    pub fn kv_get(&self, key: &str)",
                       "    /// Every tracked file, ordered by path.\n"
                       "    pub fn all_offsets(&self) -> anyhow::Result<Vec<FileOffsets>> {\n"
                       "        let conn = self.conn.lock().unwrap();\n"
                       "        let mut stmt = conn.prepare(\"SELECT path, inode, offset, shipped, updated_at FROM offsets ORDER BY path\")?;\n"
                       "        let rows = stmt.query_map([], |r| {\n"
                       "            Ok(FileOffsets {\n"
                       "                path: r.get(0)?,\n"
                       "                inode: r.get::<_, i64>(1)? as u64,\n"
                       "                offset: r.get::<_, i64>(2)? as u64,\n"
                       "                shipped: r.get::<_, i64>(3)? as u64,\n"
                       "                updated_at: r.get(4)?,\n"
                       "            })\n        })?;\n"
                       "        Ok(rows.collect::<Result<_, _>>()?)\n    }\n\n"
                       "    pub fn kv_get(&self, key: &str)"),
                T.edit("src/state.rs", "    #[test]\n    fn kv_roundtrip() {",
                       "    #[test]\n    fn all_offsets_sorted_by_path() {\n"
                       "        let s = State::in_memory();\n"
                       "        s.set_offset(Path::new(\"/var/log/z.log\"), 2, 20).unwrap();\n"
                       "        s.set_offset(Path::new(\"/var/log/a.log\"), 1, 10).unwrap();\n"
                       "        s.set_shipped(Path::new(\"/var/log/a.log\"), 7).unwrap();\n"
                       "        let rows = s.all_offsets().unwrap();\n"
                       "        assert_eq!(rows.iter().map(|r| r.path.as_str()).collect::<Vec<_>>(), [\"/var/log/a.log\", \"/var/log/z.log\"]);\n"
                       "        assert_eq!((rows[0].offset, rows[0].shipped), (10, 7));\n    }\n\n"
                       "    #[test]\n    fn kv_roundtrip() {")])
    C.add("lib", "state::tests::all_offsets_sorted_by_path")
    S.ai(calls=[T.edit("src/cli.rs", "use std::path::{Path, PathBuf};\n",
                       "use std::io::Write;\nuse std::path::{Path, PathBuf};\nuse std::time::{SystemTime, UNIX_EPOCH};\n"),
                T.edit("src/cli.rs", "use tracing_subscriber::EnvFilter;\n",
                       "use tracing_subscriber::EnvFilter;\n\nuse crate::config::Config;\nuse crate::state::{FileOffsets, State};\n"),
                T.edit("src/cli.rs",
                       "        /// The file to rotate; it must be listed in the config.\n        path: PathBuf,\n    },\n}\n",
                       "        /// The file to rotate; it must be listed in the config.\n        path: PathBuf,\n    },\n"
                       "    /// Show per-file offsets from the state database.\n    Status {\n"
                       "        /// Machine-readable output.\n        #[arg(long)]\n        json: bool,\n    },\n}\n"),
                T.edit("src/cli.rs", "// Accepts \"10MB\", \"10 MB\", \"10mb\".\n",
                       STATUS_FN.lstrip("\n").split("#[cfg(test)]")[0] + "// Accepts \"10MB\", \"10 MB\", \"10mb\".\n")])
    R.fs["src/cli.rs"] += "\n#[cfg(test)]" + STATUS_FN.split("#[cfg(test)]")[1]
    S.ai(text="(Appended the unit tests for `render_table`/`human` at the end of `src/cli.rs` too.) Now `main.rs`:",
         calls=[T.edit("src/main.rs",
                       "        Command::RotateNow { path } => tidewater::rotate::rotate_now(&cfg, &path).await,\n",
                       "        Command::RotateNow { path } => tidewater::rotate::rotate_now(&cfg, &path).await,\n"
                       "        Command::Status { json } => tidewater::cli::status(&cfg, json),\n")])
    C.add("lib", "cli::tests::table_lines_up", "cli::tests::human_sizes")
    S.ai(calls=[x.cargo_test()])
    status_toml = ('state_path = "/tmp/staging-state.db"\n\n[[files]]\npath = "/var/log/nginx/access.log"\n\n'
                   '[[files]]\npath = "/var/log/nginx/error.log"\n\n[[files]]\npath = "/var/log/legacy/billing.log"\n\n'
                   '[[files]]\npath = "/var/log/app/worker.log"\n\n[ship]\n[[ship.sinks]]\nname = "eu-west"\n'
                   'address = "ingest.eu-west.tidewater.dev:5044"\n')
    S.ai(text="Green. Trying it on the staging copy with a throwaway config pointing at it:",
         calls=[T.write("/tmp/status-staging.toml", status_toml)])
    rows = [("/var/log/legacy/billing.log", 2883617, 6_117_204, 6_117_204, 3),
            ("/var/log/nginx/access.log", 1835042, 192_118_733, 191_987_417, 2),
            ("/var/log/nginx/error.log", 1835047, 88_412, 88_412, 41)]

    def human(n: int) -> str:
        if n < 1024:
            return f"{n} B"
        v, u = n / 1024, 0
        while v >= 1024 and u < 3:
            v /= 1024
            u += 1
        return f"{v:.1f} {['KiB', 'MiB', 'GiB', 'TiB'][u]}"

    w = max(len(r[0]) for r in rows)
    table = f"{'PATH':<{w}}  {'INODE':>9}  {'READ':>10}  {'SHIPPED':>10}  {'LAG':>10}  UPDATED\n" + "".join(
        f"{p:<{w}}  {ino:>9}  {human(o):>10}  {human(s):>10}  {human(o - s):>10}  {ago}s ago\n" for p, ino, o, s, ago in rows)
    S.ai(calls=[T.bash("cargo run -q -- -c /tmp/status-staging.toml status",
                       table + "note: /var/log/app/worker.log is configured but has no state yet")])
    jrows = [{"path": p, "inode": ino, "offset": o, "shipped": s, "updated_at": 1793976004 - ago} for p, ino, o, s, ago in rows]
    S.ai(calls=[T.bash("cargo run -q -- -c /tmp/status-staging.toml status --json 2>/dev/null",
                       json.dumps(jrows, indent=2))])
    S.ai(text="Works against the staging copy:\n\n```\n" + table + "```\n\n"
              "`access.log` is 128.2 KiB behind on shipping, the others are caught up. `/var/log/app/worker.log` is in my "
              "throwaway config but not in the db, so it gets a note on stderr rather than a fake row. `--json` prints the "
              "rows as a JSON array.")

    S.user("--json should be one object per line, not an array. we pipe it into jq -c and friends")
    S.ai(calls=[T.edit("src/cli.rs",
                       "        serde_json::to_writer_pretty(&mut out, &rows)?;\n        writeln!(out)?;\n",
                       "        // One object per line, so `jq -c`, `grep` and `while read` all work.\n"
                       "        for r in &rows {\n            serde_json::to_writer(&mut out, r)?;\n            writeln!(out)?;\n        }\n"),
                T.edit("src/cli.rs", "    #[test]\n    fn human_sizes() {",
                       "    #[test]\n    fn json_is_one_object_per_line() {\n"
                       "        let rows = [row(\"/a\", 1, 1), row(\"/b\", 2, 1)];\n"
                       "        let mut buf = Vec::new();\n"
                       "        for r in &rows {\n            serde_json::to_writer(&mut buf, r).unwrap();\n            buf.push(b'\\n');\n        }\n"
                       "        let text = String::from_utf8(buf).unwrap();\n"
                       "        for line in text.lines() {\n"
                       "            let v: serde_json::Value = serde_json::from_str(line).unwrap();\n"
                       "            assert!(v.is_object());\n        }\n"
                       "        assert_eq!(text.lines().count(), 2);\n    }\n\n"
                       "    #[test]\n    fn human_sizes() {")])
    C.add("lib", "cli::tests::json_is_one_object_per_line")
    S.ai(calls=[x.cargo_test("cargo test --workspace cli::", filt="cli::")])
    S.ai(calls=[T.bash("cargo run -q -- -c /tmp/status-staging.toml status --json 2>/dev/null | jq -c '{path, lag: (.offset - .shipped)}'",
                       "\n".join(json.dumps({"path": p, "lag": o - s}, separators=(",", ":")) for p, _, o, s, _ in rows))])
    S.ai(text="Now NDJSON: one object per line. `jq -c` over it works as shown.")

    S.user("msrv check?")
    S.ai(calls=[T.bash("rustup toolchain list", "stable-x86_64-unknown-linux-gnu (default)\n1.75.0-x86_64-unknown-linux-gnu")])
    ln = x.line("src/cli.rs", ".inspect_err(")
    src = x.src_line("src/cli.rs", ".inspect_err(")
    c = src.index("inspect_err") + 1
    err = ("    Checking tidewater v0.9.3 (/home/dev/src/tidewater)\n"
           "error[E0658]: use of unstable library feature 'result_option_inspect'\n"
           f"   --> src/cli.rs:{ln}:{c}\n    |\n{ln:<4}| {src}\n    | {' ' * (c - 1)}{'^' * len('inspect_err')}\n    |\n"
           "    = note: see issue #91345 <https://github.com/rust-lang/rust/issues/91345> for more information\n\n"
           "For more information about this error, try `rustc --explain E0658`.\n"
           "error: could not compile `tidewater` (lib) due to 1 previous error\n")
    S.ai(calls=[T.bash("cargo +1.75.0 check --workspace --locked --all-targets", err, error=True, code=101)])
    S.ai(text="Caught one: `Result::inspect_err` was only stabilized in 1.76. Replacing it with `with_context`, which reads "
              "better anyway because the hint ends up in the error chain instead of a separate stderr line.",
         calls=[T.edit("src/cli.rs",
                       "    let state = State::open_read_only(&cfg.state_path)\n"
                       "        .inspect_err(|_| eprintln!(\"hint: state_path is {}\", cfg.state_path.display()))?;\n",
                       "    let state = State::open_read_only(&cfg.state_path)\n"
                       "        .with_context(|| format!(\"reading state (state_path = {})\", cfg.state_path.display()))?;\n")])
    S.ai(calls=[T.bash("cargo +1.75.0 check --workspace --locked --all-targets",
                       "    Checking tidewater v0.9.3 (/home/dev/src/tidewater)\n"
                       "    Finished dev [unoptimized + debuginfo] target(s) in 4.82s")])
    S.ai(calls=[x.cargo_test()])
    S.ai(text="MSRV is clean with 1.75.0 now, and the normal suite is still green. The only 1.76+ API was "
              "`inspect_err`; everything else from today (`saturating_mul`, `fchown`, `Duration::is_zero`) is older than "
              "1.75.")

    S.user("commit. then rename `rotate-now` to just `rotate`, rotate-now is silly")
    S.ai(calls=[T.git_diff()])
    S.ai(calls=[T.git_commit("feat(cli): `tidewater status` shows per-file offsets from the state db",
                             ["src/cli.rs", "src/main.rs", "src/state.rs"],
                             body="Table by default, `--json` prints one object per line. Opens the database read-only "
                                  "and never migrates, so it is safe next to a running daemon.")])
    S.ai(calls=[T.grep("rotate-now|RotateNow|rotate_now", ".")])
    S.ai(calls=[T.edit("src/cli.rs", "    /// Rotate one file immediately, whatever its policy says.\n    RotateNow {",
                       "    /// Rotate one file immediately, whatever its policy says.\n    Rotate {"),
                T.edit("src/main.rs", "        Command::RotateNow { path } => tidewater::rotate::rotate_now(&cfg, &path).await,\n",
                       "        Command::Rotate { path } => tidewater::rotate::rotate_now(&cfg, &path).await,\n"),
                T.edit("src/rotate/mod.rs", "/// `tidewater rotate-now <path>`.\n", "/// `tidewater rotate <path>`.\n"),
                T.edit("docs/ops.md", "    tidewater rotate-now /var/log/nginx/access.log\n",
                       "    tidewater rotate /var/log/nginx/access.log\n")])
    S.ai(calls=[x.cargo_test(tail=12)])
    S.ai(text="Renamed: `Command::RotateNow` → `Command::Rotate`, so the subcommand is `tidewater rotate <path>`; "
              "`docs/ops.md` and the doc comment updated. I left the internal function name `rotate_now()` alone. Note "
              "this breaks anything that calls `tidewater rotate-now` today.")

    S.user("ah right, no, keep rotate-now as an alias. the ansible playbooks call it and I dont want to chase that")
    S.ai(calls=[T.edit("src/cli.rs", "    /// Rotate one file immediately, whatever its policy says.\n    Rotate {",
                       "    /// Rotate one file immediately, whatever its policy says.\n"
                       "    #[command(alias = \"rotate-now\")]\n    Rotate {"),
                T.edit("src/cli.rs", "    #[test]\n    fn human_sizes() {",
                       "    #[test]\n    fn rotate_now_is_still_accepted() {\n"
                       "        for name in [\"rotate\", \"rotate-now\"] {\n"
                       "            let cli = Cli::try_parse_from([\"tidewater\", name, \"/var/log/a.log\"]).unwrap();\n"
                       "            assert!(matches!(cli.command, Some(Command::Rotate { .. })), \"{name}\");\n"
                       "        }\n    }\n\n"
                       "    #[test]\n    fn human_sizes() {"),
                T.edit("docs/ops.md", "rotates one file immediately, whatever its policy says.",
                       "rotates one file immediately, whatever its policy says (`rotate-now` is\nstill accepted as an alias).")])
    C.add("lib", "cli::tests::rotate_now_is_still_accepted")
    S.ai(calls=[x.cargo_test()])
    S.ai(calls=[T.bash("cargo run -q -- rotate --help",
                       "Rotate one file immediately, whatever its policy says\n\n"
                       "Usage: tidewater rotate [OPTIONS] <PATH>\n\n"
                       "Arguments:\n  <PATH>  The file to rotate; it must be listed in the config\n\n"
                       "Options:\n  -c, --config <CONFIG>          Path to the config file [env: TIDEWATER_CONFIG=] [default: /etc/tidewater/tidewater.toml]\n"
                       "      --log-format <LOG_FORMAT>  Log output format [default: text] [possible values: text, json]\n"
                       "  -v, --verbose...               More output (-v, -vv)\n"
                       "  -h, --help                     Print help")])
    S.ai(text="`rotate-now` is a hidden alias of `rotate` (clap `alias`, so it doesn't clutter `--help`); "
              "`rotate_now_is_still_accepted` checks both spellings. Green.")

    S.user("commit")
    S.ai(calls=[T.git_commit("feat(cli): rename `rotate-now` to `rotate`, keep the old name as an alias",
                             ["src/cli.rs", "src/main.rs", "src/rotate/mod.rs", "docs/ops.md"])])
    S.ai(text=f"Committed as `{R.commits[-1][0][:7]}`.")


# ---------------------------------------------------------------------------
# 15:10 - macOS CI, changelog, the version bump that wasn't
# ---------------------------------------------------------------------------


def ci_and_changelog(x: X) -> None:
    S, T, R, C = x.S, x.T, x.R, x.C
    ln_use = x.line("tests/rotate_issue_412.rs", "use std::os::linux::fs::MetadataExt;")
    ln_ino = x.line("tests/rotate_issue_412.rs", ".st_ino();")
    src_ino = x.src_line("tests/rotate_issue_412.rs", ".st_ino();")
    c_ino = src_ino.index("st_ino") + 1
    S.user("pushed the branch, CI is red on macos: "
           "https://github.com/tidewater-rs/tidewater/actions/runs/11873024119/job/33091765512\n\n```\n"
           "Run cargo test --workspace --locked\n"
           "  cargo test --workspace --locked\n  shell: /bin/bash -e {0}\n  env:\n    CARGO_TERM_COLOR: always\n"
           "    CARGO_HOME: /Users/runner/.cargo\n    CARGO_INCREMENTAL: 0\n"
           "   Compiling libc v0.2.152\n   Compiling proc-macro2 v1.0.78\n   Compiling cc v1.0.83\n"
           "   Compiling libsqlite3-sys v0.27.0\n   Compiling socket2 v0.5.5\n   Compiling tokio v1.35.1\n"
           "   Compiling rusqlite v0.30.0\n   Compiling tidewater v0.9.3 (/Users/runner/work/tidewater/tidewater)\n"
           "error[E0433]: failed to resolve: could not find `linux` in `os`\n"
           f" --> tests/rotate_issue_412.rs:{ln_use}:14\n  |\n{ln_use} | use std::os::linux::fs::MetadataExt;\n"
           "  |              ^^^^^ could not find `linux` in `os`\n  |\n"
           "note: found an item that was configured out\n"
           " --> /rustc/90b35a6239c3d8bdabc530a6a0816f7ff89a0aaf/library/std/src/os/mod.rs:114:13\n\n"
           "error[E0599]: no method named `st_ino` found for struct `Metadata` in the current scope\n"
           f"  --> tests/rotate_issue_412.rs:{ln_ino}:{c_ino}\n   |\n{ln_ino} | {src_ino}\n"
           f"   | {' ' * (c_ino - 1)}^^^^^^ method not found in `Metadata`\n\n"
           "Some errors have detailed explanations: E0433, E0599.\n"
           "For more information about an error, try `rustc --explain E0433`.\n"
           "error: could not compile `tidewater` (test \"rotate_issue_412\") due to 2 previous errors\n"
           "warning: build failed, waiting for other jobs to finish...\n"
           "Error: Process completed with exit code 101.\n```", at="15:12")
    S.ai(text="My fault: the #412 regression test uses the Linux-only `std::os::linux::fs::MetadataExt::st_ino`. The "
              "portable one is `std::os::unix::fs::MetadataExt::ino()`, which the watcher already uses.",
         calls=[T.grep("os::linux|st_ino|st_dev", "."), T.read("tests/rotate_issue_412.rs")])
    S.ai(calls=[T.edit("tests/rotate_issue_412.rs", "use std::os::linux::fs::MetadataExt;\n", "use std::os::unix::fs::MetadataExt;\n"),
                T.edit("tests/rotate_issue_412.rs", ".st_ino();", ".ino();")])
    S.ai(calls=[x.cargo_test("cargo test --workspace --test rotate_issue_412", only="tests/rotate_issue_412.rs",
                             compiling=(f"tidewater v0.9.3 ({CWD})",))])
    S.ai(text="Passes on Linux. Let me see whether I can at least type-check for macOS here.",
         calls=[T.bash("rustup target add aarch64-apple-darwin",
                       "info: downloading component 'rust-std' for 'aarch64-apple-darwin'\n"
                       "info: installing component 'rust-std' for 'aarch64-apple-darwin'\n"
                       " 26.4 MiB /  26.4 MiB (100 %)  19.1 MiB/s in  1s ETA:  0s")])
    S.ai(calls=[T.bash("cargo check --workspace --all-targets --target aarch64-apple-darwin",
                       "   Compiling cc v1.0.83\n   Compiling libsqlite3-sys v0.27.0\n"
                       "    Checking libc v0.2.152\n    Checking socket2 v0.5.5\n"
                       "error: failed to run custom build command for `libsqlite3-sys v0.27.0`\n\n"
                       "Caused by:\n  process didn't exit successfully: "
                       "`/home/dev/src/tidewater/target/debug/build/libsqlite3-sys-5a0e3c9f1b7d2e44/build-script-build` "
                       "(exit status: 1)\n  --- stdout\n"
                       "  cargo:rerun-if-env-changed=LIBSQLITE3_SYS_USE_PKG_CONFIG\n"
                       "  cargo:include=/home/dev/.cargo/registry/src/index.crates.io-6f17d22bba15001f/libsqlite3-sys-0.27.0/sqlite3\n"
                       "  cargo:rerun-if-changed=sqlite3/sqlite3.c\n  cargo:rerun-if-changed=sqlite3/wasm32-wasi-vfs.c\n"
                       "  cargo:rerun-if-env-changed=SQLITE_MAX_VARIABLE_NUMBER\n"
                       "  TARGET = Some(\"aarch64-apple-darwin\")\n  HOST = Some(\"x86_64-unknown-linux-gnu\")\n"
                       "  cargo:rerun-if-env-changed=CC_aarch64-apple-darwin\n  CC_aarch64-apple-darwin = None\n"
                       "  cargo:rerun-if-env-changed=CC_aarch64_apple_darwin\n  CC_aarch64_apple_darwin = None\n"
                       "  cargo:rerun-if-env-changed=TARGET_CC\n  TARGET_CC = None\n  cargo:rerun-if-env-changed=CC\n  CC = None\n"
                       "  running: \"cc\" \"-O3\" \"-ffunction-sections\" \"-fdata-sections\" \"-fPIC\" \"-arch\" \"arm64\" "
                       "\"-I\" \"sqlite3\" \"-DSQLITE_CORE\" \"-DSQLITE_DEFAULT_FOREIGN_KEYS=1\" \"-DSQLITE_ENABLE_API_ARMOR\" "
                       "\"-o\" \"/home/dev/src/tidewater/target/aarch64-apple-darwin/debug/build/libsqlite3-sys-0c41d7e2f9a3b815/out/sqlite3/sqlite3.o\" "
                       "\"-c\" \"sqlite3/sqlite3.c\"\n"
                       "  cargo:warning=cc: error: unrecognized command-line option '-arch'\n  exit status: 1\n\n"
                       "  --- stderr\n\n\n  error occurred: Command \"cc\" \"-O3\" \"-ffunction-sections\" \"-fdata-sections\" "
                       "\"-fPIC\" \"-arch\" \"arm64\" [...] \"-c\" \"sqlite3/sqlite3.c\" with args \"cc\" did not execute "
                       "successfully (status code exit status: 1).\n", error=True, code=101)])
    S.ai(text="As expected, a local macOS check doesn't get far: the bundled SQLite in `libsqlite3-sys` has to be compiled "
              "with a C toolchain for the target, and there's no Apple cross toolchain on this box. So CI is the real "
              "check. What I can say from the source:\n\n"
              "- the grep above shows no other `std::os::linux` or `st_*` uses anywhere in `src/` or `tests/`;\n"
              "- everything else platform-specific from today is `std::os::unix` (`MetadataExt`, `fchown`, "
              "`OpenOptionsExt`, `PermissionsExt`) and socket2's `TcpKeepalive` with `with_time/with_interval/"
              "with_retries`, which socket2 supports on macOS.\n\n"
              "Want me to commit the test fix?")

    S.user("yes commit. also does it still build on freebsd? theres a port and the maintainer will yell")
    S.ai(calls=[T.git_commit("test(rotate): use the portable unix MetadataExt in the #412 test",
                             ["tests/rotate_issue_412.rs"], body="std::os::linux does not exist on macOS; CI run 11873024119.")])
    S.ai(calls=[T.grep("std::os::|socket2::|cfg\\(target_os", "src")])
    S.ai(text=f"Committed (`{R.commits[-1][0][:7]}`).\n\nFreeBSD: same answer as macOS, I can't build it here (same "
              "bundled-SQLite cross-compile problem), but the platform surface is small and all of it exists there:\n\n"
              "- `std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt, fchown}`: all unix, FreeBSD included.\n"
              "- `socket2::TcpKeepalive::with_time/with_interval/with_retries`: socket2 0.5 enables `with_interval` and "
              "`with_retries` on FreeBSD (they map to `TCP_KEEPINTVL` / `TCP_KEEPCNT`).\n"
              "- no `target_os` cfgs and no `std::os::linux` left.\n\n"
              "The one thing that differs in practice is `Metadata::created()`: FreeBSD (UFS2/ZFS) does report birth "
              "time, so the age-restart problem we noted this morning is actually *less* of an issue there.")

    S.user("ok. changelog entries for everything today under Unreleased pls")
    log_lines = "\n".join(f"{h[:7]} {s}" for h, s in reversed(R.commits))
    S.ai(calls=[T.bash("git log --oneline main..", log_lines), T.read("CHANGELOG.md")])
    S.ai(calls=[T.edit("CHANGELOG.md", "## [Unreleased]\n",
                       "## [Unreleased]\n\n### Added\n"
                       "- `ship.keepalive` (default `\"30s\"`) enables TCP keepalive on collector connections, so load\n"
                       "  balancers with an idle timeout no longer drop quiet connections. `keepalive_secs` is accepted\n"
                       "  as an older spelling.\n"
                       "- `tidewater status` prints per-file read and shipped offsets from the state database\n"
                       "  (`--json` for one object per line).\n\n"
                       "### Changed\n"
                       "- Retry delays use decorrelated jitter and decay after a success instead of resetting, so a\n"
                       "  flapping collector is not retried every 250ms.\n"
                       "- `tidewater rotate-now` is now `tidewater rotate`; the old name still works.\n\n"
                       "### Fixed\n"
                       "- Size-based rotation follows the file's real size instead of how far it has been read, and the\n"
                       "  unread tail of a rotated file is still shipped (#412).\n"
                       "- Rename rotation keeps the owner, group and mode of the live file (#431).\n")])
    S.ai(text="Added under `[Unreleased]`: Added (keepalive, status), Changed (backoff, `rotate` rename with alias), "
              "Fixed (#412, #431). I left out the clippy and test-only commits.")

    S.user("bump the version to 0.10.0-rc.1 while youre at it")
    S.ai(calls=[T.edit("Cargo.toml", 'version = "0.9.3"\n', 'version = "0.10.0-rc.1"\n')])
    R.fs["Cargo.lock"] = R.fs["Cargo.lock"].replace('name = "tidewater"\nversion = "0.9.3"', 'name = "tidewater"\nversion = "0.10.0-rc.1"')
    S.ai(calls=[T.bash("cargo check --workspace", "    Checking tidewater v0.10.0-rc.1 (/home/dev/src/tidewater)\n"
                                                   "    Finished `dev` profile [unoptimized + debuginfo] target(s) in 2.96s"),
                T.git_diff(["Cargo.toml", "Cargo.lock"])])
    S.ai(text="`Cargo.toml` and the lock file now say `0.10.0-rc.1`. Should the changelog's `[Unreleased]` become "
              "`[0.10.0-rc.1]` too?")

    S.user("hm actually no, revert the bump. release mgmt does that on thursday when they tag")
    S.ai(calls=[T.bash("git checkout -- Cargo.toml Cargo.lock", "")])
    R.restore("Cargo.toml")
    R.restore("Cargo.lock")
    S.ai(calls=[T.git_status()])
    S.ai(text="Reverted; only `CHANGELOG.md` is modified now. Version stays `0.9.3`.")

    S.user("commit the changelog")
    S.ai(calls=[T.git_commit("docs(changelog): today's changes under Unreleased", ["CHANGELOG.md"])])
    S.ai(text=f"Committed as `{R.commits[-1][0][:7]}`.")


# ---------------------------------------------------------------------------
# 15:45 - sizes: validate vs the daemon, units, #445
# ---------------------------------------------------------------------------


def size_rs(decimal: bool) -> str:
    if decimal:
        head = ("//! Byte sizes in the config: `512`, `64KiB`, `10 MB`, `2GB`.\n//!\n"
                "//! `KiB`/`MiB`/`GiB` are powers of 1024, `KB`/`MB`/`GB` powers of 1000, like\n"
                "//! everywhere else. Units are case-insensitive and may be separated from the\n"
                "//! number by spaces. See https://docs.tidewater.dev/0.8/config/#sizes\n\n"
                "use std::fmt;\n\nuse serde::{de, Deserialize, Deserializer};\n")
        arms = ('        "k" | "kb" => 1_000,\n        "m" | "mb" => 1_000_000,\n        "g" | "gb" => 1_000_000_000,\n')
        extra = ""
    else:
        head = ("//! Byte sizes in the config: `512`, `64KiB`, `10 MiB`, `2GB`.\n//!\n"
                "//! `KiB`/`MiB`/`GiB` are powers of 1024. `KB`/`MB`/`GB` are *also* powers of\n"
                "//! 1024 for now, for compatibility, and log a warning: they will mean powers\n"
                "//! of 1000 in 1.0 (#445). Units are case-insensitive and may be separated\n"
                "//! from the number by spaces. See https://docs.tidewater.dev/0.8/config/#sizes\n\n"
                "use std::fmt;\nuse std::sync::Once;\n\nuse serde::{de, Deserialize, Deserializer};\n")
        arms = ('        "k" | "kb" | "m" | "mb" | "g" | "gb" => {\n'
                '            warn_ambiguous_unit(unit);\n'
                '            match unit.as_bytes()[0].to_ascii_lowercase() {\n'
                "                b'k' => 1 << 10,\n                b'm' => 1 << 20,\n                _ => 1 << 30,\n"
                '            }\n        }\n')
        extra = ('\n/// `KB`/`MB`/`GB` are binary today and will be decimal in 1.0 (#445). Say so\n'
                 '/// once per process, not once per key.\n'
                 'fn warn_ambiguous_unit(unit: &str) {\n'
                 '    static WARNED: Once = Once::new();\n'
                 '    WARNED.call_once(|| {\n'
                 '        tracing::warn!(\n'
                 '            unit,\n'
                 '            "size units KB/MB/GB are read as KiB/MiB/GiB (powers of 1024) but will mean powers of 1000 \\\n'
                 '             in tidewater 1.0; write KiB/MiB/GiB to keep the current meaning \\\n'
                 '             (https://github.com/tidewater-rs/tidewater/issues/445)"\n'
                 '        )\n    });\n}\n')
    return head + r'''
/// A number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SizeError {
    #[error("empty size")]
    Empty,
    #[error("invalid number in size {0:?}")]
    Number(String),
    #[error("unknown unit {0:?} (expected B, KiB, MiB, GiB, KB, MB or GB)")]
    Unit(String),
    #[error("size {0:?} does not fit in 64 bits")]
    Overflow(String),
}

/// Parses a size.
///
/// ```
/// use tidewater::size::{parse_size, ByteSize};
/// assert_eq!(parse_size("64KiB"), Ok(ByteSize(65536)));
/// assert_eq!(parse_size("3"), Ok(ByteSize(3)));
/// ```
pub fn parse_size(s: &str) -> Result<ByteSize, SizeError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(SizeError::Empty);
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let unit = unit.trim_start();
    let n: u64 = num.parse().map_err(|_| SizeError::Number(s.to_string()))?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
''' + arms + r'''        _ => return Err(SizeError::Unit(unit.to_string())),
    };
    n.checked_mul(mult).map(ByteSize).ok_or_else(|| SizeError::Overflow(s.to_string()))
}
''' + extra + r'''
impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> de::Visitor<'de> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a byte count or a string like \"10MiB\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v).map(ByteSize).map_err(|_| E::custom("size must not be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                parse_size(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
        for (name, n) in UNITS {
            if self.0 >= n && self.0 % n == 0 {
                return write!(f, "{}{}", self.0 / n, name);
            }
        }
        write!(f, "{}B", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_numbers_are_bytes() {
        assert_eq!(parse_size("0"), Ok(ByteSize(0)));
        assert_eq!(parse_size("512"), Ok(ByteSize(512)));
    }

    #[test]
    fn binary_units() {
        assert_eq!(parse_size("1KB"), Ok(ByteSize(1024)));
        assert_eq!(parse_size("10MB"), Ok(ByteSize(10 * 1024 * 1024)));
        assert_eq!(parse_size("2G"), Ok(ByteSize(2 << 30)));
    }

    #[test]
    fn iec_units() {
        assert_eq!(parse_size("1KiB"), Ok(ByteSize(1024)));
        assert_eq!(parse_size("10MiB"), Ok(ByteSize(10 << 20)));
        assert_eq!(parse_size("2GiB"), Ok(ByteSize(2 << 30)));
    }

    #[test]
    fn spaces_and_case() {
        assert_eq!(parse_size("10 MiB"), parse_size("10MiB"));
        assert_eq!(parse_size("10mib"), parse_size("10MiB"));
        assert_eq!(parse_size("  64 KiB "), Ok(ByteSize(64 << 10)));
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(parse_size(""), Err(SizeError::Empty));
        assert_eq!(parse_size("MB"), Err(SizeError::Number("MB".into())));
        assert_eq!(parse_size("10XB"), Err(SizeError::Unit("XB".into())));
    }

    #[test]
    fn overflow() {
        assert!(matches!(parse_size("99999999999GiB"), Err(SizeError::Overflow(_))));
    }

    #[test]
    fn display_roundtrip() {
        for s in ["512B", "64KiB", "10MiB", "3GiB"] {
            assert_eq!(parse_size(s).unwrap().to_string(), s);
        }
    }
}
'''


BATCH_LEVEL_TEST = r'''
    #[test]
    fn level_changes_output() {
        let mut fast = Batch::new(1000, 1 << 20).with_level(1);
        let mut best = Batch::new(1000, 1 << 20).with_level(9);
        for b in [&mut fast, &mut best] {
            for i in 0..200 {
                b.push(Chunk::new(PathBuf::from("/a"), 0, format!("line {i} status=200 bytes={}\n", i * 37).into_bytes()));
            }
        }
        assert!(best.encode().unwrap().len() <= fast.encode().unwrap().len());
    }
'''


def sizes(x: X) -> None:
    S, T, R, C = x.S, x.T, x.R, x.C

    S.user("someone on discord: `tidewater validate` says ok for `max_size = \"10 MB\"` but then the daemon refuses to "
           "start with unknown unit \" MB\". check pls", at="15:47")
    S.ai(calls=[T.read("src/size.rs"), T.grep("fn validate|parse_size", "src")])
    S.ai(calls=[T.read("src/cli.rs"), T.read("tests/cli_validate.rs")])
    cfg = ('[[files]]\npath = "/var/log/app.log"\nmax_size = "10 MB"\n\n[ship]\n[[ship.sinks]]\nname = "eu-west"\n'
           'address = "ingest.eu-west.tidewater.dev:5044"\n')
    S.ai(calls=[T.write("/tmp/space.toml", cfg)])
    S.ai(calls=[T.bash("cargo run -q -- -c /tmp/space.toml validate; echo \"exit=$?\"; "
                       "timeout 3 cargo run -q -- -c /tmp/space.toml run; echo \"exit=$?\"",
                       "/tmp/space.toml: ok (1 files)\nexit=0\n"
                       "2026-11-02T15:49:12.402117Z ERROR tidewater: failed to load config: parsing /tmp/space.toml: TOML "
                       "parse error at line 3, column 12\n  |\n3 | max_size = \"10 MB\"\n  |            ^^^^^^^\n"
                       "unknown unit \" MB\" (expected B, KB, MB or GB)\n path=/tmp/space.toml\nexit=2")])
    S.ai(text="Reproduced. There are two size parsers:\n\n"
              "- `validate` (in `src/cli.rs`) walks the raw TOML and uses its own `parse_size_lenient`, which strips "
              "spaces and uppercases, so `\"10 MB\"` passes;\n"
              "- the daemon deserializes through `size::parse_size`, which splits at the first non-digit and only knows "
              "`B`/`KB`/`MB`/`GB`/`K`/`M`/`G` exactly, so the unit becomes `\" MB\"` and is rejected.\n\n"
              "`validate` also only checks a handful of keys by hand, so it can drift from the loader in other ways too "
              "(e.g. unknown keys, which `deny_unknown_fields` rejects at load but `validate` ignores).\n\n"
              "Suggestion: make `validate` run the real `Config::load` (same parser, same checks) and make `parse_size` "
              "tolerate spaces and case.")

    S.user("yes, validate should just call the real loader. and make parse_size accept `10 MB`, `10mb`, and "
           "KiB/MiB/GiB. and MB should be 1000^2 like everyone else, document it")
    cli = R.fs["src/cli.rs"]
    v0 = cli.index("/// Checks a config file without starting anything.")
    v1 = cli.index("    println!(\"{}: ok ({} files)\", path.display(), files.len());\n    Ok(())\n}\n") + \
        len("    println!(\"{}: ok ({} files)\", path.display(), files.len());\n    Ok(())\n}\n")
    l0 = cli.index("// Accepts \"10MB\", \"10 MB\", \"10mb\".\n")
    l1 = cli.index("    Ok(num.parse::<u64>()? * mult)\n}\n") + len("    Ok(num.parse::<u64>()? * mult)\n}\n")
    S.ai(calls=[T.write("src/size.rs", size_rs(decimal=True))])
    C.add("lib", "size::tests::iec_units", "size::tests::spaces_and_case")
    S.ai(calls=[T.edit("src/cli.rs", cli[v0:v1],
                       "/// Checks a config file without starting anything: the same loader and\n"
                       "/// checks the daemon runs, so the two can't disagree.\n"
                       "pub fn validate(path: &Path) -> anyhow::Result<()> {\n"
                       "    let cfg = Config::load(path)?;\n"
                       "    println!(\"{}: ok ({} files)\", path.display(), cfg.files.len());\n    Ok(())\n}\n")])
    S.ai(calls=[T.edit("src/cli.rs", cli[l0:l1] + "\n", "")])
    ln = x.line("src/size.rs", 'assert_eq!(parse_size("1KB"), Ok(ByteSize(1024)));')
    S.ai(calls=[x.cargo_test(tail=30, fail={"size::tests::binary_units":
        f"thread 'size::tests::binary_units' panicked at src/size.rs:{ln}:9:\n"
        "assertion `left == right` failed\n  left: Ok(ByteSize(1000))\n right: Ok(ByteSize(1024))\n"
        "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace"})])
    S.ai(think="binary_units fails: of course, it encodes the current meaning of KB/MB/GB. This is not a test to "
               "update blindly: every existing config with \"100MB\" would silently mean 100,000,000 instead of "
               "104,857,600 bytes after upgrading: rotation ~4.6% earlier, batch_max_bytes \"1MB\" smaller. Nothing "
               "errors, nothing warns. The docs for 0.9 explicitly say 1KB = 1024. That's a silent behaviour change in "
               "a minor release. Should stop and ask instead of changing the test.",
         text="Stopping here before I \"fix\" that test, because it's telling us something. `binary_units` encodes "
              "today's documented meaning (`docs/config.md`: \"Units are binary: `1KB` is 1024 bytes\"). With `MB` = "
              "1000², every existing config silently changes after an upgrade:\n\n"
              "- `max_size = \"100MB\"` goes from 104,857,600 to 100,000,000 bytes (rotation ~4.6% earlier),\n"
              "- `batch_max_bytes = \"1MB\"` shrinks the same way,\n"
              "- nothing errors and nothing warns.\n\n"
              "For a 0.x minor release that's a quiet behaviour change on every install. Options:\n"
              "1. Do it anyway, with a loud changelog entry.\n"
              "2. Keep `KB/MB/GB` binary for now, add `KiB/MiB/GiB`, warn when the ambiguous units are used, and flip in 1.0.\n"
              "3. Make `KB/MB/GB` an error and force people to pick (breaks configs loudly instead of quietly).\n\n"
              "I'd go with 2. The `validate` change and the space/case handling are independent of this and fine either "
              "way. Which do you want?")

    S.user("hm right, thats a silent behavior change. keep MB = MiB for now but log a warning when someone uses "
           "KB/MB/GB, pointing to KiB/MiB/GiB. we flip it in 1.0, track it in #445 "
           "https://github.com/tidewater-rs/tidewater/issues/445")
    S.ai(calls=[T.write("src/size.rs", size_rs(decimal=False))])
    tcli = R.fs["tests/cli_validate.rs"]
    i_addr = tcli.index("fn address_needs_a_port()")
    ln_addr = tcli[:i_addr].count("\n") + 3
    i_bad = tcli.index("fn bad_size_names_the_key()")
    ln_bad = tcli[:i_bad].count("\n") + 4
    errtxt = ("invalid config: parsing /tmp/.tmpR3kQ2v/t.toml: TOML parse error at line 4, column 12\n  |\n"
              "4 | max_size = \"ten\"\n  |            ^^^^^\ninvalid number in size \"ten\"\n\n")
    S.ai(calls=[x.cargo_test(tail=40, fail={
        "address_needs_a_port": f"thread 'address_needs_a_port' panicked at tests/cli_validate.rs:{ln_addr}:5:\n"
                                "assertion `left == right` failed\n  left: 0\n right: 2",
        "bad_size_names_the_key": f"thread 'bad_size_names_the_key' panicked at tests/cli_validate.rs:{ln_bad}:5:\n"
                                  + errtxt + "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace"})])
    S.ai(text="Unit tests pass now (`binary_units` holds again). Two `validate` tests fail, both expected fallout from "
              "switching to the real loader:\n\n"
              "1. `address_needs_a_port`: the `host:port` check only existed in the old hand-rolled `validate`; "
              "`Config::check` never had it, so the daemon would have accepted a port-less address and failed at connect "
              "time. Moving the check into `Config::check` where both paths get it.\n"
              "2. `bad_size_names_the_key`: the message no longer says `files[0].max_size`; it's toml's error with line, "
              "column and the offending line, which is more useful. Updating the assertion.",
         calls=[T.edit("src/config.rs",
                       "        for f in &self.files {\n            if let Some(name) = &f.sink {",
                       "        for (i, s) in self.ship.sinks.iter().enumerate() {\n"
                       "            let port_ok = s.address.rsplit_once(':').map(|(_, p)| p.parse::<u16>().is_ok()).unwrap_or(false);\n"
                       "            if !port_ok {\n"
                       "                bail!(\"ship.sinks[{i}].address {:?}: expected host:port\", s.address);\n"
                       "            }\n        }\n"
                       "        for f in &self.files {\n            if let Some(name) = &f.sink {"),
                T.edit("tests/cli_validate.rs", '    assert!(err.contains("files[0].max_size"), "{err}");\n',
                       '    // toml points at the line; the message names the bad value.\n'
                       '    assert!(err.contains("line 4") && err.contains("invalid number in size \\"ten\\""), "{err}");\n')])
    S.ai(calls=[x.cargo_test()])
    S.ai(calls=[T.bash("cargo run -q -- -c /tmp/space.toml validate; echo \"exit=$?\"",
                       "2026-11-02T16:02:37.118754Z  WARN tidewater::size: size units KB/MB/GB are read as KiB/MiB/GiB "
                       "(powers of 1024) but will mean powers of 1000 in tidewater 1.0; write KiB/MiB/GiB to keep the "
                       "current meaning (https://github.com/tidewater-rs/tidewater/issues/445) unit=\"MB\"\n"
                       "/tmp/space.toml: ok (1 files)\nexit=0")])
    S.ai(text="Docs and the example config:",
         calls=[T.edit("docs/config.md",
                       "Sizes are strings such as `\"512\"`, `\"64KB\"`, `\"100MB\"` or `\"2GB\"`, or plain\n"
                       "integers (bytes). Units are binary: `1KB` is 1024 bytes.\n",
                       "Sizes are strings such as `\"512\"`, `\"64KiB\"`, `\"100 MiB\"` or `\"2GiB\"`, or plain\n"
                       "integers (bytes). Units are case-insensitive and may be separated from the\n"
                       "number by spaces.\n\n"
                       "`KiB`, `MiB` and `GiB` are powers of 1024. `KB`, `MB` and `GB` currently mean\n"
                       "the same (powers of 1024) and log a warning: **in 1.0 they will mean powers of\n"
                       "1000** ([#445](https://github.com/tidewater-rs/tidewater/issues/445)). Write\n"
                       "`KiB`/`MiB`/`GiB` to keep today's meaning.\n"),
                T.edit("tidewater.example.toml", "# Sizes accept B, KB, MB and GB (binary: 1KB = 1024 bytes).\n",
                       "# Sizes accept B, KiB, MiB and GiB (1KiB = 1024 bytes). KB/MB/GB still mean the\n"
                       "# same but are deprecated: they become powers of 1000 in 1.0 (#445).\n"),
                T.edit("tidewater.example.toml", 'max_size = "100MB"\n', 'max_size = "100MiB"\n'),
                T.edit("tidewater.example.toml", 'max_size = "250MB"\n', 'max_size = "250MiB"\n'),
                T.edit("tidewater.example.toml", 'batch_max_bytes = "1MB"\n', 'batch_max_bytes = "1MiB"\n')])
    S.ai(text="Done:\n"
              "- `validate` now runs `Config::load`; the hand-rolled checks and `parse_size_lenient` are gone. The "
              "`host:port` check moved into `Config::check`, so the daemon enforces it too.\n"
              "- `parse_size`: trims, allows spaces between number and unit, case-insensitive, adds `KiB/MiB/GiB`. "
              "`KB/MB/GB/K/M/G` stay binary and log one warning per process pointing at #445.\n"
              "- `Display` for sizes now prints `KiB/MiB/GiB`.\n"
              "- `docs/config.md` and `tidewater.example.toml` updated (example uses the IEC units so it doesn't warn).")

    S.user("commit")
    S.ai(calls=[T.git_status()])
    S.ai(calls=[T.git_diff(["src/cli.rs", "src/config.rs", "tests/cli_validate.rs"])])
    S.ai(calls=[T.git_commit("fix(config): `validate` uses the real loader; sizes accept spaces, case and KiB/MiB/GiB",
                             ["src/cli.rs", "src/config.rs", "src/size.rs", "tests/cli_validate.rs", "docs/config.md",
                              "tidewater.example.toml"],
                             body="`validate` had its own lenient size parser and accepted \"10 MB\", which the daemon "
                                  "then rejected. It now runs Config::load. KB/MB/GB keep their binary meaning and log a "
                                  "deprecation warning; they become decimal in 1.0 (#445).")])
    S.ai(text=f"Committed as `{R.commits[-1][0][:7]}`.")

    S.user("does the example config still validate after all this? people copy it verbatim")
    S.ai(calls=[T.read("tidewater.example.toml"), T.read("docs/config.md")])
    S.ai(calls=[T.bash("cargo run -q -- -c tidewater.example.toml validate; echo \"exit=$?\"",
                       "tidewater.example.toml: ok (3 files)\nexit=0"),
                T.bash("sed 's/MiB\"/MB\"/' tidewater.example.toml > /tmp/old-units.toml && "
                       "cargo run -q -- -c /tmp/old-units.toml validate 2>&1 | cut -c1-160",
                       "2026-11-02T16:09:51.230441Z  WARN tidewater::size: size units KB/MB/GB are read as KiB/MiB/GiB "
                       "(powers of 1024) but will mean powers of 1000 in tide\n/tmp/old-units.toml: ok (3 files)")])
    S.ai(text="Yes: the example validates cleanly with exit 0 and no warning, since it now uses `MiB`. A copy with the "
              "old `MB` spellings still validates too, with the one-time #445 warning, so existing configs keep working "
              "exactly as before. The docs and the example agree on the keys we touched today (`keepalive`, the size "
              "units).")

    S.user("docs links: everything still points at https://docs.tidewater.dev/0.8/ , switch them all to /latest/")
    S.ai(calls=[T.grep("docs\\.tidewater\\.dev/0\\.8", ".")])
    hits = [l for p in sorted(R.fs) if R.fs[p] and not p.startswith("/") and p != "Cargo.lock"
            for l in [(p, ln) for ln in R.fs[p].splitlines() if "docs.tidewater.dev/0.8" in ln]]
    edits = [T.edit(p, ln, ln.replace("docs.tidewater.dev/0.8/", "docs.tidewater.dev/latest/")) for p, ln in hits]
    S.ai(calls=edits[:3])
    S.ai(calls=edits[3:])
    S.ai(calls=[T.grep("docs\\.tidewater\\.dev/0\\.", ".")])
    S.ai(calls=[T.git_commit("docs: point documentation links at /latest/", sorted({p for p, _ in hits}))])
    S.ai(text=f"Replaced {len(hits)} links in {len({p for p, _ in hits})} files (README, `docs/config.md`, "
              "`tidewater.example.toml`, and the doc comments in `src/config.rs` and `src/size.rs`); no `0.x` links "
              f"remain. Committed as `{R.commits[-1][0][:7]}`.")


# ---------------------------------------------------------------------------
# 16:15 - gzip level, history cleanup, PR text
# ---------------------------------------------------------------------------


def criterion(name: str, t: tuple[float, float, float], mib: float, change: tuple[float, float, float] | None) -> str:
    lo, mid, hi = t
    thr = (mib * mid / hi, mib, mib * mid / lo)
    out = [f"{name:<24}time:   [{lo:.4f} ms {mid:.4f} ms {hi:.4f} ms]",
           f"{'':<24}thrpt:  [{thr[0]:.3f} MiB/s {thr[1]:.3f} MiB/s {thr[2]:.3f} MiB/s]"]
    if change:
        a, b, c = change
        out += [f"{'':<17}change:",
                f"{'':<24}time:   [{a:+.4f}% {b:+.4f}% {c:+.4f}%] (p = 0.00 < 0.05)",
                f"{'':<24}thrpt:  [{-a / (1 + a / 100):+.4f}% {-b / (1 + b / 100):+.4f}% {-c / (1 + c / 100):+.4f}%]",
                f"{'':<24}Performance has improved."]
    out.append("Found 4 outliers among 100 measurements (4.00%)\n  3 (3.00%) high mild\n  1 (1.00%) high severe")
    return "\n".join(out)


def compression_and_pr(x: X) -> None:
    S, T, R, C = x.S, x.T, x.R, x.C

    S.user("perf thing: Batch::encode uses Compression::best() and the shipper eats most of a core on the nginx boxes. "
           "make the level configurable, `ship.compression_level`, default 6. bench before/after", at="16:16")
    S.ai(calls=[T.read("src/ship/batch.rs"), T.grep("Batch::new", ".")])
    S.ai(calls=[T.read("src/config.rs")])
    S.ai(calls=[T.bash("ls -l benches/data/ && cargo bench --bench batch -- --save-baseline level9",
                       "total 244\n-rw-r--r-- 1 dev dev 245812 Aug 11 14:02 nginx-access-1k.log\n"
                       "   Compiling tidewater v0.9.3 (/home/dev/src/tidewater)\n"
                       "    Finished `bench` profile [optimized] target(s) in 41.27s\n"
                       "     Running benches/batch.rs (target/release/deps/batch-0b1e7d4c3a9f2816)\n"
                       "Gnuplot not found, using plotters backend\n"
                       + criterion("batch/encode_1k_lines", (3.9127, 3.9302, 3.9489), 59.648, None))])
    S.ai(calls=[T.bash("for l in 1 4 6 9; do printf 'level %s: ' $l; gzip -$l -c benches/data/nginx-access-1k.log | wc -c; done",
                       "level 1: 31904\nlevel 4: 25207\nlevel 6: 23870\nlevel 9: 23391")])
    S.ai(think="Size difference 6 vs 9 is 2% on real nginx lines, CPU is ~3x. Default 6 is zlib's default too. "
               "Batch::new is called in ship/mod.rs, batch.rs tests, tests/ship_retry.rs, benches. Adding a parameter "
               "churns all of them; a builder `with_level` keeps call sites unchanged and only the shipper sets it. "
               "Validate 0..=9 in Config::check (flate2 Compression::new panics? No, it accepts up to 9 silently for "
               "zlib backend, miniz clamps to 10). Reject >9 explicitly.",
         text="On the sample file, level 9 saves only ~2% over level 6 (23,391 vs 23,870 bytes) for roughly 3x the CPU, "
              "so 6 is a good default. `Batch::new` has 9 call sites (tests, bench, shipper); I'll add a `with_level` "
              "builder so only the shipper changes.",
         calls=[T.edit("src/ship/batch.rs", "    max_records: usize,\n    max_bytes: usize,\n}\n",
                       "    max_records: usize,\n    max_bytes: usize,\n    /// gzip level, 0-9.\n    level: u32,\n}\n"),
                T.edit("src/ship/batch.rs",
                       "        Batch { id: uuid::Uuid::new_v4(), chunks: Vec::new(), records: 0, bytes: 0, max_records, max_bytes }\n    }\n\n"
                       "    pub fn empty_like(&self) -> Self {\n        Batch::new(self.max_records, self.max_bytes)\n    }\n",
                       "        Batch { id: uuid::Uuid::new_v4(), chunks: Vec::new(), records: 0, bytes: 0, max_records, max_bytes, level: 6 }\n    }\n\n"
                       "    /// Sets the gzip level (0-9; `Config::check` enforces the range).\n"
                       "    pub fn with_level(mut self, level: u32) -> Self {\n        self.level = level;\n        self\n    }\n\n"
                       "    pub fn empty_like(&self) -> Self {\n        Batch::new(self.max_records, self.max_bytes).with_level(self.level)\n    }\n"),
                T.edit("src/ship/batch.rs", "Compression::best()", "Compression::new(self.level)"),
                T.edit("src/ship/batch.rs", "    #[test]\n    fn encode_roundtrip() {",
                       BATCH_LEVEL_TEST.lstrip("\n") + "\n    #[test]\n    fn encode_roundtrip() {")])
    C.add("lib", "ship::batch::tests::level_changes_output")
    S.ai(calls=[T.edit("src/config.rs",
                       "    #[serde(default = \"default_batch_max_bytes\")]\n    pub batch_max_bytes: ByteSize,\n",
                       "    #[serde(default = \"default_batch_max_bytes\")]\n    pub batch_max_bytes: ByteSize,\n"
                       "    /// gzip level for batches, 0 (none) to 9 (smallest, slowest).\n"
                       "    #[serde(default = \"default_compression_level\")]\n    pub compression_level: u32,\n"),
                T.edit("src/config.rs", "fn default_flush_interval() -> Duration {",
                       "fn default_compression_level() -> u32 {\n    6\n}\nfn default_flush_interval() -> Duration {"),
                T.edit("src/config.rs", "        self.ship.keepalive()?;\n",
                       "        self.ship.keepalive()?;\n        if self.ship.compression_level > 9 {\n"
                       "            bail!(\"ship.compression_level must be 0-9, got {}\", self.ship.compression_level);\n        }\n"),
                T.edit("src/config.rs", "    #[test]\n    fn unknown_keys_are_rejected() {",
                       "    #[test]\n    fn compression_level_range() {\n"
                       "        let mut cfg: Config = toml::from_str(MINIMAL).unwrap();\n"
                       "        assert_eq!(cfg.ship.compression_level, 6);\n"
                       "        cfg.ship.compression_level = 10;\n"
                       "        assert!(cfg.check().unwrap_err().to_string().contains(\"0-9\"));\n    }\n\n"
                       "    #[test]\n    fn unknown_keys_are_rejected() {"),
                T.edit("src/ship/mod.rs",
                       "    let mut batch = Batch::new(cfg.batch_max_records, cfg.batch_max_bytes.0 as usize);\n",
                       "    let mut batch = Batch::new(cfg.batch_max_records, cfg.batch_max_bytes.0 as usize).with_level(cfg.compression_level);\n")])
    C.add("lib", "config::tests::compression_level_range")
    S.ai(calls=[x.cargo_test()])
    S.ai(calls=[T.edit("benches/batch.rs", "                let mut batch = Batch::new(10_000, 64 << 20);\n",
                       "                let level = std::env::var(\"BENCH_GZIP_LEVEL\").map(|l| l.parse().unwrap()).unwrap_or(6);\n"
                       "                let mut batch = Batch::new(10_000, 64 << 20).with_level(level);\n")])
    S.ai(calls=[T.bash("cargo bench --bench batch -- --baseline level9",
                       "   Compiling tidewater v0.9.3 (/home/dev/src/tidewater)\n"
                       "    Finished `bench` profile [optimized] target(s) in 38.90s\n"
                       "     Running benches/batch.rs (target/release/deps/batch-0b1e7d4c3a9f2816)\n"
                       "Gnuplot not found, using plotters backend\n"
                       + criterion("batch/encode_1k_lines", (1.1468, 1.1519, 1.1577), 203.51, (-70.874, -70.691, -70.498)))])
    S.ai(calls=[T.edit("docs/config.md",
                       "| `batch_max_bytes`   | `\"1MB\"`  | ... or this many bytes                            |\n",
                       "| `batch_max_bytes`   | `\"1MB\"`  | ... or this many bytes                            |\n"
                       "| `compression_level` | `6`      | gzip level, 0 (off) to 9 (smallest, most CPU)     |\n"),
                T.edit("tidewater.example.toml", 'batch_max_bytes = "1MiB"\n',
                       'batch_max_bytes = "1MiB"\n# gzip level 0-9; 9 saves ~2% over 6 on access logs for ~3x the CPU.\ncompression_level = 6\n')])
    S.ai(text="Before/after on `benches/batch.rs` (245,812-byte nginx sample):\n\n"
              "| level | time per batch | throughput | output |\n|---|---|---|---|\n"
              "| 9 (old `best()`) | 3.93 ms | 59.6 MiB/s | 23,391 B |\n| 6 (new default) | 1.15 ms | 203.5 MiB/s | 23,870 B |\n\n"
              "~71% less time for ~2% more bytes on the wire. Changes: `ship.compression_level` (default 6, 0-9 enforced "
              "in `Config::check`), `Batch::with_level`, the shipper passes it through, the bench reads "
              "`BENCH_GZIP_LEVEL`, docs + example updated. Tests green.")

    S.user("commit")
    S.ai(calls=[T.git_diff(stat=True)])
    S.ai(calls=[T.git_diff(["src/ship/batch.rs", "src/config.rs", "src/ship/mod.rs"])])
    S.ai(calls=[T.git_commit("perf(ship): configurable gzip level, default 6 instead of 9",
                             ["src/ship/batch.rs", "src/ship/mod.rs", "src/config.rs", "benches/batch.rs",
                              "docs/config.md", "tidewater.example.toml"],
                             body="encode_1k_lines: 3.93ms -> 1.15ms (-71%), output +2% on the nginx sample. "
                                  "`ship.compression_level` keeps 9 available.")])
    S.ai(text=f"Committed as `{R.commits[-1][0][:7]}`.")

    S.user("git log --oneline main.. pls, want to see what the PR looks like")
    S.ai(calls=[T.bash("git log --oneline main..", "\n".join(f"{h[:7]} {s}" for h, s in reversed(R.commits)))])
    S.ai(text=f"{len(R.commits)} commits on `fix/412-size-rotation`. The `style(rotate): clippy len_zero` one is the "
              "leftover from this morning that really belongs in the first #412 commit.")

    S.user("squash that clippy one into the 412 commit")
    target = R.commits[0][1]
    fix = "style(rotate): clippy len_zero in rotate::run"
    idx = [s for _, s in R.commits].index(fix)
    todo = f"pick {R.commits[0][0][:7]} {target}\nfixup {R.commits[idx][0][:7]} {fix}"
    S.ai(think="Non-interactive: mark the style commit as a fixup! of the first commit via rebase todo editing. Simplest "
               "reliable way without an editor: GIT_SEQUENCE_EDITOR with sed turning 'pick <sha> style(rotate)' into "
               "'fixup' and moving it right after the first commit. It's already directly after the first commit? "
               "Order: 412 fix, style, keepalive... yes adjacent, so just pick->fixup in place.",
         calls=[T.bash(f"git log --format='%h %s' --reverse main.. | head -3",
                       "\n".join(f"{h[:7]} {s}" for h, s in R.commits[:3]))])
    old_ids = [h for h, _ in R.commits]
    R.squash(fix, target)
    S.ai(text="They're adjacent, so it's a plain `pick` → `fixup` in the todo list, done without an editor:",
         calls=[T.bash(f"GIT_SEQUENCE_EDITOR=\"sed -i 's/^pick {old_ids[idx][:7]} /fixup {old_ids[idx][:7]} /'\" "
                       f"git rebase -i main",
                       "Successfully rebased and updated refs/heads/fix/412-size-rotation."),
                T.bash("git log --oneline main..", "\n".join(f"{h[:7]} {s}" for h, s in reversed(R.commits)))])
    S.ai(calls=[T.bash(f"git show --stat {R.commits[0][0][:7]} | head -20",
                       f"commit {R.commits[0][0]}\nAuthor: Dev <dev@tidewater.dev>\nDate:   Mon Nov 2 09:46:12 2026 +0000\n\n"
                       f"    {target}\n    \n    decide() compared max_size against how far the watcher had read, which trails the\n"
                       "    real length by up to everything written above the 1 MiB/tick read budget. Use\n"
                       "    fstat on our descriptor instead, and drain the old descriptor after a rename so the\n"
                       "    unread tail is still shipped.\n    \n    Fixes #412\n\n"
                       " src/rotate/mod.rs         | 24 ++++++++++++++++++-----\n src/rotate/policy.rs      | 16 ++++++++++++---\n"
                       " src/rotate/watcher.rs     | 18 +++++++++++++++++-\n tests/rotate_issue_412.rs | 72 ++++++++++++++++++++++++++++++++++++\n"
                       " 4 files changed, 121 insertions(+), 9 deletions(-)")])
    S.ai(text=f"Folded in. The #412 commit is now `{R.commits[0][0][:7]}` and includes the `is_empty()` fix; every later "
              f"commit got a new hash (e.g. the keepalive commit is now `{R.commits[1][0][:7]}`), so the branch needs a "
              "`git push --force-with-lease` when you push. I haven't pushed.")

    S.user("run everything once more after the rebase: tests, clippy, fmt, msrv")
    S.ai(calls=[x.cargo_test()])
    S.ai(calls=[T.bash("cargo clippy --workspace --all-targets -- -D warnings && cargo fmt --check",
                       f"    Checking tidewater v0.9.3 ({CWD})\n    Finished `dev` profile [unoptimized + debuginfo] target(s) in 6.02s")])
    S.ai(calls=[T.bash("cargo +1.75.0 check --workspace --locked --all-targets",
                       f"    Checking tidewater v0.9.3 ({CWD})\n    Finished dev [unoptimized + debuginfo] target(s) in 5.37s")])
    S.ai(text=f"All clean after the rebase: {C.count()} tests pass, clippy with `-D warnings` and `cargo fmt --check` are "
              "quiet, and 1.75.0 checks all targets. (Integration suite not run, as agreed.)")

    S.user("write a PR description into /tmp/pr-412.md, dont push anything")
    full_log = "\n\n".join(f"commit {h}\nAuthor: Dev <dev@tidewater.dev>\n\n    {s}" for h, s in reversed(R.commits))
    S.ai(calls=[T.bash("git log main.. --format='commit %H%nAuthor: %an <%ae>%n%n    %s'", full_log),
                T.bash("git diff --stat main.. | tail -n 1", R.range_stat())])
    short = {s: h[:7] for h, s in R.commits}
    pr = ("# Rotation and shipping fixes (#412, #431) + `tidewater status`\n\n"
          "## Fixes\n\n"
          f"- **#412** size-based rotation now follows the file's real length (fstat on our descriptor) instead of how "
          f"far the watcher has read, and the unread tail of a renamed file is drained and shipped before reopening "
          f"({short[R.commits[0][1]]}, {short['test(rotate): use the portable unix MetadataExt in the #412 test']}).\n"
          f"- **#431** rename rotation keeps the owner, group and mode of the live file, like logrotate's `create` "
          f"({short['fix(rotate): keep owner, group and mode of the live file on rename rotation (#431)']}).\n"
          "- `tidewater validate` runs the real config loader, so it can no longer accept what the daemon rejects "
          "(`max_size = \"10 MB\"`).\n\n"
          "## Shipping\n\n"
          "- TCP keepalive on collector connections (`ship.keepalive`, default `\"30s\"`; `keepalive_secs` accepted). "
          "The eu-west LB (`ingest.eu-west.tidewater.dev`) has a 60 s idle timeout and was resetting every quiet "
          "connection; on staging the resets stopped after deploying this branch.\n"
          "- Retry backoff uses decorrelated jitter and decays on success instead of resetting to 250 ms.\n"
          "- gzip level configurable (`ship.compression_level`, default 6 instead of 9): encode time -71%, output +2%.\n\n"
          "## CLI\n\n"
          "- `tidewater status` (`--json`: one object per line); opens the state db read-only.\n"
          "- `rotate-now` renamed to `rotate`; `rotate-now` still works as an alias.\n\n"
          "## Compatibility\n\n"
          "- MSRV stays 1.75 (`cargo +1.75.0 check` clean).\n"
          "- New direct dependency: `socket2 0.5.5`, already in the tree via tokio.\n"
          "- No migrations.\n"
          "- Size units: `KB`/`MB`/`GB` keep their binary meaning but now log a deprecation warning; they become "
          "decimal in 1.0 (#445). `KiB`/`MiB`/`GiB` added.\n\n"
          "## Not in this PR\n\n"
          "- Age-based rotation restarts its clock on daemon restart when the filesystem has no birth time "
          "(needs a schema change; issue to be filed).\n"
          "- A trailing partial line in a rotated file is still dropped by the drain.\n\n"
          "## Testing\n\n"
          f"- `cargo test --workspace`: {C.count()} tests, green. Integration suite (`--features integration`) not run.\n"
          "- `cargo clippy --all-targets -- -D warnings`, `cargo fmt --check` clean.\n"
          "- Staging: keepalive build running since 11:20; one reconnect at 11:39 when the LB replaced the amphora "
          "behind 10.20.4.18, detected by keepalive (`ETIMEDOUT`).\n")
    S.ai(calls=[T.write("/tmp/pr-412.md", pr)])
    S.ai(text="Written to `/tmp/pr-412.md`: fixes (#412, #431, validate), shipping changes, CLI, compatibility notes "
              "(MSRV, socket2, no migrations, the #445 unit deprecation), what's deliberately left out, and testing. "
              "Nothing pushed.")


# ---------------------------------------------------------------------------
# 16:50 - #440 journald input: design, parser, wiring (left unfinished)
# ---------------------------------------------------------------------------

JOURNALD_DESIGN = r'''# Design sketch: journald as an input (#440)

Status: draft, 2026-11-02. Issue: https://github.com/tidewater-rs/tidewater/issues/440

## Goal

Ship entries from the systemd journal the same way we ship lines from files:
batched, gzipped, at least once, resuming where we left off after a restart.
Rotation does not apply (journald rotates its own files).

## Non-goals

- Reading journal files from disk directly (`/var/log/journal/*/*.journal`).
  The format is documented but intricate, and journald already gives us a
  stable reader.
- Remote journals (`systemd-journal-remote`), namespaces, `--merge`.

## Options for reading the journal

### A. libsystemd through FFI (`sd-journal` / `systemd` crates)

- `sd_journal_open`, `sd_journal_seek_cursor`, `sd_journal_wait`.
- New dependencies: a `-sys` crate plus a safe wrapper; links `libsystemd`
  dynamically, so the binary no longer runs where libsystemd is missing, and
  the static musl build we ship for Alpine breaks.
- Every platform build (macOS, FreeBSD) needs it feature-gated anyway.

### B. Spawn `journalctl -o json --follow`

- No new dependencies: `tokio::process` + `serde_json`, both already used.
- `journalctl --after-cursor=<c>` resumes exactly after the last shipped entry;
  `--cursor-file` exists too but writes a file we'd have to manage.
- Cost: one extra process, and we depend on `journalctl`'s JSON output, which
  is documented and stable (https://systemd.io/JOURNAL_EXPORT_FORMATS/).
- Failure modes are visible: if `journalctl` exits we see it and restart it
  with backoff.

**Proposal: B**, behind a `journald` cargo feature so non-systemd builds are
unaffected.

## Data model

`journalctl -o json` prints one object per line. Field values are strings,
with two exceptions we must handle:

- values that are not valid UTF-8 (or contain control characters) are
  encoded as **arrays of byte values**;
- fields that occur more than once in an entry are encoded as **arrays of
  values**.

We keep `__CURSOR`, `__REALTIME_TIMESTAMP`, `_SYSTEMD_UNIT`,
`SYSLOG_IDENTIFIER`, `PRIORITY` and `MESSAGE`; everything else is dropped for
now (configurable later).

Records are shipped as one JSON line each, with the usual `fields` from the
config merged in, so the collector needs no changes.

## Resuming

The last cursor acknowledged by the collector is the resume point, per
configured source. It goes into the state database.

## Config

```toml
[[journald]]
units = ["nginx.service", "app-*.service"]   # journalctl -u, globs allowed
priority = "info"                            # journalctl -p
fields = { source = "journald" }
sink = "eu-west"
```

## Open questions

- Journal vacuumed past our cursor (`journalctl` then errors with
  "Failed to seek to cursor"): start from the oldest entry or from now?
- Rate: one `journalctl` per `[[journald]]` entry, or one with several `-u`?
'''

JOURNALD_RS_V1 = r'''//! Reading the systemd journal through `journalctl -o json` (#440).
//!
//! `journalctl` prints one JSON object per line. Values are strings, except
//! that journald encodes values that are not valid UTF-8 as arrays of byte
//! values, and fields that occur more than once as arrays of values. See
//! https://systemd.io/JOURNAL_EXPORT_FORMATS/

use serde::Deserialize;

/// The fields of an entry we ship.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    /// Opaque position, for `journalctl --after-cursor`.
    pub cursor: String,
    /// Microseconds since the epoch.
    pub realtime_usec: u64,
    pub unit: Option<String>,
    pub identifier: Option<String>,
    /// 0 (emerg) .. 7 (debug).
    pub priority: Option<u8>,
    /// Raw bytes: MESSAGE is not guaranteed to be UTF-8.
    pub message: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("invalid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("entry without {0}")]
    Missing(&'static str),
    #[error("bad {0}: {1:?}")]
    Bad(&'static str, String),
}

#[derive(Deserialize)]
struct Raw {
    #[serde(rename = "__CURSOR")]
    cursor: Option<String>,
    #[serde(rename = "__REALTIME_TIMESTAMP")]
    realtime: Option<String>,
    #[serde(rename = "_SYSTEMD_UNIT")]
    unit: Option<String>,
    #[serde(rename = "SYSLOG_IDENTIFIER")]
    identifier: Option<String>,
    #[serde(rename = "PRIORITY")]
    priority: Option<String>,
    #[serde(rename = "MESSAGE")]
    message: Option<String>,
}

/// Parses one line of `journalctl -o json` output.
pub fn parse_line(line: &str) -> Result<JournalEntry, ParseError> {
    let raw: Raw = serde_json::from_str(line)?;
    let cursor = raw.cursor.ok_or(ParseError::Missing("__CURSOR"))?;
    let rt = raw.realtime.ok_or(ParseError::Missing("__REALTIME_TIMESTAMP"))?;
    let realtime_usec = rt.parse().map_err(|_| ParseError::Bad("__REALTIME_TIMESTAMP", rt.clone()))?;
    let priority = match raw.priority {
        Some(p) => Some(p.parse().map_err(|_| ParseError::Bad("PRIORITY", p.clone()))?),
        None => None,
    };
    Ok(JournalEntry {
        cursor,
        realtime_usec,
        unit: raw.unit,
        identifier: raw.identifier,
        priority,
        message: raw.message.map(String::into_bytes).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Trimmed from `journalctl -o json -u nginx` on tw-staging-02.
    const LINE: &str = r#"{"__CURSOR":"s=3c1f0a7ed1c84e0f9a2b3c4d5e6f7a8b;i=3a1f2;b=3c1f0a7e9b2d4c58a6e1f09d7b3a2c44;m=10f3c2e1a;t=5f2b8c1d0e3a1;x=9e8d7c6b5a493827","__REALTIME_TIMESTAMP":"1793866812418233","_SYSTEMD_UNIT":"nginx.service","SYSLOG_IDENTIFIER":"nginx","PRIORITY":"6","_PID":"1187","MESSAGE":"10.20.4.51 - - [02/Nov/2026:16:20:12 +0000] \"GET /healthz HTTP/1.1\" 200 2 \"-\" \"kube-probe/1.31\""}"#;

    #[test]
    fn parses_sample_line() {
        let e = parse_line(LINE).unwrap();
        assert!(e.cursor.starts_with("s=3c1f0a7e"));
        assert_eq!(e.realtime_usec, 1793866812418233);
        assert_eq!(e.unit.as_deref(), Some("nginx.service"));
        assert_eq!(e.priority, Some(6));
        assert!(e.message.starts_with(b"10.20.4.51 - -"));
    }

    #[test]
    fn byte_array_message() {
        let line = r#"{"__CURSOR":"s=1;i=2","__REALTIME_TIMESTAMP":"1","MESSAGE":[71,69,84,32,47,63,113,61,99,97,102,233]}"#;
        let e = parse_line(line).unwrap();
        assert_eq!(e.message, b"GET /?q=caf\xe9");
    }

    #[test]
    fn repeated_field_takes_first() {
        let line = r#"{"__CURSOR":"s=1;i=2","__REALTIME_TIMESTAMP":"1","MESSAGE":["first","second"]}"#;
        assert_eq!(parse_line(line).unwrap().message, b"first");
    }

    #[test]
    fn missing_cursor_is_an_error() {
        let err = parse_line(r#"{"__REALTIME_TIMESTAMP":"1","MESSAGE":"x"}"#).unwrap_err();
        assert!(matches!(err, ParseError::Missing("__CURSOR")), "{err}");
    }
}
'''

FIELD_ENUM = r'''/// A field value as journald encodes it.
#[derive(Deserialize)]
#[serde(untagged)]
enum Field {
    Text(String),
    /// Not valid UTF-8 (or contains control characters): byte values.
    Bytes(Vec<u8>),
    /// The field occurs more than once in the entry.
    Many(Vec<Field>),
}

impl Field {
    fn into_bytes(self) -> Vec<u8> {
        match self {
            Field::Text(s) => s.into_bytes(),
            Field::Bytes(b) => b,
            // Repeated MESSAGE is rare; the first one is what `journalctl -o short` shows.
            Field::Many(v) => v.into_iter().next().map(Field::into_bytes).unwrap_or_default(),
        }
    }
}

'''


def journald(x: X) -> None:
    S, T, R, C = x.S, x.T, x.R, x.C

    S.user("last big thing today: #440 https://github.com/tidewater-rs/tidewater/issues/440 , journald as an input. "
           "design sketch first in docs/design/journald.md, no code yet. what would it need dep-wise?", at="16:51")
    S.ai(calls=[T.bash("journalctl --version", "systemd 255 (255.4-1ubuntu8.4)\n+PAM +AUDIT +SELINUX +APPARMOR +IMA "
                       "+SMACK +SECCOMP +GCRYPT -GNUTLS +OPENSSL +ACL +BLKID +CURL +ELFUTILS +FIDO2 +IDN2 -IDN +IPTC "
                       "+KMOD +LIBCRYPTSETUP +LIBFDISK +PCRE2 -PWQUALITY +P11KIT +QRENCODE +TPM2 +BZIP2 +LZ4 +XZ +ZLIB "
                       "+ZSTD -BPF_FRAMEWORK -XKBCOMMON +UTMP +SYSVINIT default-hierarchy=unified")])
    sample = journal_sample(80)
    S.ai(calls=[T.bash("ssh tw-staging-02 journalctl -o json -u nginx -n 80 --no-pager", sample)])
    S.ai(think="Real output confirms: strings everywhere, __CURSOR opaque, __REALTIME_TIMESTAMP microseconds as string, "
               "and one entry (the cafe query) has MESSAGE as an array of byte values because it's not valid UTF-8. "
               "The parser must accept that.\n\n"
               "Dep options: libsystemd FFI (systemd crate / sd-journal): new deps, links libsystemd, breaks the musl "
               "static build. Or spawn journalctl: tokio::process (tokio has the 'process' feature? Cargo.toml features: "
               "rt-multi-thread, macros, net, time, fs, io-util, signal, sync: no 'process'). Enabling a tokio feature "
               "is not a new crate but does change the build; mention it. serde_json already a dep.\n\n"
               "Cursor persistence: state db. Where? Don't decide yet; note as open question.",
         calls=[T.grep("^tokio = ", "Cargo.toml"), T.read("src/ship/batch.rs")])
    S.ai(calls=[T.write("docs/design/journald.md", JOURNALD_DESIGN)])
    S.ai(text="Draft is in `docs/design/journald.md`. Short version:\n\n"
              "**Dependencies.** Two ways to read the journal:\n"
              "- **libsystemd via FFI** (`systemd` / `sd-journal` crates): new dependencies, links `libsystemd` "
              "dynamically, and breaks the static musl build we ship for Alpine.\n"
              "- **Spawn `journalctl -o json --follow --after-cursor=…`**: *no new crates*. It needs `tokio::process`, "
              "which is the `process` feature of tokio, not enabled today (we have `rt-multi-thread, macros, net, time, "
              "fs, io-util, signal, sync`). Turning on a feature of an existing dependency builds a bit more of tokio "
              "but adds nothing to `Cargo.lock`. `serde_json` is already a dependency.\n\n"
              "I recommend the subprocess, behind a `journald` cargo feature.\n\n"
              "**A detail from the real output above:** the entry for `GET /search?q=caf\\xe9` has `MESSAGE` as an "
              "array of byte values, because it isn't valid UTF-8. That's documented journald behaviour and the parser "
              "has to handle it; same for fields that occur twice (arrays of values).\n\n"
              "Open questions are at the end of the doc (cursor past vacuumed journal; one `journalctl` per source or "
              "shared).")

    S.user("what does turning on tokio/process actually pull in? show me")
    tree = ("tidewater v0.9.3 (/home/dev/src/tidewater)\n"
            "└── tokio v1.35.1\n"
            "    ├── bytes v1.5.0\n    ├── libc v0.2.152\n    ├── mio v0.8.10\n    │   ├── libc v0.2.152\n"
            "    │   └── log v0.4.20\n    ├── num_cpus v1.16.0\n    │   └── libc v0.2.152\n"
            "    ├── parking_lot v0.12.1\n    │   ├── lock_api v0.4.11\n    │   │   └── scopeguard v1.2.0\n"
            "    │   │   [build-dependencies]\n    │   │   └── autocfg v1.1.0\n"
            "    │   └── parking_lot_core v0.9.9\n    │       ├── cfg-if v1.0.0\n    │       ├── libc v0.2.152\n"
            "    │       └── smallvec v1.13.1\n    ├── pin-project-lite v0.2.13\n"
            "    ├── signal-hook-registry v1.4.1\n    │   └── libc v0.2.152\n    ├── socket2 v0.5.5\n"
            "    │   └── libc v0.2.152\n    └── tokio-macros v2.2.0 (proc-macro)\n"
            "        ├── proc-macro2 v1.0.78\n        │   └── unicode-ident v1.0.12\n"
            "        ├── quote v1.0.35\n        │   └── proc-macro2 v1.0.78 (*)\n"
            "        └── syn v2.0.48\n            ├── proc-macro2 v1.0.78 (*)\n            ├── quote v1.0.35 (*)\n"
            "            └── unicode-ident v1.0.12\n")
    S.ai(calls=[T.bash("cargo tree -e normal,build --features tokio/process -i tokio --invert | head -40", tree),
                T.bash("cp Cargo.lock /tmp/lock.before && cargo update --dry-run --workspace 2>&1 | tail -n 2; "
                       "cargo check -q --features tokio/process && diff /tmp/lock.before Cargo.lock && echo 'Cargo.lock unchanged'",
                       "    Updating crates.io index\nwarning: aborting update due to dry run\nCargo.lock unchanged")])
    S.ai(text="Nothing new. With `tokio/process` the tokio subtree is the same set of crates we already build "
              "(`mio`, `libc`, `signal-hook-registry`, `socket2`, …); `process` only compiles tokio's own "
              "`process` module, which reuses `signal-hook-registry` for `SIGCHLD`. `Cargo.lock` is byte-for-byte "
              "unchanged after a check with the feature on.")

    S.user("go with the subprocess + tokio process feature, thats fine. start with the parser for journalctl's json in "
           "src/input/journald.rs, test it against real output like the one above")
    S.ai(calls=[T.write("src/input/journald.rs", JOURNALD_RS_V1),
                T.write("src/input/mod.rs", "//! Inputs other than plain files.\n\npub mod journald;\n"),
                T.edit("src/lib.rs", "pub mod config;\n", "pub mod config;\npub mod input;\n")])
    C.add("lib", "input::journald::tests::parses_sample_line", "input::journald::tests::byte_array_message",
          "input::journald::tests::repeated_field_takes_first", "input::journald::tests::missing_cursor_is_an_error")
    ln1 = x.line("src/input/journald.rs", "let e = parse_line(line).unwrap();\n        assert_eq!(e.message, b\"GET".split("\n")[0])
    ln_b = x.line("src/input/journald.rs", "fn byte_array_message()") + 2
    ln_r = x.line("src/input/journald.rs", "fn repeated_field_takes_first()") + 2
    S.ai(calls=[x.cargo_test("cargo test --workspace journald", filt="journald", tail=40, fail={
        "input::journald::tests::byte_array_message":
            f"thread 'input::journald::tests::byte_array_message' panicked at src/input/journald.rs:{ln_b}:32:\n"
            "called `Result::unwrap()` on an `Err` value: Json(Error(\"invalid type: sequence, expected a string\", "
            "line: 1, column: 66))\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
        "input::journald::tests::repeated_field_takes_first":
            f"thread 'input::journald::tests::repeated_field_takes_first' panicked at src/input/journald.rs:{ln_r}:26:\n"
            "called `Result::unwrap()` on an `Err` value: Json(Error(\"invalid type: sequence, expected a string\", "
            "line: 1, column: 66))"})])
    S.ai(text="As intended, the two array cases fail with the naive `Option<String>` for `MESSAGE`. Adding an untagged "
              "`Field` enum: string, byte array, or repeated values (first one wins). serde tries the variants in order, "
              "so an array of numbers becomes `Bytes` and an array of strings falls through to `Many`.",
         calls=[T.edit("src/input/journald.rs", "#[derive(Deserialize)]\nstruct Raw {", FIELD_ENUM + "#[derive(Deserialize)]\nstruct Raw {"),
                T.edit("src/input/journald.rs", "    #[serde(rename = \"MESSAGE\")]\n    message: Option<String>,\n",
                       "    #[serde(rename = \"MESSAGE\")]\n    message: Option<Field>,\n"),
                T.edit("src/input/journald.rs", "        message: raw.message.map(String::into_bytes).unwrap_or_default(),\n",
                       "        message: raw.message.map(Field::into_bytes).unwrap_or_default(),\n")])
    S.ai(calls=[x.cargo_test("cargo test --workspace journald", filt="journald")])
    S.ai(text="Now the whole staging sample through the parser, via a throwaway test binary so nothing lands in the repo:",
         calls=[T.bash("ssh tw-staging-02 journalctl -o json -u nginx -n 5000 --no-pager > /tmp/nginx-journal.json && "
                       "wc -l /tmp/nginx-journal.json && cargo run -q --example journald_check -- /tmp/nginx-journal.json",
                       "5000 /tmp/nginx-journal.json\nerror: no example target named `journald_check`.\n\n"
                       "Available example targets:\n    (none)", error=True, code=101)])
    S.ai(text="Right, there's no examples directory and I don't want to add one just for this. A quick `#[ignore]`d test "
              "reading a path from the environment does the same job without leaving anything behind after I remove it.",
         calls=[T.edit("src/input/journald.rs", "    #[test]\n    fn missing_cursor_is_an_error() {",
                       "    #[test]\n    #[ignore]\n    fn parse_file_from_env() {\n"
                       "        let path = std::env::var(\"JOURNAL_SAMPLE\").unwrap();\n"
                       "        let text = std::fs::read_to_string(path).unwrap();\n"
                       "        let mut bytes_msgs = 0;\n"
                       "        for (i, line) in text.lines().enumerate() {\n"
                       "            let e = parse_line(line).unwrap_or_else(|err| panic!(\"line {}: {err}\", i + 1));\n"
                       "            bytes_msgs += usize::from(std::str::from_utf8(&e.message).is_err());\n"
                       "        }\n"
                       "        println!(\"{} entries, {bytes_msgs} non-UTF-8 messages\", text.lines().count());\n    }\n\n"
                       "    #[test]\n    fn missing_cursor_is_an_error() {")])
    S.ai(calls=[T.bash("JOURNAL_SAMPLE=/tmp/nginx-journal.json cargo test -q --lib parse_file_from_env -- --ignored --nocapture",
                       "\nrunning 1 test\n5000 entries, 3 non-UTF-8 messages\n.\n"
                       f"test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; {len(C.bins['lib'])} filtered out; finished in 0.09s\n")])
    S.ai(calls=[T.edit("src/input/journald.rs",
                       R.fs["src/input/journald.rs"][R.fs["src/input/journald.rs"].index("    #[test]\n    #[ignore]"):
                                                    R.fs["src/input/journald.rs"].index("    #[test]\n    fn missing_cursor_is_an_error")],
                       "")])
    S.ai(calls=[x.cargo_test()])
    S.ai(text="Parser done and the throwaway check removed again:\n"
              "- `src/input/journald.rs`: `parse_line()` → `JournalEntry { cursor, realtime_usec, unit, identifier, "
              "priority, message: Vec<u8> }`; `MESSAGE` may be a string, a byte array or repeated values.\n"
              "- All 5000 real nginx entries from staging parse; 3 of them have non-UTF-8 messages.\n"
              "- 4 unit tests, full suite green.\n\n"
              "Not wired into anything yet.")

    S.user("cursor persistence has to go in the state db. and remember, migrations/ is off limits. how?")
    S.ai(calls=[T.read("migrations/0002_kv.sql"), T.grep("kv_get|kv_set", "src")])
    S.ai(text="Without touching `migrations/`: the generic `kv` table from `0002_kv.sql` "
              "(`key TEXT PRIMARY KEY, value TEXT NOT NULL`) already exists in every deployed database, and `State` has "
              "`kv_get`/`kv_set`. It was added for exactly this kind of component state (#288, the collector session "
              "token). Key per source, e.g. `journald.cursor.<name>`, value = the cursor string.\n\n"
              "Semantics: only store a cursor once the collector has acknowledged the batch containing that entry (same "
              "rule as `offsets.shipped`), then restart `journalctl` with `--after-cursor`. Worst case after a crash is a "
              "re-send of one batch, which is our at-least-once guarantee anyway.\n\n"
              "The one thing `kv` can't give us is history or an index, which we don't need for a single cursor per "
              "source.")

    S.user("ok use kv. i have to leave at 6. before that: wire the journald source into the main loop behind a "
           "`journald` cargo feature. whatever isnt done, write down as TODOs in the design doc so I can pick it up "
           "tomorrow", at="17:38")
    S.ai(calls=[T.read("src/main.rs"), T.read("src/ship/mod.rs")])
    S.ai(calls=[T.read("src/config.rs"), T.read("src/state.rs")])
    S.ai(calls=[T.read("src/rotate/mod.rs"), T.read("docs/design/journald.md")])
    S.ai(think="Plan: feature journald = [\"tokio/process\"]; lib.rs gate `input` behind it; config gets "
               "`#[cfg(feature = \"journald\")] journald: Vec<JournaldConfig>`; input::journald::run(cfg, state, tx) "
               "spawns journalctl, parses lines, sends to the shipper; main spawns one task per source.\n\n"
               "Problem I can already see: the shipper channel carries Chunk { path, offset, data }, and ship::send "
               "writes high_water_marks() into offsets via set_shipped(path, end). A journal entry has no path/offset; "
               "its resume point is a cursor that has to go to kv after the ack. So either Chunk grows a source enum "
               "or the journal source fakes a path. Faking is wrong (would create bogus offsets rows). Start wiring, "
               "let the compiler show where it breaks, and write down the Chunk redesign as the main TODO.")
    S.ai(calls=[T.edit("Cargo.toml", "integration = []\n",
                       "integration = []\n# Read the systemd journal via `journalctl` (#440).\njournald = [\"tokio/process\"]\n"),
                T.edit("src/lib.rs", "pub mod input;\n", "#[cfg(feature = \"journald\")]\npub mod input;\n"),
                T.edit("src/config.rs", "    pub files: Vec<FileConfig>,\n    pub ship: ShipConfig,\n}\n",
                       "    pub files: Vec<FileConfig>,\n    pub ship: ShipConfig,\n"
                       "    /// Journal sources (#440).\n    #[cfg(feature = \"journald\")]\n    #[serde(default)]\n"
                       "    pub journald: Vec<crate::input::journald::JournaldConfig>,\n}\n")])
    run_fn = r'''
/// One `[[journald]]` entry.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JournaldConfig {
    /// Used in the state key; defaults to the joined unit names.
    pub name: Option<String>,
    #[serde(default)]
    pub units: Vec<String>,
    pub priority: Option<String>,
    #[serde(default)]
    pub fields: std::collections::BTreeMap<String, String>,
    pub sink: Option<String>,
}

impl JournaldConfig {
    pub fn state_key(&self) -> String {
        format!("journald.cursor.{}", self.name.clone().unwrap_or_else(|| self.units.join(",")))
    }
}

/// Follows the journal and hands entries to the shipper.
pub async fn run(
    cfg: JournaldConfig,
    state: crate::state::State,
    tx: tokio::sync::mpsc::Sender<crate::ship::Chunk>,
) -> anyhow::Result<()> {
    use tokio::io::AsyncBufReadExt;

    let mut cmd = tokio::process::Command::new("journalctl");
    cmd.args(["--output=json", "--follow", "--no-pager", "--quiet"]);
    for u in &cfg.units {
        cmd.arg(format!("--unit={u}"));
    }
    if let Some(p) = &cfg.priority {
        cmd.arg(format!("--priority={p}"));
    }
    // Resume point. Nothing writes it yet: TODO(#440) store it in ship::send
    // after the collector acks, see docs/design/journald.md.
    if let Some(cursor) = state.kv_get(&cfg.state_key())? {
        cmd.arg(format!("--after-cursor={cursor}"));
    }
    let mut child = cmd.stdout(std::process::Stdio::piped()).kill_on_drop(true).spawn()?;
    let stdout = child.stdout.take().expect("piped");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    while let Some(line) = lines.next_line().await? {
        let entry = parse_line(&line)?;
        tx.send(entry).await?;
    }
    let status = child.wait().await?;
    anyhow::bail!("journalctl exited: {status}")
}
'''
    S.ai(calls=[T.edit("src/input/journald.rs", "#[cfg(test)]\nmod tests {", run_fn.lstrip("\n") + "\n#[cfg(test)]\nmod tests {"),
                T.edit("src/main.rs",
                       "    let shipper = tokio::spawn(tidewater::ship::run(cfg.ship.clone(), state.clone(), rx));\n",
                       "    #[cfg(feature = \"journald\")]\n"
                       "    for j in cfg.journald.clone() {\n"
                       "        tokio::spawn(tidewater::input::journald::run(j, state.clone(), tx.clone()));\n"
                       "    }\n"
                       "    let shipper = tokio::spawn(tidewater::ship::run(cfg.ship.clone(), state.clone(), rx));\n")])
    p = "src/input/journald.rs"
    ln = x.line(p, "tx.send(entry).await?;")
    src = x.src_line(p, "tx.send(entry).await?;")
    c = src.index("entry") + 1
    err = ("   Compiling tidewater v0.9.3 (/home/dev/src/tidewater)\n"
           "error[E0308]: mismatched types\n"
           f"   --> {p}:{ln}:{c}\n    |\n{ln:<4}| {src}\n"
           f"    | {' ' * (src.index('send') )}---- ^^^^^ expected `Chunk`, found `JournalEntry`\n"
           f"    | {' ' * (src.index('send'))}|\n"
           f"    | {' ' * (src.index('send'))}arguments to this method are incorrect\n    |\n"
           "help: the return type of this call is `JournalEntry` due to the type of the argument passed\n"
           "note: method defined here\n"
           "   --> /home/dev/.cargo/registry/src/index.crates.io-6f17d22bba15001f/tokio-1.35.1/src/sync/mpsc/bounded.rs:356:18\n"
           "    |\n356 |     pub async fn send(&self, value: T) -> Result<(), SendError<T>> {\n"
           "    |                  ^^^^\n\n"
           "For more information about this error, try `rustc --explain E0308`.\n"
           "error: could not compile `tidewater` (lib) due to 1 previous error\n")
    S.ai(calls=[T.bash("cargo check --workspace --all-targets --features journald", err, error=True, code=101),
                T.bash("cargo check --workspace --all-targets",
                       "    Checking tidewater v0.9.3 (/home/dev/src/tidewater)\n"
                       "    Finished `dev` profile [unoptimized + debuginfo] target(s) in 5.12s")])
    S.ai(think="As expected. Default build fine, feature build fails at the Chunk boundary. Converting JournalEntry into "
               "a Chunk with a fake path would compile but ship::send would then call state.set_shipped(fake_path, "
               "end) and the cursor would never be stored. Doing the proper change (Chunk source enum + ack handling in "
               "ship::send + kv cursor write) touches ship/mod.rs, batch.rs, rotate, tests; not something to rush in the "
               "last 15 minutes before the user leaves. Write it up as TODOs instead, precisely, and leave the branch "
               "state clearly described.",
         calls=[T.edit("docs/design/journald.md", "## Open questions\n",
                       "## Status and TODO (end of 2026-11-02)\n\n"
                       "Done:\n"
                       "- `src/input/journald.rs`: `parse_line()` for `journalctl -o json`, including byte-array and\n"
                       "  repeated fields; checked against 5000 real nginx entries from tw-staging-02.\n"
                       "- `journald` cargo feature (`tokio/process`), `[[journald]]` config behind it, `run()` that\n"
                       "  spawns `journalctl --follow`, and the spawn in `main.rs`.\n"
                       "- Cursor storage decided: `kv` table (0002), key `journald.cursor.<name>`. No migration.\n\n"
                       "Not done (`cargo check --features journald` fails, default build is fine):\n"
                       "- [ ] `ship::Chunk` only knows files (`path`, `offset`). Give it a source:\n"
                       "      `enum Source { File { path, offset }, Journal { key, cursor } }`, and make\n"
                       "      `Batch::high_water_marks()` return per-source positions.\n"
                       "- [ ] `ship::send`: after an ack, `set_shipped` for files and `kv_set(key, cursor)` for journal\n"
                       "      sources. Never store a cursor before the ack.\n"
                       "- [ ] Encode each `JournalEntry` as one JSON line (`MESSAGE` lossy-UTF-8 plus `fields`).\n"
                       "- [ ] Restart `journalctl` with `Backoff` when it exits; today `run()` just returns an error\n"
                       "      and the task dies silently (its `JoinHandle` isn't awaited in `main.rs`).\n"
                       "- [ ] Cursor vacuumed away (\"Failed to seek to cursor\"): decide oldest vs. now (open question below).\n"
                       "- [ ] `sink` on `[[journald]]` is parsed but ignored, like `files[].sink` today.\n"
                       "- [ ] Tests for `run()` with a fake `journalctl` on `PATH`.\n"
                       "- [ ] CI: add a `--features journald` build on Linux; make sure macOS/FreeBSD builds don't\n"
                       "      enable it.\n"
                       "- [ ] `docs/config.md` section for `[[journald]]` once the format is final.\n\n"
                       "## Open questions\n")])
    S.ai(calls=[T.git_status()])
    S.ai(text="I didn't get this one finished. Here's where it stands.\n\n"
              "**Done (uncommitted, on `fix/412-size-rotation`):**\n"
              "- `journald` cargo feature (`journald = [\"tokio/process\"]`), `input` module gated behind it.\n"
              "- `[[journald]]` config (`JournaldConfig`, behind the feature) and `input::journald::run()`, which spawns "
              "`journalctl --output=json --follow`, resumes with `--after-cursor` from `kv` key `journald.cursor.<name>`, "
              "and parses each line.\n"
              "- `main.rs` spawns one task per `[[journald]]` entry when the feature is on.\n"
              "- The default build is unaffected: `cargo check --workspace --all-targets` passes.\n\n"
              "**Not done:** `cargo check --features journald` fails with `E0308` in `src/input/journald.rs`: the shipper "
              "channel carries `ship::Chunk` (a file path + byte offset) and I'm sending a `JournalEntry`. Papering over "
              "that with a fake path would compile, but `ship::send` would then write a bogus row into `offsets` and "
              "never store the cursor. The real fix is giving `Chunk` a source enum and acking cursors into `kv` in "
              "`ship::send`, which touches the shipper and its tests. I didn't want to rush that.\n\n"
              "The full TODO list is in `docs/design/journald.md` under \"Status and TODO\": Chunk source enum, "
              "cursor-after-ack in `ship::send`, JSON encoding of entries, restarting `journalctl` with backoff (right "
              "now a dead `journalctl` kills its task silently), the vacuumed-cursor question, the ignored `sink`, "
              "tests with a fake `journalctl`, a CI job for the feature, and config docs.\n\n"
              "Nothing from the journald work is committed; the branch history ends at the gzip-level commit. Tomorrow, "
              "start with the `Chunk` change.")


# ---------------------------------------------------------------------------
# main + checks
# ---------------------------------------------------------------------------


def check(path: Path) -> dict:
    """Every line parses; ids sequential and unique; parents chain; results match earlier calls."""
    raw = path.read_bytes()
    lines = raw.decode("utf-8").splitlines()
    head = json.loads(lines[0])
    assert head["type"] == "session" and head["version"] == 3, head
    seen_ids: set[str] = set()
    calls: dict[str, str] = {}
    answered: set[str] = set()
    prev = None
    prev_ts = ""
    roles: dict[str, int] = {}
    users = compact = images = aborted = errors = 0
    for i, line in enumerate(lines[1:], 1):
        e = json.loads(line)
        assert e["type"] == "message", i
        assert e["id"] == f"{i:08x}", (i, e["id"])
        assert e["id"] not in seen_ids
        seen_ids.add(e["id"])
        assert e["parentId"] == prev, (i, e["parentId"], prev)
        assert e["timestamp"] > prev_ts, (i, e["timestamp"], prev_ts)
        prev, prev_ts = e["id"], e["timestamp"]
        m = e["message"]
        roles[m["role"]] = roles.get(m["role"], 0) + 1
        if m["role"] == "user":
            users += 1
            if m["content"] == "/compact":
                compact += 1
            if isinstance(m["content"], list):
                images += sum(1 for b in m["content"] if b["type"] == "image")
        elif m["role"] == "assistant":
            if m["stopReason"] == "aborted":
                aborted += 1
            for b in m["content"]:
                if b["type"] == "toolCall":
                    assert b["id"] not in calls, b["id"]
                    calls[b["id"]] = b["name"]
        elif m["role"] == "toolResult":
            cid = m["toolCallId"]
            assert cid in calls, cid
            assert cid not in answered, cid
            assert m["toolName"] == calls[cid]
            answered.add(cid)
            errors += bool(m["isError"])
    unanswered = set(calls) - answered
    assert len(unanswered) == 1, unanswered
    assert compact == 1 and images == 1 and aborted == 1
    return {"messages": len(lines) - 1, "bytes": len(raw), "user_turns": users, "roles": roles,
            "tool_calls": len(calls), "tool_errors": errors, "unanswered_calls": len(unanswered)}


def main() -> None:
    x = X()
    for part in PARTS:
        part(x)
    S = x.S
    body = [json.dumps(S.header, separators=(",", ":"))] + S.lines
    OUT.write_text("\n".join(body) + "\n", encoding="utf-8")
    stats = check(OUT)
    print(f"wrote {OUT}")
    for k, v in stats.items():
        print(f"  {k}: {v}")
    print(f"  last timestamp: {json.loads(S.lines[-1])['timestamp']}")


PARTS = [morning_412, keepalive, backoff, issue_431, status_cmd, ci_and_changelog, sizes, compression_and_pr, journald]

if __name__ == "__main__":
    main()
