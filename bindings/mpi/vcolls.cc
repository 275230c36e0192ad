// The variable-count collectives and prefix reductions: MPI_Allgatherv, Alltoallv, Gatherv,
// Scatterv, Reduce_scatter, Scan, Exscan and their MPI_I* forms, through sncl's v-forms
// (sncl_ext.h). MPI's int counts and displacements (in elements of the type) become size_t
// byte counts and offsets into the staged buffers (staging.h), kept in the call's Job so
// that they live until the call ran even though sncl copies them too.
#include <cstring>

#include "bindings/mpi/callback_reduce.h"
#include "bindings/mpi/common.h"
#include "bindings/mpi/staging.h"
#include "bindings/mpi/types.h"

namespace sncl_mpi {
namespace {

// The blocks of a v-form's buffer: counts[i] elements at displs[i]; false for a negative count.
bool blocksOf(const int* counts, const int* displs, int n, std::vector<Block>* out) {
  if (!counts || !displs) return false;
  out->resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    if (counts[i] < 0) return false;
    (*out)[i] = Block{displs[i], counts[i]};
  }
  return true;
}

// The byte counts and offsets of blocks in staged buffer s into counts[0..n) and offs[0..n).
void toBytes(const std::vector<Block>& blocks, const Staged& s, size_t size, size_t* counts, size_t* offs) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    counts[i] = static_cast<size_t>(blocks[i].count) * size;
    offs[i] = s.at(blocks[i].disp);
  }
}

int allgatherv(const void* sb, int scount, MPI_Datatype stype, void* rb, const int* rcounts, const int* displs,
               MPI_Datatype rtype, MPI_Comm comm, MPI_Request* req) {
  const Kind k = kindOf(kAllgatherv, req);
  const int n = sizeOf(comm), me = rankIn(comm);
  const bool ip = sb == MPI_IN_PLACE;
  std::vector<Block> blocks;
  const char* why = blocksOf(rcounts, displs, n, &blocks) ? nullptr : "negative count";
  const size_t rsize = typeSize(rtype);
  if (!why && !ip && (scount < 0 || static_cast<size_t>(scount) * typeSize(stype) != rsize * blocks[me].count))
    why = "send and receive sizes differ";
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Iallgatherv(sb, scount, stype, rb, rcounts, displs, rtype, comm, req)
               : PMPI_Allgatherv(sb, scount, stype, rb, rcounts, displs, rtype, comm);
  }
  std::unique_ptr<Job> job = newJob();
  const Staged out = stage(job, rb, rtype, blocks, ip, true, comm);
  job->arrays.resize(2 * static_cast<size_t>(n));
  size_t* counts = job->arrays.data();
  toBytes(blocks, out, rsize, counts, counts + n);
  const size_t mine = counts[me];
  noteSncl(k, mine);
  const char* src = ip ? out.base + counts[n + me] : stage(job, sb, stype, scount, true, false, comm).base;
  return run(k, comm, *t, req, std::move(job), [=, dst = out.base](const Target& s, Job& j) {
    return snclAllGatherV(src, mine, dst, j.arrays.data(), j.arrays.data() + n, snclUint8, s.comm, s.stream);
  });
}

int alltoallv(const void* sb, const int* scounts, const int* sdispls, MPI_Datatype stype, void* rb,
              const int* rcounts, const int* rdispls, MPI_Datatype rtype, MPI_Comm comm, MPI_Request* req) {
  const Kind k = kindOf(kAlltoallv, req);
  const int n = sizeOf(comm);
  const bool ip = sb == MPI_IN_PLACE;
  std::vector<Block> sent, got;
  // In place, MPI takes the receive arrays for both sides, as sncl's in-place form does.
  const char* why = blocksOf(rcounts, rdispls, n, &got) && (ip || blocksOf(scounts, sdispls, n, &sent))
                        ? nullptr
                        : "negative count";
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Ialltoallv(sb, scounts, sdispls, stype, rb, rcounts, rdispls, rtype, comm, req)
               : PMPI_Alltoallv(sb, scounts, sdispls, stype, rb, rcounts, rdispls, rtype, comm);
  }
  std::unique_ptr<Job> job = newJob();
  job->arrays.resize(4 * static_cast<size_t>(n));
  size_t* a = job->arrays.data();  // send counts, send offsets, receive counts, receive offsets
  const Staged out = stage(job, rb, rtype, got, ip, true, comm);
  toBytes(got, out, typeSize(rtype), a + 2 * n, a + 3 * n);
  const Staged in = ip ? out : stage(job, sb, stype, sent, true, false, comm);
  if (ip) std::memcpy(a, a + 2 * n, 2 * static_cast<size_t>(n) * sizeof(size_t));
  else toBytes(sent, in, typeSize(stype), a, a + n);
  size_t bytes = 0;
  for (int i = 0; i < n; ++i) bytes += a[i];
  noteSncl(k, bytes);
  return run(k, comm, *t, req, std::move(job), [=, src = in.base, dst = out.base](const Target& s, Job& j) {
    const size_t* v = j.arrays.data();
    return snclAlltoAllV(src, v, v + n, dst, v + 2 * n, v + 3 * n, snclUint8, s.comm, s.stream);
  });
}

// Gatherv's and Scatterv's checks: the root's blocks (of rootType), then this rank's own
// side (myCount of myType, unless in place), which at the root must match its own block.
const char* rootedLayout(bool isRoot, bool inPlace, int n, int root, const int* counts, const int* displs,
                         MPI_Datatype rootType, int myCount, MPI_Datatype myType, std::vector<Block>* blocks) {
  if (isRoot && !blocksOf(counts, displs, n, blocks)) return "negative count";
  if (inPlace) return nullptr;
  if (myCount < 0) return "negative count";
  const size_t mine = static_cast<size_t>(myCount) * typeSize(myType);
  return !isRoot || mine == typeSize(rootType) * (*blocks)[root].count ? nullptr : "send and receive sizes differ";
}

int gatherv(const void* sb, int scount, MPI_Datatype stype, void* rb, const int* rcounts, const int* displs,
            MPI_Datatype rtype, int root, MPI_Comm comm, MPI_Request* req) {
  const Kind k = kindOf(kGatherv, req);
  const int n = sizeOf(comm);
  const char* why = root < 0 || root >= n ? "root" : nullptr;
  const bool isRoot = !why && rankIn(comm) == root;
  const bool ip = isRoot && sb == MPI_IN_PLACE;
  std::vector<Block> blocks;
  if (!why) why = rootedLayout(isRoot, ip, n, root, rcounts, displs, rtype, scount, stype, &blocks);
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Igatherv(sb, scount, stype, rb, rcounts, displs, rtype, root, comm, req)
               : PMPI_Gatherv(sb, scount, stype, rb, rcounts, displs, rtype, root, comm);
  }
  std::unique_ptr<Job> job = newJob();
  char* dst = nullptr;
  if (isRoot) {
    const Staged out = stage(job, rb, rtype, blocks, ip, true, comm);
    job->arrays.resize(2 * static_cast<size_t>(n));
    toBytes(blocks, out, typeSize(rtype), job->arrays.data(), job->arrays.data() + n);
    dst = out.base;
  }
  const size_t mine = ip ? job->arrays[root] : static_cast<size_t>(scount) * typeSize(stype);
  noteSncl(k, mine);
  const char* src = ip ? dst + job->arrays[n + root] : stage(job, sb, stype, scount, true, false, comm).base;
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
  std::vector<Block> blocks;
  if (!why) why = rootedLayout(isRoot, ip, n, root, scounts, displs, stype, rcount, rtype, &blocks);
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Iscatterv(sb, scounts, displs, stype, rb, rcount, rtype, root, comm, req)
               : PMPI_Scatterv(sb, scounts, displs, stype, rb, rcount, rtype, root, comm);
  }
  std::unique_ptr<Job> job = newJob();
  char* src = nullptr;
  if (isRoot) {
    const Staged in = stage(job, sb, stype, blocks, true, false, comm);
    job->arrays.resize(2 * static_cast<size_t>(n));
    toBytes(blocks, in, typeSize(stype), job->arrays.data(), job->arrays.data() + n);
    src = in.base;
  }
  const size_t mine = ip ? job->arrays[root] : static_cast<size_t>(rcount) * typeSize(rtype);
  noteSncl(k, mine);
  char* dst = ip ? src + job->arrays[n + root] : stage(job, rb, rtype, rcount, false, true, comm).base;
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
  bool callback = false;
  const char* why = negative ? "negative count" : reductionOrCallback(dt, op, total, comm, &red, &callback);
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Ireduce_scatter(sb, rb, rcounts, dt, op, comm, req)
               : PMPI_Reduce_scatter(sb, rb, rcounts, dt, op, comm);
  }
  noteSncl(k, typeSize(dt) * static_cast<size_t>(total));
  if (callback) return callbackReduceScatter(k, sb, rb, rcounts, dt, op, comm, *t, req);
  if (!red.n) return nothing(k, comm, *t, req);
  const size_t per = red.n / static_cast<size_t>(total);  // sncl elements per MPI element
  std::unique_ptr<Job> job = newJob();
  job->arrays.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) job->arrays[i] = static_cast<size_t>(rcounts[i]) * per;
  const long mine = rcounts[rankIn(comm)];
  char* src = nullptr;
  char* dst = nullptr;
  if (sb != MPI_IN_PLACE) {
    src = stage(job, sb, dt, total, true, false, comm).base;
    dst = stage(job, rb, dt, mine, false, true, comm).base;
  } else {  // sncl's in-place form is MPI's: the result at the start of the input
    const Block whole[1] = {{0, total}};
    const bool packed = packs(dt, whole);
    src = dst = stage(job, rb, dt, total, true, false, comm).base;
    if (packed) unpackAfter(*job, dst, rb, dt, mine, comm);
  }
  return run(k, comm, *t, req, std::move(job), [=](const Target& s, Job& j) {
    return snclReduceScatterV(src, dst, j.arrays.data(), red.type, red.op, s.comm, s.stream);
  });
}

int scan(bool exclusive, const void* sb, void* rb, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
         MPI_Request* req) {
  const Kind k = kindOf(exclusive ? kExscan : kScan, req);
  Reduction red{};
  bool callback = false;
  const char* why = reductionOrCallback(dt, op, count, comm, &red, &callback);
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    if (exclusive)
      return req ? PMPI_Iexscan(sb, rb, count, dt, op, comm, req) : PMPI_Exscan(sb, rb, count, dt, op, comm);
    return req ? PMPI_Iscan(sb, rb, count, dt, op, comm, req) : PMPI_Scan(sb, rb, count, dt, op, comm);
  }
  noteSncl(k, typeSize(dt) * static_cast<size_t>(count));
  if (callback) return callbackScan(k, exclusive, sb, rb, count, dt, op, comm, *t, req);
  if (!red.n) return nothing(k, comm, *t, req);
  std::unique_ptr<Job> job;
  const bool ip = sb == MPI_IN_PLACE;
  char* dst = stage(job, rb, dt, count, ip, true, comm).base;
  const char* src = ip ? dst : stage(job, sb, dt, count, true, false, comm).base;
  return run(k, comm, *t, req, std::move(job), [=](const Target& s, Job&) {
    return (exclusive ? snclExscan : snclScan)(src, dst, red.n, red.type, red.op, s.comm, s.stream);
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
