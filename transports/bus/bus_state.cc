#include "transports/bus/bus_state.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "lib/base/clock.h"
#include "lib/net/bootstrap.h"
#include "transports/shm/segment.h"

namespace sncl::bus {
namespace {

constexpr uint64_t kMagic = 0x5c1b05u;

size_t align64(size_t x) { return (x + 63) / 64 * 64; }

struct Layout {
  size_t channels, links, ranks, consumed, rings, total;
};

Layout layoutOf(uint32_t nranks, uint32_t nlinks, uint32_t ringEntries) {
  Layout l;
  l.channels = align64(sizeof(Header));
  l.links = l.channels + align64(sizeof(Channel) * 2 * size_t(nlinks));
  l.ranks = l.links + align64(sizeof(LinkHealth) * nlinks);
  l.consumed = l.ranks + align64(sizeof(RankHealth) * nranks);
  l.rings = l.consumed + 64 * size_t(nranks) * nranks;
  l.total = l.rings + align64(sizeof(ArrivalEntry) * size_t(nranks) * nranks * ringEntries);
  return l;
}

// Maps another process's segment by name, whole.
Result mapByName(const std::string& name, size_t bytes, std::shared_ptr<void>* out) {
  int fd = shm_open(("/" + name).c_str(), O_RDWR, 0);
  if (fd < 0) return fail(snclSystemError, "bus: cannot open /dev/shm/{}: {}", name, strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || size_t(st.st_size) < bytes) {
    close(fd);
    return fail(snclInternalError, "bus: /dev/shm/{} is smaller than the {} bytes expected", name, bytes);
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return fail(snclSystemError, "bus: mmap of /dev/shm/{} failed: {}", name, strerror(errno));
  *out = std::shared_ptr<void>(p, [bytes](void* q) { munmap(q, bytes); });
  return snclSuccess;
}

struct Record {
  int32_t status;
  char name[92];
};

}  // namespace

void SharedState::bind(char* base) {
  const Layout l = layoutOf(reinterpret_cast<Header*>(base)->nranks, reinterpret_cast<Header*>(base)->nlinks,
                            reinterpret_cast<Header*>(base)->ringEntries);
  header_ = reinterpret_cast<Header*>(base);
  channels_ = reinterpret_cast<Channel*>(base + l.channels);
  links_ = reinterpret_cast<LinkHealth*>(base + l.links);
  ranks_ = reinterpret_cast<RankHealth*>(base + l.ranks);
  consumed_ = reinterpret_cast<Counter*>(base + l.consumed);
  rings_ = reinterpret_cast<ArrivalEntry*>(base + l.rings);
}

Result SharedState::open(const TransportContext& ctx, uint64_t key, uint32_t nlinks, uint32_t ringEntries,
                         std::unique_ptr<SharedState>* out) {
  const Deadline deadline = Deadline::afterMs(ctx.timeoutMs);
  const Layout l = layoutOf(uint32_t(ctx.nranks), nlinks, ringEntries);
  std::unique_ptr<SharedState> s(new SharedState());
  std::shared_ptr<shm::Segment> created;

  // Rank 0 creates and initializes; the others learn its name. A failure on rank 0 still
  // goes through the exchange so that nobody waits for it until the deadline.
  std::vector<Record> records(ctx.nranks);
  if (ctx.rank == 0) {
    Result r = shm::Segment::create(shm::segmentName(key, ctx.nranks), l.total, &created);
    records[0].status = r;
    if (r == snclSuccess) {
      snprintf(records[0].name, sizeof(records[0].name), "%s", created->name().c_str());
      auto* h = new (created->data()) Header{};
      h->magic = kMagic;
      h->nranks = uint32_t(ctx.nranks);
      h->nlinks = nlinks;
      h->ringEntries = ringEntries;
      h->originNs = wallNs();
      s->keep_ = created;
      s->bind(created->data());
    }
  }
  SNCL_CHECK(ctx.bootstrap->allGather(records.data(), sizeof(Record), deadline));
  if (records[0].status != snclSuccess)
    return ctx.rank == 0 ? Result(records[0].status)
                         : fail(snclRemoteError, "bus: rank 0 could not create the bus segment ({})",
                                resultName(Result(records[0].status)));
  Result mapped = snclSuccess;
  if (ctx.rank != 0) {
    const std::string name(records[0].name, strnlen(records[0].name, sizeof(records[0].name)));
    if (auto same = shm::Segment::findInProcess(name)) {
      s->keep_ = same;
      s->bind(same->data());
    } else {
      mapped = mapByName(name, l.total, &s->keep_);
      if (mapped == snclSuccess) s->bind(static_cast<char*>(s->keep_.get()));
    }
    if (mapped == snclSuccess && (s->header_->magic != kMagic || s->header_->nlinks != nlinks))
      mapped = fail(snclInternalError, "bus: the bus segment of rank 0 has another layout (topologies differ?)");
  }
  std::vector<int32_t> statuses(ctx.nranks);
  statuses[ctx.rank] = mapped;
  Result r = ctx.bootstrap->allGather(statuses.data(), sizeof(int32_t), deadline);
  if (created) created->unlink();  // everyone mapped it (or gave up): only mappings keep it
  SNCL_CHECK(r);
  SNCL_CHECK(mapped);
  for (int k = 0; k < ctx.nranks; ++k)
    if (statuses[k] != snclSuccess)
      return fail(snclRemoteError, "bus: rank {} could not map the bus segment ({})", k,
                  resultName(Result(statuses[k])));
  s->bytes_ = l.total;
  *out = std::move(s);
  return snclSuccess;
}

}  // namespace sncl::bus
