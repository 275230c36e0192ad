// SharedMaps (lib/transport/shared_mem.h), the mappings of peers' snclMemAlloc allocations,
// on this process's own allocations (mapped again through /proc/<pid>/fd as a peer would):
// what is mapped is the same memory; a freed allocation whose fd comes back with another
// file is mapped anew; when every slot holds a live allocation map() fails instead of
// dropping one a call may still use, and succeeds again once an owner freed one.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "lib/transport/shared_mem.h"

using namespace sncl;

namespace {

constexpr size_t kSlots = 256;  // SharedMaps::kMaxMappings

struct Alloc {
  char* p = nullptr;
  SharedRef ref;
};

Alloc allocate(size_t bytes) {
  Alloc a;
  REQUIRE(sharedAlloc(bytes, reinterpret_cast<void**>(&a.p)) == snclSuccess);
  REQUIRE(sharedFind(a.p, bytes, &a.ref));
  return a;
}

}  // namespace

TEST_CASE("SharedMaps: a mapping is the same memory; a reused fd is mapped anew", "[shared][maps]") {
  SharedMaps maps;
  Alloc a = allocate(10000);
  char* view = nullptr;
  REQUIRE(maps.map(a.ref, 100, &view) == snclSuccess);
  REQUIRE(view != a.p);
  a.p[7] = 42;
  CHECK(view[7] == 42);
  // An offset inside the allocation, and a buffer that overruns it.
  SharedRef inside = a.ref;
  inside.offset = 4096;
  char* at = nullptr;
  REQUIRE(maps.map(inside, 100, &at) == snclSuccess);
  at[1] = 9;
  CHECK(a.p[4097] == 9);
  CHECK(maps.map(inside, a.ref.allocBytes, &at) == snclInvalidArgument);
  // Freed, then the same fd number holds a new allocation: the old mapping must not answer.
  const int32_t fd = a.ref.fd;
  REQUIRE(sharedFree(a.p) == snclSuccess);
  Alloc b = allocate(10000);
  REQUIRE(b.ref.fd == fd);  // the lowest free descriptor comes back
  REQUIRE(b.ref.ino != a.ref.ino);
  b.p[7] = 5;
  REQUIRE(maps.map(b.ref, 100, &view) == snclSuccess);
  CHECK(view[7] == 5);
  // The stale reference no longer opens: the inode check refuses it.
  CHECK(maps.map(a.ref, 100, &view) != snclSuccess);
  CHECK(sharedFree(b.p) == snclSuccess);
}

TEST_CASE("SharedMaps: full of live allocations it fails, and recovers once some are freed", "[shared][maps]") {
  SharedMaps maps;
  std::vector<Alloc> live;
  for (size_t i = 0; i < kSlots; ++i) {
    live.push_back(allocate(64));
    char* view = nullptr;
    REQUIRE(maps.map(live.back().ref, 64, &view) == snclSuccess);
  }
  Alloc extra = allocate(64);
  char* view = nullptr;
  CHECK(maps.map(extra.ref, 64, &view) == snclSystemError);
  // Every mapping made so far still works: none was dropped to make room.
  for (size_t i = 0; i < live.size(); i += 37) {
    REQUIRE(maps.map(live[i].ref, 64, &view) == snclSuccess);
    live[i].p[3] = 77;
    CHECK(view[3] == 77);
  }
  // Freed allocations give their slots back (their fds now refer to nothing).
  for (size_t i = 0; i < 3; ++i) REQUIRE(sharedFree(live[i].p) == snclSuccess);
  REQUIRE(maps.map(extra.ref, 64, &view) == snclSuccess);
  extra.p[0] = 11;
  CHECK(view[0] == 11);
  for (size_t i = 3; i < live.size(); ++i) CHECK(sharedFree(live[i].p) == snclSuccess);
  CHECK(sharedFree(extra.p) == snclSuccess);
}
