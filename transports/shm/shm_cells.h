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
  bool active() const { return cellBytes_ != 0; }

  size_t cellBytes() const override { return cellBytes_; }
  uint64_t beginCall() override { return ++calls_; }
  char* cell(int rank, uint64_t call) override { return payload(header(rank, call)); }
  uint64_t cellDesc(int rank, uint64_t call) override { return loadRelaxed(header(rank, call).desc); }
  void publish(uint64_t call, uint64_t desc) override;
  bool published(int rank, uint64_t call) override { return loadAcquire(header(rank, call).call) >= call; }
  void wait(int rank, uint64_t call, int64_t maxMicros) override;
  Result peerState(int rank) override;
  bool sharedBuffers() const override;
  Result mapShared(const SharedRef& ref, size_t bytes, char** out) override;

 private:
  CellHeader& header(int rank, uint64_t call) {
    const Rank& r = ranks_[static_cast<size_t>(rank)];
    return *reinterpret_cast<CellHeader*>(r.area + (call % kCellsPerRank) * r.stride);
  }
  static char* payload(CellHeader& h) { return reinterpret_cast<char*>(&h) + sizeof(CellHeader); }

  ShmTransport* transport_ = nullptr;
  int rank_ = -1;
  size_t cellBytes_ = 0;
  uint64_t calls_ = 0;
  std::vector<Rank> ranks_;
};

}  // namespace sncl::shm
