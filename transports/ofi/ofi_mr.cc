#include "transports/ofi/ofi_mr.h"

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <unistd.h>

namespace sncl::ofi {

void Registrar::init(fid_domain* domain, fid_ep* ep, uint64_t mrMode, size_t cacheEntries) {
  domain_ = domain;
  ep_ = ep;
  mrMode_ = mrMode;
  entries_.assign(cacheEntries, Entry{});
  owned_.reserve(4);
}

Result Registrar::reg(const void* addr, size_t len, fid_mr** mr) {
  const uint64_t key = (mrMode_ & FI_MR_PROV_KEY) ? 0 : nextKey_++;
  int rc = fi_mr_reg(domain_, addr, len, FI_SEND | FI_RECV, 0, key, 0, mr, nullptr);
  if (rc) return fail(snclSystemError, "ofi: fi_mr_reg of {} bytes at {}: {}", len, addr, fi_strerror(-rc));
  if (mrMode_ & FI_MR_ENDPOINT) {
    rc = fi_mr_bind(*mr, &ep_->fid, 0);
    if (!rc) rc = fi_mr_enable(*mr);
    if (rc) {
      fi_close(&(*mr)->fid);
      *mr = nullptr;
      return fail(snclSystemError, "ofi: binding a memory registration to the endpoint: {}", fi_strerror(-rc));
    }
  }
  return snclSuccess;
}

Result Registrar::registerOwned(void* addr, size_t len, void** desc) {
  fid_mr* mr = nullptr;
  SNCL_CHECK(reg(addr, len, &mr));
  owned_.push_back(mr);
  *desc = fi_mr_desc(mr);
  return snclSuccess;
}

Result Registrar::acquire(const void* addr, size_t len, int* entry, void** desc) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(addr) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(addr) + len + page - 1) & ~(page - 1);
  int victim = -1;
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (e.begin <= begin && end <= e.end && e.begin != e.end) {
      e.lastUse = ++clock_;
      ++e.refs;
      ++hits_;
      *entry = static_cast<int>(i);
      *desc = e.desc;
      return snclSuccess;
    }
    if (e.refs == 0 && (victim < 0 || e.lastUse < entries_[victim].lastUse)) victim = static_cast<int>(i);
  }
  if (victim < 0)
    return fail(snclInternalError, "ofi: all {} cached registrations are in use by sends in flight", entries_.size());
  Entry& e = entries_[victim];
  if (e.mr) fi_close(&e.mr->fid);
  e = Entry{};
  SNCL_CHECK(reg(reinterpret_cast<const void*>(begin), end - begin, &e.mr));
  ++misses_;
  e.begin = begin;
  e.end = end;
  e.desc = fi_mr_desc(e.mr);
  e.lastUse = ++clock_;
  e.refs = 1;
  *entry = victim;
  *desc = e.desc;
  return snclSuccess;
}

void Registrar::clear() {
  for (Entry& e : entries_) {
    if (e.mr) fi_close(&e.mr->fid);
    e = Entry{};
  }
  for (fid_mr* mr : owned_) fi_close(&mr->fid);
  owned_.clear();
}

}  // namespace sncl::ofi
