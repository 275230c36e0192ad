#include "lib/error.h"

#include "lib/log.h"

namespace sncl {
namespace {
thread_local std::string tLastError;
}

Result recordError(Result code, std::string msg) {
  log::warn("{}: {}", resultName(code), msg);
  tLastError = std::move(msg);
  return code;
}

const char* lastError() { return tLastError.c_str(); }
void clearLastError() { tLastError.clear(); }

const char* resultName(Result r) {
  switch (r) {
    case snclSuccess: return "success";
    case snclSystemError: return "system error";
    case snclInternalError: return "internal error";
    case snclInvalidArgument: return "invalid argument";
    case snclInvalidUsage: return "invalid usage";
    case snclRemoteError: return "remote error";
    case snclInProgress: return "in progress";
    case snclTimeout: return "timeout";
    default: return "unknown result";
  }
}

}  // namespace sncl
