#include "lib/base/wait_policy.h"

#include "lib/base/hot_tls.h"

namespace sncl {
namespace {
SNCL_HOT_THREAD_LOCAL int noSpinDepth = 0;
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
