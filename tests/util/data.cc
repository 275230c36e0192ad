#include "tests/util/data.h"

#include <cmath>
#include <cstring>

namespace sncl::test {

double inputValue(snclRedOp_t op, int rank, int nranks, size_t i) {
  switch (op) {
    case snclProd: return (i % static_cast<size_t>(nranks)) == static_cast<size_t>(rank) ? 2.0 : 1.0;
    case snclMax:
    case snclMin: return static_cast<double>((static_cast<size_t>(rank) * 5 + i) % 11);
    case snclAvg: return static_cast<double>(nranks * ((i + rank) % 3));  // sums divide evenly by nranks? see expected
    default: return static_cast<double>((static_cast<size_t>(rank) + i) % 4);
  }
}

double expectedValue(snclRedOp_t op, int nranks, size_t i) {
  double acc = inputValue(op, 0, nranks, i);
  for (int r = 1; r < nranks; ++r) {
    double v = inputValue(op, r, nranks, i);
    switch (op) {
      case snclProd: acc *= v; break;
      case snclMax: acc = std::max(acc, v); break;
      case snclMin: acc = std::min(acc, v); break;
      default: acc += v;
    }
  }
  return op == snclAvg ? acc / nranks : acc;
}

void storeElement(snclDataType_t type, void* base, size_t i, double v) {
  switch (type) {
    case snclInt8: static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v); break;
    case snclUint8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); break;
    case snclInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case snclUint32: static_cast<uint32_t*>(base)[i] = static_cast<uint32_t>(v); break;
    case snclInt64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case snclUint64: static_cast<uint64_t*>(base)[i] = static_cast<uint64_t>(v); break;
    case snclFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case snclFloat64: static_cast<double*>(base)[i] = v; break;
    default: break;
  }
}

double loadElement(snclDataType_t type, const void* base, size_t i) {
  switch (type) {
    case snclInt8: return static_cast<const int8_t*>(base)[i];
    case snclUint8: return static_cast<const uint8_t*>(base)[i];
    case snclInt32: return static_cast<const int32_t*>(base)[i];
    case snclUint32: return static_cast<const uint32_t*>(base)[i];
    case snclInt64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case snclUint64: return static_cast<double>(static_cast<const uint64_t*>(base)[i]);
    case snclFloat32: return static_cast<const float*>(base)[i];
    case snclFloat64: return static_cast<const double*>(base)[i];
    default: return NAN;
  }
}

void fillInput(snclDataType_t type, snclRedOp_t op, int rank, int nranks, void* buf, size_t count) {
  for (size_t i = 0; i < count; ++i) storeElement(type, buf, i, inputValue(op, rank, nranks, i));
}

size_t countWrong(snclDataType_t type, snclRedOp_t op, int nranks, const void* buf, size_t count) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += loadElement(type, buf, i) != expectedValue(op, nranks, i);
  return wrong;
}

}  // namespace sncl::test
