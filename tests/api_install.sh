#!/usr/bin/env bash
# api_install.sh - librefusion as another program sees it: `cmake --install`
# of this build into a temporary prefix; examples/simple.c compiled against
# the installed tree with `pkg-config --cflags --libs refusion` only (shared),
# and with --static against librefusion.a; both run on a small model and
# answer with the same ids as `refusion generate`; the .so exports exactly
# the RF_API functions of include/refusion.h (all rf_*), has soname
# librefusion.so.0; refusion.h compiles on its own as C99 and C++.
set -u
SRC=${REFUSION_SRC:?REFUSION_SRC must point at the source tree}
. "$SRC/tests/helpers/common.sh"
. "$SRC/tests/helpers/small_model.sh"
rf_test_setup api_install
BUILD=$(dirname "$BIN")

# a sanitizer build's library needs the same flags in the program
SAN=$(sed -n 's/^CMAKE_C_FLAGS_ASAN:[A-Z]*=.*\(-fsanitize=[^ ]*\).*/\1/p' "$BUILD/CMakeCache.txt" 2>/dev/null)
grep -q '^CMAKE_BUILD_TYPE:STRING=Asan' "$BUILD/CMakeCache.txt" 2>/dev/null || SAN=

rf_small_model "$T" || bad "small model"
P="$T/prefix"
cmake --install "$BUILD" --prefix "$P" >"$T/install.log" 2>&1 && ok || bad "cmake --install: $(tail -3 "$T/install.log")"
LIB=$(dirname "$(find "$P" -name librefusion.so.0 | head -1)")
for f in "$P/include/refusion.h" "$LIB/librefusion.so" "$LIB/librefusion.so.0" "$LIB/librefusion.a" \
  "$LIB/pkgconfig/refusion.pc" "$P/bin/refusion"; do
  [ -e "$f" ] && ok || bad "not installed: $f"
done

# ---- the exported symbols --------------------------------------------------------
nm -D --defined-only "$LIB/librefusion.so" | awk '{print $3}' | sort >"$T/syms"
grep -v '^rf_' "$T/syms" >"$T/foreign"
[ -s "$T/syms" ] && [ ! -s "$T/foreign" ] && ok || bad "exported symbols without rf_: $(head -5 "$T/foreign" | tr '\n' ' ')"
sed -n 's/^RF_API [^(]*[ *]\(rf_[a-z_0-9]*\)(.*/\1/p' "$P/include/refusion.h" | sort >"$T/api"
diff "$T/api" "$T/syms" >"$T/symdiff" && ok || bad "exports differ from the header's RF_API list: $(tr '\n' ' ' <"$T/symdiff")"
readelf -d "$LIB/librefusion.so" | grep -q 'SONAME.*librefusion.so.0' && ok || bad "soname is not librefusion.so.0"

# ---- the header alone -------------------------------------------------------------
echo '#include <refusion.h>
int main(void) { rf_params p = rf_params_default(); return p.gen_length > 0 ? 0 : 1; }' >"$T/h.c"
cc -std=c99 -pedantic -Wall -Wextra -Werror -I"$P/include" -c "$T/h.c" -o "$T/h.o" && ok || bad "refusion.h as C99"
if command -v c++ >/dev/null; then
  c++ -x c++ -Wall -Werror -I"$P/include" -c "$T/h.c" -o "$T/hpp.o" && ok || bad "refusion.h as C++"
fi

# ---- examples/simple.c via pkg-config -----------------------------------------------
export PKG_CONFIG_PATH="$LIB/pkgconfig"
flags=$(pkg-config --cflags --libs refusion) && ok || bad "pkg-config refusion"
cc -std=c11 -Wall -Wextra -Werror $SAN "$SRC/examples/simple.c" $flags -o "$T/simple" 2>"$T/cc.err" && ok ||
  bad "simple.c with pkg-config: $(head -5 "$T/cc.err")"
ldd "$T/simple" 2>/dev/null | grep -q "$LIB/librefusion.so.0" || LD_LIBRARY_PATH="$LIB" ldd "$T/simple" | grep -q "$LIB/librefusion.so.0" &&
  ok || bad "simple does not load the installed librefusion.so.0"
sflags=$(pkg-config --static --cflags --libs refusion | sed "s|-lrefusion|$LIB/librefusion.a|")
cc -std=c11 -Wall -Werror $SAN "$SRC/examples/simple.c" $sflags -o "$T/simple_static" 2>"$T/cc2.err" && ok ||
  bad "simple.c against librefusion.a: $(head -5 "$T/cc2.err")"

Q="What is 3 plus 4?"
OMP_NUM_THREADS=1 "$BIN" generate -m "$T/m" -p "$Q" -n 12 --blocks 1 --threads 1 --json >"$T/cli.json" 2>"$T/cli.err" ||
  bad "refusion generate: $(cat "$T/cli.err")"
want=$(python3 -c 'import json,sys; print(" ".join(map(str, json.load(open(sys.argv[1]))["answer_ids"])))' "$T/cli.json")
for prog in simple simple_static; do
  OMP_NUM_THREADS=1 LD_LIBRARY_PATH="$LIB" "$T/$prog" "$T/m" "$Q" 12 >"$T/$prog.out" 2>"$T/$prog.err"
  rc=$?
  got=$(sed -n 's/^ids: *//p' "$T/$prog.out")
  [ $rc -eq 0 ] && [ -n "$want" ] && [ "$got" = "$want" ] && ok ||
    bad "$prog: exit $rc, ids '$got', CLI '$want': $(cat "$T/$prog.err")"
done
# a bad model path: one line from the library, exit 1
LD_LIBRARY_PATH="$LIB" "$T/simple" "$T/nope" "x" >/dev/null 2>"$T/err"
rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "nope" "$T/err" && ok || bad "bad path: exit $rc: $(cat "$T/err")"

# the installed Python package finds the installed library by itself (no
# REFUSION_LIB), and pip installs it from there offline (not in a sanitizer
# build: its .so cannot load into python3)
if [ -z "$SAN" ]; then
  PY=$P/share/refusion/python
  got=$(cd "$T" && env -u REFUSION_LIB -u LD_LIBRARY_PATH PYTHONPATH="$PY" OMP_NUM_THREADS=1 python3 -c '
import refusion, sys
m = refusion.Model(sys.argv[1])
print(refusion.load_library()._name, m.session().generate(m.tokenize(sys.argv[2], chat=True), gen_length=12, n_blocks=1))' \
    "$T/m" "$Q" 2>&1)
  [ "$got" = "$LIB/librefusion.so.0 [$(echo "$want" | sed 's/ /, /g')]" ] && ok || bad "installed Python package: '$got'"
  python3 -m pip install --no-index --no-deps --target "$T/site" "$PY" >"$T/pip.log" 2>&1 && [ -f "$T/site/refusion/__init__.py" ] &&
    ok || bad "pip install of the installed package: $(tail -3 "$T/pip.log")"
fi

echo "api_install: $pass passed, $fails failed"
[ $fails -eq 0 ]
