#!/usr/bin/env bash
# fuzz.sh NAME [SECONDS] - build the libFuzzer harness fuzz/NAME.c (clang,
# -fsanitize=fuzzer,address,undefined; the library sources are compiled into
# build-fuzz/ with the same sanitizers) and run it for SECONDS (default 60)
# from the seed corpus fuzz/corpus/NAME (new inputs go to build-fuzz/corpus/NAME,
# crashes to build-fuzz/crash-NAME-*). NAME=all runs every harness in turn.
# Needs clang, libclang-rt-14-dev (libFuzzer) and libomp-14-dev (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: scripts/fuzz.sh NAME|all [SECONDS]}
secs=${2:-60}
if [ "$name" = all ]; then
  for f in fuzz/*.c; do bash "$0" "$(basename "$f" .c)" "$secs" || exit 1; done
  exit 0
fi
[ -f "fuzz/$name.c" ] || { echo "fuzz.sh: no fuzz/$name.c" >&2; exit 2; }
CC=${CC:-clang}
B=build-fuzz
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# include/refusion_version.h as CMake's configure_file writes it, from project(... VERSION x.y.z)
V=$(sed -n 's/^project(refusion VERSION \([0-9]*\.[0-9]*\.[0-9]*\).*/\1/p' CMakeLists.txt)
mkdir -p "$B/include"
sed -e "s/@PROJECT_VERSION@/$V/" -e "s/@PROJECT_VERSION_MAJOR@/${V%%.*}/" -e "s/@PROJECT_VERSION_PATCH@/${V##*.}/" \
  -e "s/@PROJECT_VERSION_MINOR@/$(echo "$V" | cut -d. -f2)/" include/refusion_version.h.in >"$B/include/refusion_version.h.tmp"
cmp -s "$B/include/refusion_version.h.tmp" "$B/include/refusion_version.h" || mv "$B/include/refusion_version.h.tmp" "$B/include/refusion_version.h"
rm -f "$B/include/refusion_version.h.tmp"
CFLAGS="-std=c11 -O1 -g -mavx2 -mfma -mf16c -D_GNU_SOURCE -fopenmp -Iinclude -I$B/include -Isrc $SAN $(pkg-config --cflags jansson libpcre2-8 libutf8proc libmicrohttpd openblas)"
LIBS="$(pkg-config --libs jansson libpcre2-8 libutf8proc libmicrohttpd openblas) -lm -lpthread"
# per input: the template harness must answer within 2 s and 600 MiB (its
# hostile seeds would not without the interpreter's bounds); others 10 s, 4 GiB
per_input_s=10 rss_mb=4096
[ "$name" = jinja ] && per_input_s=2 rss_mb=600
mkdir -p "$B/obj" "$B/corpus/$name"
# the web page embedded as CMakeLists.txt does it (cmake/embed_web.cmake)
cmake -DDIR="$PWD/web" -DOUT="$PWD/$B/web_assets.c.tmp" -P cmake/embed_web.cmake
cmp -s "$B/web_assets.c.tmp" "$B/web_assets.c" || mv "$B/web_assets.c.tmp" "$B/web_assets.c"
rm -f "$B/web_assets.c.tmp"
# the library (everything but the CLI), once; rebuilt when a source or header is newer
objs=()
for src in src/{util,formats,io,kernels,model,tokenizer,grammar,decode,train,tasks,api,serve}/*.c src/common/args.c "$B/web_assets.c"; do
  o="$B/obj/$(echo "${src#src/}" | sed "s|^$B/||" | tr / _).o"
  extra="" # the per-file flags of CMakeLists.txt
  case $src in
    *_avx512.c) extra="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mavx512vnni" ;;
    *_amx.c) extra="-mamx-tile -mamx-bf16 -mamx-int8 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16" ;;
    src/formats/*.c) extra="-ffp-contract=off" ;;
  esac
  # the kernels without sanitizers or coverage: no harness explores them
  # (the ASan suite, build-asan, runs them), and clang's sanitizer passes
  # take over ten minutes on the always-inline panel kernels
  flags="$CFLAGS -fsanitize=fuzzer-no-link"
  case $src in src/kernels/*) flags=${CFLAGS/$SAN/} ;; esac
  # stale when its source or any header is newer (a changed struct layout)
  if [ ! -f "$o" ] || [ "$src" -nt "$o" ] || [ -n "$(find src -name '*.h' -newer "$o" -print -quit)" ]; then
    $CC $flags $extra -c "$src" -o "$o"
  fi
  objs+=("$o")
done
$CC $CFLAGS -fsanitize=fuzzer "fuzz/$name.c" "${objs[@]}" $LIBS -o "$B/fuzz_$name"
# leaks are reported by the ASan suite; here each input must not crash or hang
REFUSION_SRC=$PWD ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
  "$B/fuzz_$name" -max_total_time="$secs" -timeout="$per_input_s" -rss_limit_mb="$rss_mb" -max_len=65536 \
  -artifact_prefix="$B/crash-$name-" "$B/corpus/$name" "fuzz/corpus/$name" 2>"$B/fuzz_$name.log" || {
  tail -n 40 "$B/fuzz_$name.log" >&2
  echo "fuzz.sh: $name FAILED (log: $B/fuzz_$name.log)" >&2
  exit 1
}
echo "fuzz $name: $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$B/fuzz_$name.log" | tail -n 1)"
