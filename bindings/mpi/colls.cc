// The fixed-count collectives: MPI_Allreduce, Reduce, Bcast, Allgather, Alltoall, Gather,
// Scatter, Reduce_scatter_block, Barrier and their MPI_I* forms. Each decides from
// arguments MPI requires to agree across ranks (type signature, op, root, count), so every
// rank takes the same path, then runs through sncl (common.h) or passes the call to PMPI
// unchanged.
#include <cstring>

#include "bindings/mpi/common.h"

namespace sncl_mpi {
namespace {


int allreduce(const void* sb, void* rb, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm, MPI_Request* req) {
  const Kind k = kindOf(kAllreduce, req);
  Reduction red{};
  const char* why = reduction(dt, op, count, &red);
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Iallreduce(sb, rb, count, dt, op, comm, req) : PMPI_Allreduce(sb, rb, count, dt, op, comm);
  }
  noteSncl(k, red.n * red.elem);
  const void* src = sb == MPI_IN_PLACE ? rb : sb;
  return run(k, comm, *t, req, nullptr, [=](const Target& s, Job&) {
    return snclAllReduce(src, rb, red.n, red.type, red.op, s.comm, s.stream);
  });
}

int reduce(const void* sb, void* rb, int count, MPI_Datatype dt, MPI_Op op, int root, MPI_Comm comm,
           MPI_Request* req) {
  const Kind k = kindOf(kReduce, req);
  Reduction red{};
  const char* why = reduction(dt, op, count, &red);
  if (!why && (root < 0 || root >= sizeOf(comm))) why = "root";  // MPI reports the bad root
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Ireduce(sb, rb, count, dt, op, root, comm, req)
               : PMPI_Reduce(sb, rb, count, dt, op, root, comm);
  }
  noteSncl(k, red.n * red.elem);
  const bool isRoot = rankIn(comm) == root;
  const void* src = sb == MPI_IN_PLACE ? rb : sb;  // MPI_IN_PLACE is legal at the root only
  void* dst = isRoot ? rb : nullptr;
  return run(k, comm, *t, req, nullptr, [=](const Target& s, Job&) {
    return snclReduce(src, dst, red.n, red.type, red.op, root, s.comm, s.stream);
  });
}

int bcast(void* buf, int count, MPI_Datatype dt, int root, MPI_Comm comm, MPI_Request* req) {
  const Kind k = kindOf(kBcast, req);
  const size_t elem = plainBytes(dt);
  const char* why = !elem ? "datatype not contiguous" : count <= 0 ? "count 0" : nullptr;
  if (!why && (root < 0 || root >= sizeOf(comm))) why = "root";
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Ibcast(buf, count, dt, root, comm, req) : PMPI_Bcast(buf, count, dt, root, comm);
  }
  const size_t bytes = elem * static_cast<size_t>(count);
  noteSncl(k, bytes);
  return run(k, comm, *t, req, nullptr, [=](const Target& s, Job&) {
    return snclBroadcast(buf, buf, bytes, snclUint8, root, s.comm, s.stream);
  });
}

// The bytes of one rank's block of an All-Gather or All-to-All, or why MPI serves it
// (types with gaps, a count of 0, send and receive blocks that differ).
const char* blockOf(const void* sb, int scount, MPI_Datatype stype, int rcount, MPI_Datatype rtype, size_t* block) {
  const size_t relem = plainBytes(rtype);
  if (!relem) return "datatype not contiguous";
  if (rcount <= 0) return "count 0";
  *block = relem * static_cast<size_t>(rcount);
  if (sb == MPI_IN_PLACE) return nullptr;
  const size_t selem = plainBytes(stype);
  if (!selem) return "datatype not contiguous";
  return scount >= 0 && selem * static_cast<size_t>(scount) == *block ? nullptr : "send and receive sizes differ";
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
  const void* src = sb == MPI_IN_PLACE ? at(rb, static_cast<size_t>(rankIn(comm)) * block) : sb;
  return run(k, comm, *t, req, nullptr, [=](const Target& s, Job&) {
    return snclAllGather(src, rb, block, snclUint8, s.comm, s.stream);
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
  const void* src = sb == MPI_IN_PLACE ? rb : sb;
  return run(k, comm, *t, req, nullptr, [=](const Target& s, Job&) {
    return snclAlltoAll(src, rb, block, snclUint8, s.comm, s.stream);
  });
}

// Gather and Scatter: the root's block is its receive (gather) or send (scatter) side, the
// other ranks' the side they pass; each rank checks the sides it uses.
const char* rootedBlock(bool isRoot, bool inPlace, int myCount, MPI_Datatype myType,
                        int rootCount, MPI_Datatype rootType, size_t* block) {
  if (!isRoot) {
    const size_t e = plainBytes(myType);
    if (!e) return "datatype not contiguous";
    if (myCount <= 0) return "count 0";
    *block = e * static_cast<size_t>(myCount);
    return nullptr;
  }
  const size_t re = plainBytes(rootType);
  if (!re) return "datatype not contiguous";
  if (rootCount <= 0) return "count 0";
  *block = re * static_cast<size_t>(rootCount);
  if (inPlace) return nullptr;
  const size_t e = plainBytes(myType);
  if (!e) return "datatype not contiguous";
  return myCount >= 0 && e * static_cast<size_t>(myCount) == *block ? nullptr : "send and receive sizes differ";
}

int gather(const void* sb, int scount, MPI_Datatype stype, void* rb, int rcount, MPI_Datatype rtype, int root,
           MPI_Comm comm, MPI_Request* req) {
  const Kind k = kindOf(kGather, req);
  const char* why = root < 0 || root >= sizeOf(comm) ? "root" : nullptr;
  const bool isRoot = !why && rankIn(comm) == root;
  size_t block = 0;
  if (!why) why = rootedBlock(isRoot, sb == MPI_IN_PLACE, scount, stype, rcount, rtype, &block);
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Igather(sb, scount, stype, rb, rcount, rtype, root, comm, req)
               : PMPI_Gather(sb, scount, stype, rb, rcount, rtype, root, comm);
  }
  noteSncl(k, block);
  const void* src = sb == MPI_IN_PLACE ? at(rb, static_cast<size_t>(root) * block) : sb;
  void* dst = isRoot ? rb : nullptr;
  return run(k, comm, *t, req, nullptr, [=](const Target& s, Job&) {
    return snclGather(src, dst, block, snclUint8, root, s.comm, s.stream);
  });
}

int scatter(const void* sb, int scount, MPI_Datatype stype, void* rb, int rcount, MPI_Datatype rtype, int root,
            MPI_Comm comm, MPI_Request* req) {
  const Kind k = kindOf(kScatter, req);
  const char* why = root < 0 || root >= sizeOf(comm) ? "root" : nullptr;
  const bool isRoot = !why && rankIn(comm) == root;
  size_t block = 0;
  if (!why) why = rootedBlock(isRoot, rb == MPI_IN_PLACE, rcount, rtype, scount, stype, &block);
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Iscatter(sb, scount, stype, rb, rcount, rtype, root, comm, req)
               : PMPI_Scatter(sb, scount, stype, rb, rcount, rtype, root, comm);
  }
  noteSncl(k, block);
  const void* src = isRoot ? sb : nullptr;
  void* dst = rb == MPI_IN_PLACE ? const_cast<char*>(at(sb, static_cast<size_t>(root) * block)) : rb;
  return run(k, comm, *t, req, nullptr, [=](const Target& s, Job&) {
    return snclScatter(src, dst, block, snclUint8, root, s.comm, s.stream);
  });
}

int reduceScatterBlock(const void* sb, void* rb, int rcount, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                       MPI_Request* req) {
  const Kind k = kindOf(kReduceScatterBlock, req);
  Reduction red{};
  const char* why = reduction(dt, op, rcount, &red);
  const auto t = why ? std::nullopt : served(comm);
  if (!t) {
    noteMpi(k, why ? why : kCommWhy);
    return req ? PMPI_Ireduce_scatter_block(sb, rb, rcount, dt, op, comm, req)
               : PMPI_Reduce_scatter_block(sb, rb, rcount, dt, op, comm);
  }
  const size_t bytes = red.n * red.elem;
  noteSncl(k, bytes);
  if (sb != MPI_IN_PLACE)
    return run(k, comm, *t, req, nullptr, [=](const Target& s, Job&) {
      return snclReduceScatter(sb, rb, red.n, red.type, red.op, s.comm, s.stream);
    });
  // MPI in place: the input fills rb and the result goes to its start; sncl's in-place form
  // leaves block `rank` where it is, so it moves down once the call ran.
  auto* buf = static_cast<char*>(rb);
  const size_t offset = static_cast<size_t>(rankIn(comm)) * bytes;
  auto job = std::make_unique<Job>();
  if (offset) job->after = [=] { std::memmove(buf, buf + offset, bytes); };
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
  auto job = std::make_unique<Job>();
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
