// The one error mechanism inside sncl: functions return snclResult_t; the first place that
// sees a failure records a message with fail(), which the C API hands out through
// snclGetLastError.
#pragma once

#include <fmt/format.h>

#include <string>

#include "sncl/sncl.h"

namespace sncl {

using Result = snclResult_t;

// Records msg as this thread's last error and logs it at WARN (INFO inside an
// ExpectedErrors scope); returns code.
Result recordError(Result code, std::string msg);

// While one lives on this thread, failures are expected and handled by the caller (a
// side-channel poll finding that a peer which finished closed its connection): they are
// recorded as usual but logged at INFO, so that a clean run prints no warning.
class ExpectedErrors {
 public:
  ExpectedErrors();
  ~ExpectedErrors();
  ExpectedErrors(const ExpectedErrors&) = delete;
  ExpectedErrors& operator=(const ExpectedErrors&) = delete;
};
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
