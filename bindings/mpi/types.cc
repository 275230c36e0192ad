#include "bindings/mpi/types.h"

namespace sncl_mpi {
namespace {

bool isNamed(MPI_Datatype t) {
  int ni = 0, na = 0, nd = 0, combiner = 0;
  return PMPI_Type_get_envelope(t, &ni, &na, &nd, &combiner) == MPI_SUCCESS && combiner == MPI_COMBINER_NAMED;
}

// Layout check by the constructor (the outer check in contiguous() then rules out gaps at
// either end): a derived type of one predefined type whose pieces follow each other.
std::optional<Contig> walk(MPI_Datatype t, int depth) {
  int ni = 0, na = 0, nd = 0, combiner = 0;
  if (depth > 16 || PMPI_Type_get_envelope(t, &ni, &na, &nd, &combiner) != MPI_SUCCESS) return std::nullopt;
  if (combiner == MPI_COMBINER_NAMED) {
    MPI_Aint lb = 0, extent = 0;
    int size = 0;
    PMPI_Type_get_extent(t, &lb, &extent);
    PMPI_Type_size(t, &size);
    if (lb != 0 || size <= 0 || extent != size) return std::nullopt;  // MPI_DOUBLE_INT and the like
    return Contig{static_cast<size_t>(size), t, 1};
  }
  if (combiner != MPI_COMBINER_DUP && combiner != MPI_COMBINER_CONTIGUOUS && combiner != MPI_COMBINER_VECTOR &&
      combiner != MPI_COMBINER_HVECTOR)
    return std::nullopt;
  if (ni > 3 || na > 1 || nd != 1) return std::nullopt;
  int ints[3] = {0, 0, 0};
  MPI_Aint addrs[1] = {0};
  MPI_Datatype inner = MPI_DATATYPE_NULL;
  if (PMPI_Type_get_contents(t, ni, na, nd, ints, addrs, &inner) != MPI_SUCCESS) return std::nullopt;
  auto sub = walk(inner, depth + 1);
  if (!isNamed(inner)) PMPI_Type_free(&inner);  // get_contents hands out a copy of a derived type
  if (!sub) return std::nullopt;
  long pieces = 1;  // elements of inner in one element of t
  switch (combiner) {
    case MPI_COMBINER_DUP: break;
    case MPI_COMBINER_CONTIGUOUS: pieces = ints[0]; break;
    case MPI_COMBINER_VECTOR:  // count, blocklength, stride (in elements of inner)
      if (ints[0] > 1 && ints[2] != ints[1]) return std::nullopt;
      pieces = static_cast<long>(ints[0]) * ints[1];
      break;
    default:  // HVECTOR: count, blocklength; stride in bytes
      if (ints[0] > 1 && addrs[0] != static_cast<MPI_Aint>(ints[1] * sub->bytes)) return std::nullopt;
      pieces = static_cast<long>(ints[0]) * ints[1];
      break;
  }
  if (pieces <= 0) return std::nullopt;
  return Contig{sub->bytes * static_cast<size_t>(pieces), sub->base, sub->perElement * static_cast<size_t>(pieces)};
}

// The sncl type a reduction over a predefined type uses: integer and floating types of a
// width sncl has. MPI_SHORT, MPI_LONG_DOUBLE, MPI_C_BOOL, MPI_LOGICAL, pair types: none.
std::optional<snclDataType_t> reduceType(MPI_Datatype t) {
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

bool isInteger(snclDataType_t t) {
  return t == snclInt8 || t == snclUint8 || t == snclInt32 || t == snclUint32 || t == snclInt64 || t == snclUint64;
}

size_t typeBytes(snclDataType_t t) {
  switch (t) {
    case snclInt8: case snclUint8: return 1;
    case snclInt32: case snclUint32: case snclFloat32: return 4;
    default: return 8;
  }
}

}  // namespace

std::optional<Contig> contiguous(MPI_Datatype t) {
  if (t == MPI_DATATYPE_NULL) return std::nullopt;
  auto c = walk(t, 0);
  if (!c) return std::nullopt;
  // Whatever the constructors said: no gap before, inside or after the data.
  MPI_Aint lb = 0, extent = 0, tlb = 0, textent = 0;
  int size = 0;
  PMPI_Type_get_extent(t, &lb, &extent);
  PMPI_Type_get_true_extent(t, &tlb, &textent);
  PMPI_Type_size(t, &size);
  if (lb != 0 || tlb != 0 || size <= 0 || extent != size || textent != size || static_cast<size_t>(size) != c->bytes)
    return std::nullopt;
  return c;
}

const char* reduction(MPI_Datatype t, MPI_Op op, long count, Reduction* out) {
  if (op == MPI_MAXLOC || op == MPI_MINLOC) return "MAXLOC/MINLOC on a pair type";
  const auto c = contiguous(t);
  if (!c) return "datatype not contiguous";
  std::optional<snclDataType_t> type = reduceType(c->base);
  const bool bitwise = op == MPI_BAND || op == MPI_BOR || op == MPI_BXOR;
  if (!type && bitwise && c->base == MPI_BYTE) type = snclUint8;  // MPI defines bitwise ops on bytes
  if (!type) return "datatype sncl cannot reduce";
  snclRedOp_t o;
  if (op == MPI_SUM) o = snclSum;
  else if (op == MPI_PROD) o = snclProd;
  else if (op == MPI_MAX) o = snclMax;
  else if (op == MPI_MIN) o = snclMin;
  else if (op == MPI_BAND) o = snclBand;
  else if (op == MPI_BOR) o = snclBor;
  else if (op == MPI_BXOR) o = snclBxor;
  else if (op == MPI_LAND) o = snclLand;
  else if (op == MPI_LOR) o = snclLor;
  else if (op == MPI_LXOR) o = snclLxor;
  else return "user-defined op";
  if (o >= snclBand && !isInteger(*type)) return "bitwise or logical op on a floating type";
  if (count <= 0) return "count 0";
  *out = Reduction{*type, o, static_cast<size_t>(count) * c->perElement, typeBytes(*type)};
  return nullptr;
}

}  // namespace sncl_mpi
