// isend/irecv of the sncl process group: queued, then issued in batches.
//
// A send of sncl completes only when the transport took the data, and the group's issuer
// runs one job at a time, so issuing each isend as it comes would deadlock the ring
// pattern (isend right, irecv left, wait) on large tensors. isend/irecv therefore only
// queue the op; the queue is flushed as one sncl group (in which any order of matching
// sends and receives completes) when one of its Works is waited on or polled, before the
// next collective, and at the end of a coalescing block (batch_isend_irecv).
//
// Tags: within a batch each peer's sends and each peer's receives are ordered by (tag,
// posting order), and every message is a small header (tag, size) and then its payload.
// A receive that meets another tag's message of its own size keeps that message aside
// (a later receive of that tag takes it) and receives again; so ranks that flush at
// different moments still pair by tag. One that meets another size fails (sncl checks
// sizes before delivering), naming the receive.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bindings/torch/work_queue.h"
#include "sncl/sncl.h"

namespace sncl_torch {

class P2pQueue : public std::enable_shared_from_this<P2pQueue> {
 public:
  P2pQueue(int rank, snclComm_t comm, Issuer* issuer) : rank_(rank), comm_(comm), issuer_(issuer) {}

  // Queues the op; the Work flushes the queue when waited on or polled.
  c10::intrusive_ptr<WorkSNCL> post(bool send, const at::Tensor& t, int peer, int tag);

  // Submits the pending ops as one batch job; reason names the trigger in errors.
  void flush(const std::string& reason);

  // Final flush; later posts fail and Works no longer reach the (gone) issuer.
  void close();

 private:
  struct Op {
    bool send;
    int peer;
    int tag;
    uint64_t seq;  // posting order
    at::Tensor t;
    c10::intrusive_ptr<WorkSNCL> work;
  };
  struct Header {
    uint32_t magic;
    int32_t tag;
    uint64_t bytes;
  };

  // The batch job (issuer thread); completes or fails every op's Work.
  void run(std::vector<Op>& ops, snclStream_t s, const std::string& reason);
  // Receives of one round: one header and one payload per op; sends only in the first.
  snclResult_t exchange(const std::vector<Op*>& sends, const std::vector<Op*>& recvs, std::vector<Header>& in,
                        snclStream_t s);
  // A message kept aside for (peer, tag) completes r, or fails it on another size.
  bool takeKept(Op& r);
  std::string describe(const Op& op) const;
  void fail(Op& op, const std::string& why);

  const int rank_;
  const snclComm_t comm_;
  Issuer* const issuer_;
  std::mutex mu_;
  std::vector<Op> pending_;
  uint64_t seq_ = 0;
  bool closed_ = false;
  // Issuer thread only: messages that arrived for a receive of another tag, per (peer, tag).
  std::map<std::pair<int, int>, std::deque<at::Tensor>> kept_;
};

}  // namespace sncl_torch
