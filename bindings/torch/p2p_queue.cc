#include "bindings/torch/p2p_queue.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <tuple>

namespace sncl_torch {
namespace {

constexpr uint32_t kMagic = 0x53503250;  // "SP2P": a header of this queue, not some other message

size_t bytesOf(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

at::Tensor copyBytes(const at::Tensor& t) {
  at::Tensor c = at::empty({static_cast<int64_t>(bytesOf(t))}, at::TensorOptions().dtype(at::kByte));
  if (bytesOf(t)) std::memcpy(c.data_ptr(), t.data_ptr(), bytesOf(t));
  return c;
}

}  // namespace

c10::intrusive_ptr<WorkSNCL> P2pQueue::post(bool send, const at::Tensor& t, int peer, int tag) {
  auto work = c10::make_intrusive<WorkSNCL>(rank_, send ? c10d::OpType::SEND : c10d::OpType::RECV,
                                            std::vector<at::Tensor>{t});
  std::weak_ptr<P2pQueue> self = weak_from_this();
  work->setDemandHook([self] {
    if (auto q = self.lock()) q->flush("a wait on (or a poll of) one of its Works");
  });
  std::lock_guard<std::mutex> lock(mu_);
  TORCH_CHECK(!closed_, "sncl ", send ? "send" : "recv", ": issued while the process group shuts down");
  pending_.push_back(Op{send, peer, tag, seq_++, t, work});
  return work;
}

void P2pQueue::flush(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);  // held while submitting: batches keep flush order
  if (pending_.empty()) return;
  std::vector<Op> ops;
  ops.swap(pending_);
  auto self = shared_from_this();
  issuer_->submit({}, "isend/irecv", [self, ops, reason](snclStream_t s) mutable {
    self->run(ops, s, reason);
    return snclSuccess;
  });
}

void P2pQueue::close() {
  flush("the process group's shutdown");
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
}

std::string P2pQueue::describe(const Op& op) const {
  return std::string(op.send ? "isend to" : "irecv from") + " rank " + std::to_string(op.peer) + " (tag " +
         std::to_string(op.tag) + ", " + std::to_string(bytesOf(op.t)) + " bytes)";
}

void P2pQueue::fail(Op& op, const std::string& why) {
  op.work->complete(std::make_exception_ptr(std::runtime_error("sncl " + describe(op) + ": " + why)));
}

bool P2pQueue::takeKept(Op& r) {
  auto it = kept_.find({r.peer, r.tag});
  if (it == kept_.end()) return false;
  at::Tensor m = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) kept_.erase(it);
  if (static_cast<size_t>(m.numel()) != bytesOf(r.t)) {
    fail(r, "the message of this tag from rank " + std::to_string(r.peer) + " has " + std::to_string(m.numel()) +
                " bytes");
    return true;
  }
  if (m.numel()) std::memcpy(r.t.data_ptr(), m.data_ptr(), bytesOf(r.t));
  r.work->complete(nullptr);
  return true;
}

snclResult_t P2pQueue::exchange(const std::vector<Op*>& sends, const std::vector<Op*>& recvs,
                                std::vector<Header>& in, snclStream_t s) {
  std::vector<Header> out(sends.size());
  in.assign(recvs.size(), Header{0, 0, 0});
  snclResult_t r = snclGroupStart();
  if (r != snclSuccess) return r;
  for (size_t i = 0; i < sends.size() && r == snclSuccess; ++i) {
    const Op& op = *sends[i];
    out[i] = Header{kMagic, op.tag, bytesOf(op.t)};
    r = snclSend(&out[i], sizeof(Header), snclUint8, op.peer, comm_, s);
    if (r == snclSuccess) r = snclSend(op.t.data_ptr(), bytesOf(op.t), snclUint8, op.peer, comm_, s);
  }
  for (size_t i = 0; i < recvs.size() && r == snclSuccess; ++i) {
    const Op& op = *recvs[i];
    r = snclRecv(&in[i], sizeof(Header), snclUint8, op.peer, comm_, s);
    if (r == snclSuccess) r = snclRecv(op.t.data_ptr(), bytesOf(op.t), snclUint8, op.peer, comm_, s);
  }
  const snclResult_t end = snclGroupEnd();
  if (r == snclSuccess) r = end;
  return r == snclSuccess ? snclStreamSynchronize(s) : r;
}

void P2pQueue::run(std::vector<Op>& ops, snclStream_t s, const std::string& reason) {
  // Ops reach their own rank as copies, through kept_: sends first, so that a receive
  // from oneself finds every send to oneself of the same batch.
  std::vector<Op*> sends, recvs;
  for (Op& op : ops) {
    if (op.peer != rank_) {
      (op.send ? sends : recvs).push_back(&op);
    } else if (op.send) {
      kept_[{rank_, op.tag}].push_back(copyBytes(op.t));
      op.work->complete(nullptr);
    }
  }
  auto order = [](const Op* a, const Op* b) {
    return std::tie(a->peer, a->tag, a->seq) < std::tie(b->peer, b->tag, b->seq);
  };
  std::sort(sends.begin(), sends.end(), order);
  for (Op& op : ops) {
    if (op.peer == rank_ && !op.send && !takeKept(op))
      fail(op, "no isend to this rank with this tag was posted before the wait");
  }
  std::vector<Op*> waiting;
  std::sort(recvs.begin(), recvs.end(), order);
  for (Op* op : recvs)
    if (!takeKept(*op)) waiting.push_back(op);

  bool first = true;
  while ((first && !sends.empty()) || !waiting.empty()) {
    std::vector<Header> in;
    snclResult_t r = snclInternalError;  // also when a tensor call throws
    try {
      r = exchange(first ? sends : std::vector<Op*>{}, waiting, in, s);
    } catch (const std::exception&) {
    }
    if (r != snclSuccess) {
      const std::string err = std::string("failed: ") + snclGetErrorString(r) + ": " + snclGetLastError(comm_) +
                              " (the batch was issued at " + reason + ")";
      if (first)
        for (Op* op : sends) fail(*op, err);
      for (Op* op : waiting)
        fail(*op, err + ". If the ranks issued different sets of isend/irecv (one waited before the other posted "
                        "all of them), the next message from rank " +
                      std::to_string(op->peer) +
                      " may have been another tag's, of another size: post every isend/irecv of an exchange "
                      "before waiting on any");
      return;
    }
    if (first)
      for (Op* op : sends) op->work->complete(nullptr);
    first = false;
    // A receive that got another tag's message keeps it aside, then looks for its own
    // among those kept; all are kept before any is taken, as a payload may be another's.
    std::vector<Op*> missed;
    for (size_t i = 0; i < waiting.size(); ++i) {
      Op& op = *waiting[i];
      if (in[i].magic != kMagic || in[i].bytes != bytesOf(op.t)) {
        fail(op, "the next message from rank " + std::to_string(op.peer) +
                     " is not one of an isend (was a collective or send issued there in its place?)");
      } else if (in[i].tag == op.tag) {
        op.work->complete(nullptr);
      } else {
        kept_[{op.peer, in[i].tag}].push_back(copyBytes(op.t));
        missed.push_back(&op);
      }
    }
    waiting.clear();
    for (Op* op : missed)
      if (!takeKept(*op)) waiting.push_back(op);
  }
}

}  // namespace sncl_torch
