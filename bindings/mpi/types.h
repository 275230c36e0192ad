// What the drop-in needs to know of an MPI datatype. The choice between sncl and PMPI uses
// only what MPI requires equal on every rank of a collective: the type signature (its size
// in bytes, and for a reduction its one predefined type) and the op. A rank's own layout
// (gaps, order, lower bound) only decides whether that rank's buffer is used in place or
// packed around the sncl call (bindings/mpi/staging.h), never whether sncl serves.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <optional>

#include "bindings/mpi/tls.h"
#include "sncl/sncl.h"

namespace sncl_mpi {

// Bytes of data in one element of t (MPI_Type_size; 0 for a type without data).
size_t typeSize(MPI_Datatype t);

// Where a run of count elements of t lies as plain bytes: at the buffer plus *offset (the
// type's true lower bound), when the type's data has no gaps and consecutive elements
// touch (extent == size, or one element). false: the run must be packed. *extent, when
// given, becomes extentOf(t) (one lookup of t for both).
bool denseLookup(MPI_Datatype t, long count, ptrdiff_t* offset, ptrdiff_t* extent);

// The answer for the predefined type this thread asked about last (a program passes one
// type call after call, for both buffers): read inline, without a call.
// Memos are constant-initialized (constinit, no handle constants in them): a thread-local
// that needs initializing at run time is reached through a call to its wrapper on every
// access.
struct DenseMemo {
  bool valid = false;
  MPI_Datatype type{};
  ptrdiff_t offset = 0, extent = 0;
  bool one = false, many = false;  // dense for count <= 1, for more
};
extern SNCL_MPI_THREAD_LOCAL constinit DenseMemo tDenseMemo;

inline bool dense(MPI_Datatype t, long count, ptrdiff_t* offset, ptrdiff_t* extent = nullptr) {
  const DenseMemo& m = tDenseMemo;
  if (!m.valid || t != m.type) return denseLookup(t, count, offset, extent);
  *offset = m.offset;
  if (extent) *extent = m.extent;
  return count <= 1 ? m.one : m.many;
}

// Bytes between consecutive elements of t (MPI_Type_get_extent).
ptrdiff_t extentOf(MPI_Datatype t);

// What an MPI reduction becomes in sncl.
struct Reduction {
  snclDataType_t type;
  snclRedOp_t op;
  size_t n;     // sncl elements (count times the predefined elements of one element of t)
  size_t elem;  // bytes of one sncl element
};
// Why reduction() refuses an op or type that a callback reduction (callback_reduce.h) serves.
extern const char* const kWhyPairOp;
extern const char* const kWhyType;
extern const char* const kWhyUserOp;

// reduction() worked out (the predefined type and op given, not the memo).
const char* reductionLookup(MPI_Datatype t, MPI_Op op, long count, Reduction* out);

// The predefined type and op this thread last served: a program reduces with the same pair
// call after call, and working the answer out again (the type's map, its facts, the op)
// was a fifth of the drop-in's own time in a small call. Derived types are worked out every
// time: their handles may be freed and reused.
struct ReductionMemo {
  bool valid = false;
  MPI_Datatype type{};
  MPI_Op op{};
  Reduction perCount{};  // n: sncl elements per element of type
};
extern SNCL_MPI_THREAD_LOCAL constinit ReductionMemo tReductionMemo;

// nullptr with *out filled when sncl reduces count elements of t with op, else why not.
// Depends on op and t's signature only: the same answer on every rank of a correct call.
inline const char* reduction(MPI_Datatype t, MPI_Op op, long count, Reduction* out) {
  const ReductionMemo& m = tReductionMemo;
  if (!m.valid || t != m.type || op != m.op || count < 0) return reductionLookup(t, op, count, out);
  *out = m.perCount;
  out->n *= static_cast<size_t>(count);
  return nullptr;
}

}  // namespace sncl_mpi
