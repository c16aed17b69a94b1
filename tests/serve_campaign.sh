#!/usr/bin/env bash
# serve_campaign.sh - a short hostile-client campaign (scripts/serve/campaign.py,
# 300 generated requests over every field and protocol corner, loopback
# only) against a tiny random model: no crash, no hang, no 5xx but 503 (busy)
# and 505 (an unknown HTTP version), the server alive and exiting 0 after
# SIGTERM. The full-size run (10^5 requests) is in docs/server-security.md.
set -u
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup serve_campaign
command -v python3 >/dev/null || { echo "FAIL: python3 is needed" >&2; exit 1; }
"$BIN" init -o "$T/m" --preset tiny --hidden 64 --layers 2 --heads 2 --kv-heads 1 --ffn 128 --max-pos 1024 \
  --seed 5 --tokenizer "$SRC/models/refusion-demo/tokenizer.json" >/dev/null 2>&1 || bad "init"
timeout 120 python3 "$SRC/scripts/serve/campaign.py" --bin "$BIN" -m "$T/m" --count 300 --threads 6 --timeout 20 \
  >"$T/campaign.out" 2>&1
rc=$?
cat "$T/campaign.out"
[ $rc -eq 0 ] && grep -q 'crashes 0, hangs 0, 5xx other than 503 (busy) and 505 (HTTP/2.0 ...): 0; server alive at the end: yes; exit after SIGTERM: 0' \
  "$T/campaign.out" && ok || bad "campaign: exit $rc"
grep -q 'campaign: 300 requests' "$T/campaign.out" && ok || bad "not all 300 requests were sent"
echo "serve_campaign: $pass checks passed, $fails failed"
[ $fails -eq 0 ]
