// Events on streams: many calls queued, one event after each, polled and waited on out of
// order; an event covering a failed call reports its error while an earlier one stays
// clean; misuse (destroyed events, destroyed streams, NULL) is refused. The comm's wait
// hook, which runs while a call waits for peers.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"
#include "tests/util/launcher.h"

using namespace sncl;

namespace {

// Call k's size: odd and growing, so later calls take longer than earlier ones.
size_t countOf(int k) { return 1 + static_cast<size_t>(k) * 4099; }
// Rank r's element i of call k, and the sum over n ranks (exact in int32).
int32_t valueOf(int rank, int k, size_t i) { return static_cast<int32_t>((rank + 1) * (k + 1) + i % 7); }
int32_t sumOf(int n, int k, size_t i) {
  int32_t s = 0;
  for (int r = 0; r < n; ++r) s += valueOf(r, k, i);
  return s;
}

// Queues `calls` all-reduces on one stream with an event after each, then checks events
// from the last to the first: a done event implies every earlier one is done, and when
// event k is done call k's result is final.
int manyCalls(int rank, int n, const snclUniqueId& id) {
  snclComm_t comm = nullptr;
  if (snclCommInitRank(&comm, n, id, rank) != snclSuccess) return 2;
  snclStream_t stream = nullptr;
  if (snclStreamCreate(&stream) != snclSuccess) return 3;
  const int calls = 40;
  std::vector<std::vector<int32_t>> in(calls), out(calls);
  std::vector<snclEvent_t> ev(calls);
  int bad = 0;
  for (int k = 0; k < calls; ++k) {
    in[k].resize(countOf(k));
    out[k].assign(countOf(k), -1);
    for (size_t i = 0; i < in[k].size(); ++i) in[k][i] = valueOf(rank, k, i);
    if (snclEventCreate(&ev[k]) != snclSuccess) return 4;
    // An event recorded before its call covers nothing of it yet: done already or soon.
    if (snclAllReduce(in[k].data(), out[k].data(), in[k].size(), snclInt32, snclSum, comm, stream) != snclSuccess)
      return 5;
    if (snclEventRecord(ev[k], stream) != snclSuccess) return 6;
  }
  auto resultOk = [&](int k) {
    for (size_t i = 0; i < out[k].size(); ++i)
      if (out[k][i] != sumOf(n, k, i)) return false;
    return true;
  };
  // Poll backwards until the last is done; ordering: once k is done, all j < k are.
  bool sawInProgress = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (snclEventQuery(ev[calls - 1]) == snclInProgress) {
    sawInProgress = true;
    for (int k = calls - 1; k >= 0; --k) {
      const snclResult_t r = snclEventQuery(ev[k]);
      if (r == snclSuccess) {
        for (int j = 0; j <= k; ++j) bad += snclEventQuery(ev[j]) != snclSuccess || !resultOk(j);
        break;
      }
      bad += r != snclInProgress;
    }
    if (std::chrono::steady_clock::now() > deadline) return 7;
  }
  // Waits out of order: the middle, then the first, then the last.
  for (int k : {calls / 2, 0, calls - 1}) bad += snclEventSynchronize(ev[k]) != snclSuccess || !resultOk(k);
  for (int k = 0; k < calls; ++k) bad += snclEventQuery(ev[k]) != snclSuccess || !resultOk(k);
  if (bad) std::fprintf(stderr, "rank %d: %d wrong event answers or results\n", rank, bad);
  if (!sawInProgress) std::fprintf(stderr, "rank %d: note: every call was done before the first poll\n", rank);
  // Re-recording moves the mark to what is queued now (nothing more): done.
  bad += snclEventRecord(ev[0], stream) != snclSuccess || snclEventQuery(ev[0]) != snclSuccess;
  for (auto e : ev) bad += snclEventDestroy(e) != snclSuccess;
  bad += snclStreamDestroy(stream) != snclSuccess;
  bad += snclCommDestroy(comm) != snclSuccess;
  return bad ? 1 : 0;
}

}  // namespace

TEST_CASE("events mark single calls of a stream, queried and waited out of order", "[events]") {
  for (int nranks : {2, 4}) {
    INFO("nranks " << nranks);
    CHECK(test::allSucceeded(test::runRanks(nranks, manyCalls)));
  }
}

TEST_CASE("an event covering a failed call reports its error; an earlier one stays clean", "[events][errors]") {
  auto exits = test::runRanks(2, [](int rank, int n, const snclUniqueId& id) {
    snclComm_t comm = nullptr;
    if (snclCommInitRank(&comm, n, id, rank) != snclSuccess) return 2;
    snclStream_t stream = nullptr;
    snclEvent_t before = nullptr, after = nullptr;
    if (snclStreamCreate(&stream) != snclSuccess || snclEventCreate(&before) != snclSuccess ||
        snclEventCreate(&after) != snclSuccess)
      return 3;
    int32_t x[64] = {}, y[64] = {};
    int bad = 0;
    bad += snclAllReduce(x, y, 64, snclInt32, snclSum, comm, stream) != snclSuccess;
    bad += snclEventRecord(before, stream) != snclSuccess;
    bad += snclEventSynchronize(before) != snclSuccess;
    if (rank == 0) {
      // Rank 1 never joins this one; revoking the comm stops it with a remote error.
      bad += snclAllReduce(x, y, 64, snclInt32, snclSum, comm, stream) != snclSuccess;
      bad += snclEventRecord(after, stream) != snclSuccess;
      bad += snclEventQuery(after) != snclInProgress;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      bad += snclEventQuery(after) != snclInProgress;
      bad += snclCommRevoke(comm, SNCL_REVOKE_DEFAULT) != snclSuccess;
      const snclResult_t r = snclEventSynchronize(after);
      if (r != snclRemoteError) std::fprintf(stderr, "event after the failed call: %s\n", snclGetErrorString(r));
      bad += r != snclRemoteError;
      bad += snclEventQuery(after) != snclRemoteError;  // stays failed
      bad += snclEventQuery(before) != snclSuccess;     // covers only the call that succeeded
    } else {
      // Stays connected meanwhile, so that the revoke (not a closed peer) ends the call.
      std::this_thread::sleep_for(std::chrono::seconds(2));
    }
    // Misuse: a NULL stream, a destroyed stream, a destroyed event.
    bad += snclEventRecord(before, nullptr) != snclInvalidArgument;
    bad += snclStreamSynchronize(stream) != (rank == 0 ? snclRemoteError : snclSuccess);
    bad += snclStreamDestroy(stream) != snclSuccess;
    bad += snclEventQuery(before) != snclInvalidUsage;
    bad += snclEventDestroy(before) != snclSuccess;
    bad += snclEventQuery(before) != snclInvalidArgument;
    bad += snclEventDestroy(before) != snclInvalidArgument;
    bad += snclEventDestroy(after) != snclSuccess;
    snclEvent_t fresh = nullptr;
    bad += snclEventCreate(&fresh) != snclSuccess || snclEventQuery(fresh) != snclSuccess;  // never recorded
    bad += snclEventSynchronize(fresh) != snclSuccess || snclEventDestroy(fresh) != snclSuccess;
    bad += snclEventCreate(nullptr) != snclInvalidArgument;
    if (rank == 0) snclCommAbort(comm);
    else snclCommDestroy(comm);
    if (bad) std::fprintf(stderr, "rank %d: %d wrong answers\n", rank, bad);
    return bad ? 1 : 0;
  });
  CHECK(test::allSucceeded(exits));
}

// The wait hook: called on the thread running the call while it waits for a late peer, never
// after it is removed; a NULL comm is refused.
TEST_CASE("the wait hook runs while a call waits for a peer, on the calling thread", "[events][hook]") {
  auto exits = test::runRanks(2, [](int rank, int n, const snclUniqueId& id) {
    snclComm_t comm = nullptr;
    if (snclCommInitRank(&comm, n, id, rank) != snclSuccess) return 2;
    struct Seen {
      int calls = 0;
      bool otherThread = false;
      std::thread::id caller = std::this_thread::get_id();
    } seen;
    auto hook = [](void* user) {
      auto* s = static_cast<Seen*>(user);
      ++s->calls;
      s->otherThread |= std::this_thread::get_id() != s->caller;
    };
    int bad = 0;
    bad += snclCommSetWaitHook(nullptr, hook, &seen) != snclInvalidArgument;
    int32_t x[16] = {}, y[16] = {};
    for (bool withHook : {true, false}) {
      if (rank == 0) bad += snclCommSetWaitHook(comm, withHook ? +hook : nullptr, &seen) != snclSuccess;
      // Rank 1 comes late, so rank 0 waits in its first step for a while.
      if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const int before = seen.calls;
      bad += snclAllReduce(x, y, 16, snclInt32, snclSum, comm, nullptr) != snclSuccess;
      if (rank == 0 && withHook && seen.calls == before) {
        std::fprintf(stderr, "the hook was not called while rank 0 waited 100 ms\n");
        ++bad;
      }
      if (rank == 0 && !withHook && seen.calls != before) {
        std::fprintf(stderr, "a removed hook was called %d times\n", seen.calls - before);
        ++bad;
      }
    }
    bad += seen.otherThread;
    bad += snclCommDestroy(comm) != snclSuccess;
    return bad ? 1 : 0;
  });
  CHECK(test::allSucceeded(exits));
}
