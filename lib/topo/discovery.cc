#include "lib/topo/discovery.h"

#include <hwloc.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "lib/base/env.h"
#include "lib/base/log.h"

namespace sncl::topo {
namespace {

constexpr uint32_t kViewMagic = 0x56544e53;  // "SNTV"
constexpr uint16_t kViewVersion = 1;
constexpr int32_t kMaxCount = 1 << 20;

// hwloc's view of the machine, loaded once per process and kept: the topology is
// read-only afterwards, which hwloc allows from any thread.
struct Hwloc {
  hwloc_topology_t topo = nullptr;
  MachineInfo info;
  Result status = snclSuccess;
};

Hwloc& hwloc() {
  static Hwloc h;
  static std::once_flag once;
  std::call_once(once, [] {
    if (hwloc_topology_init(&h.topo) != 0) {
      h.status = fail(snclSystemError, "hwloc_topology_init failed");
      return;
    }
    // PCI devices and the OS devices behind them (NICs) are filtered out by default.
    hwloc_topology_set_io_types_filter(h.topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(h.topo) != 0) {
      h.status = fail(snclSystemError, "hwloc_topology_load failed");
      return;
    }
    MachineInfo& m = h.info;
    m.packages = std::max(1, hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_PACKAGE));
    m.numaNodes = std::max(1, hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_NUMANODE));
    m.cores = std::max(1, hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_CORE));
    m.pus = std::max(1, hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_PU));
    const hwloc_obj_type_t cacheTypes[] = {HWLOC_OBJ_L1CACHE, HWLOC_OBJ_L2CACHE, HWLOC_OBJ_L3CACHE};
    for (int i = 0; i < 3; ++i) {
      int n = hwloc_get_nbobjs_by_type(h.topo, cacheTypes[i]);
      if (n <= 0) continue;
      hwloc_obj_t c = hwloc_get_obj_by_type(h.topo, cacheTypes[i], 0);
      m.caches.push_back({i + 1, n, c->attr ? c->attr->cache.size : 0});
    }
    m.pciDevices = std::max(0, hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_PCI_DEVICE));
    for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_osdev(h.topo, o));)
      if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK ||
          o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS)
        m.nics.push_back(o->name ? o->name : "?");
    int numaCount = hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_NUMANODE);
    for (int c = 0; c < hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_CORE); ++c) {
      hwloc_obj_t core = hwloc_get_obj_by_type(h.topo, HWLOC_OBJ_CORE, c);
      int numa = 0;
      for (int n = 0; n < numaCount; ++n) {
        hwloc_obj_t node = hwloc_get_obj_by_type(h.topo, HWLOC_OBJ_NUMANODE, n);
        if (node->cpuset && hwloc_bitmap_isincluded(core->cpuset, node->cpuset)) {
          numa = n;
          break;
        }
      }
      m.coreNuma.push_back(numa);
    }
    log::info("hwloc: {} packages, {} NUMA nodes, {} cores, {} PUs, {} PCI devices, {} NICs",
              m.packages, m.numaNodes, m.cores, m.pus, m.pciDevices, m.nics.size());
  });
  return h;
}

// Pins the calling thread per SNCL_BIND; returns whether it did.
bool bindThread(Hwloc& h, int localRank) {
  std::string mode = env::str("SNCL_BIND").value_or("none");
  if (mode == "none") return false;
  hwloc_obj_type_t type;
  if (mode == "core") type = HWLOC_OBJ_CORE;
  else if (mode == "numa") type = HWLOC_OBJ_NUMANODE;
  else {
    log::warn("SNCL_BIND={} is not none, core or numa; not binding", mode);
    return false;
  }
  int n = hwloc_get_nbobjs_by_type(h.topo, type);
  if (n <= 0) return false;
  hwloc_obj_t obj = hwloc_get_obj_by_type(h.topo, type, std::max(0, localRank) % n);
  if (!obj || !obj->cpuset || hwloc_set_cpubind(h.topo, obj->cpuset, HWLOC_CPUBIND_THREAD) != 0) {
    log::warn("SNCL_BIND={}: could not bind local rank {}: {}", mode, localRank, strerror(errno));
    return false;
  }
  return true;
}

template <class T>
void put(uint8_t*& p, const T& v) {
  std::memcpy(p, &v, sizeof(v));
  p += sizeof(v);
}
template <class T>
void get(const uint8_t*& p, T* v) {
  std::memcpy(v, p, sizeof(*v));
  p += sizeof(*v);
}

}  // namespace

Result discoverMachine(MachineInfo* out) {
  Hwloc& h = hwloc();
  if (h.status != snclSuccess) return h.status;
  *out = h.info;
  return snclSuccess;
}

uint64_t lastLevelCacheBytes() {
  MachineInfo m;
  if (discoverMachine(&m) != snclSuccess || m.caches.empty()) return 0;
  return m.caches.back().bytes;
}

Result discoverLocal(int rank, int localRank, uint64_t hostId, const char* hostname, LocalView* out) {
  Hwloc& h = hwloc();
  if (h.status != snclSuccess) return h.status;
  const MachineInfo& m = h.info;
  LocalView v;
  v.hostId = hostId;
  v.rank = rank;
  v.packages = m.packages;
  v.numaNodes = m.numaNodes;
  v.cores = m.cores;
  v.pus = m.pus;
  for (const auto& c : m.caches)
    if (c.level == 3) v.l3Caches = c.count;
  v.pciDevices = m.pciDevices;
  v.nics = int32_t(m.nics.size());
  v.bound = bindThread(h, localRank);
  hwloc_bitmap_t where = hwloc_bitmap_alloc();
  if (where && hwloc_get_last_cpu_location(h.topo, where, HWLOC_CPUBIND_THREAD) == 0) {
    int pu = hwloc_bitmap_first(where);
    hwloc_obj_t puObj = pu >= 0 ? hwloc_get_pu_obj_by_os_index(h.topo, unsigned(pu)) : nullptr;
    hwloc_obj_t core = puObj ? hwloc_get_ancestor_obj_by_type(h.topo, HWLOC_OBJ_CORE, puObj) : nullptr;
    if (core && core->logical_index < m.coreNuma.size()) {
      v.core = int32_t(core->logical_index);
      v.numa = m.coreNuma[core->logical_index];
    }
  }
  hwloc_bitmap_free(where);
  if (hostname) std::strncpy(v.hostname, hostname, sizeof(v.hostname) - 1);
  log::info("rank {} (local {}) on core {} NUMA {}{}", rank, localRank, v.core, v.numa,
            v.bound ? " (bound by SNCL_BIND)" : "");
  *out = v;
  return snclSuccess;
}

void encodeLocalView(const LocalView& v, uint8_t out[kLocalViewBytes]) {
  std::memset(out, 0, kLocalViewBytes);
  uint8_t* p = out;
  put(p, kViewMagic);
  put(p, kViewVersion);
  put(p, uint16_t(v.bound));
  put(p, v.hostId);
  for (int32_t x : {v.rank, v.packages, v.numaNodes, v.cores, v.pus, v.l3Caches, v.pciDevices,
                    v.nics, v.core, v.numa})
    put(p, x);
  std::memcpy(p, v.hostname, sizeof(v.hostname));
  static_assert(4 + 2 + 2 + 8 + 10 * 4 + sizeof(LocalView::hostname) <= kLocalViewBytes);
}

Result decodeLocalView(const uint8_t* in, size_t bytes, LocalView* out) {
  if (bytes < kLocalViewBytes)
    return fail(snclInvalidArgument, "topology view: {} bytes, expected {}", bytes, kLocalViewBytes);
  const uint8_t* p = in;
  uint32_t magic;
  uint16_t version, bound;
  get(p, &magic);
  get(p, &version);
  get(p, &bound);
  if (magic != kViewMagic || version != kViewVersion)
    return fail(snclInvalidArgument, "topology view: not a version {} sncl view (magic {:#x}, version {})",
                kViewVersion, magic, version);
  LocalView v;
  v.bound = bound != 0;
  get(p, &v.hostId);
  for (int32_t* x : {&v.rank, &v.packages, &v.numaNodes, &v.cores, &v.pus, &v.l3Caches,
                     &v.pciDevices, &v.nics, &v.core, &v.numa})
    get(p, x);
  std::memcpy(v.hostname, p, sizeof(v.hostname));
  v.hostname[sizeof(v.hostname) - 1] = 0;
  for (int32_t x : {v.packages, v.numaNodes, v.cores, v.pus, v.l3Caches, v.pciDevices, v.nics})
    if (x < 0 || x > kMaxCount)
      return fail(snclInvalidArgument, "topology view of rank {}: count {} out of range", v.rank, x);
  if (v.numaNodes < 1 || v.core < -1 || v.core >= v.cores || v.numa < -1 || v.numa >= v.numaNodes)
    return fail(snclInvalidArgument, "topology view of rank {}: core {} of {} / NUMA {} of {} is impossible",
                v.rank, v.core, v.cores, v.numa, v.numaNodes);
  *out = v;
  return snclSuccess;
}

}  // namespace sncl::topo
