// A served call's buffers as sncl sees them: plain bytes. A buffer whose datatype lays its
// data out without gaps is used where it is; any other layout (vector, indexed, struct,
// resized, pair types with padding) is packed (PMPI_Pack) into a copy the call's Job owns
// before the call, and unpacked into the caller's buffer once the call ran. Every rank
// thus makes the same call with the same byte counts whatever its own layout.
//
// Cost: a packed side costs one copy through MPI's type engine each way, which MPI itself
// pays for such types too (its own collectives pack or send per block); the dense case,
// every predefined type and contiguous or vector-without-gaps derived type, costs nothing
// and allocates nothing. The copies live in the call's Job, which a blocking call's thread
// reuses (newJob): repeated packed calls stop allocating once the storage has grown.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "bindings/mpi/common.h"
#include "bindings/mpi/types.h"

namespace sncl_mpi {

// A run of count elements of a type at disp elements (extents) from a buffer.
struct Block {
  long disp;
  long count;
};

// Where sncl reads or writes one buffer argument.
struct Staged {
  char* base = nullptr;  // the bytes of the block at displacement `first`
  size_t stride = 0;     // bytes per element of displacement (extent in place, size packed)
  long first = 0;        // the smallest displacement
  // Byte offset from base of the block at disp.
  size_t at(long disp) const { return static_cast<size_t>(disp - first) * stride; }
};

// Stages the blocks of t at buf: in place when dense, else a packed copy in *job (created
// when needed), packed now when `in`, unpacked into buf by job's after step when `out`.
Staged stage(std::unique_ptr<Job>& job, const void* buf, MPI_Datatype t, std::span<const Block> blocks, bool in,
             bool out, MPI_Comm comm);
// One block of count elements at the start (no allocation: every fixed-count call comes
// here; a dense one, nearly all, without a call into staging.cc).
inline Staged stage(std::unique_ptr<Job>& job, const void* buf, MPI_Datatype t, long count, bool in, bool out,
                    MPI_Comm comm) {
  ptrdiff_t offset = 0, extent = 0;
  if (dense(t, count, &offset, &extent))
    return Staged{static_cast<char*>(const_cast<void*>(buf)) + offset, static_cast<size_t>(extent), 0};
  const Block one[1] = {{0, count}};
  return stage(job, buf, t, std::span<const Block>(one), in, out, comm);
}

// After the call: count elements of t from packed bytes at src into buf (a result that
// sncl left at another place than MPI wants it, as an in-place Reduce_scatter's).
void unpackAfter(Job& job, const char* src, void* buf, MPI_Datatype t, long count, MPI_Comm comm);

// Whether stage() would pack (t's blocks not dense).
bool packs(MPI_Datatype t, std::span<const Block> blocks);

}  // namespace sncl_mpi
