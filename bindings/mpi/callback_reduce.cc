#include "bindings/mpi/callback_reduce.h"

#include <algorithm>
#include <utility>

#include "bindings/mpi/staging.h"
#include "bindings/mpi/types.h"

namespace sncl_mpi {
namespace {

// Room in job for count elements of t in its own layout: where element 0 starts in it.
char* typedRoom(Job& job, MPI_Datatype t, long count) {
  MPI_Aint lb = 0, extent = 0, tlb = 0, textent = 0;
  PMPI_Type_get_extent(t, &lb, &extent);
  PMPI_Type_get_true_extent(t, &tlb, &textent);
  const size_t span = count > 0 ? static_cast<size_t>(textent + (count - 1) * extent) : 0;
  return reinterpret_cast<char*>(job.room(std::max<size_t>(span, 1))) - tlb;
}

void unpackInto(const char* packed, size_t bytes, void* buf, long count, MPI_Datatype t, MPI_Comm comm) {
  int pos = 0;
  PMPI_Unpack(packed, static_cast<int>(bytes), &pos, buf, static_cast<int>(count), t, comm);
}

// After the call: buf = x[first] op ... op x[last], x[i] the packed input at all + i * bytes.
// MPI_Reduce_local(in, inout) makes inout = in op inout, so the fold runs from the last down.
void foldAfter(Job& job, const char* all, size_t bytes, int first, int last, void* buf, long count, MPI_Datatype t,
               MPI_Op op, MPI_Comm comm) {
  char* x = typedRoom(job, t, count);
  job.after = [=] {
    if (last < first) return;
    unpackInto(all + static_cast<size_t>(last) * bytes, bytes, buf, count, t, comm);
    for (int i = last - 1; i >= first; --i) {
      unpackInto(all + static_cast<size_t>(i) * bytes, bytes, x, count, t, comm);
      PMPI_Reduce_local(x, buf, static_cast<int>(count), t, op);
    }
  };
}

// This rank's input, packed (count elements of t at buf).
const char* packedInput(std::unique_ptr<Job>& job, const void* buf, MPI_Datatype t, long count, MPI_Comm comm) {
  return stage(job, buf, t, count, true, false, comm).base;
}

// n inputs of bytes each, received into the job.
char* inputsRoom(Job& job, int n, size_t bytes) {
  return reinterpret_cast<char*>(job.room(std::max<size_t>(static_cast<size_t>(n) * bytes, 1)));
}

}  // namespace

const char* callbackOr(const char* why, MPI_Datatype t, MPI_Op op, long count, MPI_Comm comm, bool* callback) {
  if (why != kWhyPairOp && why != kWhyType && why != kWhyUserOp) return why;
  if (op == MPI_OP_NULL || op == MPI_REPLACE || op == MPI_NO_OP || count < 0) return why;  // MPI reports them
  if (typeSize(t) * static_cast<size_t>(count) * static_cast<size_t>(sizeOf(comm)) > kCallbackMaxBytes)
    return "op or type sncl lacks, inputs of all ranks above 64 MiB";
  *callback = true;
  return nullptr;
}

int callbackAllreduce(Kind k, const void* sb, void* rb, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm,
                      const Target& target, MPI_Request* req) {
  const size_t bytes = typeSize(t) * static_cast<size_t>(count);
  if (!bytes) return nothing(k, comm, target, req);
  std::unique_ptr<Job> job = newJob();
  const char* mine = packedInput(job, sb == MPI_IN_PLACE ? rb : sb, t, count, comm);
  const int n = sizeOf(comm);
  char* all = inputsRoom(*job, n, bytes);
  foldAfter(*job, all, bytes, 0, n - 1, rb, count, t, op, comm);
  return run(k, comm, target, req, std::move(job), [=](const Target& s, Job&) {
    return snclAllGather(mine, all, bytes, snclUint8, s.comm, s.stream);
  });
}

int callbackReduce(Kind k, const void* sb, void* rb, int count, MPI_Datatype t, MPI_Op op, int root, MPI_Comm comm,
                   const Target& target, MPI_Request* req) {
  const size_t bytes = typeSize(t) * static_cast<size_t>(count);
  if (!bytes) return nothing(k, comm, target, req);
  const bool isRoot = rankIn(comm) == root;
  std::unique_ptr<Job> job = newJob();
  const char* mine = packedInput(job, isRoot && sb == MPI_IN_PLACE ? rb : sb, t, count, comm);
  char* all = nullptr;
  if (isRoot) {
    const int n = sizeOf(comm);
    all = inputsRoom(*job, n, bytes);
    foldAfter(*job, all, bytes, 0, n - 1, rb, count, t, op, comm);
  }
  return run(k, comm, target, req, std::move(job), [=](const Target& s, Job&) {
    return snclGather(mine, all, bytes, snclUint8, root, s.comm, s.stream);
  });
}

int callbackScan(Kind k, bool exclusive, const void* sb, void* rb, int count, MPI_Datatype t, MPI_Op op,
                 MPI_Comm comm, const Target& target, MPI_Request* req) {
  const size_t bytes = typeSize(t) * static_cast<size_t>(count);
  if (!bytes) return nothing(k, comm, target, req);
  std::unique_ptr<Job> job = newJob();
  const char* mine = packedInput(job, sb == MPI_IN_PLACE ? rb : sb, t, count, comm);
  const int me = rankIn(comm);
  char* all = inputsRoom(*job, sizeOf(comm), bytes);
  foldAfter(*job, all, bytes, 0, exclusive ? me - 1 : me, rb, count, t, op, comm);  // rank 0's Exscan: untouched
  return run(k, comm, target, req, std::move(job), [=](const Target& s, Job&) {
    return snclAllGather(mine, all, bytes, snclUint8, s.comm, s.stream);
  });
}

int callbackReduceScatterBlock(Kind k, const void* sb, void* rb, int count, MPI_Datatype t, MPI_Op op,
                               MPI_Comm comm, const Target& target, MPI_Request* req) {
  const size_t bytes = typeSize(t) * static_cast<size_t>(count);  // one block
  if (!bytes) return nothing(k, comm, target, req);
  const int n = sizeOf(comm);
  std::unique_ptr<Job> job = newJob();
  // Block i of every rank's input goes to rank i: an All-to-All, then the fold of the n blocks.
  const char* mine = packedInput(job, sb == MPI_IN_PLACE ? rb : sb, t, static_cast<long>(n) * count, comm);
  char* all = inputsRoom(*job, n, bytes);
  foldAfter(*job, all, bytes, 0, n - 1, rb, count, t, op, comm);
  return run(k, comm, target, req, std::move(job), [=](const Target& s, Job&) {
    return snclAlltoAll(mine, all, bytes, snclUint8, s.comm, s.stream);
  });
}

int callbackReduceScatter(Kind k, const void* sb, void* rb, const int* counts, MPI_Datatype t, MPI_Op op,
                          MPI_Comm comm, const Target& target, MPI_Request* req) {
  const int n = sizeOf(comm), me = rankIn(comm);
  const size_t size = typeSize(t);
  std::unique_ptr<Job> job = newJob();
  // Block i (counts[i] elements) of every rank's input goes to rank i: an All-to-All-v
  // (send counts and offsets, receive counts and offsets), then the fold of the n blocks.
  job->arrays.resize(4 * static_cast<size_t>(n));
  size_t* a = job->arrays.data();
  long total = 0;
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<size_t>(counts[i]) * size;
    a[n + i] = static_cast<size_t>(total) * size;
    a[2 * n + i] = static_cast<size_t>(counts[me]) * size;
    a[3 * n + i] = static_cast<size_t>(i) * a[2 * n + i];
    total += counts[i];
  }
  const size_t bytes = a[2 * n];
  const char* mine = packedInput(job, sb == MPI_IN_PLACE ? rb : sb, t, total, comm);
  char* all = inputsRoom(*job, n, bytes);
  foldAfter(*job, all, bytes, 0, bytes ? n - 1 : -1, rb, counts[me], t, op, comm);
  return run(k, comm, target, req, std::move(job), [=](const Target& s, Job& j) {
    const size_t* v = j.arrays.data();
    return snclAlltoAllV(mine, v, v + n, all, v + 2 * n, v + 3 * n, snclUint8, s.comm, s.stream);
  });
}

}  // namespace sncl_mpi
