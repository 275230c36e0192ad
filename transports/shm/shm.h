// The shared-memory transport: ranks on one machine exchange messages through FIFOs of
// slots in POSIX shared memory. See shm_transport.h for how it works.
#pragma once

#include <cstddef>
#include <memory>

#include "lib/transport/transport.h"

namespace sncl {

struct ShmOptions {
  size_t fifoBytes = 0;  // payload bytes of each FIFO (per directed pair); 0: share a per-rank budget
  size_t slotBytes = 0;  // payload bytes of one slot (rounded up to 4 KiB); 0: fifoBytes / 8

  // SNCL_SHM_FIFO_BYTES and SNCL_SHM_SLOT_BYTES (K, M, G suffixes).
  static ShmOptions fromEnv();
};

std::unique_ptr<Transport> createShmTransport();  // options from the environment
std::unique_ptr<Transport> createShmTransport(const ShmOptions& options);
// What a comm holds (transports/builtin.cc): the same, and reset() starts it over (shm_reset.cc).
std::unique_ptr<Transport> createResettableShmTransport();

}  // namespace sncl
