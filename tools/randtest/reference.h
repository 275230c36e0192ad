// The host reference of sncl-randtest: every rank's input and the expected result of a
// reduction, and the byte patterns of collectives that only move data.
//
// Integers take any value and wrap (two's complement, as lib/exec/reduce.h promises); the
// reference folds them in uint64 arithmetic masked to the type's width, and avg divides
// the wrapped sum by nranks truncating toward zero. Band/bor get denser/sparser bits, and
// the logical ops zeros at a density drawn per element, so that every outcome occurs. Floats are chosen so that every
// partial result is exact in the type whatever order the ranks combine them in:
// sum/avg/premulsum inputs are integer multiples of a power of two q whose magnitudes
// add up to at most 2^(mantissa+1) quanta, products are +-2^k whose exponents add up
// within the type's range, and max/min take any encoding (NaN, infinities, subnormals,
// signed zeros; max/min are exact anyway). Those results are compared exactly (any NaN
// matches any NaN; zeros compare with their sign). Avg scales the exact sum S by 1/nranks
// rounded to float, then rounds once, so its result may differ from S/nranks by half an
// ulp plus |S/nranks| * 2^-24; the check allows
//   |got - S/nranks| <= ulp_T(S/nranks) + |S/nranks| * 2^-23
// where ulp_T(x) is the spacing of type T at |x| (the subnormal spacing below the normal
// range).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tools/randtest/case.h"

namespace randtest {

class Reference {
 public:
  // salt makes the values of one call of one case; elements: how many reduction elements
  // the call reduces (count, or nranks * count for a reduce-scatter).
  Reference(const Call& call, uint64_t salt, int nranks, size_t elements);

  // The scalar rank passes to snclRedOpCreatePreMulSum (bytes of the call's type).
  const void* scalar(int rank) const { return scalars_[rank].bytes; }
  // Elements first.. of rank's input to the reduction.
  void fillInput(int rank, void* dst, size_t count, size_t first) const;
  // Elements of got that differ from the reduction at elements first.. (or, with rank >= 0,
  // from rank's input there); the first one is described in *note.
  size_t checkResult(const void* got, size_t count, size_t first, std::string* note, int rank = -1) const;

 private:
  struct Scalar {
    unsigned char bytes[8] = {};
  };
  const Call call_;
  const int nranks_;
  size_t period_;                                // the tables repeat after this many elements
  size_t elem_;
  std::vector<std::vector<unsigned char>> in_;  // per rank: period_ encoded inputs
  std::vector<unsigned char> outBytes_;         // encoded expected results
  std::vector<double> outFloat_;                // floats: the exact result (avg: exact mean)
  std::vector<uint64_t> outInt_;                // integers: expected bits
  std::vector<Scalar> scalars_;

  bool elementOk(const void* got, size_t i, size_t at, int rank) const;
  std::string describe(const void* got, size_t i, size_t at, int rank) const;
};

// Bytes of element i of stream (a rank's data, or one message), for collectives that only
// move data; every byte value and every bit pattern (NaNs included) occurs.
void fillPattern(uint64_t stream, size_t elem, void* dst, size_t count, size_t first);
size_t checkPattern(uint64_t stream, size_t elem, const void* got, size_t count, size_t first, std::string* note);

}  // namespace randtest
