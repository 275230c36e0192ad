// The variable-count collectives and prefix reductions: MPI_Allgatherv, Alltoallv, Gatherv,
// Scatterv, Reduce_scatter, Scan, Exscan and their MPI_I* forms, through sncl's v-forms
// (sncl_ext.h). MPI's int counts and displacements (in elements of the type) become size_t
// byte counts kept in the call's Job, so they live until the call ran even though sncl
// copies them too.
#include <cstring>

#include "bindings/mpi/common.h"

namespace sncl_mpi {
namespace {

// counts[0..n) times elem into out; false for a negative count or displacement.
bool toBytes(const int* v, int n, size_t elem, size_t* out) {
  if (!v) return false;
  for (int i = 0; i < n; ++i) {
    if (v[i] < 0) return false;
    out[i] = static_cast<size_t>(v[i]) * elem;
  }
  return true;
}

// Gatherv's and Scatterv's checks: the root's counts and displacements (of rootType) into
// job's arrays, then this rank's own block (myCount of myType; the root's own entry when
// in place), which must match the root's entry for it at the root. nullptr, or why MPI
// serves the call.
const char* rootedLayout(bool isRoot, bool inPlace, int n, int root, const int* counts, const int* displs,
                         MPI_Datatype rootType, int myCount, MPI_Datatype myType, Job* job, size_t* mine) {
  *mine = 0;
  if (isRoot) {
    const size_t elem = plainBytes(rootType);
    job->arrays.resize(2 * static_cast<size_t>(n));
    if (!elem) return "datatype not contiguous";
    if (!toBytes(counts, n, elem, job->arrays.data()) || !toBytes(displs, n, elem, job->arrays.data() + n))
      return "negative count";
    *mine = job->arrays[static_cast<size_t>(root)];
  }
  if (inPlace) return nullptr;
  const size_t elem = plainBytes(myType);
  if (!elem) return "datatype not contiguous";
  if (myCount < 0 || (isRoot && static_cast<size_t>(myCount) * elem != *mine)) return "send and receive sizes differ";
  *mine = static_cast<size_t>(myCount) * elem;
  return nullptr;
}

int allgatherv(const void* sb, int scount, MPI_Datatype stype, void* rb, const int* rcounts, const int* displs,
               MPI_Datatype rtype, MPI_Comm comm, MPI_Request* req) {
  const Kind k = kindOf(kAllgatherv, req);
  const int n = sizeOf(comm), me = rankIn(comm);
  const size_t relem = plainBytes(rtype);
  const size_t selem = sb == MPI_IN_PLACE ? relem : plainBytes(stype);
  auto job = std::make_unique<Job>();
  job->arrays.resize(2 * static_cast<size_t>(n));
  size_t* counts = job->arrays.data();
  size_t* offs = counts + n;
  const char* why = !relem || !selem ? "datatype not contiguous" : nullptr;
  if (!why && (!toBytes(rcounts, n, relem, counts) || !toBytes(displs, n, relem, offs))) why = "negative count";
  if (!why && sb != MPI_IN_PLACE && (scount < 0 || static_cast<size_t>(scount) * selem != counts[me]))
    why = "send and receive sizes differ";
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Iallgatherv(sb, scount, stype, rb, rcounts, displs, rtype, comm, req)
               : PMPI_Allgatherv(sb, scount, stype, rb, rcounts, displs, rtype, comm);
  }
  noteSncl(k, counts[me]);
  const void* src = sb == MPI_IN_PLACE ? at(rb, offs[me]) : sb;
  const size_t mine = counts[me];
  return run(k, comm, *t, req, std::move(job), [=](const Target& s, Job& j) {
    return snclAllGatherV(src, mine, rb, j.arrays.data(), j.arrays.data() + n, snclUint8, s.comm, s.stream);
  });
}

int alltoallv(const void* sb, const int* scounts, const int* sdispls, MPI_Datatype stype, void* rb,
              const int* rcounts, const int* rdispls, MPI_Datatype rtype, MPI_Comm comm, MPI_Request* req) {
  const Kind k = kindOf(kAlltoallv, req);
  const int n = sizeOf(comm);
  const bool ip = sb == MPI_IN_PLACE;
  const size_t relem = plainBytes(rtype);
  const size_t selem = ip ? relem : plainBytes(stype);
  auto job = std::make_unique<Job>();
  job->arrays.resize(4 * static_cast<size_t>(n));
  size_t* a = job->arrays.data();  // send counts, send offsets, receive counts, receive offsets
  const char* why = !relem || !selem ? "datatype not contiguous" : nullptr;
  // In place, MPI takes the receive arrays for both sides, as sncl's in-place form does.
  if (!why && (!toBytes(ip ? rcounts : scounts, n, selem, a) || !toBytes(ip ? rdispls : sdispls, n, selem, a + n) ||
               !toBytes(rcounts, n, relem, a + 2 * n) || !toBytes(rdispls, n, relem, a + 3 * n)))
    why = "negative count";
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Ialltoallv(sb, scounts, sdispls, stype, rb, rcounts, rdispls, rtype, comm, req)
               : PMPI_Alltoallv(sb, scounts, sdispls, stype, rb, rcounts, rdispls, rtype, comm);
  }
  size_t bytes = 0;
  for (int i = 0; i < n; ++i) bytes += a[i];
  noteSncl(k, bytes);
  const void* src = ip ? rb : sb;
  return run(k, comm, *t, req, std::move(job), [=](const Target& s, Job& j) {
    const size_t* v = j.arrays.data();
    return snclAlltoAllV(src, v, v + n, rb, v + 2 * n, v + 3 * n, snclUint8, s.comm, s.stream);
  });
}

int gatherv(const void* sb, int scount, MPI_Datatype stype, void* rb, const int* rcounts, const int* displs,
            MPI_Datatype rtype, int root, MPI_Comm comm, MPI_Request* req) {
  const Kind k = kindOf(kGatherv, req);
  const int n = sizeOf(comm);
  const char* why = root < 0 || root >= n ? "root" : nullptr;
  const bool isRoot = !why && rankIn(comm) == root;
  const bool ip = isRoot && sb == MPI_IN_PLACE;
  auto job = std::make_unique<Job>();
  size_t mine = 0;
  if (!why) why = rootedLayout(isRoot, ip, n, root, rcounts, displs, rtype, scount, stype, job.get(), &mine);
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Igatherv(sb, scount, stype, rb, rcounts, displs, rtype, root, comm, req)
               : PMPI_Gatherv(sb, scount, stype, rb, rcounts, displs, rtype, root, comm);
  }
  noteSncl(k, mine);
  const void* src = ip ? at(rb, job->arrays[n + root]) : sb;
  void* dst = isRoot ? rb : nullptr;
  return run(k, comm, *t, req, std::move(job), [=](const Target& s, Job& j) {
    const size_t* v = isRoot ? j.arrays.data() : nullptr;
    return snclGatherV(src, mine, dst, v, v ? v + n : nullptr, snclUint8, root, s.comm, s.stream);
  });
}

int scatterv(const void* sb, const int* scounts, const int* displs, MPI_Datatype stype, void* rb, int rcount,
             MPI_Datatype rtype, int root, MPI_Comm comm, MPI_Request* req) {
  const Kind k = kindOf(kScatterv, req);
  const int n = sizeOf(comm);
  const char* why = root < 0 || root >= n ? "root" : nullptr;
  const bool isRoot = !why && rankIn(comm) == root;
  const bool ip = isRoot && rb == MPI_IN_PLACE;
  auto job = std::make_unique<Job>();
  size_t mine = 0;
  if (!why) why = rootedLayout(isRoot, ip, n, root, scounts, displs, stype, rcount, rtype, job.get(), &mine);
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Iscatterv(sb, scounts, displs, stype, rb, rcount, rtype, root, comm, req)
               : PMPI_Scatterv(sb, scounts, displs, stype, rb, rcount, rtype, root, comm);
  }
  noteSncl(k, mine);
  const void* src = isRoot ? sb : nullptr;
  void* dst = ip ? const_cast<char*>(at(sb, job->arrays[n + root])) : rb;
  return run(k, comm, *t, req, std::move(job), [=](const Target& s, Job& j) {
    const size_t* v = isRoot ? j.arrays.data() : nullptr;
    return snclScatterV(src, v, v ? v + n : nullptr, dst, mine, snclUint8, root, s.comm, s.stream);
  });
}

int reduceScatter(const void* sb, void* rb, const int* rcounts, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                  MPI_Request* req) {
  const Kind k = kindOf(kReduceScatter, req);
  const int n = sizeOf(comm);
  long total = 0;
  bool negative = !rcounts;
  for (int i = 0; !negative && i < n; ++i) {
    negative = rcounts[i] < 0;
    total += rcounts[i];
  }
  Reduction red{};
  const char* why = negative ? "negative count" : reduction(dt, op, total, &red);
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Ireduce_scatter(sb, rb, rcounts, dt, op, comm, req)
               : PMPI_Reduce_scatter(sb, rb, rcounts, dt, op, comm);
  }
  noteSncl(k, red.n * red.elem);
  const size_t per = red.n / static_cast<size_t>(total);  // sncl elements per MPI element
  auto job = std::make_unique<Job>();
  job->arrays.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) job->arrays[i] = static_cast<size_t>(rcounts[i]) * per;
  const void* src = sb == MPI_IN_PLACE ? rb : sb;  // sncl's in-place form is MPI's
  return run(k, comm, *t, req, std::move(job), [=](const Target& s, Job& j) {
    return snclReduceScatterV(src, rb, j.arrays.data(), red.type, red.op, s.comm, s.stream);
  });
}

int scan(bool exclusive, const void* sb, void* rb, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
         MPI_Request* req) {
  const Kind k = kindOf(exclusive ? kExscan : kScan, req);
  Reduction red{};
  const char* why = reduction(dt, op, count, &red);
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    if (exclusive)
      return req ? PMPI_Iexscan(sb, rb, count, dt, op, comm, req) : PMPI_Exscan(sb, rb, count, dt, op, comm);
    return req ? PMPI_Iscan(sb, rb, count, dt, op, comm, req) : PMPI_Scan(sb, rb, count, dt, op, comm);
  }
  noteSncl(k, red.n * red.elem);
  const void* src = sb == MPI_IN_PLACE ? rb : sb;
  return run(k, comm, *t, req, nullptr, [=](const Target& s, Job&) {
    return (exclusive ? snclExscan : snclScan)(src, rb, red.n, red.type, red.op, s.comm, s.stream);
  });
}

}  // namespace
}  // namespace sncl_mpi

using namespace sncl_mpi;

extern "C" {

int MPI_Allgatherv(const void* sb, int sc, MPI_Datatype st, void* rb, const int rc[], const int d[], MPI_Datatype rt,
                   MPI_Comm comm) {
  return allgatherv(sb, sc, st, rb, rc, d, rt, comm, nullptr);
}
int MPI_Iallgatherv(const void* sb, int sc, MPI_Datatype st, void* rb, const int rc[], const int d[],
                    MPI_Datatype rt, MPI_Comm comm, MPI_Request* req) {
  return allgatherv(sb, sc, st, rb, rc, d, rt, comm, req);
}
int MPI_Alltoallv(const void* sb, const int sc[], const int sd[], MPI_Datatype st, void* rb, const int rc[],
                  const int rd[], MPI_Datatype rt, MPI_Comm comm) {
  return alltoallv(sb, sc, sd, st, rb, rc, rd, rt, comm, nullptr);
}
int MPI_Ialltoallv(const void* sb, const int sc[], const int sd[], MPI_Datatype st, void* rb, const int rc[],
                   const int rd[], MPI_Datatype rt, MPI_Comm comm, MPI_Request* req) {
  return alltoallv(sb, sc, sd, st, rb, rc, rd, rt, comm, req);
}
int MPI_Gatherv(const void* sb, int sc, MPI_Datatype st, void* rb, const int rc[], const int d[], MPI_Datatype rt,
                int root, MPI_Comm comm) {
  return gatherv(sb, sc, st, rb, rc, d, rt, root, comm, nullptr);
}
int MPI_Igatherv(const void* sb, int sc, MPI_Datatype st, void* rb, const int rc[], const int d[], MPI_Datatype rt,
                 int root, MPI_Comm comm, MPI_Request* req) {
  return gatherv(sb, sc, st, rb, rc, d, rt, root, comm, req);
}
int MPI_Scatterv(const void* sb, const int sc[], const int d[], MPI_Datatype st, void* rb, int rc, MPI_Datatype rt,
                 int root, MPI_Comm comm) {
  return scatterv(sb, sc, d, st, rb, rc, rt, root, comm, nullptr);
}
int MPI_Iscatterv(const void* sb, const int sc[], const int d[], MPI_Datatype st, void* rb, int rc, MPI_Datatype rt,
                  int root, MPI_Comm comm, MPI_Request* req) {
  return scatterv(sb, sc, d, st, rb, rc, rt, root, comm, req);
}
int MPI_Reduce_scatter(const void* sb, void* rb, const int rc[], MPI_Datatype dt, MPI_Op op, MPI_Comm comm) {
  return reduceScatter(sb, rb, rc, dt, op, comm, nullptr);
}
int MPI_Ireduce_scatter(const void* sb, void* rb, const int rc[], MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                        MPI_Request* req) {
  return reduceScatter(sb, rb, rc, dt, op, comm, req);
}
int MPI_Scan(const void* sb, void* rb, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm) {
  return scan(false, sb, rb, count, dt, op, comm, nullptr);
}
int MPI_Iscan(const void* sb, void* rb, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm, MPI_Request* req) {
  return scan(false, sb, rb, count, dt, op, comm, req);
}
int MPI_Exscan(const void* sb, void* rb, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm) {
  return scan(true, sb, rb, count, dt, op, comm, nullptr);
}
int MPI_Iexscan(const void* sb, void* rb, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm, MPI_Request* req) {
  return scan(true, sb, rb, count, dt, op, comm, req);
}

}  // extern "C"
