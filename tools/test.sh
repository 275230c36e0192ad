#!/usr/bin/env bash
# Installs the dependencies, builds sncl (Release, then ASan+UBSan) and runs every test,
# plus a bounded fuzzing run of the topology parser.
# Traffic stays on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
export SNCL_SOCKET_IFNAME=lo FI_TCP_IFACE=lo
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo

build() {  # build dir, extra cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" -G Ninja -DSNCL_UNITY_BUILD=ON "$@" >/dev/null
  cmake --build "$dir" -j2
}
run_tests() {  # build dir, labels to leave out (a regex; "" none)
  # Tests without ranks two at a time, then the busy ones one at a time, each beside at
  # most one test that mostly sleeps (cmake/test_slots.cmake: two slots a busy test, one a
  # sleeping one).
  local skip=${2:+|$2}
  ctest --test-dir "$1" --output-on-failure --timeout 900 -L unit ${2:+-LE "$2"} -j2
  ctest --test-dir "$1" --output-on-failure --timeout 900 -LE "unit$skip" -j3
}
phase() {  # how long each part took, for keeping the run short
  echo "test.sh: $1 at $((SECONDS / 60)) min $((SECONDS % 60)) s"
}

phase "dependencies installed"
# Background work is stopped with the script whatever ends it, with every process it
# started. (Not by a session of its own: setsid put it in an autogroup of its own, which
# the scheduler gives a fair share of the CPU, idle priority or not; the tests then ran
# 2.5x slower.)
background=()
kill_tree() {
  local child
  for child in $(pgrep -P "$1"); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}
stop_background() {
  for pid in "${background[@]}"; do kill_tree "$pid"; done
}
trap stop_background EXIT
bash tools/check_includes.sh   # the layering of lib/README.md
# MPICH's collective tests (ctest mpich_coll) compile against this MPI, not against sncl:
# beside sncl's build, so that ctest's mpich_coll_build only finds them built.
mkdir -p build
bash tests/dropin/mpich_coll/fetch_and_build.sh build/mpich_coll >build/mpich_coll.log 2>&1 &
mpich=$!
background+=("$mpich")
build build -DCMAKE_BUILD_TYPE=Release -DSNCL_WERROR=ON   # a new warning fails CI
if ! wait "$mpich"; then
  cat build/mpich_coll.log
  echo "test.sh: MPICH's collective tests did not build" >&2
  exit 1
fi
# While the Release tests run (their ranks mostly wait on each other: about half the CPU
# stays idle), the ASan+UBSan build compiles at idle priority (SCHED_IDLE: it gets a core
# only when no test process wants it).
# The torch extension is left out of ASan: Python cannot load an ASan-built module without
# preloading the runtime; its tests report themselves skipped.
# -O1 -g1 (line tables), as ASan advises: half the compile time of -O2 -g, same reports.
mkdir -p build-asan
chrt --idle 0 bash -c 'set -e
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1" -DSNCL_SANITIZE=address -DSNCL_BUILD_PERF=OFF \
    -DSNCL_BUILD_EXAMPLES=OFF -DSNCL_BUILD_TOOLS=OFF -DSNCL_BUILD_TORCH=OFF -DSNCL_UNITY_BUILD=ON >/dev/null
  cmake --build build-asan -j2' > build-asan/background.log 2>&1 &
asan=$!
background+=("$asan")
phase "Release built"
# The tests labelled release-redundant run sanitized only (tests/CMakeLists.txt says why).
run_tests build release-redundant
phase "Release tests passed"
if ! wait "$asan"; then
  cat build-asan/background.log
  echo "test.sh: the ASan build failed" >&2
  exit 1
fi
phase "ASan+UBSan built"
# The topology-file parser and cache reader under libFuzzer (built, then 30 s each), beside
# the sanitized tests at idle priority (the CPU their waits leave); an input's time limit
# is wall time, so a long one there.
SNCL_FUZZ_TIMEOUT=120 chrt --idle 0 bash tools/run_fuzz.sh 30 > build-asan/fuzz.log 2>&1 &
fuzz=$!
background+=("$fuzz")
# Sanitized, the tests labelled sanitizer-redundant are left out (and not built where no
# other test needs their program): their code runs under ASan in other tests too
# (tests/CMakeLists.txt says which and why).
run_tests build-asan sanitizer-redundant
if ! wait "$fuzz"; then
  tail -40 build-asan/fuzz.log
  echo "test.sh: a fuzzer found a crash, a leak or a hang (build-fuzz/crashes/)" >&2
  exit 1
fi
phase "ASan+UBSan tests and fuzzing passed"
