#include "lib/sim/flows.h"

#include <algorithm>
#include <limits>

namespace sncl::sim {

FairShare::FairShare(const Network& net)
    : net_(net),
      capLeft_(net.channelCount()),
      weight_(net.channelCount()),
      stamp_(net.channelCount(), 0),
      local_(net.channelCount()) {}

void FairShare::solve(std::span<const Path* const> flows, std::vector<double>* rates, std::vector<uint32_t>* bottleneck) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const size_t n = flows.size();
  rates->assign(n, kInf);
  bottleneck->assign(n, UINT32_MAX);
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
        capLeft_[ch] = net_.capacity(ch);
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

  frozen_.assign(n, 0);
  size_t unfrozen = 0;
  for (size_t i = 0; i < n; ++i) unfrozen += !flows[i]->hops.empty();
  active_ = channels_;
  double level = 0;
  while (unfrozen > 0 && !active_.empty()) {
    double delta = kInf;
    for (uint32_t ch : active_) delta = std::min(delta, std::max(0.0, capLeft_[ch]) / weight_[ch]);
    level += delta;
    size_t keep = 0;
    for (uint32_t ch : active_) {
      capLeft_[ch] -= delta * weight_[ch];
      if (capLeft_[ch] > 1e-9 * net_.capacity(ch)) {
        active_[keep++] = ch;
        continue;
      }
      // Full: every flow still growing through it stops here.
      for (uint32_t k = offsets_[local_[ch]]; k < offsets_[local_[ch] + 1]; ++k) {
        const uint32_t f = members_[k];
        if (frozen_[f]) continue;
        frozen_[f] = 1;
        --unfrozen;
        (*rates)[f] = level;
        (*bottleneck)[f] = ch;
        for (auto [c2, fr] : flows[f]->hops) weight_[c2] -= fr;
      }
      weight_[ch] = 0;
    }
    active_.resize(keep);
    // Channels no growing flow crosses any more constrain nothing.
    keep = 0;
    for (uint32_t ch : active_)
      if (weight_[ch] > 1e-9) active_[keep++] = ch;
    active_.resize(keep);
  }
}

}  // namespace sncl::sim
