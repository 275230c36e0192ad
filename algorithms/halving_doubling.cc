#include "algorithms/halving_doubling.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <utility>

namespace sncl::algo {
namespace {

// One rank's schedule, built in the order it runs.
class HalvingDoubling {
 public:
  HalvingDoubling(int rank, int nranks, size_t count, Schedule* out)
      : rank_(rank),
        count_(count),
        p_(static_cast<int>(std::bit_floor(static_cast<unsigned>(nranks)))),
        extra_(nranks - p_),
        logP_(std::countr_zero(static_cast<unsigned>(p_))),
        out_(out) {}

  void build() {
    if (paired() && rank_ % 2 == 0) {
      sitOut();
      return;
    }
    if (p_ == 1) addStep(OpKind::Copy, Buf::Input, -1, 0, 0, count_);  // one rank: its input is the sum
    foldPartner();
    reduceScatter();
    allGather();
    returnToPartner();
  }

 private:
  // Tags: 0 for the pair's fold, 1.. for the halving steps, then the doubling steps, then
  // the pair's return.
  uint32_t returnTag() const { return 1 + 2 * static_cast<uint32_t>(logP_); }

  bool paired() const { return rank_ < 2 * extra_; }  // one of the first r pairs
  // Index among the p participants, and back.
  int index() const { return paired() ? rank_ / 2 : rank_ - extra_; }
  int rankOf(int v) const { return v < extra_ ? 2 * v + 1 : v + extra_; }

  // The even rank of a pair hands its data to the odd one and waits for the result.
  void sitOut() {
    addStep(OpKind::Send, Buf::Input, rank_ + 1, 0, 0, count_);
    addStep(OpKind::Recv, Buf::Output, rank_ + 1, returnTag(), 0, count_);
  }

  void foldPartner() {
    if (!paired()) return;
    addStep(OpKind::RecvReduce, Buf::Input, rank_ - 1, 0, 0, count_);
    sum_ = Buf::Output;
  }

  // Before the step with distance d the rank owns blocks [lo, lo + 2d), partially reduced.
  void reduceScatter() {
    const int v = index();
    uint32_t tag = 1;
    for (int d = p_ / 2; d >= 1; d /= 2, ++tag) {
      const int lo = v & ~(2 * d - 1);
      const int keep = v & d ? lo + d : lo, give = v & d ? lo : lo + d;
      addOp(OpKind::Send, sum_, rankOf(v ^ d), tag, blocks(give, d));
      addOp(OpKind::RecvReduce, sum_, rankOf(v ^ d), tag, blocks(keep, d));
      out_->endStep();
      sum_ = Buf::Output;
    }
  }

  // Before the step with distance d the rank owns blocks [v & ~(d-1), + d), fully reduced.
  void allGather() {
    const int v = index();
    uint32_t tag = 1 + static_cast<uint32_t>(logP_);
    for (int d = 1; d < p_; d *= 2, ++tag) {
      addOp(OpKind::Send, Buf::Output, rankOf(v ^ d), tag, blocks(v & ~(d - 1), d));
      addOp(OpKind::Recv, Buf::Output, rankOf(v ^ d), tag, blocks((v ^ d) & ~(d - 1), d));
      out_->endStep();
    }
  }

  void returnToPartner() {
    if (paired()) addStep(OpKind::Send, Buf::Output, rank_ - 1, returnTag(), 0, count_);
  }

  // Elements of blocks [b, b + n) of p nearly equal blocks: {offset, count}.
  std::pair<size_t, size_t> blocks(int b, int n) const {
    auto begin = [&](int i) {
      const size_t ui = static_cast<size_t>(i), q = count_ / p_, rem = count_ % p_;
      return ui * q + std::min(ui, rem);
    };
    return {begin(b), begin(b + n) - begin(b)};
  }

  // Adds an op on a range that reads src and (unless a Send) writes Output. Both ends leave
  // out empty messages alike.
  void addOp(OpKind kind, Buf src, int peer, uint32_t tag, std::pair<size_t, size_t> range) {
    auto [offset, n] = range;
    if (n) out_->add({kind, src, Buf::Output, peer, tag, offset, offset, n});
  }
  void addStep(OpKind kind, Buf src, int peer, uint32_t tag, size_t offset, size_t n) {
    addOp(kind, src, peer, tag, {offset, n});
    out_->endStep();
  }

  int rank_;
  size_t count_;
  int p_;      // participants: the largest power of two <= nranks
  int extra_;  // ranks beyond p, each paired with a participant
  int logP_;
  Buf sum_ = Buf::Input;  // where this rank's partial sum is
  Schedule* out_;
};

}  // namespace

void HalvingDoublingAllReduce::build(int rank, int nranks, size_t count, Schedule* out) {
  out->clear();
  HalvingDoubling(rank, nranks, count, out).build();
}

double HalvingDoublingAllReduce::estimateUs(int nranks, size_t bytes, double alphaUs, double betaGBs,
                                            double memGBs) {
  const double memBytesPerUs = memGBs * 1e3, linkBytesPerUs = betaGBs * 1e3;
  if (nranks == 1) return bytes / memBytesPerUs;
  const double p = static_cast<double>(std::bit_floor(static_cast<unsigned>(nranks)));
  const double perByte = 1.0 / linkBytesPerUs + 1.0 / memBytesPerUs;
  double us = 2.0 * std::log2(p) * alphaUs + 2.0 * (p - 1.0) / p * bytes * perByte;
  if (nranks > p) us += 2.0 * alphaUs + 2.0 * bytes * perByte;
  return us;
}

}  // namespace sncl::algo
