#!/usr/bin/env bash
# fetch_puppeteer.sh - install npm `puppeteer-core` (the Chrome DevTools
# driver without a bundled browser: it drives Debian's chromium) into the
# ignored cache .deps/npm-puppeteer (once; later runs reuse it), for
# tests/serve_webui.sh. Prints the package's directory. Exit 1 when node /
# npm / the registry is not available.
set -euo pipefail
SRC=${REFUSION_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
PREFIX=$SRC/.deps/npm-puppeteer
# tests that share this cache run at once: one installs while the others wait
mkdir -p "$(dirname "$PREFIX")"
exec 9>"$PREFIX.lock"
flock 9
VERSION=25.19.0
PKG=$PREFIX/node_modules/puppeteer-core
command -v node >/dev/null || { echo "fetch_puppeteer.sh: node is not installed (scripts/install-deps.sh installs it)" >&2; exit 1; }
if ! [ -f "$PKG/package.json" ] || ! node -e "process.exit(require('$PKG/package.json').version === '$VERSION' ? 0 : 1)"; then
  command -v npm >/dev/null || { echo "fetch_puppeteer.sh: npm is not installed" >&2; exit 1; }
  mkdir -p "$PREFIX"
  npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "puppeteer-core@$VERSION" >&2 ||
    { echo "fetch_puppeteer.sh: npm install puppeteer-core@$VERSION failed (is the npm registry reachable?)" >&2; exit 1; }
fi
echo "$PKG"
