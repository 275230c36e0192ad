// Which MPI datatypes and ops sncl can serve. Anything else goes to PMPI.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <optional>

#include "sncl/sncl.h"

namespace sncl_mpi {

// The sncl type a reduction over t uses: predefined integer and floating types of a
// width sncl has. MPI_SHORT, MPI_LONG_DOUBLE, MPI_C_BOOL, MPI_LOGICAL, pair types: none.
inline std::optional<snclDataType_t> reduceType(MPI_Datatype t) {
  if (t == MPI_FLOAT) return snclFloat32;
  if (t == MPI_DOUBLE) return snclFloat64;
  if (t == MPI_INT || t == MPI_INT32_T) return snclInt32;
  if (t == MPI_UNSIGNED || t == MPI_UINT32_T) return snclUint32;
  if (t == MPI_LONG_LONG_INT || t == MPI_LONG_LONG || t == MPI_INT64_T) return snclInt64;
  if (t == MPI_UNSIGNED_LONG_LONG || t == MPI_UINT64_T) return snclUint64;
  if (t == MPI_LONG) return sizeof(long) == 8 ? snclInt64 : snclInt32;
  if (t == MPI_UNSIGNED_LONG) return sizeof(long) == 8 ? snclUint64 : snclUint32;
  if (t == MPI_SIGNED_CHAR || t == MPI_INT8_T) return snclInt8;
  if (t == MPI_UNSIGNED_CHAR || t == MPI_UINT8_T) return snclUint8;
  return std::nullopt;
}

inline std::optional<snclRedOp_t> reduceOp(MPI_Op op) {
  if (op == MPI_SUM) return snclSum;
  if (op == MPI_PROD) return snclProd;
  if (op == MPI_MAX) return snclMax;
  if (op == MPI_MIN) return snclMin;
  return std::nullopt;  // MPI_LAND, MPI_BOR, MPI_MAXLOC, user ops, ...
}

// Bytes per element when t is a predefined type stored without gaps (lb 0, extent ==
// size), so that data movement may copy it as bytes; 0 otherwise (derived types, pair
// types with padding such as MPI_DOUBLE_INT).
inline size_t plainBytes(MPI_Datatype t) {
  if (t == MPI_DATATYPE_NULL) return 0;
  int ni = 0, na = 0, nd = 0, combiner = 0;
  if (PMPI_Type_get_envelope(t, &ni, &na, &nd, &combiner) != MPI_SUCCESS || combiner != MPI_COMBINER_NAMED)
    return 0;
  MPI_Aint lb = 0, extent = 0;
  int size = 0;
  PMPI_Type_get_extent(t, &lb, &extent);
  PMPI_Type_size(t, &size);
  return lb == 0 && size > 0 && extent == size ? static_cast<size_t>(size) : 0;
}

}  // namespace sncl_mpi
