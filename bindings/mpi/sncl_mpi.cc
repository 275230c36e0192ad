// libsncl_mpi.so: PMPI interposition. Preloaded into an unmodified MPI program, it serves
// MPI_Allreduce, MPI_Bcast, MPI_Reduce, MPI_Allgather, MPI_Reduce_scatter_block,
// MPI_Alltoall and MPI_Barrier on intracommunicators through sncl, and passes every call
// it cannot serve (derived datatypes, user or logical ops, intercommunicators, types sncl
// lacks) to the PMPI_* entry points unchanged.
//
// Every decision depends only on arguments MPI requires to match across ranks (datatype
// signature, op, root, count), so all ranks of a collective take the same path.
//
// SNCL_MPI_DEBUG=1: per call kind, how many calls went to sncl and to MPI, at MPI_Finalize.
// SNCL_MPI_DEBUG=2: also one line per call.
#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bindings/mpi/comm_cache.h"
#include "bindings/mpi/types.h"

namespace sncl_mpi {
namespace {

enum Kind { kAllreduce, kBcast, kReduce, kAllgather, kReduceScatterBlock, kAlltoall, kBarrier, kNumKinds };
constexpr const char* kNames[kNumKinds] = {"MPI_Allreduce",  "MPI_Bcast",    "MPI_Reduce", "MPI_Allgather",
                                           "MPI_Reduce_scatter_block", "MPI_Alltoall", "MPI_Barrier"};
std::atomic<long> bySncl[kNumKinds];
std::atomic<long> byMpi[kNumKinds];

int debugLevel() {
  static const int level = [] {
    const char* s = std::getenv("SNCL_MPI_DEBUG");
    return s ? std::atoi(s) : 0;
  }();
  return level;
}

int worldRank() {
  int rank = -1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// Bytes per element of the types reduceType returns.
size_t typeBytes(snclDataType_t t) {
  switch (t) {
    case snclInt8: case snclUint8: return 1;
    case snclInt32: case snclUint32: case snclFloat32: return 4;
    default: return 8;
  }
}

void note(Kind k, bool sncl, const char* why, size_t bytes) {
  (sncl ? bySncl : byMpi)[k].fetch_add(1, std::memory_order_relaxed);
  if (debugLevel() < 2) return;
  if (sncl)
    std::fprintf(stderr, "sncl_mpi: rank %d: %s %zu bytes -> sncl\n", worldRank(), kNames[k], bytes);
  else
    std::fprintf(stderr, "sncl_mpi: rank %d: %s -> MPI (%s)\n", worldRank(), kNames[k], why);
}

// The sncl comm serving comm, or nullptr (MPI serves: not initialized, finalized, null,
// intercommunicator, failed init).
snclComm_t served(MPI_Comm comm) {
  int init = 0, fin = 0;
  PMPI_Initialized(&init);
  PMPI_Finalized(&fin);
  if (!init || fin || comm == MPI_COMM_NULL) return nullptr;
  return commFor(comm);
}

int rankIn(MPI_Comm comm) {
  int r = 0;
  PMPI_Comm_rank(comm, &r);
  return r;
}
int sizeOf(MPI_Comm comm) {
  int n = 0;
  PMPI_Comm_size(comm, &n);
  return n;
}

// sncl failed after every rank chose it: raise through the communicator's error handler
// (fatal by default), as MPI would.
int finish(snclResult_t r, Kind k, MPI_Comm comm) {
  if (r == snclSuccess) return MPI_SUCCESS;
  std::fprintf(stderr, "sncl_mpi: rank %d: %s failed in sncl: %s: %s\n", worldRank(), kNames[k],
               snclGetErrorString(r), snclGetLastError(nullptr));
  PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
  return MPI_ERR_OTHER;
}

// The sncl comm serving an All-Gather or All-to-All and the bytes of each rank's block, or
// null after noting why the call goes to MPI (types that are not plain bytes, counts, send
// and receive blocks that differ, a communicator sncl does not serve).
snclComm_t blockCall(Kind k, const void* sendbuf, int sendcount, MPI_Datatype sendtype, int recvcount,
                     MPI_Datatype recvtype, MPI_Comm comm, size_t* block) {
  const size_t relem = plainBytes(recvtype);
  *block = relem * static_cast<size_t>(recvcount > 0 ? recvcount : 0);
  const char* why = !relem ? "datatype" : recvcount <= 0 ? "count" : nullptr;
  if (!why && sendbuf != MPI_IN_PLACE) {
    const size_t selem = plainBytes(sendtype);
    if (!selem || sendcount < 0 || selem * static_cast<size_t>(sendcount) != *block) why = "send type";
  }
  snclComm_t c = why ? nullptr : served(comm);
  if (!c) note(k, false, why ? why : "communicator", 0);
  else note(k, true, nullptr, *block);
  return c;
}

}  // namespace
}  // namespace sncl_mpi

using namespace sncl_mpi;

extern "C" {

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  const auto t = reduceType(datatype);
  const auto o = reduceOp(op);
  const char* why = !t ? "datatype" : !o ? "op" : count <= 0 ? "count" : nullptr;
  snclComm_t c = why ? nullptr : served(comm);
  if (!c) {
    note(kAllreduce, false, why ? why : "communicator", 0);
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  }
  const size_t n = static_cast<size_t>(count);
  note(kAllreduce, true, nullptr, n * typeBytes(*t));
  const void* src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  return finish(snclAllReduce(src, recvbuf, n, *t, *o, c, nullptr), kAllreduce, comm);
}

int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
               MPI_Comm comm) {
  const auto t = reduceType(datatype);
  const auto o = reduceOp(op);
  const char* why = !t ? "datatype" : !o ? "op" : count <= 0 ? "count" : nullptr;
  snclComm_t c = why ? nullptr : served(comm);
  if (c && (root < 0 || root >= sizeOf(comm))) c = nullptr;  // MPI reports the bad root
  if (!c) {
    note(kReduce, false, why ? why : "communicator or root", 0);
    return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
  }
  const size_t n = static_cast<size_t>(count);
  note(kReduce, true, nullptr, n * typeBytes(*t));
  const bool isRoot = rankIn(comm) == root;
  const void* src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;  // MPI_IN_PLACE is legal at root only
  return finish(snclReduce(src, isRoot ? recvbuf : nullptr, n, *t, *o, root, c, nullptr), kReduce, comm);
}

int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  const size_t elem = plainBytes(datatype);
  const char* why = !elem ? "datatype" : count <= 0 ? "count" : nullptr;
  snclComm_t c = why ? nullptr : served(comm);
  if (c && (root < 0 || root >= sizeOf(comm))) c = nullptr;
  if (!c) {
    note(kBcast, false, why ? why : "communicator or root", 0);
    return PMPI_Bcast(buffer, count, datatype, root, comm);
  }
  const size_t bytes = elem * static_cast<size_t>(count);
  note(kBcast, true, nullptr, bytes);
  return finish(snclBroadcast(buffer, buffer, bytes, snclUint8, root, c, nullptr), kBcast, comm);
}

int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm) {
  size_t block = 0;
  snclComm_t c = blockCall(kAllgather, sendbuf, sendcount, sendtype, recvcount, recvtype, comm, &block);
  if (!c) return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  const void* src =
      sendbuf == MPI_IN_PLACE ? static_cast<char*>(recvbuf) + static_cast<size_t>(rankIn(comm)) * block : sendbuf;
  return finish(snclAllGather(src, recvbuf, block, snclUint8, c, nullptr), kAllgather, comm);
}

int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                 MPI_Datatype recvtype, MPI_Comm comm) {
  size_t block = 0;
  snclComm_t c = blockCall(kAlltoall, sendbuf, sendcount, sendtype, recvcount, recvtype, comm, &block);
  if (!c) return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  const void* src = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  return finish(snclAlltoAll(src, recvbuf, block, snclUint8, c, nullptr), kAlltoall, comm);
}

int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype datatype, MPI_Op op,
                             MPI_Comm comm) {
  const auto t = reduceType(datatype);
  const auto o = reduceOp(op);
  const char* why = !t ? "datatype" : !o ? "op" : recvcount <= 0 ? "count" : nullptr;
  snclComm_t c = why ? nullptr : served(comm);
  if (!c) {
    note(kReduceScatterBlock, false, why ? why : "communicator", 0);
    return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
  }
  const size_t n = static_cast<size_t>(recvcount), elem = typeBytes(*t);
  note(kReduceScatterBlock, true, nullptr, n * elem);
  if (sendbuf != MPI_IN_PLACE)
    return finish(snclReduceScatter(sendbuf, recvbuf, n, *t, *o, c, nullptr), kReduceScatterBlock, comm);
  // MPI in place: the input fills recvbuf and the result goes to its start; sncl's in-place
  // form leaves block `rank` where it was, so move it down afterwards.
  auto* buf = static_cast<char*>(recvbuf);
  const size_t offset = static_cast<size_t>(rankIn(comm)) * n * elem;
  const int rc = finish(snclReduceScatter(buf, buf + offset, n, *t, *o, c, nullptr), kReduceScatterBlock, comm);
  if (rc == MPI_SUCCESS && offset) std::memmove(buf, buf + offset, n * elem);
  return rc;
}

int MPI_Barrier(MPI_Comm comm) {
  snclComm_t c = served(comm);
  if (!c) {
    note(kBarrier, false, "communicator", 0);
    return PMPI_Barrier(comm);
  }
  note(kBarrier, true, nullptr, 0);
  // No rank leaves an all-reduce before every rank has entered it.
  unsigned char token = 0;
  return finish(snclAllReduce(&token, &token, 1, snclUint8, snclMax, c, nullptr), kBarrier, comm);
}

int MPI_Finalize(void) {
  sncl_mpi::destroyAll();
  if (debugLevel() >= 1) {
    const int rank = worldRank();
    for (int k = 0; k < kNumKinds; ++k) {
      const long s = bySncl[k].load(), m = byMpi[k].load();
      if (s || m) std::fprintf(stderr, "sncl_mpi: rank %d: %s: %ld by sncl, %ld by MPI\n", rank, kNames[k], s, m);
    }
  }
  return PMPI_Finalize();
}

}  // extern "C"
