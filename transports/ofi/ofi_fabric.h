// The libfabric objects of one transport (fabric, domain, completion queue, address vector,
// endpoint) and the choice of provider they come from.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "lib/base/error.h"
#include "transports/ofi/ofi.h"

namespace sncl::ofi {

// What a rank publishes about its endpoint during setup (all-gathered, fixed size).
struct AddressRecord {
  static constexpr size_t kMaxAddr = 160;
  int32_t status;         // snclSuccess, or why this rank could not open its endpoint
  uint8_t participates;   // this rank has ofi peers (others publish only their status)
  uint8_t tagged;         // FI_TAGGED (1) or the FI_MSG fallback (0)
  uint16_t addrLen;
  uint32_t chunkBytes;
  char provider[48];
  uint8_t addr[kMaxAddr];  // fi_getname's bytes
  char error[192];         // status's message, for the other ranks' errors
  uint32_t probeAddr;      // rail checks: the rail's IPv4 address and the port of its probe
  uint16_t probePort;      // listener, network order (0: none)
};

// What ofi_rxm sends at once rather than by rendezvous, unless the user set
// FI_OFI_RXM_EAGER_LIMIT (ofi_fabric.cc).
constexpr size_t kEagerBytes = 128 << 10;

class Fabric {
 public:
  Fabric() = default;
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  // Picks the provider (options.provider, else the first fi_getinfo offers that can leave
  // the host), bound to the IPv4 address srcNode so that traffic stays on the interface the
  // user named, and opens an RDM endpoint with a completion queue and an address vector.
  Result open(const OfiOptions& options, const std::string& srcNode, size_t avCount, size_t cqSize);
  // Closes the endpoint first (it cancels posted operations) so that the memory they
  // point at can be deregistered and freed; the destructor closes the rest.
  void closeEndpoint();

  Result localAddress(AddressRecord* record) const;
  // Resolves a peer's published address; fails (naming the rank) when it does not resolve.
  Result insert(const AddressRecord& record, int rank, fi_addr_t* out);
  std::string addressString(const void* addr, size_t len) const;  // fi_av_straddr
  // The provider's text for an error completion, with fi_strerror's.
  std::string errorText(int err, int provErrno, const void* errData, size_t errDataSize) const;

  fid_fabric* fabric() const { return fabric_; }
  fid_domain* domain() const { return domain_; }
  fid_cq* cq() const { return cq_; }
  fid_ep* ep() const { return ep_; }
  int waitFd() const { return waitFd_; }  // -1: the provider's CQ has no pollable fd
  const std::string& provider() const { return provider_; }
  bool tagged() const { return tagged_; }
  uint64_t mrMode() const { return mrMode_; }
  size_t maxMsgSize() const { return maxMsgSize_; }
  size_t injectSize() const { return injectSize_; }
  size_t cqDataBytes() const { return cqDataBytes_; }
  size_t txDepth() const { return txDepth_; }

 private:
  Result choose(const OfiOptions& options, const std::string& srcNode);
  Result openCq(size_t cqSize);

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_ep* ep_ = nullptr;
  int waitFd_ = -1;
  std::string provider_;
  bool tagged_ = true;
  uint64_t mrMode_ = 0;
  size_t maxMsgSize_ = 0;
  size_t injectSize_ = 0;
  size_t cqDataBytes_ = 0;
  size_t txDepth_ = 0;
};

// Provider names fi_getinfo offers for RDM endpoints with the source address srcNode
// ("" for any), comma-separated: for errors that list the alternatives.
std::string availableProviders(const std::string& srcNode);

}  // namespace sncl::ofi
