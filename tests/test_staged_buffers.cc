// Collectives on heap buffers between processes, through the ranks' staging areas
// (lib/exec/staged_colls.*): random calls (tests/util/shared_calls.h) on 2, 3, 4 and 8
// ranks, bit for bit against a rank-order reference, with staging parts drawn small (down
// to 64 bytes, so that calls run in many chunks of both parities, counts straddling them)
// or the default; in groups and on a stream; and the counters that show the calls were
// staged, also where a tuning file moves the crossover past which the schedule runs instead.
// test_shared_buffers.cc has a peer killed mid-loop and a split comm on heap buffers too.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "lib/comm/comm.h"
#include "sncl/sncl.h"
#include "tests/util/launcher.h"
#include "tests/util/shared_calls.h"

using namespace sncl;
using namespace sncl::test::shared;

namespace {

// SNCL_SHM_STAGE_BYTES for a run: a multiple of 256 (four parts of a multiple of 64 bytes)
// from 256 bytes to 256 KiB, or "" (the default, 2 MiB).
std::string drawStageBytes(uint64_t seed) {
  if (seed % 3 == 0) return "";
  return std::to_string(256 * (1 + (seed >> 8) % 1024));
}

}  // namespace

TEST_CASE("staged: random collectives on heap buffers across processes", "[staged][process]") {
  testSeed();
  for (int nranks : {2, 3, 4, 8}) {
    const uint64_t seed = testSeed() + uint64_t(nranks) * 0x51a9;
    const std::string stage = drawStageBytes(seed);
    INFO("nranks " << nranks << ", SNCL_SHM_STAGE_BYTES " << (stage.empty() ? "unset" : stage));
    printf("staged: %d ranks, SNCL_SHM_STAGE_BYTES=%s\n", nranks, stage.empty() ? "(unset)" : stage.c_str());
    LoopOptions opt;
    opt.sharedMem = false;
    opt.calls = nranks <= 4 ? 60 : 30;
    opt.draw.small = true;
    if (nranks == 8) opt.draw.maxRankBytes = opt.draw.maxTotalBytes = 1 << 20;
    auto exits = test::runRanks(nranks, [&](int rank, int n, const snclUniqueId& id) {
      if (!stage.empty()) setenv("SNCL_SHM_STAGE_BYTES", stage.c_str(), 1);
      return processRank(rank, n, id, seed, opt, true);
    }, 300000);
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("staged: calls in groups and on a stream", "[staged][process]") {
  testSeed();
  for (bool onStream : {false, true}) {
    INFO((onStream ? "on a stream" : "groups of 3 on the NULL stream"));
    LoopOptions opt;
    opt.sharedMem = false;
    opt.calls = 30;
    opt.onStream = onStream;
    opt.perGroup = onStream ? 1 : 3;
    opt.draw.maxRankBytes = 128 << 10;
    opt.draw.maxTotalBytes = 256 << 10;
    const uint64_t seed = testSeed() ^ (onStream ? 0x57e : 0x6e0);
    auto exits = test::runRanks(3, [&](int rank, int n, const snclUniqueId& id) {
      setenv("SNCL_SHM_STAGE_BYTES", "4096", 1);  // parts of 1 KiB: many chunks per call
      return processRank(rank, n, id, seed, opt, true);
    }, 300000);
    CHECK(test::allSucceeded(exits));
  }
}

// The planner's crossover (Tuning::stagedMaxBytes) decides which calls stage: a tuning file
// with random crossovers for 2 and 4 ranks, run on 2, 3 (the 2-rank entry applies) and 4
// ranks; the counters must show exactly the calls at or below it staged and the rest on the
// schedule, every result exact.
TEST_CASE("staged: the tuning's crossover decides which calls stage", "[staged][process]") {
  const uint64_t seed = testSeed() ^ 0xc705;
  std::mt19937_64 g(seed);
  const int64_t max2 = g() % 3 == 0 ? 0 : int64_t(g() % (192u << 10));
  const int64_t max4 = int64_t(g() % (192u << 10));
  char path[] = "/tmp/sncl_staged_tuning.XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  {
    std::ofstream f(path);
    f << "{\"version\": 1, \"staged_max_bytes\": {\"4\": " << max4 << ", \"2\": " << max2 << "}}\n";
  }
  for (int nranks : {2, 3, 4}) {
    const int64_t max = nranks < 4 ? max2 : max4;
    INFO("nranks " << nranks << ", staged up to " << max << " bytes per rank");
    printf("staged: %d ranks, tuning file stages up to %lld bytes per rank\n", nranks, (long long)max);
    LoopOptions opt;
    opt.sharedMem = false;
    opt.calls = 40;
    opt.draw.maxRankBytes = opt.draw.maxTotalBytes = 256 << 10;
    opt.stagedMaxBytes = max;
    // Calls past the crossover run the schedule, which reduces in its own order: with more
    // than two ranks only order-free reductions compare bit for bit.
    opt.draw.orderFree = nranks > 2;
    auto exits = test::runRanks(nranks, [&](int rank, int n, const snclUniqueId& id) {
      setenv("SNCL_TUNING_FILE", path, 1);
      setenv("SNCL_SHM_STAGE_BYTES", "16384", 1);
      return processRank(rank, n, id, seed + uint64_t(nranks), opt, true);
    }, 300000);
    CHECK(test::allSucceeded(exits));
  }
  unlink(path);
}
