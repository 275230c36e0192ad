#include "lib/base/wait_policy.h"

namespace sncl {
namespace {
thread_local int noSpinDepth = 0;
}  // namespace

int64_t WaitPolicy::spinHere() const {
  return noSpinDepth > 0 ? 0 : spinMicros;
}

NoSpinHere::NoSpinHere() {
  ++noSpinDepth;
}

NoSpinHere::~NoSpinHere() {
  --noSpinDepth;
}

}  // namespace sncl
