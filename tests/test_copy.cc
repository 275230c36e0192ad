// The data paths' copies (lib/base/copy.h) against the bytes they must produce: random
// sizes (zero, odd, prime, around the 1 KiB and 2 KiB switches, up to 300 KiB) at every
// source and destination offset within a line, with guard bytes on both sides of the
// destination. ctest runs it twice, with SNCL_FAST_STRINGS=1 and =0, so that both ways
// copyCached can copy are checked on a CPU that has either.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "lib/base/copy.h"
#include "tests/util/shared_calls.h"

using namespace sncl;

namespace {

constexpr size_t kGuard = 64;

// Copies bytes with copy from src offset so to dst offset do, then checks the copy and the
// guards; returns the first wrong index or SIZE_MAX.
template <class Copy>
size_t checkCopy(Copy copy, size_t bytes, size_t so, size_t dof, std::mt19937_64& rng) {
  std::vector<unsigned char> src(bytes + 128), dst(bytes + 128 + 2 * kGuard, 0xA5);
  for (auto& b : src) b = static_cast<unsigned char>(rng());
  unsigned char* d = dst.data() + kGuard + dof;
  copy(d, src.data() + so, bytes);
  for (size_t i = 0; i < bytes; ++i)
    if (d[i] != src[so + i]) return i;
  for (unsigned char* p = dst.data(); p < d; ++p)
    if (*p != 0xA5) return bytes + 1;
  for (unsigned char* p = d + bytes; p < dst.data() + dst.size(); ++p)
    if (*p != 0xA5) return bytes + 2;
  return SIZE_MAX;
}

std::vector<size_t> sizes(std::mt19937_64& rng) {
  constexpr size_t fast = kFastStringsMinBytes;
  std::vector<size_t> out = {0, 1, 2, 3, 7, 15, 16, 17, 63, 64, 65, 127, 128, 129, fast - 3, fast - 1, fast, fast + 1,
                             2039, 2047, 2048, 2049, 4093, 4096, 65521, 65536, 262139, 300000};
  for (int i = 0; i < 40; ++i) out.push_back(rng() % 70000);
  return out;
}

}  // namespace

TEST_CASE("copies produce the source's bytes at every size and offset, nothing outside", "[copy]") {
  const char* forced = std::getenv("SNCL_FAST_STRINGS");
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // The override must take effect, or the run checks one path twice.
  if (forced) CHECK(copiesUseFastStrings() == (std::string(forced) != "0"));
#endif
  INFO("SNCL_FAST_STRINGS=" << (forced ? forced : "(unset)") << ", rep movsb: " << copiesUseFastStrings());
  std::mt19937_64 rng(test::shared::testSeed());
  for (size_t bytes : sizes(rng)) {
    const size_t so = rng() % 64, dof = rng() % 64;
    INFO(bytes << " bytes, source offset " << so << ", destination offset " << dof);
    CHECK(checkCopy(copyCached, bytes, so, dof, rng) == SIZE_MAX);
    CHECK(checkCopy(copyNonTemporal, bytes, so, dof, rng) == SIZE_MAX);
  }
  // Every pair of offsets within a line, at the sizes where copyCached changes its way.
  for (size_t bytes : {kFastStringsMinBytes - 24, kFastStringsMinBytes, size_t{2048}, size_t{5000}})
    for (size_t so = 0; so < 64; so += 8)
      for (size_t dof = 0; dof < 64; dof += 8) {
        INFO(bytes << " bytes, source offset " << so << ", destination offset " << dof);
        REQUIRE(checkCopy(copyCached, bytes, so, dof, rng) == SIZE_MAX);
      }
}
