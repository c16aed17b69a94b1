#!/usr/bin/env bash
# api_version.sh - one version everywhere: project(refusion VERSION x.y.z)
# in CMakeLists.txt is what `refusion --version` and every command's
# --version print, what rf_version() returns and RF_VERSION_MAJOR / MINOR /
# PATCH / STRING say (a program built against the build's header and .so),
# the .so's file version and soname major, and refusion.pc's Version.
set -u
SRC=${REFUSION_SRC:?REFUSION_SRC must point at the source tree}
. "$SRC/tests/helpers/common.sh"
rf_test_setup api_version
BUILD=$(dirname "$BIN")

want=$(sed -n 's/^project(refusion VERSION \([0-9]*\.[0-9]*\.[0-9]*\).*/\1/p' "$SRC/CMakeLists.txt")
[ -n "$want" ] && ok || bad "no project(refusion VERSION x.y.z) in CMakeLists.txt"
major=${want%%.*}

for c in "" generate chat eval serve probe; do
  v=$("$BIN" $c --version 2>&1)
  [ "$v" = "refusion $want" ] && ok || bad "refusion $c --version: '$v', want 'refusion $want'"
done

pcv=$(sed -n 's/^Version: //p' "$BUILD/refusion.pc")
[ "$pcv" = "$want" ] && ok || bad "refusion.pc: Version '$pcv', want '$want'"
[ -f "$BUILD/librefusion.so.$want" ] && ok || bad "no $BUILD/librefusion.so.$want: $(ls "$BUILD"/librefusion.so* 2>&1 | tr '\n' ' ')"
readelf -d "$BUILD/librefusion.so" | grep -q "SONAME.*librefusion.so.$major\]" && ok || bad "soname is not librefusion.so.$major"

SAN=$(sed -n 's/^CMAKE_C_FLAGS_ASAN:[A-Z]*=.*\(-fsanitize=[^ ]*\).*/\1/p' "$BUILD/CMakeCache.txt" 2>/dev/null)
grep -q '^CMAKE_BUILD_TYPE:STRING=Asan' "$BUILD/CMakeCache.txt" 2>/dev/null || SAN=
cat >"$T/v.c" <<'C'
#include <stdio.h>
#include <refusion.h>
int main(void) {
    char h[64];
    snprintf(h, sizeof h, "%d.%d.%d", RF_VERSION_MAJOR, RF_VERSION_MINOR, RF_VERSION_PATCH);
    printf("%s %s %s\n", h, RF_VERSION_STRING, rf_version());
    return 0;
}
C
cc -std=c11 -Wall -Werror $SAN -I"$SRC/include" -I"$BUILD/include" "$T/v.c" -L"$BUILD" -lrefusion -o "$T/v" 2>"$T/cc.err" &&
  ok || bad "version program: $(head -3 "$T/cc.err")"
got=$(LD_LIBRARY_PATH="$BUILD" "$T/v")
[ "$got" = "$want $want $want" ] && ok || bad "RF_VERSION_MAJOR.MINOR.PATCH, RF_VERSION_STRING, rf_version(): '$got', want '$want' x3"

echo "api_version: $pass passed, $fails failed"
[ "$fails" -eq 0 ]
