// Work objects of the sncl process group and the thread that issues them.
//
// sncl's stream can say "everything queued so far is done", not "item k is done", so one
// issuer thread per process group takes the jobs in call order: a job queues its sncl calls
// on the group's stream, waits for the stream (which then holds that job only), and copies
// results out; the issuer then completes the job's Work and Future. Calls from Python
// return at once.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sncl/sncl.h"

namespace sncl_torch {

class WorkSNCL : public c10d::Work {
 public:
  WorkSNCL(int rank, c10d::OpType type, std::vector<at::Tensor> outputs);

  std::vector<at::Tensor> result() override { return outputs_; }
  // A queued isend/irecv is issued only when someone asks for it (see p2p_queue.h), so
  // these first run the hook that flushes the queue.
  bool isCompleted() override;
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  void setDemandHook(std::function<void()> hook) { demand_ = std::move(hook); }

  // Called once by the issuer: marks the Work done (wait() returns or rethrows) and
  // completes the Future with the output tensors or the error.
  void complete(std::exception_ptr error);

 private:
  void demand() {
    if (demand_) demand_();
  }
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::function<void()> demand_;
};

// A job: queues sncl calls on the stream and synchronizes it; returns the sncl result.
// It may throw (a c10::Error from a copy), which fails its Work the same way. A job
// submitted without a Work (a batch of isend/irecv) completes its Works itself.
using JobFn = std::function<snclResult_t(snclStream_t)>;

class Issuer {
 public:
  Issuer(snclComm_t comm, snclStream_t stream);
  ~Issuer();  // finishes queued jobs (each is bounded by the comm's deadlines), then joins

  // what names the call in error messages ("allreduce").
  void submit(c10::intrusive_ptr<WorkSNCL> work, std::string what, JobFn fn);

 private:
  struct Job {
    c10::intrusive_ptr<WorkSNCL> work;
    std::string what;
    JobFn fn;
  };
  void serve();

  snclComm_t comm_;
  snclStream_t stream_;
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace sncl_torch
