// One collective call, as the API validated it: what, how much, which dtype and op.
#pragma once

#include <cstddef>

#include "lib/planner.h"
#include "sncl/sncl.h"

namespace sncl {

struct CollOp {
  CollType coll = CollType::AllReduce;
  const void* input = nullptr;
  void* output = nullptr;
  size_t count = 0;
  snclDataType_t dtype = snclFloat32;
  snclRedOp_t op = snclSum;
};

}  // namespace sncl
