#include "lib/sim/flows.h"

#include <algorithm>
#include <limits>

namespace sncl::sim {

FairShare::FairShare(const Network& net)
    : net_(net),
      weight_(net.channelCount()),
      stamp_(net.channelCount(), 0),
      local_(net.channelCount()) {}

void FairShare::solve(std::span<const Path* const> flows, std::vector<double>* rates, std::vector<uint32_t>* bottleneck) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const size_t n = flows.size();
  rates->assign(n, kInf);
  bottleneck->assign(n, UINT32_MAX);
  if (stamp_.size() < net_.channelCount()) {  // bundles were added
    stamp_.resize(net_.channelCount(), 0);
    local_.resize(net_.channelCount());
    weight_.resize(net_.channelCount());
  }
  if (++gen_ == 0) {
    std::fill(stamp_.begin(), stamp_.end(), 0);
    gen_ = 1;
  }
  // The channels of this solve, their load, and which flows cross each (CSR).
  channels_.clear();
  for (const Path* p : flows)
    for (auto [ch, f] : p->hops) {
      if (stamp_[ch] != gen_) {
        stamp_[ch] = gen_;
        local_[ch] = uint32_t(channels_.size());
        channels_.push_back(ch);
        weight_[ch] = 0;
      }
      weight_[ch] += f;
    }
  offsets_.assign(channels_.size() + 1, 0);
  for (const Path* p : flows)
    for (auto [ch, f] : p->hops) ++offsets_[local_[ch] + 1];
  for (size_t i = 0; i < channels_.size(); ++i) offsets_[i + 1] += offsets_[i];
  members_.resize(offsets_.back());
  fill_.assign(offsets_.begin(), offsets_.end() - 1);
  for (size_t i = 0; i < n; ++i)
    for (auto [ch, f] : flows[i]->hops) members_[fill_[local_[ch]]++] = uint32_t(i);

  // Progressive filling, driven by a heap of the level at which each channel fills:
  // (capacity - load of frozen flows) / (fractions of growing flows). Freezing a flow
  // changes only the channels it crosses, so each of its hops is touched once.
  frozen_.assign(n, 0);
  frozenLoad_.resize(channels_.size());
  version_.assign(channels_.size(), 0);
  heap_.clear();
  dirty_.clear();
  constexpr uint32_t kDirty = UINT32_MAX;
  uint32_t stamp = 0;  // versions handed out so far (entries start at 0)
  auto fillLevel = [&](uint32_t ch) { return (net_.capacity(ch) - frozenLoad_[local_[ch]]) / weight_[ch]; };
  for (size_t i = 0; i < channels_.size(); ++i) {
    frozenLoad_[i] = 0;
    heap_.push_back({fillLevel(channels_[i]), uint32_t(i), 0});
  }
  std::make_heap(heap_.begin(), heap_.end(), std::greater<>());
  size_t growing = 0;
  for (size_t i = 0; i < n; ++i) growing += !flows[i]->hops.empty();
  while (growing > 0 && !heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
    const auto [level, li, ver] = heap_.back();
    heap_.pop_back();
    if (ver != version_[li]) continue;  // superseded by a later push
    const uint32_t ch = channels_[li];
    // Full at `level`: every flow still growing through it stops here.
    for (uint32_t k = offsets_[li]; k < offsets_[li + 1]; ++k) {
      const uint32_t f = members_[k];
      if (frozen_[f]) continue;
      frozen_[f] = 1;
      --growing;
      (*rates)[f] = level;
      (*bottleneck)[f] = ch;
      for (auto [c2, fr] : flows[f]->hops) {
        const uint32_t l2 = local_[c2];
        weight_[c2] -= fr;
        frozenLoad_[l2] += level * fr;
        if (version_[l2] != kDirty) dirty_.push_back(l2), version_[l2] = kDirty;
      }
    }
    // Re-key the channels those flows crossed, once each; one that no growing flow crosses
    // any more constrains nothing.
    for (uint32_t l2 : dirty_) {
      version_[l2] = ++stamp;
      const uint32_t c2 = channels_[l2];
      if (c2 != ch && weight_[c2] > 1e-9) {
        heap_.push_back({std::max(level, fillLevel(c2)), l2, version_[l2]});
        std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
      }
    }
    dirty_.clear();
    version_[li] = ++stamp;
  }
}

}  // namespace sncl::sim
