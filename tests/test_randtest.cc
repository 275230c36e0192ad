// Runs tools/sncl-randtest for a fixed time per transport and seed (docs/testing.md):
// any wrong element, error or hang fails. Sanitized builds run a shorter while.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr const char* kSeconds = "4";
constexpr const char* kMaxBytes = "2M";
#else
constexpr const char* kSeconds = "6";
constexpr const char* kMaxBytes = "6M";  // past the 2 MiB per-peer FIFO that direct schedules overflowed
#endif

// Runs the tool; returns its exit status and its last line (the summary).
int runTool(const std::string& args, std::string* summary) {
  const std::string cmd = std::string(SNCL_RANDTEST_PATH) + " --seconds " + kSeconds + " --max-bytes " + kMaxBytes + " " +
                          "--shrink-seconds 60 " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char line[4096];
  std::string last, all;
  while (fgets(line, sizeof line, p)) last = line, all += line;  // bounded: the tool stops itself
  const int status = pclose(p);
  *summary = last;
  if (status != 0) fprintf(stderr, "%s\n%s", cmd.c_str(), all.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("randtest: random collectives match the host reference", "[randtest][process]") {
  // Seeds per transport; ofi runs one mixed (virtual hosts) seed: its setup is slower.
  const struct {
    const char* transport;
    const char* seed;
  } runs[] = {{"shm", "1"}, {"shm", "2"}, {"bus", "3"}, {"bus", "4"}, {"mixed", "5"}};
  for (const auto& run : runs) {
    INFO("transport " << run.transport << " seed " << run.seed);
    std::string summary;
    const int rc = runTool(std::string("--transport ") + run.transport + " --seed " + run.seed, &summary);
    INFO(summary);
    CHECK(rc == 0);
    CHECK(summary.find(" 0 wrong, 0 errors, 0 hangs") != std::string::npos);
  }
}
