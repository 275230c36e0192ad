// Memory the ranks of one host share (snclMemAlloc/snclMemFree): each allocation is a
// memfd mapped into this process and kept open, so a peer process on the host maps the
// same pages through /proc/<pid>/fd/<fd> (checked against the file's inode). Collectives
// whose buffers all lie in such allocations read and write peers' buffers in place
// (lib/exec/shared_colls.h) instead of copying them through the transport.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lib/base/error.h"

namespace sncl {

// Where a peer process finds a buffer of this one: the allocation's file and the buffer's
// offset in it. ino is the check that /proc/<pid>/fd/<fd> still is that allocation.
struct SharedRef {
  int32_t pid = 0;
  int32_t fd = -1;
  uint64_t ino = 0;
  uint64_t allocBytes = 0;  // of the whole allocation (what a peer maps)
  uint64_t offset = 0;      // of the buffer in it
};

// A shared allocation of at least bytes (> 0), page-aligned, faulted in here.
Result sharedAlloc(size_t bytes, void** out);
// Frees one; nullptr is a no-op; any other pointer is InvalidArgument.
Result sharedFree(void* ptr);
// Whether [ptr, ptr + bytes) lies within one shared allocation of this process; fills ref.
bool sharedFind(const void* ptr, size_t bytes, SharedRef* ref);

// Maps the peers' allocations this process reads and writes: one mapping per allocation,
// kept until the cache goes or its owner freed it (its fd holds another file now). A
// mapping in use is never dropped: when all slots are taken, only the mappings of freed
// allocations go (a correct program has no call in flight on those), else map() fails.
// Used by one thread at a time (a comm's calls).
class SharedMaps {
 public:
  SharedMaps() = default;
  SharedMaps(const SharedMaps&) = delete;
  SharedMaps& operator=(const SharedMaps&) = delete;
  ~SharedMaps();
  // The address in this process of [ref.offset, +bytes) of the allocation ref names.
  Result map(const SharedRef& ref, size_t bytes, char** out);

 private:
  struct Mapping {
    int32_t pid = 0;
    int32_t fd = -1;
    uint64_t ino = 0;
    char* base = nullptr;
    size_t bytes = 0;
  };
  static constexpr size_t kMaxMappings = 256;
  void drop(Mapping& m);
  Mapping* freeSlot();  // nullptr: every slot holds a live allocation
  Mapping maps_[kMaxMappings];
  size_t count_ = 0;  // slots ever used; dropped ones have base nullptr
};

// Whether this process can map peer pid's allocations: opens /proc/<pid>/fd/<fd> of a
// probe allocation that peer made (setup), true if it is the file with inode ino.
bool sharedProbe(const SharedRef& ref);

}  // namespace sncl
