#include "lib/base/error.h"

#include "lib/base/log.h"

namespace sncl {
namespace {
thread_local std::string tLastError;
thread_local int tExpected = 0;
}  // namespace

ExpectedErrors::ExpectedErrors() { ++tExpected; }
ExpectedErrors::~ExpectedErrors() { --tExpected; }

Result recordError(Result code, std::string msg) {
  if (tExpected) log::info(log::Subsys::Fault, "{}: {}", resultName(code), msg);
  else log::warn("{}: {}", resultName(code), msg);
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
