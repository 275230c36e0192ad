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
  // Single-copy path (shm_single_copy.cc): messages of at least singleCopyMinBytes are read
  // by the receiver straight out of the sender's buffer (process_vm_readv, or memcpy
  // between threads of one process) instead of streaming through the FIFO. Used only when
  // every rank of the comm enables it and can read its peers (probed at setup).
  bool singleCopy = true;
  // For every message when the host runs more ranks than it has cores; with a core per
  // rank only in calls that exchange no reductions (Transport::callBegin's hints). Measured on 2
  // quiet cores (4 MiB, against the FIFO path; `mpirun --bind-to none`, snclMemAlloc
  // buffers, 2026-12-05): 8 ranks All-Gather 1.9x, Broadcast 2.3x, All-Reduce 1.5x faster;
  // 2 ranks All-Reduce 1.4-2x slower, since with a core per rank the FIFO's two copies
  // overlap the reduction, and a single-copy send waits for its reader.
  bool singleCopyAuto = false;
  // Oversubscribed: below ~256 KiB a process_vm_readv (~1.5 us a call, ~0.2 us a page
  // pinned) costs about what the FIFO's two in-cache copies cost; beyond the cache it
  // costs one copy instead of two.
  size_t singleCopyMinBytes = 256u << 10;
  // With a core per rank, the messages of calls that exchange no reductions (all but
  // All-Reduce, Reduce-Scatter and the scans: Reduce takes it) take it from
  // singleCopyMovesMinBytes to singleCopyMovesMaxBytes. 2 ranks on 2 cores, plain `mpirun
  // -np 2` (a core per rank), heap buffers, against the FIFO path (2026-12-07): Send/Recv
  // and All-to-All 1.2-2.4x faster from 32 KiB messages to 4 MiB, All-Gather 2x from 512
  // KiB, Broadcast 1.6-2.9x from 128 KiB, Reduce 1.4-1.6x at 32-128 KiB (even at 512 KiB,
  // 8% slower at 2 MiB); 16 KiB messages were as fast or slower. At 16 MiB and more, even, or slower where both ranks read
  // each other's memory at once.
  size_t singleCopyMovesMinBytes = 32u << 10;
  size_t singleCopyMovesMaxBytes = 4u << 20;
  // The sends of a group in which the rank also receives (CallHints::sendsAndReceives) take
  // it up to here instead: both ends of an exchange copy once, in parallel. Same setting,
  // 2026-12-08, sendrecv_perf against the 4 MiB limit: 8 MiB 925-1023 us against
  // 1346-1771, 16 MiB 2750-3713 against 4134-5266, 32 MiB even. A one-way send keeps the
  // FIFO, whose two copies run on both cores at once (pingpong_perf through single copy: 8
  // MiB 2225-2369 us against 1517-1551), and so do the collectives, which lost past 4 MiB
  // (a Gather's root copies every message alone: 32-64 MiB 1.2-1.5x slower).
  size_t singleCopyExchangeMaxBytes = 16u << 20;
  // A received message that is reduced rather than copied is read in pieces of this size
  // into a staging buffer, so that the reduction reads it from cache.
  size_t singleCopyPieceBytes = 128u << 10;

  // Cells of small collectives (shm_cells.cc, lib/exec/cells.*): payload bytes of a rank's
  // cell, the largest call per rank they take; 0: none. The comm uses the smallest of its
  // ranks' values, and only when every rank reaches every other through this transport.
  size_t cellBytes = 4096;
  // Collectives on buffers from snclMemAlloc read and write peers' buffers in place
  // (lib/exec/shared_colls.*): on when every rank can open its peers' allocations; needs
  // the cells (their descriptors travel there).
  bool sharedBuffers = true;
  // Messages of at least this many bytes from a shared allocation (or between threads of
  // one process) are copied once, by the receiver, out of the sender's buffer.
  size_t sharedMinBytes = 64u << 10;
  // Of the host's last-level cache (hwloc): single-copy messages whose two ends reach half
  // of it are copied with non-temporal stores; 0: unknown (lib/base/copy.h).
  uint64_t cacheBytes = 0;

  // SNCL_SHM_CELL_BYTES, SNCL_SHM_DIRECT (0: no shared buffers), SNCL_SHM_FIFO_BYTES, SNCL_SHM_SLOT_BYTES, SNCL_SHM_CMA (unset: singleCopyAuto;
  // 1: on; 0: off), SNCL_SHM_CMA_MIN_BYTES, SNCL_SHM_CMA_MOVES_MIN_BYTES, SNCL_SHM_CMA_MOVES_MAX_BYTES, SNCL_SHM_CMA_EXCHANGE_MAX_BYTES,
  // SNCL_SHM_CMA_PIECE_BYTES (K, M, G suffixes).
  static ShmOptions fromEnv();
};

std::unique_ptr<Transport> createShmTransport();  // options from the environment
std::unique_ptr<Transport> createShmTransport(const ShmOptions& options);
// What a comm holds (transports/builtin.cc): the same, and reset() starts it over (shm_reset.cc).
std::unique_ptr<Transport> createResettableShmTransport();

}  // namespace sncl
