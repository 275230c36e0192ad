#include "bindings/mpi/staging.h"

#include <algorithm>
#include <climits>
#include <utility>

#include "bindings/mpi/types.h"

namespace sncl_mpi {
namespace {

long longest(std::span<const Block> blocks) {
  long n = 0;
  for (const Block& b : blocks) n = std::max(n, b.count);
  return blocks.size() > 1 ? std::max(n, 2L) : n;  // several blocks: element spacing matters too
}

// MPI_Pack and MPI_Unpack take int counts; a block beyond INT_MAX elements goes in pieces.
void packBlock(const char* from, long count, MPI_Datatype t, ptrdiff_t extent, char* to, size_t size, MPI_Comm comm) {
  while (count > 0) {
    const int n = static_cast<int>(std::min<long>(count, INT_MAX / std::max<size_t>(size, 1)));
    int pos = 0;
    PMPI_Pack(from, n, t, to, static_cast<int>(static_cast<size_t>(n) * size), &pos, comm);
    from += n * extent;
    to += static_cast<size_t>(n) * size;
    count -= n;
  }
}

void unpackBlock(const char* from, size_t size, char* to, long count, MPI_Datatype t, ptrdiff_t extent,
                 MPI_Comm comm) {
  while (count > 0) {
    const int n = static_cast<int>(std::min<long>(count, INT_MAX / std::max<size_t>(size, 1)));
    int pos = 0;
    PMPI_Unpack(from, static_cast<int>(static_cast<size_t>(n) * size), &pos, to, n, t, comm);
    from += static_cast<size_t>(n) * size;
    to += n * extent;
    count -= n;
  }
}

void thenRun(Job& job, std::function<void()> step) {
  if (!job.after) {
    job.after = std::move(step);
    return;
  }
  job.after = [first = std::move(job.after), step = std::move(step)] {
    first();
    step();
  };
}

}  // namespace

bool packs(MPI_Datatype t, std::span<const Block> blocks) {
  ptrdiff_t offset = 0;
  return !dense(t, longest(blocks), &offset);
}

Staged stage(std::unique_ptr<Job>& job, const void* buf, MPI_Datatype t, std::span<const Block> blocks, bool in,
             bool out, MPI_Comm comm) {
  ptrdiff_t offset = 0, extent = 0;
  auto* user = static_cast<char*>(const_cast<void*>(buf));
  // extent: set by dense() for every type but MPI_DATATYPE_NULL, whose extent is 0.
  if (dense(t, longest(blocks), &offset, &extent)) return Staged{user + offset, static_cast<size_t>(extent), 0};
  const size_t size = typeSize(t);
  long first = 0, end = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    first = i ? std::min(first, blocks[i].disp) : blocks[i].disp;
    end = i ? std::max(end, blocks[i].disp + blocks[i].count) : blocks[i].disp + blocks[i].count;
  }
  if (!job) job = newJob();
  const Staged s{reinterpret_cast<char*>(job->room(std::max<size_t>(static_cast<size_t>(end - first) * size, 1))), size,
                 first};
  for (const Block& b : blocks)
    if (in) packBlock(user + b.disp * extent, b.count, t, extent, s.base + s.at(b.disp), size, comm);
  if (out) {
    // MPI lets the program free the datatype before a nonblocking call completes: the
    // unpack keeps a duplicate of its own.
    MPI_Datatype own = MPI_DATATYPE_NULL;
    PMPI_Type_dup(t, &own);
    // The blocks are the caller's (a span): the unpack keeps a copy (this path packs, and
    // allocates, anyway).
    thenRun(*job, [=, blocks = std::vector<Block>(blocks.begin(), blocks.end())]() mutable {
      for (const Block& b : blocks)
        unpackBlock(s.base + s.at(b.disp), size, user + b.disp * extent, b.count, own, extent, comm);
      PMPI_Type_free(&own);
    });
  }
  return s;
}

void unpackAfter(Job& job, const char* src, void* buf, MPI_Datatype t, long count, MPI_Comm comm) {
  const size_t size = typeSize(t);
  const ptrdiff_t extent = extentOf(t);
  MPI_Datatype own = MPI_DATATYPE_NULL;  // as in stage(): the program may free t meanwhile
  PMPI_Type_dup(t, &own);
  thenRun(job, [=]() mutable {
    unpackBlock(src, size, static_cast<char*>(buf), count, own, extent, comm);
    PMPI_Type_free(&own);
  });
}

}  // namespace sncl_mpi
