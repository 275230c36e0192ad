// Send and receive requests: a pool allocated once at setup (posting never allocates) and
// the per-peer queues that keep them in posting order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lib/transport/transport.h"

namespace sncl::shm {

struct Request {
  enum class State : uint8_t { Free, Queued, Done, Failed };

  State state = State::Free;
  bool isSend = false;
  bool started = false;  // its first fragment was sent or matched (zero-byte messages have one)
  uint16_t generation = 1;
  int32_t peer = -1;  // index into the transport's peers
  uint64_t tag = 0;
  size_t bytes = 0;
  size_t doneBytes = 0;  // sent: copied into slots; received: delivered to the sink
  const char* sendData = nullptr;
  bool singleCopy = false;  // send: read by the receiver out of sendData (decided when posted)
  // Single-copy messages (shm_single_copy.cc). Send: its number among the pair's
  // single-copy sends, done once the receiver's cmaDone reaches it. Receive: where the
  // message is in the sender's address space (0: it streams through the FIFO).
  uint64_t cmaOrdinal = 0;
  uint64_t cmaAddr = 0;
  const char* sharedSrc = nullptr;  // receive: the message in this process's mapping of the sender's allocation
  RecvSink sink;
  Result error = snclSuccess;
  Request* next = nullptr;  // in its peer's queue
};

// A RequestId is (generation << 16 | index): a stale id (its request was released and
// reused since) is recognized instead of reporting someone else's request.
class RequestPool {
 public:
  static constexpr size_t kMaxCapacity = 1u << 16;

  void init(size_t capacity) {
    requests_.assign(capacity, Request{});
    free_.clear();
    free_.reserve(capacity);
    for (size_t i = capacity; i-- > 0;) free_.push_back(static_cast<uint32_t>(i));
  }
  size_t capacity() const { return requests_.size(); }

  // nullptr when every request is in use.
  Request* acquire(RequestId* id) {
    if (free_.empty()) return nullptr;
    uint32_t index = free_.back();
    free_.pop_back();
    Request& r = requests_[index];
    *id = (static_cast<RequestId>(r.generation) << 16) | index;
    return &r;
  }

  // nullptr for an id that is not outstanding.
  Request* find(RequestId id) {
    uint32_t index = id & 0xffff;
    if (index >= requests_.size()) return nullptr;
    Request& r = requests_[index];
    if (r.state == Request::State::Free || r.generation != id >> 16) return nullptr;
    return &r;
  }

  void release(Request* r) {
    uint16_t generation = static_cast<uint16_t>(r->generation + 1);
    *r = Request{};
    r->generation = generation == 0 ? 1 : generation;
    free_.push_back(static_cast<uint32_t>(r - requests_.data()));
  }

 private:
  std::vector<Request> requests_;
  std::vector<uint32_t> free_;
};

// Requests of one peer and direction, oldest first, linked through Request::next.
class RequestQueue {
 public:
  bool empty() const { return head_ == nullptr; }
  Request* front() const { return head_; }
  void push(Request* r) {
    r->next = nullptr;
    (tail_ ? tail_->next : head_) = r;
    tail_ = r;
  }
  Request* pop() {
    Request* r = head_;
    head_ = r->next;
    if (!head_) tail_ = nullptr;
    r->next = nullptr;
    return r;
  }

 private:
  Request* head_ = nullptr;
  Request* tail_ = nullptr;
};

}  // namespace sncl::shm
