#!/usr/bin/env bash
# fetch_openai.sh - install the official OpenAI JavaScript client (npm
# `openai`, v6) into the ignored cache .deps/npm-openai (once; later runs
# reuse it), for tests/serve_openai.sh. Prints the package's directory.
# Exit 1 when node / npm / the registry is not available.
set -euo pipefail
SRC=${REFUSION_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
PREFIX=$SRC/.deps/npm-openai
# tests that share this cache run at once: one installs while the others wait
mkdir -p "$(dirname "$PREFIX")"
exec 9>"$PREFIX.lock"
flock 9
VERSION=6.30.1
PKG=$PREFIX/node_modules/openai
command -v node >/dev/null || { echo "fetch_openai.sh: node is not installed (scripts/install-deps.sh installs it)" >&2; exit 1; }
if ! [ -f "$PKG/package.json" ] || ! node -e "process.exit(require('$PKG/package.json').version === '$VERSION' ? 0 : 1)"; then
  command -v npm >/dev/null || { echo "fetch_openai.sh: npm is not installed" >&2; exit 1; }
  mkdir -p "$PREFIX"
  npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "openai@$VERSION" >&2 ||
    { echo "fetch_openai.sh: npm install openai@$VERSION failed (is the npm registry reachable?)" >&2; exit 1; }
fi
echo "$PKG"
