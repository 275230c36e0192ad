#include "lib/transport/shared_mem.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

namespace sncl {
namespace {

struct Allocation {
  size_t bytes = 0;
  int fd = -1;
  uint64_t ino = 0;
};

// The process's allocations by base address. Global because the memory is the process's,
// not a comm's: any comm of any thread may be handed a buffer from it.
struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, Allocation> byBase;
};
Registry& registry() {
  static Registry r;
  return r;
}

size_t pageBytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

std::string procFdPath(int32_t pid, int32_t fd) {
  return "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
}

// Opens the peer's allocation file; -1 unless it is the file with inode ino.
int openPeerFile(const SharedRef& ref, std::string* why) {
  const int fd = open(procFdPath(ref.pid, ref.fd).c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    *why = std::strerror(errno);
    return -1;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_ino) != ref.ino ||
      static_cast<uint64_t>(st.st_size) < ref.allocBytes) {
    *why = "the file there is not that allocation (freed?)";
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

Result sharedAlloc(size_t bytes, void** out) {
  if (!out) return fail(snclInvalidArgument, "snclMemAlloc: ptr is NULL");
  *out = nullptr;
  if (bytes == 0) return fail(snclInvalidArgument, "snclMemAlloc: size is 0");
  const size_t page = pageBytes();
  if (bytes > (SIZE_MAX >> 1)) return fail(snclInvalidArgument, "snclMemAlloc: size {} is too large", bytes);
  const size_t rounded = (bytes + page - 1) / page * page;
  const int fd = memfd_create("sncl-mem", MFD_CLOEXEC);
  if (fd < 0) return fail(snclSystemError, "snclMemAlloc: memfd_create: {}", std::strerror(errno));
  struct stat st {};
  if (ftruncate(fd, static_cast<off_t>(rounded)) != 0 || fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return fail(snclSystemError, "snclMemAlloc: {} bytes: {}", rounded, std::strerror(e));
  }
  // Faulted in now (MAP_POPULATE): a first touch costs ~11 us a page, never on a call.
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    close(fd);
    return fail(snclSystemError, "snclMemAlloc: mapping {} bytes: {}", rounded, std::strerror(e));
  }
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  reg.byBase[reinterpret_cast<uintptr_t>(p)] = {rounded, fd, static_cast<uint64_t>(st.st_ino)};
  *out = p;
  return snclSuccess;
}

Result sharedFree(void* ptr) {
  if (!ptr) return snclSuccess;
  Allocation a;
  {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mutex);
    auto it = reg.byBase.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == reg.byBase.end())
      return fail(snclInvalidArgument, "snclMemFree: {} did not come from snclMemAlloc (or was freed)", ptr);
    a = it->second;
    reg.byBase.erase(it);
  }
  munmap(ptr, a.bytes);
  close(a.fd);
  return snclSuccess;
}

bool sharedFind(const void* ptr, size_t bytes, SharedRef* ref) {
  if (!ptr) return false;
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  auto it = reg.byBase.upper_bound(p);
  if (it == reg.byBase.begin()) return false;
  --it;
  const Allocation& a = it->second;
  const uintptr_t offset = p - it->first;
  if (offset >= a.bytes || bytes > a.bytes - offset) return false;
  ref->pid = static_cast<int32_t>(getpid());
  ref->fd = a.fd;
  ref->ino = a.ino;
  ref->allocBytes = a.bytes;
  ref->offset = offset;
  return true;
}

bool sharedProbe(const SharedRef& ref) {
  std::string why;
  const int fd = openPeerFile(ref, &why);
  if (fd < 0) return false;
  close(fd);
  return true;
}

SharedMaps::~SharedMaps() {
  for (size_t i = 0; i < count_; ++i) drop(maps_[i]);
}

void SharedMaps::drop(Mapping& m) {
  if (m.base) munmap(m.base, m.bytes);
  m = Mapping{};
}

SharedMaps::Mapping* SharedMaps::freeSlot() {
  for (size_t i = 0; i < count_; ++i)
    if (!maps_[i].base) return &maps_[i];
  if (count_ < kMaxMappings) return &maps_[count_++];
  // Full: drop the mappings of allocations their owners freed (fd closed or reused).
  Mapping* found = nullptr;
  for (size_t i = 0; i < count_; ++i) {
    Mapping& m = maps_[i];
    SharedRef ref;
    ref.pid = m.pid, ref.fd = m.fd, ref.ino = m.ino, ref.allocBytes = m.bytes;
    if (sharedProbe(ref)) continue;
    drop(m);
    if (!found) found = &m;
  }
  return found;
}

Result SharedMaps::map(const SharedRef& ref, size_t bytes, char** out) {
  *out = nullptr;
  if (ref.offset > ref.allocBytes || bytes > ref.allocBytes - ref.offset)
    return fail(snclInvalidArgument, "shared memory: a buffer of {} bytes at offset {} overruns pid {}'s allocation of {}",
                bytes, ref.offset, ref.pid, ref.allocBytes);
  Mapping* slot = nullptr;
  for (size_t i = 0; i < count_; ++i) {
    Mapping& m = maps_[i];
    if (!m.base || m.pid != ref.pid || m.fd != ref.fd) continue;
    if (m.ino == ref.ino && m.bytes >= ref.allocBytes) {
      *out = m.base + ref.offset;
      return snclSuccess;
    }
    drop(m);  // the peer freed that allocation and its fd now holds another
    slot = &m;
    break;
  }
  if (!slot) slot = freeSlot();
  if (!slot)
    return fail(snclSystemError, "shared memory: {} peers' allocations are mapped and all still live; cannot map pid {}'s",
                kMaxMappings, ref.pid);
  std::string why;
  const int fd = openPeerFile(ref, &why);
  if (fd < 0)
    return fail(snclSystemError, "shared memory: cannot open pid {}'s allocation ({}): {}", ref.pid,
                procFdPath(ref.pid, ref.fd), why);
  void* p = mmap(nullptr, ref.allocBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int e = errno;
  close(fd);
  if (p == MAP_FAILED)
    return fail(snclSystemError, "shared memory: mapping pid {}'s allocation of {} bytes: {}", ref.pid, ref.allocBytes,
                std::strerror(e));
  *slot = {ref.pid, ref.fd, ref.ino, static_cast<char*>(p), ref.allocBytes};
  *out = slot->base + ref.offset;
  return snclSuccess;
}

}  // namespace sncl
