# start.sh - the server start of the server benchmarks (bench_batch.sh,
# bench_prefix.sh, bench_batch_llamacpp.sh), sourced by them after they set
# PROG (their name, for messages), BIN, M, T (a scratch directory) and
# PIDS=() (the servers started, for rf_bench_cleanup).
#
#   rf_bench_header          "PROG: date, CPU, cores"
#   rf_bench_serve NAME OPTIONS...
#       `$BIN serve -m $M --port 0 -q OPTIONS` in the background, its stderr
#       in $T/NAME.log; waits for the port it prints (60 s at most; exits 1
#       when it does not start), writes its URL to $T/NAME.url and prints
#       its settings ("  NAME: (...)": decoder, rows, threads,
#       kernel tier)
#   rf_bench_cleanup         stops the servers, removes $T (trap it on EXIT)

rf_bench_header() {
  echo "$PROG: $(date -u +%Y-%m-%dT%H:%MZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
}

rf_bench_serve() {
  local name=$1 port="" pid
  shift
  "$BIN" serve -m "$M" --port 0 -q "$@" 2>"$T/$name.log" &
  pid=$!
  PIDS+=("$pid")
  for _ in $(seq 1 600); do
    port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$T/$name.log" 2>/dev/null)
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$port" ] || { echo "$PROG: the server did not start: $(cat "$T/$name.log")" >&2; exit 1; }
  echo "http://127.0.0.1:$port" >"$T/$name.url"
  grep -m1 'listening on' "$T/$name.log" | grep -o '(.*)' | sed "s/^/  $name: /"
}

rf_bench_cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$T"
}
