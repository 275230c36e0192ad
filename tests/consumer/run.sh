#!/usr/bin/env bash
# Uses an installed sncl from outside its tree, the ways a user would. Installs BUILD_DIR into
# a fresh temporary prefix (cmake --install --prefix), then builds tests/consumer/consumer.c
# and runs it four ways: CMake with sncl::sncl and with sncl::sncl_static, pkg-config shared
# and static. Then runs the installed tools and, if installed, imports the Python package.
# Nothing may come from the build tree or LD_LIBRARY_PATH.
# Usage: tests/consumer/run.sh BUILD_DIR   (exit 77: skipped, with the reason printed)
set -euo pipefail

if [[ $# -ne 1 || ! -f $1/CMakeCache.txt ]]; then
  echo "usage: $0 BUILD_DIR (a configured and built sncl build directory)" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
cache_get() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" | head -n 1; }

# An ASan/TSan libsncl only loads into a program that carries the same runtime.
sanitize=$(cache_get SNCL_SANITIZE)
if [[ -n $sanitize ]]; then
  echo "SKIP: $build is built with SNCL_SANITIZE=$sanitize; a plain consumer cannot load it"
  exit 77
fi
libdir=$(cache_get CMAKE_INSTALL_LIBDIR)
pydir=$(cache_get SNCL_PYTHON_INSTALL_DIR)
for d in "$libdir" "$(cache_get CMAKE_INSTALL_BINDIR)" "$pydir"; do
  if [[ $d == /* ]]; then
    echo "SKIP: install dir $d is absolute; this test installs into a temporary prefix"
    exit 77
  fi
done
cc=$(cache_get CMAKE_C_COMPILER)
cc=${cc:-cc}
generator=$(cache_get CMAKE_GENERATOR)
python=$(cache_get Python3_EXECUTABLE)

unset LD_LIBRARY_PATH LD_PRELOAD PYTHONPATH CMAKE_PREFIX_PATH PKG_CONFIG_LIBDIR
# Ranks talk over loopback unless told otherwise; a hang ends at the deadline.
export SNCL_SOCKET_IFNAME=${SNCL_SOCKET_IFNAME:-lo} FI_TCP_IFACE=${FI_TCP_IFACE:-lo}
export SNCL_TIMEOUT_MS=${SNCL_TIMEOUT_MS:-20000}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sncl-consumer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

fail() { echo "FAIL: $*" >&2; exit 1; }
# Runs a command with its output in a log, shown only when it fails (its ends, if long).
quiet() {
  local log=$tmp/step.log
  if ! "$@" > "$log" 2>&1; then
    if (( $(wc -l < "$log") > 80 )); then
      { head -n 40 "$log"; echo "[...]"; tail -n 30 "$log"; } >&2
    else
      cat "$log" >&2
    fi
    fail "$*"
  fi
}
# The libsncl.so a program loads: under the prefix, or nowhere for a static link.
check_libsncl() {
  local exe=$1 want=$2 got
  got=$(ldd "$exe" | awk '/libsncl\.so/ { print $3 }')
  if [[ $want == none ]]; then
    [[ -z $got ]] || fail "$exe loads $got, expected sncl linked in statically"
  else
    [[ -n $got ]] || fail "$exe does not load libsncl.so"
    [[ $got != not ]] || fail "$exe: libsncl.so not found"
    [[ $(realpath "$got") == "$prefix"/* ]] || fail "$exe loads $got, not the installed one"
  fi
}
run_consumer() {
  local name=$1 exe=$2
  local out
  out=$(timeout 120 "$exe") || fail "$name: consumer exited with $?"
  echo "$name: $out"
}

echo "== install into a temporary prefix"
quiet cmake --install "$build" --prefix "$prefix"

echo "== CMake: find_package(sncl)"
for link in shared static; do
  bdir=$tmp/cmake-$link
  quiet cmake -S "$here" -B "$bdir" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$prefix" -DSNCL_LINK=$link
  found=$(sed -n 's/^sncl_DIR:PATH=//p' "$bdir/CMakeCache.txt")
  [[ $found == "$prefix"/* ]] || fail "find_package(sncl) found $found, not the installed one"
  quiet cmake --build "$bdir"
  if [[ $link == shared ]]; then check_libsncl "$bdir/consumer" "$prefix"; else check_libsncl "$bdir/consumer" none; fi
  run_consumer "cmake sncl::sncl$([[ $link == static ]] && echo _static)" "$bdir/consumer"
done

echo "== pkg-config sncl"
export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
quiet pkg-config --exists sncl
pc_libdir=$(realpath "$(pkg-config --variable=libdir sncl)")
[[ $pc_libdir == "$prefix/$libdir" ]] || fail "sncl.pc gives libdir $pc_libdir, not $prefix/$libdir"
out=$(pkg-config --cflags sncl)
read -r -a cflags <<< "$out"
out=$(pkg-config --libs sncl)
read -r -a libs <<< "$out"
echo "pkg-config --cflags --libs: ${cflags[*]} ${libs[*]}"
quiet "$cc" -o "$tmp/pc-shared" "$here/consumer.c" "${cflags[@]}" "${libs[@]}" -Wl,-rpath,"$pc_libdir"
check_libsncl "$tmp/pc-shared" "$prefix"
run_consumer "pkg-config shared" "$tmp/pc-shared"
# Static: libsncl.a in place of -lsncl, and what --static adds for it (the rest stays shared).
out=$(pkg-config --static --libs sncl)
read -r -a libs <<< "$out"
for i in "${!libs[@]}"; do
  if [[ ${libs[$i]} == -lsncl ]]; then libs[$i]=-l:libsncl.a; fi
done
echo "pkg-config --static --libs, libsncl.a for -lsncl: ${libs[*]}"
quiet "$cc" -o "$tmp/pc-static" "$here/consumer.c" "${cflags[@]}" "${libs[@]}"
check_libsncl "$tmp/pc-static" none
run_consumer "pkg-config --static" "$tmp/pc-static"

echo "== installed tools"
for tool in sncl-topo sncl-sim sncl-tune sncl-randtest sncl-trace; do
  [[ -x $prefix/bin/$tool ]] || fail "$tool is not installed in $prefix/bin"
  out=$(timeout 60 "$prefix/bin/$tool" --version) || fail "$tool --version exited with $?"
  [[ $out == "$tool "* ]] || fail "$tool --version printed '$out'"
  echo "$out"
done

if [[ -n $pydir && -d $prefix/$pydir/sncl_torch ]]; then
  echo "== Python package"
  # The module must load the installed libsncl.so, found through its RPATH.
  loaded=$(PYTHONPATH=$prefix/$pydir timeout 300 "${python:-python3}" -c '
import sncl_torch
print(sncl_torch.__file__)
print(next(l.split()[-1] for l in open("/proc/self/maps") if "libsncl.so" in l))
') || fail "import sncl_torch"
  while read -r path; do
    [[ $(realpath "$path") == "$prefix"/* ]] || fail "import sncl_torch used $path, not the installed one"
  done <<< "$loaded"
  echo "import sncl_torch: ok ($(echo "$loaded" | head -n 1 | sed "s|^$prefix/||"))"
else
  echo "== Python package: not built, not checked"
fi
echo "PASS"
