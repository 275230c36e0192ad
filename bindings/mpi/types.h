// Which MPI datatypes and ops sncl can serve. Anything else goes to PMPI.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <optional>

#include "sncl/sncl.h"

namespace sncl_mpi {

// A datatype whose elements lie back to back without gaps: a predefined type stored
// without padding, or a derived type built from one by MPI_Type_dup, MPI_Type_contiguous
// or MPI_Type_(h)vector whose blocks touch (stride == blocklength, or one block).
struct Contig {
  size_t bytes;       // of one element of the type
  MPI_Datatype base;  // the predefined type it repeats
  size_t perElement;  // base elements in one element of the type
};
// nullopt for a type with gaps or another layout (indexed, struct, resized, ...).
std::optional<Contig> contiguous(MPI_Datatype t);

// What an MPI reduction becomes in sncl.
struct Reduction {
  snclDataType_t type;
  snclRedOp_t op;
  size_t n;     // sncl elements (count times the elements of a derived type)
  size_t elem;  // bytes of one sncl element
};
// nullptr with *out filled when sncl serves a reduction of count elements of t with op,
// else why not ("datatype", "op", "count", ...).
const char* reduction(MPI_Datatype t, MPI_Op op, long count, Reduction* out);

// Bytes of one element of a type sncl moves as bytes, or 0 (not contiguous).
inline size_t plainBytes(MPI_Datatype t) {
  const auto c = contiguous(t);
  return c ? c->bytes : 0;
}

}  // namespace sncl_mpi
