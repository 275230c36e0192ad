// POSIX shared-memory segments: this rank's own (created at setup, unlinked as soon as
// every peer has mapped it) and the part of each peer's that this rank maps. Names are
// "sncl-<commId hex>-<rank>-<pid>-<pid namespace>" so that a later setup can tell a
// segment whose creator died before unlinking it, and remove it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "lib/base/error.h"
#include "transports/shm/layout.h"

namespace sncl::shm {

// One mmap'ed range, unmapped on destruction.
class Mapping {
 public:
  Mapping() = default;
  Mapping(char* data, size_t bytes) : data_(data), bytes_(bytes) {}
  Mapping(Mapping&& o) noexcept;
  Mapping& operator=(Mapping&& o) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();

  char* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  char* data_ = nullptr;
  size_t bytes_ = 0;
};

// The segment name for (commId, rank) created by this process.
std::string segmentName(uint64_t commId, int rank);

// Unlinks "sncl-*" segments of this pid namespace whose creating process is gone (a rank
// killed between creating its segment and the end of setup).
void removeStaleSegments();

// This rank's segment.
class Segment {
 public:
  // Creates the segment (exclusively, mode 0600), reserves its pages in /dev/shm (a full
  // /dev/shm fails here, not with SIGBUS later) and maps it with every page faulted in.
  // Ranks that are threads of this process find it with findInProcess and share the
  // mapping instead of mapping it again.
  static Result create(const std::string& name, size_t bytes, std::shared_ptr<Segment>* out);
  static std::shared_ptr<Segment> findInProcess(const std::string& name);

  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Removes the name from /dev/shm; mappings stay valid. Idempotent.
  void unlink();

  char* data() const { return mapping_.data(); }
  size_t bytes() const { return mapping_.bytes(); }
  const std::string& name() const { return name_; }

 private:
  Segment(std::string name, Mapping mapping) : name_(std::move(name)), mapping_(std::move(mapping)) {}

  std::string name_;
  Mapping mapping_;
  bool linked_ = true;
};

// What this rank maps of a peer's segment: its header pages (layout, doorbell, FIFO
// offsets), the one FIFO this rank sends on, and its cells (read only by this rank).
class PeerSegment {
 public:
  // myRank: the sender; the peer's segment must hold a FIFO for it.
  static Result open(const std::string& name, int myRank, int nranks, PeerSegment* out);

  SegmentHeader* header() const { return header_; }
  char* fifo() const { return fifo_; }
  // The peer's cells (layout.h), nullptr when it has none.
  char* cells() const { return cells_; }
  // The peer is a thread of this process (found in this process's registry).
  bool sameProcess() const { return sameProcess_ != nullptr; }

 private:
  std::shared_ptr<Segment> sameProcess_;  // when the peer is a thread of this process
  Mapping headerPages_;
  Mapping fifoPages_;
  Mapping cellPages_;
  SegmentHeader* header_ = nullptr;
  char* fifo_ = nullptr;
  char* cells_ = nullptr;
};

}  // namespace sncl::shm
