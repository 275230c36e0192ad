#include "transports/shm/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "lib/base/log.h"

namespace sncl::shm {
namespace {

// Pid namespace of this process (inode of /proc/self/ns/pid): a pid in a segment name
// means something only in the namespace that created it.
uint64_t pidNamespace() {
  char link[64] = {0};
  uint64_t ns = 0;
  if (readlink("/proc/self/ns/pid", link, sizeof(link) - 1) > 0) sscanf(link, "pid:[%" SCNu64 "]", &ns);
  return ns;
}

struct Registry {
  std::mutex mutex;
  std::map<std::string, std::weak_ptr<Segment>> byName;
};
Registry& registry() {
  static Registry r;
  return r;
}

Result mapShared(int fd, size_t offset, size_t bytes, const std::string& name, Mapping* out) {
  // MAP_POPULATE faults every page in now: a first touch on the hot path costs ~11 us.
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED)
    return fail(snclSystemError, "shm: mmap of {} bytes at {} of {} failed: {}", bytes, offset, name, strerror(errno));
  *out = Mapping(static_cast<char*>(p), bytes);
  return snclSuccess;
}

Result checkHeader(const std::string& name, SegmentHeader* h, int myRank, int nranks) {
  if (h->magic != kSegmentMagic || h->nranks != nranks)
    return fail(snclInternalError, "shm: /dev/shm/{} has a foreign layout (magic {:#x}, {} ranks)", name, h->magic,
                h->nranks);
  if (fifoOffsets(h)[myRank] == 0)
    return fail(snclInvalidUsage, "shm: rank {} did not connect rank {} (peer lists differ)", h->rank, myRank);
  return snclSuccess;
}

}  // namespace

Mapping::Mapping(Mapping&& o) noexcept : data_(o.data_), bytes_(o.bytes_) {
  o.data_ = nullptr;
  o.bytes_ = 0;
}

Mapping& Mapping::operator=(Mapping&& o) noexcept {
  if (this != &o) {
    if (data_) munmap(data_, bytes_);
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

Mapping::~Mapping() {
  if (data_) munmap(data_, bytes_);
}

std::string segmentName(uint64_t commId, int rank) {
  return fmt::format("sncl-{:016x}-{}-{}-{}", commId, rank, getpid(), pidNamespace());
}

void removeStaleSegments() {
  DIR* dir = opendir("/dev/shm");
  if (!dir) return;
  const uint64_t myNamespace = pidNamespace();
  while (dirent* e = readdir(dir)) {
    uint64_t commId = 0, ns = 0;
    int rank = 0, pid = 0, end = 0;
    if (sscanf(e->d_name, "sncl-%16" SCNx64 "-%d-%d-%" SCNu64 "%n", &commId, &rank, &pid, &ns, &end) != 4 ||
        e->d_name[end] != '\0' || ns != myNamespace || pid <= 0)
      continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // creator alive (or not ours to ask)
    if (shm_unlink(e->d_name) == 0)
      log::info(log::Subsys::Transport, "shm: removed stale segment {} (pid {} is gone)", e->d_name, pid);
  }
  closedir(dir);
}

Result Segment::create(const std::string& name, size_t bytes, std::shared_ptr<Segment>* out) {
  int fd = shm_open(("/" + name).c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return fail(snclSystemError, "shm: cannot create /dev/shm/{}: {}", name, strerror(errno));
  Mapping mapping;
  Result r = snclSuccess;
  if (fallocate(fd, 0, 0, static_cast<off_t>(bytes)) != 0)
    r = fail(snclSystemError, "shm: cannot reserve {} MiB in /dev/shm for {}: {}", bytes >> 20, name, strerror(errno));
  if (r == snclSuccess) r = mapShared(fd, 0, bytes, name, &mapping);
  close(fd);
  if (r != snclSuccess) {
    shm_unlink(("/" + name).c_str());
    return r;
  }
  out->reset(new Segment(name, std::move(mapping)));
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().byName[name] = *out;
  return snclSuccess;
}

std::shared_ptr<Segment> Segment::findInProcess(const std::string& name) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  auto it = registry().byName.find(name);
  return it == registry().byName.end() ? nullptr : it->second.lock();
}

Segment::~Segment() {
  unlink();
  std::lock_guard<std::mutex> lock(registry().mutex);
  auto it = registry().byName.find(name_);
  if (it != registry().byName.end() && it->second.expired()) registry().byName.erase(it);
}

void Segment::unlink() {
  if (!linked_) return;
  linked_ = false;
  if (shm_unlink(("/" + name_).c_str()) != 0 && errno != ENOENT)
    log::warn("shm: cannot unlink /dev/shm/{}: {}", name_, strerror(errno));
}

Result PeerSegment::open(const std::string& name, int myRank, int nranks, PeerSegment* out) {
  if (auto segment = Segment::findInProcess(name)) {
    out->sameProcess_ = segment;
    out->header_ = reinterpret_cast<SegmentHeader*>(segment->data());
    SNCL_CHECK(checkHeader(name, out->header_, myRank, nranks));
    out->fifo_ = segment->data() + fifoOffsets(out->header_)[myRank];
    if (out->header_->cellBytes != 0) out->cells_ = segment->data() + out->header_->cellsOffset;
    return snclSuccess;
  }
  int fd = shm_open(("/" + name).c_str(), O_RDWR, 0);
  if (fd < 0)
    return fail(snclSystemError, "shm: cannot open /dev/shm/{}: {} (is the peer on another machine?)", name,
                strerror(errno));
  Result r = mapShared(fd, 0, headerBytes(nranks), name, &out->headerPages_);
  if (r == snclSuccess) {
    out->header_ = reinterpret_cast<SegmentHeader*>(out->headerPages_.data());
    r = checkHeader(name, out->header_, myRank, nranks);
  }
  if (r == snclSuccess)
    r = mapShared(fd, fifoOffsets(out->header_)[myRank], out->header_->fifoStride, name, &out->fifoPages_);
  if (r == snclSuccess && out->header_->cellBytes != 0)
    r = mapShared(fd, out->header_->cellsOffset, cellsAreaBytes(out->header_->cellBytes), name, &out->cellPages_);
  close(fd);
  SNCL_CHECK(r);
  out->fifo_ = out->fifoPages_.data();
  out->cells_ = out->cellPages_.data();
  return snclSuccess;
}

}  // namespace sncl::shm
