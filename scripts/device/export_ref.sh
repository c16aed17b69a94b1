#!/usr/bin/env bash
# export_ref.sh - copy the authors' decoder (generate.py) and their qwen3/
# package out of the bare mirror of ML-GSAI/ReFusion into the IGNORED folder
# .deps/refusion_ref, so that a device run can import it. Never commit that
# folder: the reference stays outside the project; golden.py only imports it.
set -euo pipefail
SRC=${REFUSION_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
MIRROR=${REFUSION_REF_MIRROR:-/work/.mirror/ML-GSAI+ReFusion/repo}
DST=$SRC/.deps/refusion_ref
[ -d "$MIRROR" ] || { echo "export_ref.sh: no mirror at $MIRROR" >&2; exit 1; }
rm -rf "$DST"
mkdir -p "$DST/qwen3"
git -C "$MIRROR" show HEAD:generate.py > "$DST/generate.py"
for f in $(git -C "$MIRROR" ls-tree --name-only HEAD qwen3/); do
  git -C "$MIRROR" show "HEAD:$f" > "$DST/$f"
done
git -C "$MIRROR" rev-parse HEAD > "$DST/COMMIT"
echo "$DST (commit $(cat "$DST/COMMIT"))"
