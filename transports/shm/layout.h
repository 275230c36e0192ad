// The shared-memory layout of one rank's segment, as every rank that maps it sees it.
//
// A rank's segment holds the FIFOs it *receives* on, one per connected peer:
//
//   SegmentHeader | fifo offsets[nranks] | pad to page
//   FIFO from peer a: FifoControl | SlotHeader[nSlots] | pad to page | payload[nSlots][slotBytes]
//   FIFO from peer b: ...
//   cells (shm_cells.cc): CellHeader+payload for call parity 0 | the same for parity 1 | pad to page
//
// A sender maps the header pages (for the receiver's doorbell and the FIFO offsets) and the
// one FIFO it writes; see Segment and PeerWindow. Everything here is plain data: the
// kernel zero-fills the segment, so no object is ever constructed in it, and words that
// two processes touch are accessed through std::atomic_ref.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "lib/transport/transport.h"

namespace sncl::shm {

constexpr size_t kCacheLine = 64;
constexpr size_t kPage = 4096;
constexpr uint64_t kSegmentMagic = 0x736e'636c'7368'6d31ull;  // "snclshm1"

constexpr size_t alignUp(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

template <class T>
T loadAcquire(T& word) {
  return std::atomic_ref<T>(word).load(std::memory_order_acquire);
}
template <class T>
void storeRelease(T& word, T value) {
  std::atomic_ref<T>(word).store(value, std::memory_order_release);
}
template <class T>
T loadRelaxed(T& word) {
  return std::atomic_ref<T>(word).load(std::memory_order_relaxed);
}
template <class T>
void storeRelaxed(T& word, T value) {
  std::atomic_ref<T>(word).store(value, std::memory_order_relaxed);
}
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free, "shared counters need lock-free 64-bit atomics");

// The word a rank sleeps on (futex) when it cannot progress. Peers bump seq after they
// publish or free a slot that concerns this rank; they only enter the kernel to wake it
// when waiters says it may sleep.
struct Doorbell {
  alignas(kCacheLine) uint32_t seq;
  alignas(kCacheLine) uint32_t waiters;
};

struct SegmentHeader {
  uint64_t magic;
  int32_t rank;
  int32_t nranks;
  uint64_t slotBytes;   // payload bytes per slot, a multiple of kPage
  uint64_t nSlots;      // slots per FIFO
  uint64_t fifoStride;  // bytes of one FIFO (control, slot headers, payload), page multiple
  // The single-copy probe (shm_single_copy.cc): the creator's pid and the address in its
  // address space of a word that holds cmaProbeValue; a peer that reads the value there
  // with process_vm_readv knows it can read this rank's buffers.
  int32_t pid;
  uint64_t cmaProbeAddr;
  uint64_t cmaProbeValue;
  // The cells of small collectives (shm_cells.cc): where they start, and the payload bytes
  // of one cell (0: none; what every rank uses is the smallest over the comm, see setup).
  uint64_t cellsOffset;
  uint64_t cellBytes;
  alignas(kCacheLine) Doorbell doorbell;
  // Followed by uint64_t fifoOffset[nranks]: where the FIFO from sender rank r starts,
  // 0 when r is not connected.
};

inline uint64_t* fifoOffsets(SegmentHeader* header) {
  return reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(header) + sizeof(SegmentHeader));
}
inline size_t headerBytes(int nranks) {
  return alignUp(sizeof(SegmentHeader) + sizeof(uint64_t) * static_cast<size_t>(nranks), kPage);
}

// Why a pair of ranks stopped talking. Whoever fails a pair first claims the status (CAS
// None -> Claimed), fills in the details, then publishes the reason with a release store,
// so a reader that sees a reason also sees its details.
// ReadFailed: the receiver could not read a single-copy message out of the sender's memory.
enum class PairFailure : uint32_t { None = 0, Claimed, Mismatch, Aborted, Closed, Timeout, Died, ReadFailed };

struct PairStatus {
  uint32_t reason;   // PairFailure
  int32_t reporter;  // rank that failed the pair
  // Mismatch: the message from fromRank to toRank that the receiver rejected.
  int32_t fromRank;
  int32_t toRank;
  uint64_t sentTag;
  uint64_t sentBytes;
  uint64_t expectedTag;
  uint64_t expectedBytes;
};

// Head and tail are monotonic slot counters, each on its own cache line so that the
// sender's and the receiver's stores never share a line; slot n is n % nSlots.
struct FifoControl {
  alignas(kCacheLine) uint64_t head;  // slots published, written by the sender
  alignas(kCacheLine) uint64_t tail;  // slots released, written by the receiver
  // Single-copy messages the receiver has finished reading out of the sender's buffer
  // (written by the receiver): a single-copy send completes once this reaches it.
  alignas(kCacheLine) uint64_t cmaDone;
  alignas(kCacheLine) PairStatus status;
};

// Describes the fragment in a slot; written by the sender before it publishes the slot.
struct alignas(kCacheLine) SlotHeader {
  uint64_t tag;
  uint64_t totalBytes;  // of the whole message
  uint64_t offset;      // of this fragment in the message, a multiple of 64
  uint64_t bytes;       // of this fragment
  // Nonzero: a single-copy descriptor instead of data. The whole message (totalBytes) is
  // at this address in the sender's address space; bytes is 0 and no other slot follows.
  uint64_t cmaAddr;
  // With sharedFd >= 0 the message lies in a shared allocation of the sender's
  // (lib/transport/shared_mem.h) at sharedOffset: the receiver maps it and copies from there.
  int64_t sharedFd;
  uint64_t sharedIno;
  uint64_t sharedAllocBytes;
  uint64_t sharedOffset;
};

inline size_t fifoPayloadOffset(size_t nSlots) {
  return alignUp(sizeof(FifoControl) + sizeof(SlotHeader) * nSlots, kPage);
}
inline size_t fifoStride(size_t nSlots, size_t slotBytes) {
  return fifoPayloadOffset(nSlots) + nSlots * slotBytes;
}

// One cell, in LocalCells' layout (lib/transport/transport.h): a rank writes its input
// (payload), then the call number (release); a reader loads the call number (acquire),
// then the payload. Both in one cache line up to 48 bytes of payload, so a small call moves
// one line per rank. Call numbers start at 1 in fresh (zero-filled) cells, so a cell of
// nothing or of a failed attempt's segment never reads as a call of the current one. desc
// says what the writer ran (collective, op, dtype, bytes): a reader that ran something else
// reports the mismatch instead of reducing it.
using CellHeader = LocalCells::Header;
constexpr size_t kCellsPerRank = LocalCells::kCellsPerRank;
inline size_t cellStride(size_t cellBytes) {
  return alignUp(sizeof(CellHeader) + cellBytes, kCacheLine);
}
inline size_t cellsAreaBytes(size_t cellBytes) {
  return cellBytes == 0 ? 0 : alignUp(kCellsPerRank * cellStride(cellBytes), kPage);
}

}  // namespace sncl::shm
