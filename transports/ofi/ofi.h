// The libfabric transport: ranks on different hosts exchange tagged messages over reliable
// datagram endpoints (FI_EP_RDM) of whichever provider reaches them (tcp, verbs, efa, shm).
// See ofi_transport.h for how it works.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "lib/transport/transport.h"

namespace sncl {

// How send buffers meet the provider's memory-registration needs.
enum class OfiMrPolicy {
  Auto,    // register (through the cache) only when the provider asks for FI_MR_LOCAL
  Cache,   // always register user buffers, cached by address range (zero copy)
  Bounce,  // always copy into send slots registered once at setup
};

struct OfiOptions {
  std::string provider;            // fi_info -p syntax ("tcp;ofi_rxm", "shm"); empty: automatic
  bool tagged = true;              // false forces the FI_MSG fallback even where FI_TAGGED exists
  size_t chunkBytes = 1u << 20;    // largest message on the wire; receive slots have this size
  size_t slots = 4;                // per peer: receive slots, and send chunks in flight
  OfiMrPolicy mr = OfiMrPolicy::Auto;
  bool directRecv = true;          // plain receives may land in the caller's buffer (ofi_transport.h)
  std::string error;               // a malformed variable; setup fails with this message
  // Rails (ofi_rails.h): with interfaces named, one endpoint per interface, traffic on the
  // first healthy one. A rail's own options name its interface (iface), its index (rail)
  // and the time after which it counts as lost when its requests make no progress and a
  // probe of the peer's rail address gets no answer (railDetectMs; 0: only errors and the
  // carrier lose a rail).
  std::vector<std::string> ifaces;
  std::string iface;
  int rail = -1;
  int64_t railDetectMs = 1000;

  static constexpr size_t kMaxSlots = 1024;

  // SNCL_OFI_PROVIDER, SNCL_OFI_TAGGED (0/1), SNCL_OFI_CHUNK_SIZE, SNCL_OFI_SLOTS (1..1024),
  // SNCL_OFI_MR (auto, cache, bounce), SNCL_OFI_DIRECT_RECV (0/1), SNCL_OFI_IFACES (comma-separated interfaces, one
  // rail each, in the same rail order on every host), SNCL_OFI_RAIL_DETECT_MS. A malformed
  // SNCL_OFI_SLOTS fails setup; other malformed values are logged and the default used.
  static OfiOptions fromEnv();
};

std::unique_ptr<Transport> createOfiTransport();  // options from the environment
std::unique_ptr<Transport> createOfiTransport(const OfiOptions& options);  // rails when ifaces are named

}  // namespace sncl
