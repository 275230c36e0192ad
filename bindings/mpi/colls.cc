// The fixed-count collectives: MPI_Allreduce, Reduce, Bcast, Allgather, Alltoall, Gather,
// Scatter, Reduce_scatter_block, Barrier and their MPI_I* forms. Each decides from what MPI
// requires to agree across ranks (the bytes of the type signature, the op and a reduction's
// predefined type, the root), so every rank takes the same path; a buffer whose layout has
// gaps is packed around the sncl call (staging.h). A call of zero bytes moves nothing and
// completes at once on every rank.
#include <cstring>

#include "bindings/mpi/callback_reduce.h"
#include "bindings/mpi/common.h"
#include "bindings/mpi/staging.h"
#include "bindings/mpi/types.h"

namespace sncl_mpi {
namespace {

int allreduce(const void* sb, void* rb, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm, MPI_Request* req) {
  const Kind k = kindOf(kAllreduce, req);
  Reduction red{};
  bool callback = false;
  const char* why = reductionOrCallback(dt, op, count, comm, &red, &callback);
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Iallreduce(sb, rb, count, dt, op, comm, req) : PMPI_Allreduce(sb, rb, count, dt, op, comm);
  }
  noteSncl(k, callback ? typeSize(dt) * static_cast<size_t>(count) : red.n * red.elem);
  if (callback) return callbackAllreduce(k, sb, rb, count, dt, op, comm, *t, req);
  if (!red.n) return nothing(k, comm, *t, req);
  std::unique_ptr<Job> job;
  const bool ip = sb == MPI_IN_PLACE;
  const Staged out = stage(job, rb, dt, count, ip, true, comm);
  const char* src = ip ? out.base : stage(job, sb, dt, count, true, false, comm).base;
  return run(k, comm, *t, req, std::move(job), [=, dst = out.base](const Target& s, Job&) {
    return snclAllReduce(src, dst, red.n, red.type, red.op, s.comm, s.stream);
  });
}

int reduce(const void* sb, void* rb, int count, MPI_Datatype dt, MPI_Op op, int root, MPI_Comm comm,
           MPI_Request* req) {
  const Kind k = kindOf(kReduce, req);
  Reduction red{};
  bool callback = false;
  const char* why = reductionOrCallback(dt, op, count, comm, &red, &callback);
  if (!why && (root < 0 || root >= sizeOf(comm))) why = "root";  // MPI reports the bad root
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Ireduce(sb, rb, count, dt, op, root, comm, req)
               : PMPI_Reduce(sb, rb, count, dt, op, root, comm);
  }
  noteSncl(k, callback ? typeSize(dt) * static_cast<size_t>(count) : red.n * red.elem);
  if (callback) return callbackReduce(k, sb, rb, count, dt, op, root, comm, *t, req);
  if (!red.n) return nothing(k, comm, *t, req);
  const bool isRoot = rankIn(comm) == root;
  const bool ip = isRoot && sb == MPI_IN_PLACE;  // MPI_IN_PLACE is legal at the root only
  std::unique_ptr<Job> job;
  char* dst = isRoot ? stage(job, rb, dt, count, ip, true, comm).base : nullptr;
  const char* src = ip ? dst : stage(job, sb, dt, count, true, false, comm).base;
  return run(k, comm, *t, req, std::move(job), [=](const Target& s, Job&) {
    return snclReduce(src, dst, red.n, red.type, red.op, root, s.comm, s.stream);
  });
}

int bcast(void* buf, int count, MPI_Datatype dt, int root, MPI_Comm comm, MPI_Request* req) {
  const Kind k = kindOf(kBcast, req);
  const char* why = count < 0 ? "negative count" : root < 0 || root >= sizeOf(comm) ? "root" : nullptr;
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Ibcast(buf, count, dt, root, comm, req) : PMPI_Bcast(buf, count, dt, root, comm);
  }
  const size_t bytes = typeSize(dt) * static_cast<size_t>(count);
  noteSncl(k, bytes);
  if (!bytes) return nothing(k, comm, *t, req);
  const bool isRoot = rankIn(comm) == root;
  std::unique_ptr<Job> job;
  char* data = stage(job, buf, dt, count, isRoot, !isRoot, comm).base;
  return run(k, comm, *t, req, std::move(job), [=](const Target& s, Job&) {
    return snclBroadcast(data, data, bytes, snclUint8, root, s.comm, s.stream);
  });
}

// The bytes of count elements of t, or nullptr's alternative: why MPI serves the call.
const char* bytesOf(int count, MPI_Datatype t, size_t* bytes) {
  if (count < 0) return "negative count";
  *bytes = typeSize(t) * static_cast<size_t>(count);
  return nullptr;
}

// One rank's block of an All-Gather or All-to-All: the receive side's bytes, which the send
// side must equal (MPI requires equal signatures; an erroneous call goes to MPI, which reports it).
const char* blockOf(const void* sb, int scount, MPI_Datatype stype, int rcount, MPI_Datatype rtype, size_t* block) {
  if (const char* why = bytesOf(rcount, rtype, block)) return why;
  size_t sent = 0;
  if (sb == MPI_IN_PLACE) return nullptr;
  if (const char* why = bytesOf(scount, stype, &sent)) return why;
  return sent == *block ? nullptr : "send and receive sizes differ";
}

int allgather(const void* sb, int scount, MPI_Datatype stype, void* rb, int rcount, MPI_Datatype rtype,
              MPI_Comm comm, MPI_Request* req) {
  const Kind k = kindOf(kAllgather, req);
  size_t block = 0;
  const char* why = blockOf(sb, scount, stype, rcount, rtype, &block);
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Iallgather(sb, scount, stype, rb, rcount, rtype, comm, req)
               : PMPI_Allgather(sb, scount, stype, rb, rcount, rtype, comm);
  }
  noteSncl(k, block);
  if (!block) return nothing(k, comm, *t, req);
  const bool ip = sb == MPI_IN_PLACE;
  std::unique_ptr<Job> job;
  const long n = sizeOf(comm);
  char* dst = stage(job, rb, rtype, n * rcount, ip, true, comm).base;
  const char* src = ip ? dst + static_cast<size_t>(rankIn(comm)) * block
                       : stage(job, sb, stype, scount, true, false, comm).base;
  return run(k, comm, *t, req, std::move(job), [=](const Target& s, Job&) {
    return snclAllGather(src, dst, block, snclUint8, s.comm, s.stream);
  });
}

int alltoall(const void* sb, int scount, MPI_Datatype stype, void* rb, int rcount, MPI_Datatype rtype,
             MPI_Comm comm, MPI_Request* req) {
  const Kind k = kindOf(kAlltoall, req);
  size_t block = 0;
  const char* why = blockOf(sb, scount, stype, rcount, rtype, &block);
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Ialltoall(sb, scount, stype, rb, rcount, rtype, comm, req)
               : PMPI_Alltoall(sb, scount, stype, rb, rcount, rtype, comm);
  }
  noteSncl(k, block);
  if (!block) return nothing(k, comm, *t, req);
  const bool ip = sb == MPI_IN_PLACE;
  std::unique_ptr<Job> job;
  const long n = sizeOf(comm);
  char* dst = stage(job, rb, rtype, n * rcount, ip, true, comm).base;
  const char* src = ip ? dst : stage(job, sb, stype, n * scount, true, false, comm).base;
  return run(k, comm, *t, req, std::move(job), [=](const Target& s, Job&) {
    return snclAlltoAll(src, dst, block, snclUint8, s.comm, s.stream);
  });
}

// Gather and Scatter: the block is the root's per-rank side (receive for gather, send for
// scatter) and the others' own side; MPI requires them equal. The root's own side must
// match its per-rank side unless in place.
const char* rootedBlock(bool isRoot, bool inPlace, int myCount, MPI_Datatype myType, int rootCount,
                        MPI_Datatype rootType, size_t* block) {
  if (!isRoot) return bytesOf(myCount, myType, block);
  if (const char* why = bytesOf(rootCount, rootType, block)) return why;
  size_t mine = 0;
  if (inPlace) return nullptr;
  if (const char* why = bytesOf(myCount, myType, &mine)) return why;
  return mine == *block ? nullptr : "send and receive sizes differ";
}

int gather(const void* sb, int scount, MPI_Datatype stype, void* rb, int rcount, MPI_Datatype rtype, int root,
           MPI_Comm comm, MPI_Request* req) {
  const Kind k = kindOf(kGather, req);
  const char* why = root < 0 || root >= sizeOf(comm) ? "root" : nullptr;
  const bool isRoot = !why && rankIn(comm) == root;
  const bool ip = isRoot && sb == MPI_IN_PLACE;
  size_t block = 0;
  if (!why) why = rootedBlock(isRoot, ip, scount, stype, rcount, rtype, &block);
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Igather(sb, scount, stype, rb, rcount, rtype, root, comm, req)
               : PMPI_Gather(sb, scount, stype, rb, rcount, rtype, root, comm);
  }
  noteSncl(k, block);
  if (!block) return nothing(k, comm, *t, req);
  std::unique_ptr<Job> job;
  char* dst = isRoot ? stage(job, rb, rtype, sizeOf(comm) * static_cast<long>(rcount), ip, true, comm).base : nullptr;
  const char* src = ip ? dst + static_cast<size_t>(root) * block : stage(job, sb, stype, scount, true, false, comm).base;
  return run(k, comm, *t, req, std::move(job), [=](const Target& s, Job&) {
    return snclGather(src, dst, block, snclUint8, root, s.comm, s.stream);
  });
}

int scatter(const void* sb, int scount, MPI_Datatype stype, void* rb, int rcount, MPI_Datatype rtype, int root,
            MPI_Comm comm, MPI_Request* req) {
  const Kind k = kindOf(kScatter, req);
  const char* why = root < 0 || root >= sizeOf(comm) ? "root" : nullptr;
  const bool isRoot = !why && rankIn(comm) == root;
  const bool ip = isRoot && rb == MPI_IN_PLACE;
  size_t block = 0;
  if (!why) why = rootedBlock(isRoot, ip, rcount, rtype, scount, stype, &block);
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Iscatter(sb, scount, stype, rb, rcount, rtype, root, comm, req)
               : PMPI_Scatter(sb, scount, stype, rb, rcount, rtype, root, comm);
  }
  noteSncl(k, block);
  if (!block) return nothing(k, comm, *t, req);
  std::unique_ptr<Job> job;
  char* src = isRoot ? stage(job, sb, stype, sizeOf(comm) * static_cast<long>(scount), true, false, comm).base : nullptr;
  char* dst = ip ? src + static_cast<size_t>(root) * block : stage(job, rb, rtype, rcount, false, true, comm).base;
  return run(k, comm, *t, req, std::move(job), [=](const Target& s, Job&) {
    return snclScatter(src, dst, block, snclUint8, root, s.comm, s.stream);
  });
}

int reduceScatterBlock(const void* sb, void* rb, int rcount, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                       MPI_Request* req) {
  const Kind k = kindOf(kReduceScatterBlock, req);
  Reduction red{};
  bool callback = false;
  const char* why = reductionOrCallback(dt, op, rcount, comm, &red, &callback);
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Ireduce_scatter_block(sb, rb, rcount, dt, op, comm, req)
               : PMPI_Reduce_scatter_block(sb, rb, rcount, dt, op, comm);
  }
  const size_t bytes = typeSize(dt) * static_cast<size_t>(rcount);
  noteSncl(k, bytes);
  if (callback) return callbackReduceScatterBlock(k, sb, rb, rcount, dt, op, comm, *t, req);
  if (!bytes) return nothing(k, comm, *t, req);
  const long all = sizeOf(comm) * static_cast<long>(rcount);
  std::unique_ptr<Job> job;
  if (sb != MPI_IN_PLACE) {
    const char* src = stage(job, sb, dt, all, true, false, comm).base;
    char* dst = stage(job, rb, dt, rcount, false, true, comm).base;
    return run(k, comm, *t, req, std::move(job), [=](const Target& s, Job&) {
      return snclReduceScatter(src, dst, red.n, red.type, red.op, s.comm, s.stream);
    });
  }
  // MPI in place: the input fills rb and the result goes to its start; sncl's in-place form
  // leaves block `rank` where it is, so it moves (or unpacks) there once the call ran.
  const Block whole[1] = {{0, all}};
  const bool packed = packs(dt, whole);
  char* buf = stage(job, rb, dt, all, true, false, comm).base;
  const size_t offset = static_cast<size_t>(rankIn(comm)) * bytes;
  if (!job) job = newJob();
  if (packed) unpackAfter(*job, buf + offset, rb, dt, rcount, comm);
  else if (offset) job->after = [=] { std::memmove(buf, buf + offset, bytes); };
  return run(k, comm, *t, req, std::move(job), [=](const Target& s, Job&) {
    return snclReduceScatter(buf, buf + offset, red.n, red.type, red.op, s.comm, s.stream);
  });
}

int barrier(MPI_Comm comm, MPI_Request* req) {
  const Kind k = kindOf(kBarrier, req);
  const auto t = served(comm);
  if (!t) {
    noteMpi(k, kCommWhy);
    return req ? PMPI_Ibarrier(comm, req) : PMPI_Barrier(comm);
  }
  noteSncl(k, 0);
  // No rank leaves an all-reduce before every rank has entered it. The token lives in the
  // job: a nonblocking barrier runs after this function returned.
  auto job = newJob();
  job->scratch.assign(1, 0);
  return run(k, comm, *t, req, std::move(job), [](const Target& s, Job& j) {
    return snclAllReduce(j.scratch.data(), j.scratch.data(), 1, snclUint8, snclMax, s.comm, s.stream);
  });
}

}  // namespace
}  // namespace sncl_mpi

using namespace sncl_mpi;

extern "C" {

int MPI_Allreduce(const void* sb, void* rb, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm) {
  return allreduce(sb, rb, count, dt, op, comm, nullptr);
}
int MPI_Iallreduce(const void* sb, void* rb, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                   MPI_Request* req) {
  return allreduce(sb, rb, count, dt, op, comm, req);
}
int MPI_Reduce(const void* sb, void* rb, int count, MPI_Datatype dt, MPI_Op op, int root, MPI_Comm comm) {
  return reduce(sb, rb, count, dt, op, root, comm, nullptr);
}
int MPI_Ireduce(const void* sb, void* rb, int count, MPI_Datatype dt, MPI_Op op, int root, MPI_Comm comm,
                MPI_Request* req) {
  return reduce(sb, rb, count, dt, op, root, comm, req);
}
int MPI_Bcast(void* buf, int count, MPI_Datatype dt, int root, MPI_Comm comm) {
  return bcast(buf, count, dt, root, comm, nullptr);
}
int MPI_Ibcast(void* buf, int count, MPI_Datatype dt, int root, MPI_Comm comm, MPI_Request* req) {
  return bcast(buf, count, dt, root, comm, req);
}
int MPI_Allgather(const void* sb, int sc, MPI_Datatype st, void* rb, int rc, MPI_Datatype rt, MPI_Comm comm) {
  return allgather(sb, sc, st, rb, rc, rt, comm, nullptr);
}
int MPI_Iallgather(const void* sb, int sc, MPI_Datatype st, void* rb, int rc, MPI_Datatype rt, MPI_Comm comm,
                   MPI_Request* req) {
  return allgather(sb, sc, st, rb, rc, rt, comm, req);
}
int MPI_Alltoall(const void* sb, int sc, MPI_Datatype st, void* rb, int rc, MPI_Datatype rt, MPI_Comm comm) {
  return alltoall(sb, sc, st, rb, rc, rt, comm, nullptr);
}
int MPI_Ialltoall(const void* sb, int sc, MPI_Datatype st, void* rb, int rc, MPI_Datatype rt, MPI_Comm comm,
                  MPI_Request* req) {
  return alltoall(sb, sc, st, rb, rc, rt, comm, req);
}
int MPI_Gather(const void* sb, int sc, MPI_Datatype st, void* rb, int rc, MPI_Datatype rt, int root, MPI_Comm comm) {
  return gather(sb, sc, st, rb, rc, rt, root, comm, nullptr);
}
int MPI_Igather(const void* sb, int sc, MPI_Datatype st, void* rb, int rc, MPI_Datatype rt, int root, MPI_Comm comm,
                MPI_Request* req) {
  return gather(sb, sc, st, rb, rc, rt, root, comm, req);
}
int MPI_Scatter(const void* sb, int sc, MPI_Datatype st, void* rb, int rc, MPI_Datatype rt, int root, MPI_Comm comm) {
  return scatter(sb, sc, st, rb, rc, rt, root, comm, nullptr);
}
int MPI_Iscatter(const void* sb, int sc, MPI_Datatype st, void* rb, int rc, MPI_Datatype rt, int root,
                 MPI_Comm comm, MPI_Request* req) {
  return scatter(sb, sc, st, rb, rc, rt, root, comm, req);
}
int MPI_Reduce_scatter_block(const void* sb, void* rb, int rc, MPI_Datatype dt, MPI_Op op, MPI_Comm comm) {
  return reduceScatterBlock(sb, rb, rc, dt, op, comm, nullptr);
}
int MPI_Ireduce_scatter_block(const void* sb, void* rb, int rc, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                              MPI_Request* req) {
  return reduceScatterBlock(sb, rb, rc, dt, op, comm, req);
}
int MPI_Barrier(MPI_Comm comm) { return barrier(comm, nullptr); }
int MPI_Ibarrier(MPI_Comm comm, MPI_Request* req) { return barrier(comm, req); }

}  // extern "C"
