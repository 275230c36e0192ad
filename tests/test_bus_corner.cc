// The emulated bus's deadlock corner (issue 19): 16 ranks, direct All-Reduce of 1 MiB on
// topologies/supernode-4x4.json, with bus chunks of 64 KiB and 32 KiB (SNCL_BUS_CHUNK_BYTES).
// Ranks are processes; SNCL_TIMEOUT_MS turns a deadlock into an error, and the launcher
// kills whatever still runs at its deadline, so a hang fails the test instead of stalling it.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sncl/sncl.h"
#include "tests/util/data.h"
#include "tests/util/launcher.h"

using namespace sncl;

namespace {

constexpr int kRanks = 16;
constexpr size_t kCount = (size_t(1) << 20) / sizeof(float);  // 1 MiB of float32
constexpr int kIterations = 3;

std::string topologyPath(const char* name) {
  const std::string here = __FILE__;
  return here.substr(0, here.rfind("/tests/")) + "/topologies/" + name;
}

}  // namespace

TEST_CASE("bus corner: 16 ranks, direct 1 MiB All-Reduce on supernode-4x4, 64K and 32K chunks", "[bus]") {
  const std::string topo = topologyPath("supernode-4x4.json");
  for (const char* chunk : {"64K", "32K"}) {
    INFO("SNCL_BUS_CHUNK_BYTES " << chunk);
    // Set before the fork: every rank process inherits them.
    setenv("SNCL_TRANSPORT", "bus", 1);
    setenv("SNCL_TOPO_FILE", topo.c_str(), 1);
    setenv("SNCL_ALGO", "direct", 1);
    setenv("SNCL_BUS_CHUNK_BYTES", chunk, 1);
    setenv("SNCL_TIMEOUT_MS", "20000", 1);
    auto exits = test::runRanks(
        kRanks,
        [&](int rank, int nranks, const snclUniqueId& id) {
          snclComm_t comm;
          if (snclCommInitRank(&comm, nranks, id, rank) != snclSuccess) {
            fprintf(stderr, "rank %d: init failed: %s\n", rank, snclGetLastError(nullptr));
            return 2;
          }
          std::vector<float> in(kCount), out(kCount);
          test::fillInput(snclFloat32, snclSum, rank, nranks, in.data(), kCount);
          int rc = 0;
          for (int it = 0; it < kIterations && rc == 0; ++it) {
            std::fill(out.begin(), out.end(), -1.0f);
            snclResult_t r = snclAllReduce(in.data(), out.data(), kCount, snclFloat32, snclSum, comm, nullptr);
            const size_t wrong = r == snclSuccess ? test::countWrong(snclFloat32, snclSum, nranks, out.data(), kCount) : kCount;
            if (r != snclSuccess || wrong) {
              fprintf(stderr, "rank %d iteration %d: result %d, %zu wrong: %s\n", rank, it, int(r), wrong,
                      snclGetLastError(comm));
              rc = 3;
            }
          }
          snclCommDestroy(comm);
          return rc;
        },
        /*timeoutMs=*/50000);
    for (const char* name : {"SNCL_TRANSPORT", "SNCL_TOPO_FILE", "SNCL_ALGO", "SNCL_BUS_CHUNK_BYTES"}) unsetenv(name);
    CHECK(test::allSucceeded(exits));
  }
}
