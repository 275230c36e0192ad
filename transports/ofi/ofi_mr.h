// Memory registration the way a provider's mr_mode asks for it, and a cache of user-buffer
// registrations by address range: a buffer is registered on its first send and reused
// after, never registered per call.
//
// Limits: an entry is trusted until evicted, so a buffer freed and mapped again at the same
// address reuses the old registration. Software providers (tcp, udp, shm, sockets) do not
// pin pages and do not care; pinning providers (verbs, efa) install libfabric's own memory
// monitor (FI_MR_CACHE_MONITOR) under their fi_mr_reg, which is where unmapping is noticed.
#pragma once

#include <rdma/fi_domain.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lib/base/error.h"

namespace sncl::ofi {

class Registrar {
 public:
  Registrar() = default;
  ~Registrar() { clear(); }
  Registrar(const Registrar&) = delete;
  Registrar& operator=(const Registrar&) = delete;

  // cacheEntries bounds the user buffers registered at once (the cache never grows).
  void init(fid_domain* domain, fid_ep* ep, uint64_t mrMode, size_t cacheEntries);

  // Registers memory the transport owns (its slots) until clear().
  Result registerOwned(void* addr, size_t len, void** desc);

  // The descriptor of a registration covering [addr, addr + len): a cached one, or a new
  // one of the pages spanned, evicting the least recently used unreferenced entry when
  // full. The entry stays registered while referenced (acquire and addRef add one).
  Result acquire(const void* addr, size_t len, int* entry, void** desc);
  void addRef(int entry) { ++entries_[entry].refs; }
  void release(int entry) { --entries_[entry].refs; }

  // Deregisters everything; the endpoint must be closed (no operation uses the memory).
  void clear();

  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  struct Entry {
    uintptr_t begin = 0;
    uintptr_t end = 0;  // begin == end: unused
    fid_mr* mr = nullptr;
    void* desc = nullptr;
    uint64_t lastUse = 0;
    uint32_t refs = 0;
  };
  Result reg(const void* addr, size_t len, fid_mr** mr);

  fid_domain* domain_ = nullptr;
  fid_ep* ep_ = nullptr;
  uint64_t mrMode_ = 0;
  uint64_t nextKey_ = 1;  // requested keys must be unique in a domain unless FI_MR_PROV_KEY
  uint64_t clock_ = 0;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
  std::vector<Entry> entries_;
  std::vector<fid_mr*> owned_;
};

}  // namespace sncl::ofi
