#!/usr/bin/env bash
# Fetches MPICH's source package from Debian's archive (apt-get source, which needs a
# deb-src entry: tools/install-deps.sh writes one), unpacks only its collective tests
# (test/mpi/coll) and what they link (util, include, dtpools), and builds them with the
# installed MPI's mpicc into <out>/bin. MPICH's code is not part of this project; it is
# fetched at build time under MPICH's licence (its COPYRIGHT file is unpacked beside it).
#   fetch_and_build.sh <out>
# Writes <out>/testlist (name, ranks, arguments: MPICH's coll/testlist.in for the programs
# that built, plus the datatype-pool Broadcast cases) and <out>/skipped (programs that do
# not build against this MPI, with the compiler's first error).
set -euo pipefail
out=$(mkdir -p "$1" && cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
version=4.0.2
src=$out/mpich-$version/test/mpi
if [ ! -f "$out/built" ]; then
  tarball=$(ls "$out"/mpich_"$version".orig.tar.* 2>/dev/null | head -1 || true)
  if [ -z "$tarball" ]; then
    (cd "$out" && apt-get source --download-only "mpich=$version-3" >/dev/null 2>"$out/fetch.log" ||
       apt-get source --download-only mpich >>"$out/fetch.log" 2>&1) || {
      cat "$out/fetch.log" >&2
      echo "mpich_coll: apt-get source mpich failed (is there a deb-src entry? tools/install-deps.sh)" >&2
      exit 1
    }
    tarball=$(ls "$out"/mpich_*.orig.tar.* | head -1)
    version=$(basename "$tarball" | sed -E 's/mpich_([0-9.]+)\.orig.*/\1/')
    src=$out/mpich-$version/test/mpi
  fi
  tar -xf "$tarball" -C "$out" --wildcards "mpich-$version/COPYRIGHT" "mpich-$version/test/mpi/coll/*" \
    "mpich-$version/test/mpi/util/*" "mpich-$version/test/mpi/include/*" "mpich-$version/test/mpi/dtpools/*"
fi

# What MPICH's configure would find on a Linux system with a C99 compiler.
cat >"$src/include/mpitestconf.h" <<'CONF'
#ifndef MPITESTCONF_H_INCLUDED
#define MPITESTCONF_H_INCLUDED
#define HAVE_STDARG_H 1
#define HAVE_STDINT_H 1
#define HAVE_STDLIB_H 1
#define HAVE_STRING_H 1
#define HAVE_UNISTD_H 1
#define HAVE_SYS_TIME_H 1
#define HAVE_SYS_RESOURCE_H 1
#define HAVE_GETRUSAGE 1
#define HAVE_LONG_DOUBLE 1
#define HAVE_LONG_LONG 1
#define HAVE_MPI_WIN_CREATE 1
#define HAVE_MPI_INIT_THREAD 1
#define HAVE_PTHREAD_H 1
#define HAVE_USLEEP 1
#define STDC_HEADERS 1
#define THREAD_PACKAGE_NAME THREAD_PACKAGE_POSIX
#define POINTERINT_t long
#define SIZEOF_INT 4
#define SIZEOF_LONG 8
#define SIZEOF_LONG_LONG 8
#define SIZEOF_VOID_P 8
#endif
CONF
cat >"$src/dtpools/dtpoolsconf.h" <<'CONF'
#define HAVE_STDINT_H 1
#define HAVE_STDLIB_H 1
#define HAVE_STRING_H 1
#define HAVE_LIMITS_H 1
#define HAVE_INTTYPES_H 1
CONF

# The datatype pools call MPI-1 functions that Open MPI's mpi.h hides (its library has them).
cflags=(-O1 -w -DOMPI_OMIT_MPI1_COMPAT_DECLS=0 -I"$src/include" -I"$src/dtpools/include" -I"$src/dtpools")
mkdir -p "$out/obj" "$out/bin"
# The test utilities (mtest, one process per rank, no threads) and the datatype pools.
libs=()
for f in "$src"/util/mtest.c "$src"/util/mtest_common.c "$src"/util/mtest_single.c "$src"/util/dtypes.c \
         "$src"/dtpools/src/*.c; do
  o=$out/obj/$(basename "${f%.c}").o
  [ "$o" -nt "$f" ] || mpicc "${cflags[@]}" -c "$f" -o "$o"
  libs+=("$o")
done

# name source extra-flags: MPICH's coll/Makefile.am builds the nb* programs from the
# blocking ones with -DUSE_MTEST_NBC.
programs() {
  for f in "$src"/coll/*.c; do
    b=$(basename "${f%.c}")
    echo "$b $b"
  done
  echo "nballtoall1 alltoall1 -DUSE_MTEST_NBC"
  echo "nbcoll2 coll2 -DUSE_MTEST_NBC"
  for b in redscat redscat3 redscatinter; do echo "nb$b $b -DUSE_MTEST_NBC"; done
  for b in icbarrier icallgather icallgatherv icallreduce icalltoall icalltoallv icalltoallw icbcast \
           icgather icgatherv icreduce icscatter icscatterv; do
    echo "nb$b $b -DUSE_MTEST_NBC"
  done
}
build_one() {  # name source [flags]
  local name=$1 source=$2 flags=${3:-}
  local exe=$out/bin/$name
  [ "$exe" -nt "$src/coll/$source.c" ] && return 0
  # shellcheck disable=SC2086
  if ! mpicc "${cflags[@]}" $flags "$src/coll/$source.c" "${libs[@]}" -lm -o "$exe" 2>"$out/obj/$name.err"; then
    echo "$name $(grep -m1 -E 'error|undefined' "$out/obj/$name.err" | sed -E 's/^[^ ]*: //')" >"$out/obj/$name.skip"
  fi
}
export -f build_one
export src out
export cflags_joined="${cflags[*]}" libs_joined="${libs[*]}"
programs | xargs -P 2 -L 1 bash -c 'cflags=($cflags_joined); libs=($libs_joined); build_one "$@"' _
cat "$out"/obj/*.skip 2>/dev/null | sort >"$out/skipped" || true

# The testlist: MPICH's lines for the programs that built; the datatype-pool Broadcast
# (bcast, which MPICH's maint/gentests_dtp.sh expands per type and count) at the small counts.
{
  # @largetest@ lines need tens of GB (gather_big); left out.
  grep -vE '^\s*(#|$|@largetest@)' "$src/coll/testlist.in" | while read -r name np rest; do
    if [ -x "$out/bin/$name" ]; then echo "$name $np${rest:+ $rest}"; fi
  done
  seed=1
  for type in MPI_INT MPI_DOUBLE; do
    for count in 1 512; do
      if [ -x "$out/bin/bcast" ]; then echo "bcast 4 arg=-type=$type arg=-count=$count arg=-seed=$seed arg=-testsize=16"; fi
      seed=$((seed + 1))
    done
  done
} >"$out/testlist"
touch "$out/built"
echo "mpich_coll: $(ls "$out/bin" | wc -l) programs built, $(wc -l <"$out/skipped") skipped, $(wc -l <"$out/testlist") runs in $out/testlist"
