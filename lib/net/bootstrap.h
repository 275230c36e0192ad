// Bootstrap: unique id -> TCP rendezvous with a secret (the address table comes down a
// binomial tree, bootstrap_rendezvous.cc) -> all-gathers of peer info (the same tree,
// lib/net/bootstrap_tree.h). It stays connected for the comm's lifetime and carries
// out-of-band messages (setup exchanges of transports, and later the fault-handling side channel).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "lib/base/clock.h"
#include "lib/base/error.h"
#include "sncl/sncl.h"

namespace sncl {

// Creates a listening root in this process (a thread that serves one rendezvous of any
// size, then exits; it gives up after the default timeout) and fills id with its address
// and a fresh random secret. Address from SNCL_SOCKET_IFNAME (default "lo").
Result bootstrapCreateRoot(snclUniqueId* id);

// SNCL_COMM_ID=host:port: the id every rank derives without MPI. rank 0 also starts the
// root listener on that address (when isRoot is true).
Result bootstrapIdFromEnv(snclUniqueId* id, bool isRoot);

// Checks that the id carries sncl's magic and a valid checksum (a garbage id is rejected
// before any connection is tried).
Result bootstrapCheckId(const snclUniqueId& id);

// Tags of Bootstrap::send/recv/tryRecv: one space per user, so that two never meet (a
// message read under another's tag fails its size check or is taken for the wrong thing).
namespace bootstrap_tags {
constexpr uint32_t kFaultRound = 0xfa000000u;    // lib/comm/fault.cc: | (round << 2) | kind
constexpr uint32_t kShrink = 0xfb000000u;        // lib/comm/fault_members.cc: | (instance << 2) | kind
constexpr uint32_t kRevoke = 0xfc000001u;        // lib/comm/fault.cc: snclCommRevoke's notice
constexpr uint32_t kRailsDrained = 0xfc000002u;  // transports/ofi/ofi_rails.cc: before a reset closes rails
}  // namespace bootstrap_tags

class Bootstrap {
 public:
  // Meets the other ranks at the root named by id. Fails with InvalidArgument when ranks
  // disagree on nranks or two ranks claim the same rank, with Timeout when the root or a
  // peer does not answer before the deadline.
  static Result connect(const snclUniqueId& id, int rank, int nranks, Deadline deadline,
                        std::unique_ptr<Bootstrap>* out);
  virtual ~Bootstrap() = default;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }

  // In-place all-gather: data holds nranks slots of bytesPerRank; this rank's slot is
  // filled on entry, all slots are filled on return. Every rank must call it in the same order.
  // A binomial tree: O(log n) messages per rank; nranks x bytesPerRank is at most 1 GiB.
  virtual Result allGather(void* data, size_t bytesPerRank, Deadline deadline) = 0;
  virtual Result barrier(Deadline deadline) = 0;
  // Point-to-point out-of-band messages, matched by (peer, tag), any size.
  virtual Result send(int peer, uint32_t tag, const void* data, size_t bytes, Deadline deadline) = 0;
  virtual Result recv(int peer, uint32_t tag, void* data, size_t bytes, Deadline deadline) = 0;
  // recv without waiting: reads what peer already sent (accepting its connection if it
  // is pending) and sets *got. Nothing there yet is success with *got false, and records
  // no error. For the fault side channel, polled while a call waits.
  virtual Result tryRecv(int peer, uint32_t tag, void* data, size_t bytes, bool* got) = 0;
  // Makes every blocked or later call return InvalidUsage at once. Thread-safe.
  virtual void abort() = 0;
  // Messages and payload bytes this rank sent and received so far (what the simulator's
  // bootstrap model predicts, lib/sim/bootstrap_model.h). Zero for wrappers that do not count.
  struct Traffic {
    uint64_t sent = 0, received = 0, bytesSent = 0;
  };
  virtual Traffic traffic() const { return {}; }

 protected:
  Bootstrap(int rank, int nranks) : rank_(rank), nranks_(nranks) {}
  int rank_;
  int nranks_;
};

}  // namespace sncl
