// The two ends of one FIFO (a single-producer single-consumer ring of slots in the
// receiver's segment), the pair status both ranks of a pair can set, and the doorbell a
// rank sleeps on. Lock-free: the sender owns head, the receiver owns tail; each caches the
// other's counter and rereads it only when the cached value says it cannot proceed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transports/shm/layout.h"

namespace sncl::shm {

class Fifo {
 public:
  Fifo() = default;
  // fifo: the FIFO's first byte (its FifoControl) in this process's mapping.
  Fifo(char* fifo, size_t nSlots, size_t slotBytes);

  size_t nSlots() const { return nSlots_; }
  size_t slotBytes() const { return slotBytes_; }
  PairStatus& status() { return control_->status; }
  // Single-copy messages read by the receiver (its end writes, the sender's end reads).
  uint64_t& cmaDone() { return control_->cmaDone; }

 protected:
  SlotHeader& header(uint64_t n) { return headers_[n % nSlots_]; }
  char* payload(uint64_t n) { return payload_ + (n % nSlots_) * slotBytes_; }

  FifoControl* control_ = nullptr;
  SlotHeader* headers_ = nullptr;
  char* payload_ = nullptr;
  size_t nSlots_ = 0;
  size_t slotBytes_ = 0;
};

class FifoSender : public Fifo {
 public:
  using Fifo::Fifo;
  bool hasFreeSlot() {
    if (head_ - tailSeen_ < nSlots_) return true;
    tailSeen_ = loadAcquire(control_->tail);
    return head_ - tailSeen_ < nSlots_;
  }
  // The next slot to fill; valid while hasFreeSlot().
  SlotHeader& nextHeader() { return header(head_); }
  char* nextPayload() { return payload(head_); }
  // Hands the filled slot to the receiver.
  void publish() { storeRelease(control_->head, ++head_); }

 private:
  uint64_t head_ = 0;
  uint64_t tailSeen_ = 0;
};

class FifoReceiver : public Fifo {
 public:
  using Fifo::Fifo;
  bool hasSlot() {
    if (tail_ != headSeen_) return true;
    headSeen_ = loadAcquire(control_->head);
    return tail_ != headSeen_;
  }
  // The oldest published slot; valid while hasSlot().
  const SlotHeader& slotHeader() { return header(tail_); }
  const char* slotPayload() { return payload(tail_); }
  // Gives the oldest slot back to the sender.
  void release() { storeRelease(control_->tail, ++tail_); }

 private:
  uint64_t tail_ = 0;
  uint64_t headSeen_ = 0;
};

// The details of a failed pair, as read from a PairStatus.
struct PairFailureInfo {
  PairFailure reason = PairFailure::None;
  PairStatus details{};
};

// Sets status to reason unless the pair already failed; details fills the rest (reporter,
// and for a mismatch the message's and the expected tag and size).
void failPairStatus(PairStatus& status, PairFailure reason, const PairStatus& details);
// None while the pair is fine (or while another rank is still writing its failure).
PairFailureInfo readPairStatus(PairStatus& status);
inline bool pairFailed(PairStatus& status) {
  const auto reason = static_cast<PairFailure>(loadAcquire(status.reason));
  return reason != PairFailure::None && reason != PairFailure::Claimed;
}

class DoorbellRef {
 public:
  DoorbellRef() = default;
  explicit DoorbellRef(Doorbell* bell) : bell_(bell) {}

  // Tells the owner that it may progress; called after the store that lets it.
  void ring();
  // ring() only when the owner announced that it sleeps: for a caller whose store of what
  // the owner waits for was seq_cst (the owner reads it seq_cst after arm()).
  void ringIfWaiting();
  // Sleeping in three steps so that no ring is lost: arm() announces a sleeper and
  // returns the sequence to sleep on; the caller then checks for work one last time, and
  // if there is none sleeps (until a ring or micros pass); then disarms.
  uint32_t arm();
  void sleep(uint32_t armedSeq, int64_t micros);
  void disarm();

 private:
  Doorbell* bell_ = nullptr;
};

}  // namespace sncl::shm
