#include "tests/util/bus_ranks.h"

#include <cstdlib>
#include <algorithm>
#include <random>
#include <thread>

namespace sncl::test {

std::vector<snclComm_t> busComms(int nranks, const std::string& faults) {
  setenv("SNCL_TRANSPORT", "bus", 1);
  if (faults.empty()) unsetenv("SNCL_FAULTS");
  else setenv("SNCL_FAULTS", faults.c_str(), 1);
  std::vector<snclComm_t> comms(nranks, nullptr);
  const snclResult_t r = snclCommInitAll(comms.data(), nranks, nullptr);
  unsetenv("SNCL_FAULTS");
  unsetenv("SNCL_TRANSPORT");
  if (r != snclSuccess) comms.clear();
  return comms;
}

void onEveryRank(int nranks, const std::function<void(int rank)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

void destroyAll(std::vector<snclComm_t>& comms) {
  for (snclComm_t& c : comms)
    if (c) snclCommDestroy(c), c = nullptr;
}

double lastCallUs(snclComm_t comm) {
  double last = -1;
  if (snclBusModeledTimeUs(comm, &last, nullptr) != snclSuccess) return -1;
  return last;
}

Span lastCallSpan(snclComm_t comm) {
  Span s;
  if (snclBusLastCallSpanUs(comm, &s.start, &s.end) != snclSuccess) s = {-1, -1};
  return s;
}

double collectiveUs(const std::vector<Span>& spans) {
  double start = 0, end = 0;
  for (const Span& s : spans) start = std::max(start, s.start), end = std::max(end, s.end);
  return end - start;
}

std::string topologyPath(const char* name) {
  std::string here = __FILE__;
  return here.substr(0, here.rfind("/tests/")) + "/topologies/" + name;
}

std::vector<float> randomFloats(int rank, size_t count, uint64_t salt) {
  std::mt19937 rng(uint32_t(1234 + rank + 977 * salt));
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<RankOutcome> allReduceFloats(std::vector<snclComm_t>& comms, size_t count, bool inPlace, uint64_t salt) {
  std::vector<RankOutcome> res(comms.size());
  onEveryRank(int(comms.size()), [&](int r) {
    std::vector<float> in = randomFloats(r, count, salt);
    res[r].out.assign(count, 0.0f);
    if (inPlace) res[r].out = in;
    res[r].result = snclAllReduce(inPlace ? res[r].out.data() : in.data(), res[r].out.data(), count, snclFloat32,
                                  snclSum, comms[r], nullptr);
    if (res[r].result != snclSuccess) res[r].message = snclGetLastError(comms[r]);
  });
  return res;
}

}  // namespace sncl::test
