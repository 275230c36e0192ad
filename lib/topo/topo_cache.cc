#include "lib/topo/topo_cache.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "lib/base/clock.h"
#include "lib/base/env.h"
#include "lib/base/hash.h"
#include "lib/base/log.h"
#include "lib/topo/graph_binary.h"
#include "lib/topo/topo_file.h"

namespace sncl::topo {
namespace {

constexpr size_t kMaxCacheFileBytes = size_t(1) << 31;
constexpr size_t kProcessEntries = 4;  // graphs kept per process (a 16k-endpoint one is ~20 MiB)

struct Stats {
  std::atomic<uint64_t> parsed{0}, hostHits{0}, processHits{0}, rejected{0}, written{0};
};
Stats& stats() {
  static Stats s;
  return s;
}

// The process's decoded graphs, newest last. A thread that waits for another's load polls
// try_lock with a deadline, like every blocking wait (not timed_mutex: its timed lock is
// invisible to ThreadSanitizer, which then reports every access under it).
struct ProcessCache {
  std::mutex mu;
  std::deque<std::pair<uint64_t, std::shared_ptr<const Graph>>> entries;
};
ProcessCache& processCache() {
  static ProcessCache c;
  return c;
}

std::atomic<bool> gWriteWarned{false};

// Closes a descriptor on every path.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

Result readText(const std::string& path, std::string* text) {
  Fd f(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (f.fd < 0) return fail(snclInvalidArgument, "{}: cannot open the topology file: {}", path, strerror(errno));
  struct stat st {};
  if (fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode) || size_t(st.st_size) > FileLimits{}.maxFileBytes)
    return fail(snclInvalidArgument, "{}: not a readable file of at most {} bytes", path, FileLimits{}.maxFileBytes);
  text->resize(size_t(st.st_size));
  size_t got = 0;
  while (got < text->size()) {
    ssize_t n = read(f.fd, text->data() + got, text->size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(snclInvalidArgument, "{}: read failed: {}", path, n < 0 ? strerror(errno) : "short file");
    got += size_t(n);
  }
  return snclSuccess;
}

uint64_t keyOf(const std::string& path, const std::string& text) {
  uint64_t k = fnvMix(kFnvBasis, kGraphBinaryVersion);
  k = fnv1a(path.data(), path.size(), k);
  k = fnvMix(k, text.size());
  return fnvMix(k, graphBinaryChecksum({reinterpret_cast<const uint8_t*>(text.data()), text.size()}));
}

bool cacheEnabled() { return env::integer("SNCL_TOPO_CACHE", 1) != 0; }

std::string cacheFile(uint64_t key) {
  std::string dir = env::str("SNCL_TOPO_CACHE_DIR").value_or("");
  if (dir.empty()) dir = "/dev/shm";
  return fmt::format("{}/sncl-topo-{}-{:016x}.bin", dir, geteuid(), key);
}

enum class Read { Hit, Missing, Rejected };

// Reads and decodes a host cache file. Only regular files of this user count: a file of
// another user under our name in a shared directory is not trusted.
Read readCache(const std::string& file, uint64_t key, Graph* out) {
  auto reject = [&](const std::string& why) {
    stats().rejected++;
    log::warn("topology cache {}: {}; parsing the topology file instead", file, why);
    return Read::Rejected;
  };
  Fd f(open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (f.fd < 0) return errno == ENOENT ? Read::Missing : reject(fmt::format("cannot open: {}", strerror(errno)));
  struct stat st {};
  if (fstat(f.fd, &st) != 0) return reject(fmt::format("cannot stat: {}", strerror(errno)));
  if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) return reject("not a regular file of this user");
  if (size_t(st.st_size) > kMaxCacheFileBytes) return reject(fmt::format("{} bytes is too large", st.st_size));
  std::vector<uint8_t> bytes(size_t(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = read(f.fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return reject(n < 0 ? fmt::format("read failed: {}", strerror(errno)) : "shorter than its size");
    got += size_t(n);
  }
  Result r;
  {
    ExpectedErrors quiet;  // the one WARN below names the file
    r = decodeGraph(bytes, key, out);
  }
  if (r != snclSuccess) return reject(lastError());
  return Read::Hit;
}

void warnWriteOnce(const std::string& what) {
  if (!gWriteWarned.exchange(true))
    log::warn("topology cache: {}; ranks on this host parse the topology file each (SNCL_TOPO_CACHE=0 "
              "silences this)", what);
}

// A temporary in the same directory, then rename: a reader sees the old file, no file, or
// the whole new one, never a torn one.
void writeCache(const std::string& file, uint64_t key, const Graph& g) {
  std::vector<uint8_t> bytes;
  if (encodeGraph(g, key, &bytes) != snclSuccess) return warnWriteOnce(lastError());
  static std::atomic<uint64_t> serial{0};
  std::string tmp = fmt::format("{}.tmp.{}.{}", file, getpid(), serial++);
  Fd f(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (f.fd < 0) return warnWriteOnce(fmt::format("cannot create {}: {}", tmp, strerror(errno)));
  size_t put = 0;
  while (put < bytes.size()) {
    ssize_t n = write(f.fd, bytes.data() + put, bytes.size() - put);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      warnWriteOnce(fmt::format("cannot write {}: {}", tmp, n < 0 ? strerror(errno) : "no space"));
      unlink(tmp.c_str());
      return;
    }
    put += size_t(n);
  }
  if (rename(tmp.c_str(), file.c_str()) != 0) {
    warnWriteOnce(fmt::format("cannot rename {} to {}: {}", tmp, file, strerror(errno)));
    unlink(tmp.c_str());
    return;
  }
  stats().written++;
  log::info(log::Subsys::Topo, "topology cache: wrote {} ({} bytes)", file, bytes.size());
}

Result parse(const std::string& path, const std::string& text, Graph* out) {
  SNCL_CHECK(parseTopology(text, path, out));
  stats().parsed++;
  log::info("topology {}: {} vertices, {} links, {} endpoints", path, out->vertexCount(), out->linkCount(),
            out->endpointCount());
  return snclSuccess;
}

// The pid in a lock file, or 0 when it is not (yet) written.
pid_t lockOwner(const std::string& lock) {
  Fd f(open(lock.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  char buf[32] = {};
  if (f.fd < 0 || read(f.fd, buf, sizeof(buf) - 1) <= 0) return 0;
  return pid_t(std::atoi(buf));
}

// A lock without an owner's pid (its writer died between creating it and writing the pid)
// older than this is left over, not being written.
constexpr int kOwnerlessLockSeconds = 5;

bool lockAbandoned(const std::string& lock) {
  const pid_t owner = lockOwner(lock);
  if (owner > 0) return kill(owner, 0) != 0 && errno == ESRCH;
  struct stat st {};
  return stat(lock.c_str(), &st) == 0 && time(nullptr) - st.st_mtime > kOwnerlessLockSeconds;
}

// Through the host cache: read it; on a miss, one process per host parses and writes it
// while the others wait for its lock to go.
Result loadViaHost(const std::string& path, const std::string& text, uint64_t key, Graph* out, TopoSource* how) {
  std::string file = cacheFile(key);
  Read first = readCache(file, key, out);
  if (first == Read::Hit) return *how = TopoSource::HostCache, snclSuccess;
  std::string lock = file + ".lock";
  Fd mine(open(lock.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (mine.fd >= 0) {
    std::string pid = std::to_string(getpid());
    bool wrote = write(mine.fd, pid.data(), pid.size()) == ssize_t(pid.size());
    (void)wrote;  // an empty lock only makes the others wait for it to go, as for a live one
    // Another process may have written the file between our miss and our lock.
    Read again = first == Read::Missing ? readCache(file, key, out) : Read::Missing;
    Result r = snclSuccess;
    if (again == Read::Hit) {
      *how = TopoSource::HostCache;
    } else {
      r = parse(path, text, out);
      if (r == snclSuccess) writeCache(file, key, *out), *how = TopoSource::Parsed;
    }
    unlink(lock.c_str());
    return r;
  }
  if (errno != EEXIST) {  // no cache directory to work in: parse, and say so once
    warnWriteOnce(fmt::format("cannot create {}: {}", lock, strerror(errno)));
    SNCL_CHECK(parse(path, text, out));
    return *how = TopoSource::Parsed, snclSuccess;
  }
  // Another process is writing it: wait for its lock to go, then read what it wrote.
  Deadline deadline = Deadline::afterMs(env::timeoutMs());
  auto sleep = std::chrono::microseconds(500);
  bool ownerGone = false;
  while (access(lock.c_str(), F_OK) == 0 && !deadline.expired()) {
    if (lockAbandoned(lock)) {
      ownerGone = true;
      break;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(20000));
  }
  if (!ownerGone && !deadline.expired() && readCache(file, key, out) == Read::Hit)
    return *how = TopoSource::HostCache, snclSuccess;
  // Its owner died or failed, or it took too long: parse, and leave a good file behind and
  // no lock that would make every later comm wait as long (two writers at worst, each
  // renaming a whole file into place).
  const bool tooLong = !ownerGone && deadline.expired();
  SNCL_CHECK(parse(path, text, out));
  writeCache(file, key, *out);
  if (ownerGone || tooLong) unlink(lock.c_str());
  *how = TopoSource::Parsed;
  return snclSuccess;
}

}  // namespace

const char* sourceName(TopoSource s) {
  switch (s) {
    case TopoSource::Parsed: return "parsed";
    case TopoSource::HostCache: return "host cache";
    case TopoSource::ProcessCache: return "process cache";
  }
  return "?";
}

Result topoCacheFileFor(const std::string& path, std::string* out) {
  std::string text;
  SNCL_CHECK(readText(path, &text));
  *out = cacheFile(keyOf(path, text));
  return snclSuccess;
}

Result loadTopologyCached(const std::string& path, Graph* out, TopoSource* howOut) {
  TopoSource how = TopoSource::Parsed;
  std::string text;
  SNCL_CHECK(readText(path, &text));
  if (!cacheEnabled()) {
    SNCL_CHECK(parse(path, text, out));
    if (howOut) *howOut = how;
    return snclSuccess;
  }
  uint64_t key = keyOf(path, text);
  ProcessCache& pc = processCache();
  // Holding the lock across the load makes the process's other threads wait for this
  // graph rather than load it too; past the deadline a thread loads on its own.
  std::unique_lock lock(pc.mu, std::defer_lock);
  Deadline deadline = Deadline::afterMs(env::timeoutMs());
  while (!lock.try_lock() && !deadline.expired()) std::this_thread::sleep_for(std::chrono::microseconds(200));
  if (lock.owns_lock()) {
    for (const auto& [k, g] : pc.entries)
      if (k == key) {
        *out = g->clone();
        stats().processHits++;
        log::info(log::Subsys::Topo, "topology {}: from the process cache", path);
        if (howOut) *howOut = TopoSource::ProcessCache;
        return snclSuccess;
      }
  }
  Graph g;
  SNCL_CHECK(loadViaHost(path, text, key, &g, &how));
  if (how == TopoSource::HostCache) {
    stats().hostHits++;
    log::info(log::Subsys::Topo, "topology {}: from the host cache {}", path, cacheFile(key));
  }
  if (lock.owns_lock()) {
    *out = g.clone();
    if (pc.entries.size() >= kProcessEntries) pc.entries.pop_front();
    pc.entries.emplace_back(key, std::make_shared<const Graph>(std::move(g)));
  } else {
    *out = std::move(g);
  }
  if (howOut) *howOut = how;
  return snclSuccess;
}

TopoCacheStats topoCacheStats() {
  Stats& s = stats();
  return {s.parsed.load(), s.hostHits.load(), s.processHits.load(), s.rejected.load(), s.written.load()};
}

void clearTopoProcessCache() {
  ProcessCache& pc = processCache();
  std::unique_lock lock(pc.mu, std::defer_lock);
  Deadline deadline = Deadline::afterMs(env::timeoutMs());
  while (!lock.try_lock() && !deadline.expired()) std::this_thread::sleep_for(std::chrono::microseconds(200));
  if (lock.owns_lock()) pc.entries.clear();
}

}  // namespace sncl::topo
