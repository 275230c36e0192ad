// snclMemAlloc/snclMemFree: host memory the ranks of a machine share (lib/transport/shared_mem.h).
#include "lib/api/api_checks.h"
#include "lib/transport/shared_mem.h"
#include "sncl/sncl.h"

SNCL_API snclResult_t snclMemAlloc(void** ptr, size_t size) {
  return sncl::sharedAlloc(size, ptr);
}

SNCL_API snclResult_t snclMemFree(void* ptr) {
  return sncl::sharedFree(ptr);
}
