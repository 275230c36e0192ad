#include "bindings/torch/work_queue.h"

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <stdexcept>

namespace sncl_torch {

WorkSNCL::WorkSNCL(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

void WorkSNCL::complete(std::exception_ptr error) {
  finish(error);
  if (error)
    future_->setError(error);
  else
    future_->markCompleted(c10::IValue(outputs_));
}

bool WorkSNCL::isCompleted() {
  demand();
  return c10d::Work::isCompleted();
}

bool WorkSNCL::wait(std::chrono::milliseconds timeout) {
  demand();
  return c10d::Work::wait(timeout);
}

c10::intrusive_ptr<c10::ivalue::Future> WorkSNCL::getFuture() {
  demand();
  return future_;
}

Issuer::Issuer(snclComm_t comm, snclStream_t stream) : comm_(comm), stream_(stream) {
  thread_ = std::thread([this] { serve(); });
}

Issuer::~Issuer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  ready_.notify_all();
  thread_.join();
}

void Issuer::submit(c10::intrusive_ptr<WorkSNCL> work, std::string what, JobFn fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    TORCH_CHECK(!stopping_, "sncl: ", what, " issued while the process group shuts down");
    jobs_.push_back(Job{std::move(work), std::move(what), std::move(fn)});
  }
  ready_.notify_one();
}

void Issuer::serve() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, drained
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    std::exception_ptr error;
    try {
      const snclResult_t r = job.fn(stream_);
      if (r != snclSuccess) {
        throw std::runtime_error("sncl " + job.what + " failed: " + snclGetErrorString(r) + ": " +
                                 snclGetLastError(comm_));
      }
    } catch (...) {
      error = std::current_exception();
    }
    if (job.work) job.work->complete(error);  // a job without one failed its own Works

  }
}

}  // namespace sncl_torch
