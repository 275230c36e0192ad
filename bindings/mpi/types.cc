#include "bindings/mpi/types.h"

#include <vector>

#include "bindings/mpi/common.h"

namespace sncl_mpi {
namespace {

// What a call asks of its type: size, extent and true extent. A predefined type never
// changes and is never freed, so a thread asks MPI once per predefined type it uses (a
// small call asked up to eleven times per call); a derived one may be freed and its handle
// reused, so it is asked every time.
struct Facts {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  int size = 0;
  bool named = false;
  MPI_Aint lb = 0, extent = 0, trueLb = 0, trueExtent = 0;
};

Facts ask(MPI_Datatype t) {
  Facts f;
  f.type = t;
  int ni = 0, na = 0, nd = 0, combiner = 0;
  f.named = PMPI_Type_get_envelope(t, &ni, &na, &nd, &combiner) == MPI_SUCCESS && combiner == MPI_COMBINER_NAMED;
  if (PMPI_Type_size(t, &f.size) != MPI_SUCCESS || f.size < 0) f.size = 0;
  PMPI_Type_get_extent(t, &f.lb, &f.extent);
  PMPI_Type_get_true_extent(t, &f.trueLb, &f.trueExtent);
  return f;
}

const Facts& factsOf(MPI_Datatype t) {
  constexpr size_t kKept = 16;
  SNCL_MPI_THREAD_LOCAL Facts kept[kKept];
  SNCL_MPI_THREAD_LOCAL size_t next = 0;
  SNCL_MPI_THREAD_LOCAL size_t hit = 0;  // the entry found last: a program uses one type call after call
  SNCL_MPI_THREAD_LOCAL Facts derived;
  if (kept[hit].type == t && t != MPI_DATATYPE_NULL) return kept[hit];
  for (size_t i = 0; i < kKept; ++i)
    if (kept[i].type == t && t != MPI_DATATYPE_NULL) return kept[hit = i];
  Facts f = ask(t);
  if (!f.named) return derived = f;
  hit = next++ % kKept;
  kept[hit] = f;
  return kept[hit];
}

// The one predefined type of t's type map (every constructor's inner types, recursively),
// or nullopt when it has several. Named types answer themselves, pair types included.
std::optional<MPI_Datatype> baseOf(MPI_Datatype t, int depth) {
  if (depth == 0 && factsOf(t).named) return t;
  int ni = 0, na = 0, nd = 0, combiner = 0;
  if (depth > 16 || PMPI_Type_get_envelope(t, &ni, &na, &nd, &combiner) != MPI_SUCCESS) return std::nullopt;
  if (combiner == MPI_COMBINER_NAMED) return t;
  std::vector<int> ints(static_cast<size_t>(ni) + 1);
  std::vector<MPI_Aint> addrs(static_cast<size_t>(na) + 1);
  std::vector<MPI_Datatype> inner(static_cast<size_t>(nd) + 1, MPI_DATATYPE_NULL);
  if (nd < 1 || PMPI_Type_get_contents(t, ni, na, nd, ints.data(), addrs.data(), inner.data()) != MPI_SUCCESS)
    return std::nullopt;
  std::optional<MPI_Datatype> base;
  bool mixed = false;
  for (int i = 0; i < nd; ++i) {
    const auto b = mixed ? std::nullopt : baseOf(inner[i], depth + 1);
    mixed = mixed || !b || (base && *base != *b);
    base = b;
    int ii = 0, ia = 0, id = 0, c = 0;
    PMPI_Type_get_envelope(inner[i], &ii, &ia, &id, &c);
    if (c != MPI_COMBINER_NAMED) PMPI_Type_free(&inner[i]);  // get_contents hands out copies of derived types
  }
  return mixed ? std::nullopt : base;
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

const char* const kWhyPairOp = "MAXLOC/MINLOC on a pair type";
const char* const kWhyType = "datatype sncl cannot reduce";
const char* const kWhyUserOp = "user-defined op";

size_t typeSize(MPI_Datatype t) {
  if (t == MPI_DATATYPE_NULL) return 0;
  return static_cast<size_t>(factsOf(t).size);
}

ptrdiff_t extentOf(MPI_Datatype t) {
  if (t == MPI_DATATYPE_NULL) return 0;
  return factsOf(t).extent;
}

SNCL_MPI_THREAD_LOCAL constinit DenseMemo tDenseMemo;

bool denseLookup(MPI_Datatype t, long count, ptrdiff_t* offset, ptrdiff_t* extent) {
  if (t == MPI_DATATYPE_NULL) return false;
  const Facts& f = factsOf(t);
  *offset = f.trueLb;
  if (extent) *extent = f.extent;
  const bool one = f.size > 0 && f.trueExtent == f.size, many = one && f.extent == f.size;
  if (f.named) tDenseMemo = {true, t, f.trueLb, f.extent, one, many};  // derived handles may be freed and reused
  return count <= 1 ? one : many;
}

SNCL_MPI_THREAD_LOCAL constinit ReductionMemo tReductionMemo;

const char* reductionLookup(MPI_Datatype t, MPI_Op op, long count, Reduction* out) {
  if (op == MPI_MAXLOC || op == MPI_MINLOC) return kWhyPairOp;
  if (t == MPI_DATATYPE_NULL) return "datatype";
  const auto base = baseOf(t, 0);
  const auto type = base ? reduceType(*base) : std::nullopt;
  const bool bitwise = op == MPI_BAND || op == MPI_BOR || op == MPI_BXOR;
  const snclDataType_t st = type ? *type : snclUint8;
  if (!type && !(bitwise && base && *base == MPI_BYTE)) return kWhyType;  // MPI: bitwise ops on bytes
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
  else return kWhyUserOp;
  if (o >= snclBand && !isInteger(st)) return "bitwise or logical op on a floating type";
  if (count < 0) return "negative count";
  const size_t elem = typeBytes(st);
  *out = Reduction{st, o, static_cast<size_t>(count) * typeSize(t) / elem, elem};
  if (factsOf(t).named) tReductionMemo = {true, t, op, Reduction{st, o, typeSize(t) / elem, elem}};
  return nullptr;
}

}  // namespace sncl_mpi
