// Local discovery with hwloc: what this machine has (packages, NUMA nodes, cores, caches,
// PCI devices, NICs) and where the calling rank runs. Each rank condenses that into a
// fixed-size LocalView; the comm all-gathers the views over the bootstrap and every rank
// merges the same bytes into the same graph (merge.h).
//
// SNCL_BIND pins the calling thread before its location is read:
//   none (default)  leave the thread where the OS put it
//   core            local rank i on core (i mod cores)
//   numa            local rank i on the cores of NUMA node (i mod NUMA nodes)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lib/base/error.h"

namespace sncl::topo {

struct MachineInfo {
  struct Cache {
    int level = 0;  // 1, 2, 3...
    int count = 0;
    uint64_t bytes = 0;  // of one cache
  };
  int packages = 0;
  int numaNodes = 0;
  int cores = 0;
  int pus = 0;  // hardware threads
  std::vector<Cache> caches;
  int pciDevices = 0;
  std::vector<std::string> nics;  // OS names of network devices (eth0, ib0...)
  std::vector<int> coreNuma;      // NUMA node of each core, by core logical index
};

// The machine as hwloc sees it. hwloc runs once per process; later calls reuse it.
Result discoverMachine(MachineInfo* out);

// Bytes of one last-level cache (the largest level hwloc reports); 0 when hwloc cannot
// tell. Read from the OS's cache description, which a virtual machine's CPUID may
// overstate (glibc's sysconf reported 256 MiB for the test machine's 32 MiB L3).
uint64_t lastLevelCacheBytes();

// One rank's condensed view, as sent to the other ranks.
struct LocalView {
  uint64_t hostId = 0;  // PeerInfo.hostId: SNCL_HOSTID splits a machine into virtual hosts
  int32_t rank = -1;
  int32_t packages = 0, numaNodes = 0, cores = 0, pus = 0;
  int32_t l3Caches = 0, pciDevices = 0, nics = 0;
  int32_t core = -1;  // logical index of the core the rank ran on at discovery, -1 unknown
  int32_t numa = -1;  // its NUMA node, -1 unknown
  bool bound = false; // SNCL_BIND pinned it there
  char hostname[32] = {};
};
inline constexpr size_t kLocalViewBytes = 96;

// Discovers the machine, applies SNCL_BIND for this local rank (its index among the ranks
// with the same hostId), and fills the view.
Result discoverLocal(int rank, int localRank, uint64_t hostId, const char* hostname, LocalView* out);

// Fixed-size encoding (host byte order: all ranks of a job share one architecture).
void encodeLocalView(const LocalView& v, uint8_t out[kLocalViewBytes]);
// Rejects bytes that are not a view of this version or hold impossible values.
Result decodeLocalView(const uint8_t* in, size_t bytes, LocalView* out);

}  // namespace sncl::topo
