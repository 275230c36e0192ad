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
struct DenseMemo {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  ptrdiff_t offset = 0, extent = 0;
  bool one = false, many = false;  // dense for count <= 1, for more
};
extern SNCL_MPI_THREAD_LOCAL DenseMemo tDenseMemo;

inline bool dense(MPI_Datatype t, long count, ptrdiff_t* offset, ptrdiff_t* extent = nullptr) {
  const DenseMemo& m = tDenseMemo;
  if (t != m.type || t == MPI_DATATYPE_NULL) return denseLookup(t, count, offset, extent);
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

// nullptr with *out filled when sncl reduces count elements of t with op, else why not.
// Depends on op and t's signature only: the same answer on every rank of a correct call.
const char* reduction(MPI_Datatype t, MPI_Op op, long count, Reduction* out);

}  // namespace sncl_mpi
