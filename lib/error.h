// The one error mechanism inside sncl: functions return snclResult_t; the first place that
// sees a failure records a message with fail(), which the C API hands out through
// snclGetLastError.
#pragma once

#include <fmt/format.h>

#include <string>

#include "sncl/sncl.h"

namespace sncl {

using Result = snclResult_t;

// Records msg as this thread's last error and logs it at WARN; returns code.
Result recordError(Result code, std::string msg);
const char* lastError();
void clearLastError();

template <class... A>
Result fail(Result code, fmt::format_string<A...> f, A&&... a) {
  return recordError(code, fmt::format(f, std::forward<A>(a)...));
}

const char* resultName(Result r);

}  // namespace sncl

#define SNCL_CHECK(expr)                           \
  do {                                             \
    ::sncl::Result sncl_r_ = (expr);               \
    if (sncl_r_ != snclSuccess) return sncl_r_;    \
  } while (0)
