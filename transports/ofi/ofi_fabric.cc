#include "transports/ofi/ofi_fabric.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "lib/base/log.h"

namespace sncl::ofi {
namespace {

constexpr uint32_t kApiVersion = FI_VERSION(1, 17);

// The registration modes this transport knows how to honour (ofi_mr.h). Not FI_MR_RAW
// (keys we never use remotely) nor FI_MR_HMEM (host memory only).
constexpr uint64_t kSupportedMrModes =
    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;

struct InfoDeleter {
  void operator()(fi_info* i) const { fi_freeinfo(i); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

// RDM endpoints, tagged or untagged, receiving per source (FI_DIRECTED_RECV): a slot
// matches only its peer's address, never a stranger that reached the endpoint's port
// (a reused port, a sender of an earlier job still retransmitting). Untagged messages
// arrive in the order they were sent (FI_ORDER_SAS): what the FI_MSG fallback needs to
// match a peer's messages to the receives posted for it.
InfoPtr makeHints(bool tagged, const std::string& provider) {
  InfoPtr h(fi_allocinfo());
  if (!h) return h;
  h->caps = (tagged ? FI_TAGGED : FI_MSG) | FI_DIRECTED_RECV;
  h->ep_attr->type = FI_EP_RDM;
  h->mode = FI_CONTEXT | FI_CONTEXT2;  // every operation carries a struct fi_context2
  h->domain_attr->mr_mode = kSupportedMrModes;
  // One thread drives a transport at a time (the comm serializes collectives); abort()
  // never calls into libfabric. So no locks inside the provider.
  h->domain_attr->threading = FI_THREAD_DOMAIN;
  if (!tagged) h->tx_attr->msg_order = h->rx_attr->msg_order = FI_ORDER_SAS;
  if (!provider.empty()) h->fabric_attr->prov_name = strdup(provider.c_str());
  return h;
}

// ofi_rxm sends up to FI_OFI_RXM_EAGER_LIMIT bytes at once (16 KiB by default) and more by
// rendezvous, a round trip more: a 32 KiB All-Reduce of 2 ranks over tcp took 127 against
// 62 us. This transport posts a receive slot for every message ahead of it, so eager
// bytes land in place (rxm's dynamic receive buffers over tcp): unless the user set it,
// the limit becomes rxm's own segmentation limit (128 KiB), with no more memory per rank.
// libfabric reads it when the process first calls fi_getinfo: before that, once.
void preferEagerSends() {
  static std::once_flag once;
  std::call_once(once, [] { setenv("FI_OFI_RXM_EAGER_LIMIT", std::to_string(kEagerBytes).c_str(), 0); });
}

// FI_SOURCE with the interface's address: providers bind there (tcp, udp, sockets) or
// ignore it (shm), so no other interface carries traffic.
InfoPtr getInfo(const InfoPtr& hints, const std::string& srcNode, int* rc) {
  preferEagerSends();
  fi_info* out = nullptr;
  *rc = fi_getinfo(kApiVersion, srcNode.empty() ? nullptr : srcNode.c_str(), nullptr,
                   srcNode.empty() ? 0 : FI_SOURCE, hints.get(), &out);
  return InfoPtr(*rc == 0 ? out : nullptr);
}

void closeFid(fid* f) {
  if (f) fi_close(f);
}

}  // namespace

std::string availableProviders(const std::string& srcNode) {
  std::vector<std::string> names;
  for (bool tagged : {true, false}) {
    InfoPtr hints = makeHints(tagged, "");
    int rc = 0;
    InfoPtr list = hints ? getInfo(hints, srcNode, &rc) : nullptr;
    for (fi_info* i = list.get(); i; i = i->next) {
      std::string n = i->fabric_attr->prov_name;
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    }
  }
  return names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "));
}

Fabric::~Fabric() {
  closeEndpoint();
  closeFid(av_ ? &av_->fid : nullptr);
  closeFid(cq_ ? &cq_->fid : nullptr);
  closeFid(domain_ ? &domain_->fid : nullptr);
  closeFid(fabric_ ? &fabric_->fid : nullptr);
  if (info_) fi_freeinfo(info_);
}

void Fabric::closeEndpoint() {
  closeFid(ep_ ? &ep_->fid : nullptr);
  ep_ = nullptr;
}

Result Fabric::choose(const OfiOptions& options, const std::string& srcNode) {
  const char* where = srcNode.empty() ? "any address" : srcNode.c_str();
  // Tagged first; the FI_MSG fallback serves providers without FI_TAGGED.
  for (bool tagged : {true, false}) {
    if (tagged && !options.tagged) continue;
    InfoPtr hints = makeHints(tagged, options.provider);
    if (!hints) return fail(snclSystemError, "ofi: fi_allocinfo failed");
    int rc = 0;
    InfoPtr list = getInfo(hints, srcNode, &rc);
    if (rc != 0 && rc != -FI_ENODATA)
      log::info(log::Subsys::Transport, "ofi: fi_getinfo ({}) on {}: {}", tagged ? "tagged" : "msg", where,
                fi_strerror(-rc));
    for (fi_info* i = list.get(); i; i = i->next) {
      // Automatically, never shm: the transport exists to reach other hosts.
      if (options.provider.empty() && !strcmp(i->fabric_attr->prov_name, "shm")) continue;
      info_ = fi_dupinfo(i);
      if (!info_) return fail(snclSystemError, "ofi: fi_dupinfo failed");
      tagged_ = tagged;
      provider_ = info_->fabric_attr->prov_name;
      return snclSuccess;
    }
  }
  if (!options.provider.empty())
    return fail(snclInvalidArgument,
                "ofi: provider '{}' (SNCL_OFI_PROVIDER) offers no reliable datagram endpoint on {} (available: {})",
                options.provider, where, availableProviders(srcNode));
  return fail(snclInvalidArgument, "ofi: no libfabric provider offers reliable datagram endpoints on {} (available: {})",
              where, availableProviders(srcNode));
}

Result Fabric::openCq(size_t cqSize) {
  fi_cq_attr attr{};
  attr.format = FI_CQ_FORMAT_TAGGED;
  attr.size = cqSize;
  // A pollable fd lets wait() sleep until a peer's bytes arrive; a provider without one
  // (shm, udp;ofi_rxd here) gets a CQ without wait object, which costs nothing on completion.
  attr.wait_obj = FI_WAIT_FD;
  int rc = fi_cq_open(domain_, &attr, &cq_, nullptr);
  if (rc == 0 && fi_control(&cq_->fid, FI_GETWAIT, &waitFd_) == 0 && waitFd_ >= 0) return snclSuccess;
  if (rc == 0) fi_close(&cq_->fid);
  cq_ = nullptr;
  waitFd_ = -1;
  attr.wait_obj = FI_WAIT_NONE;
  rc = fi_cq_open(domain_, &attr, &cq_, nullptr);
  if (rc) return fail(snclSystemError, "ofi: fi_cq_open ({}): {}", provider_, fi_strerror(-rc));
  return snclSuccess;
}

Result Fabric::open(const OfiOptions& options, const std::string& srcNode, size_t avCount, size_t cqSize) {
  SNCL_CHECK(choose(options, srcNode));
  mrMode_ = info_->domain_attr->mr_mode;
  maxMsgSize_ = info_->ep_attr->max_msg_size;
  injectSize_ = info_->tx_attr->inject_size;
  cqDataBytes_ = info_->domain_attr->cq_data_size;
  txDepth_ = info_->tx_attr->size;
  int rc = fi_fabric(info_->fabric_attr, &fabric_, nullptr);
  if (rc) return fail(snclSystemError, "ofi: fi_fabric ({}): {}", provider_, fi_strerror(-rc));
  rc = fi_domain(fabric_, info_, &domain_, nullptr);
  if (rc) return fail(snclSystemError, "ofi: fi_domain ({}): {}", provider_, fi_strerror(-rc));
  SNCL_CHECK(openCq(cqSize));
  fi_av_attr av{};
  av.type = info_->domain_attr->av_type == FI_AV_UNSPEC ? FI_AV_TABLE : info_->domain_attr->av_type;
  av.count = avCount;
  rc = fi_av_open(domain_, &av, &av_, nullptr);
  if (rc) return fail(snclSystemError, "ofi: fi_av_open ({}): {}", provider_, fi_strerror(-rc));
  rc = fi_endpoint(domain_, info_, &ep_, nullptr);
  if (rc) return fail(snclSystemError, "ofi: fi_endpoint ({}): {}", provider_, fi_strerror(-rc));
  rc = fi_ep_bind(ep_, &av_->fid, 0);
  if (!rc) rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV);
  if (!rc) rc = fi_enable(ep_);
  if (rc) return fail(snclSystemError, "ofi: enabling the endpoint ({}): {}", provider_, fi_strerror(-rc));
  return snclSuccess;
}

Result Fabric::localAddress(AddressRecord* record) const {
  size_t len = sizeof(record->addr);
  int rc = fi_getname(&ep_->fid, record->addr, &len);
  if (rc) return fail(snclSystemError, "ofi: fi_getname ({}): {} ({} bytes)", provider_, fi_strerror(-rc), len);
  record->addrLen = static_cast<uint16_t>(len);
  record->tagged = tagged_;
  snprintf(record->provider, sizeof(record->provider), "%s", provider_.c_str());
  return snclSuccess;
}

Result Fabric::insert(const AddressRecord& record, int rank, fi_addr_t* out) {
  int n = fi_av_insert(av_, record.addr, 1, out, 0, nullptr);
  if (n != 1)
    return fail(snclRemoteError, "ofi: the address of rank {} ({}) does not resolve with provider {}: {}", rank,
                addressString(record.addr, record.addrLen), provider_, n < 0 ? fi_strerror(-n) : "not inserted");
  return snclSuccess;
}

std::string Fabric::addressString(const void* addr, size_t len) const {
  char buf[128] = "?";
  size_t size = sizeof(buf);
  if (av_ && len) fi_av_straddr(av_, addr, buf, &size);
  return buf;
}

std::string Fabric::errorText(int err, int provErrno, const void* errData, size_t errDataSize) const {
  char buf[256] = "";
  const char* prov = cq_ ? fi_cq_strerror(cq_, provErrno, errData, buf, sizeof(buf)) : nullptr;
  if (!prov || !*prov || !strcmp(prov, fi_strerror(err))) return fi_strerror(err);
  return fmt::format("{} (provider: {})", fi_strerror(err), prov);
}

}  // namespace sncl::ofi

