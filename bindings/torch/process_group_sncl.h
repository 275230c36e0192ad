// c10d::ProcessGroup over sncl: torch.distributed's "sncl" backend for CPU tensors.
// Rendezvous through torch's store (rank 0 puts the snclUniqueId there); every call
// returns a WorkSNCL at once and runs on the group's issuer and sncl stream.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>

#include "bindings/torch/p2p_queue.h"
#include "bindings/torch/work_queue.h"
#include "sncl/sncl.h"

namespace sncl_torch {

class ProcessGroupSNCL : public c10d::ProcessGroup {
 public:
  ProcessGroupSNCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout);
  ~ProcessGroupSNCL() override;

  const std::string getBackendName() const override { return "sncl"; }

  using Ptr = c10::intrusive_ptr<c10d::Work>;
  using Tensors = std::vector<at::Tensor>;

  Ptr broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override;
  Ptr allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override;
  Ptr allreduce_coalesced(Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  Ptr reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override;
  Ptr allgather(std::vector<Tensors>& outputs, Tensors& inputs, const c10d::AllgatherOptions& opts) override;
  Ptr _allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override;
  Ptr gather(std::vector<Tensors>& outputs, Tensors& inputs, const c10d::GatherOptions& opts) override;
  Ptr scatter(Tensors& outputs, std::vector<Tensors>& inputs, const c10d::ScatterOptions& opts) override;
  Ptr reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                     const c10d::ReduceScatterOptions& opts) override;
  Ptr _reduce_scatter_base(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  Ptr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
                    std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions& opts) override;
  Ptr alltoall(Tensors& outputs, Tensors& inputs, const c10d::AllToAllOptions& opts) override;
  Ptr send(Tensors& tensors, int dstRank, int tag) override;
  Ptr recv(Tensors& tensors, int srcRank, int tag) override;
  Ptr barrier(const c10d::BarrierOptions& opts) override;
  Ptr allgather_coalesced(std::vector<Tensors>& outputs, Tensors& inputs, const c10d::AllgatherOptions& opts) override;
  // batch_isend_irecv: the ops of the block are issued as one batch at its end.
  void startCoalescing() override;
  void endCoalescing(std::vector<Ptr>& reqs) override;

 private:
  // Queues job for the issuer; outputs become the Work's result and Future value.
  Ptr submit(c10d::OpType type, const char* what, Tensors outputs, JobFn job);

  snclComm_t comm_ = nullptr;
  snclStream_t stream_ = nullptr;
  std::unique_ptr<Issuer> issuer_;
  std::shared_ptr<P2pQueue> p2p_;  // isend/irecv until flushed (before every other call)
};

}  // namespace sncl_torch
