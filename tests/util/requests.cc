#include "tests/util/requests.h"

namespace sncl::test {

Result completeAll(Transport& t, std::vector<RequestId> reqs, int64_t timeoutMs) {
  const Deadline deadline = Deadline::afterMs(timeoutMs);
  int idle = 0;
  while (!reqs.empty()) {
    bool progressed = false;
    for (size_t i = 0; i < reqs.size();) {
      bool done = false;
      Result r = t.test(reqs[i], &done);
      if (r != snclSuccess) return r;
      if (done) {
        reqs[i] = reqs.back();
        reqs.pop_back();
        progressed = true;
      } else {
        ++i;
      }
    }
    if (progressed) {
      idle = 0;
      continue;
    }
    if (deadline.expired()) return fail(snclTimeout, "test: requests did not complete in {} ms", timeoutMs);
    if (++idle > 16) t.wait(200);
  }
  return snclSuccess;
}
Result complete(Transport& t, RequestId req, int64_t timeoutMs) {
  return completeAll(t, {req}, timeoutMs);
}

}  // namespace sncl::test
