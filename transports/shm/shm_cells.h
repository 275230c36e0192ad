// The shm transport's cells (LocalCells, lib/transport/transport.h): two per rank at the
// end of its segment (layout.h), mapped by every peer at setup. A call needs no message and
// no system call while the peers are quick: a rank writes its cell, then the call number;
// peers poll that number. Waiting beyond a spin sleeps on the rank's doorbell (the one its
// FIFOs use), which a publisher rings only when the rank announced that it sleeps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lib/transport/transport.h"
#include "transports/shm/fifo.h"
#include "transports/shm/layout.h"

namespace sncl::shm {

class ShmTransport;

class ShmCells final : public LocalCells {
 public:
  struct Rank {
    char* area = nullptr;  // the rank's cells in this process's mapping
    size_t stride = 0;     // of one cell (the rank's own cellBytes decides it)
    DoorbellRef bell;      // rung after this rank's publish when the rank sleeps
  };
  // ranks: every rank of the comm, this one included; cellBytes: the comm's agreed payload.
  void init(ShmTransport* transport, int rank, size_t cellBytes, std::vector<Rank> ranks);
  bool active() const { return cellBytes() != 0; }

  void publish(uint64_t call, uint64_t desc) override;
  void wait(int rank, uint64_t call, int64_t maxMicros) override;
  Result peerState(int rank) override;
  bool sharedBuffers() const override;
  Result mapShared(const SharedRef& ref, size_t bytes, char** out) override;

 private:
  ShmTransport* transport_ = nullptr;
  int rank_ = -1;
  std::vector<DoorbellRef> bells_;  // by rank
};

}  // namespace sncl::shm
