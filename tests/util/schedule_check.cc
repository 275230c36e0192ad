#include "tests/util/schedule_check.h"

#include <algorithm>
#include <deque>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

namespace sncl::test {

uint64_t symbolicKey(int rank, size_t element) {
  uint64_t x = (static_cast<uint64_t>(rank) << 40) ^ element ^ 0x9e3779b97f4a7c15ull;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

namespace {

struct Message {
  uint32_t tag;
  size_t offset, count;  // its data, in the run's pool of sent elements
};

// Per direction of a pair: messages sent, and receives posted by the receiver so far.
struct Channel {
  std::deque<Message> queue;
  size_t sent = 0;
  size_t recvsPosted = 0;
};

struct RankState {
  algo::Schedule schedule;
  std::vector<uint64_t> input, output, scratch;
  size_t step = 0;
  bool sendsPosted = false;
  // The step at hand waits for these; both only ever become true, so a check resumes where
  // the last one stopped.
  std::vector<std::pair<Channel*, size_t>> stepSends;  // (channel, index) of its sends
  std::vector<std::pair<Channel*, size_t>> stepRecvs;  // (channel, messages) of its receives
  size_t sendsMatched = 0, recvsArrived = 0;
};

}  // namespace

SymbolicResult runSymbolic(int nranks, size_t inputCount, size_t outputCount, bool inPlace,
                           const std::function<void(int, algo::Schedule*)>& build) {
  return runSymbolic(
      nranks, [&](int) { return inputCount; }, [&](int) { return outputCount; }, inPlace, build);
}

SymbolicResult runSymbolic(int nranks, const std::function<size_t(int)>& inputCountOf,
                           const std::function<size_t(int)>& outputCountOf, bool inPlace,
                           const std::function<void(int, algo::Schedule*)>& build) {
  SymbolicResult res;
  std::vector<RankState> ranks(nranks);
  std::unordered_map<uint64_t, Channel> channels;  // from * nranks + to
  auto channel = [&](int from, int to) -> Channel& { return channels[uint64_t(from) * nranks + to]; };
  auto failWith = [&](std::string e) {
    if (res.ok) res.error = std::move(e);
    res.ok = false;
  };
  for (int r = 0; r < nranks; ++r) {
    RankState& s = ranks[r];
    build(r, &s.schedule);
    const size_t inputCount = inputCountOf(r), outputCount = outputCountOf(r);
    s.output.assign(std::max(outputCount, inPlace ? inputCount : 0), 0);
    s.input.resize(inputCount);
    for (size_t i = 0; i < inputCount; ++i) s.input[i] = symbolicKey(r, i);
    if (inPlace) std::copy(s.input.begin(), s.input.end(), s.output.begin());
    s.scratch.assign(s.schedule.scratchCount, 0);
    // A message's peer indexes the channels and the worklist below.
    for (const algo::Op& op : s.schedule.ops)
      if (op.kind != algo::OpKind::Copy && op.kind != algo::OpKind::Reduce && (op.peer < 0 || op.peer >= nranks || op.peer == r))
        failWith(fmt::format("rank {}: a message to or from rank {} of {}", r, op.peer, nranks));
  }
  if (!res.ok) return res;
  auto buffer = [&](RankState& s, algo::Buf b) -> std::vector<uint64_t>& {
    if (b == algo::Buf::Input) return inPlace ? s.output : s.input;
    return b == algo::Buf::Output ? s.output : s.scratch;
  };
  auto inBounds = [&](int r, std::vector<uint64_t>& buf, size_t off, size_t count) {
    if (off + count <= buf.size()) return true;
    failWith(fmt::format("rank {} step {}: range [{}, {}) outside a buffer of {}", r, ranks[r].step, off, off + count,
                         buf.size()));
    return false;
  };
  // The executor posts a step's operations together: sends read and receives write while
  // the others run, so within a step no operation may write what another reads or writes.
  auto checkHazards = [&](int r, RankState& s, uint32_t begin, uint32_t end) {
    struct Access {
      uint32_t op;
      const std::vector<uint64_t>* buf;
      size_t off, count;
      bool write;
    };
    std::vector<Access> accesses;
    for (uint32_t i = begin; i < end; ++i) {
      const algo::Op& op = s.schedule.ops[i];
      if (op.count == 0) continue;
      // A copy onto itself (in place) is skipped by the executor.
      const bool selfCopy = op.kind == algo::OpKind::Copy && &buffer(s, op.srcBuf) == &buffer(s, op.dstBuf) && op.src == op.dst;
      const bool reads = op.kind != algo::OpKind::Recv, writes = op.kind != algo::OpKind::Send && !selfCopy;
      if (reads) accesses.push_back({i, &buffer(s, op.srcBuf), op.src, op.count, false});
      if (writes) accesses.push_back({i, &buffer(s, op.dstBuf), op.dst, op.count, true});
    }
    // A sweep over each buffer's accesses in order of offset (a step can have thousands of
    // ops): each one is checked against the farthest-reaching earlier access of another op,
    // and against the farthest-reaching earlier write of another op.
    std::sort(accesses.begin(), accesses.end(),
              [](const Access& a, const Access& b) { return a.buf != b.buf ? a.buf < b.buf : a.off < b.off; });
    struct Farthest {  // of the accesses so far: the one that ends last, and the last of another op
      const Access* first = nullptr;
      const Access* second = nullptr;
      void add(const Access& x) {
        auto endOf = [](const Access* a) { return a->off + a->count; };
        if (first && x.op == first->op) {
          if (endOf(&x) > endOf(first)) first = &x;
        } else if (!first || endOf(&x) > endOf(first)) {
          second = first;
          first = &x;
        } else if (!second || endOf(&x) > endOf(second)) {
          second = &x;
        }
      }
      // An access of an op other than c's that overlaps c (which starts at or after it).
      const Access* overlapping(const Access& c) const {
        const Access* a = first && first->op != c.op ? first : second;
        return a && a->off + a->count > c.off ? a : nullptr;
      }
    };
    Farthest any, writes;
    for (size_t i = 0; i < accesses.size(); ++i) {
      const Access& c = accesses[i];
      if (i > 0 && accesses[i - 1].buf != c.buf) any = writes = Farthest{};
      const Access* w = nullptr;  // the writer of an overlapping pair
      const Access* other = nullptr;
      if (c.write && (other = any.overlapping(c))) {
        w = &c;
      } else if ((w = writes.overlapping(c))) {
        other = &c;
      }
      if (w)
        return failWith(fmt::format("rank {} step {}: op {} writes [{}, {}) which op {} of the same step {}", r, s.step,
                                    w->op - begin, w->off, w->off + w->count, other->op - begin,
                                    other->write ? "writes" : "reads"));
      any.add(c);
      if (c.write) writes.add(c);
    }
  };
  // A worklist of ranks that may move: a rank runs its steps until one waits on a peer, and
  // a rank whose action may let a peer move (a send it can take, a receive that lets the
  // peer's send complete) puts that peer back on the list. Every step ends at most once, so
  // the work is bounded by the ops; when the list runs dry, the ranks left are deadlocked.
  std::vector<int> work(nranks);
  std::vector<char> queued(nranks, 1);
  for (int r = 0; r < nranks; ++r) work[r] = nranks - 1 - r;
  auto wake = [&](int peer) {
    if (!queued[peer]) queued[peer] = 1, work.push_back(peer);
  };
  std::vector<uint64_t> sent;  // every message's data, appended as it is sent
  std::vector<int> recvPeers;  // of the step at hand
  while (!work.empty() && res.ok) {
    const int r = work.back();
    work.pop_back();
    queued[r] = 0;
    RankState& s = ranks[r];
    while (res.ok && s.step < s.schedule.numSteps()) {
      const uint32_t begin = s.schedule.stepBegin(s.step), end = s.schedule.stepEnd[s.step];
      if (!s.sendsPosted) {
        checkHazards(r, s, begin, end);
        for (uint32_t i = begin; i < end && res.ok; ++i) {
          const algo::Op& op = s.schedule.ops[i];
          if (op.kind != algo::OpKind::Send) continue;
          auto& src = buffer(s, op.srcBuf);
          if (!inBounds(r, src, op.src, op.count)) break;
          Channel& ch = channel(r, op.peer);
          ch.queue.push_back({op.tag, sent.size(), op.count});
          sent.insert(sent.end(), src.begin() + op.src, src.begin() + op.src + op.count);
          s.stepSends.push_back({&ch, ch.sent++});
          wake(op.peer);
        }
        recvPeers.clear();
        for (uint32_t i = begin; i < end; ++i) {
          const algo::Op& op = s.schedule.ops[i];
          if (op.kind == algo::OpKind::Recv || op.kind == algo::OpKind::RecvReduce) {
            ++channel(op.peer, r).recvsPosted;
            wake(op.peer);
            recvPeers.push_back(op.peer);
          }
        }
        std::sort(recvPeers.begin(), recvPeers.end());
        for (size_t i = 0; i < recvPeers.size();) {
          size_t j = i;
          while (j < recvPeers.size() && recvPeers[j] == recvPeers[i]) ++j;
          s.stepRecvs.push_back({&channel(recvPeers[i], r), j - i});
          i = j;
        }
        s.sendsPosted = true;
      }
      // Receives of one step come from distinct messages; check availability first.
      while (s.recvsArrived < s.stepRecvs.size() &&
             s.stepRecvs[s.recvsArrived].first->queue.size() >= s.stepRecvs[s.recvsArrived].second)
        ++s.recvsArrived;
      // A send completes only once its receiver posted the matching receive: transports
      // buffer a bounded amount (a FIFO, a window of slots), so a schedule must not rely on it.
      while (s.sendsMatched < s.stepSends.size() &&
             s.stepSends[s.sendsMatched].first->recvsPosted > s.stepSends[s.sendsMatched].second)
        ++s.sendsMatched;
      const bool ready = s.recvsArrived == s.stepRecvs.size() && s.sendsMatched == s.stepSends.size();
      if (!ready) break;
      for (uint32_t i = begin; i < end && res.ok; ++i) {
        const algo::Op& op = s.schedule.ops[i];
        auto& dst = buffer(s, op.dstBuf);
        if (op.kind == algo::OpKind::Send) continue;
        if (!inBounds(r, dst, op.dst, op.count)) break;
        if (op.kind == algo::OpKind::Copy || op.kind == algo::OpKind::Reduce) {
          auto& src = buffer(s, op.srcBuf);
          if (!inBounds(r, src, op.src, op.count)) break;
          for (size_t k = 0; k < op.count; ++k)
            dst[op.dst + k] = (op.kind == algo::OpKind::Reduce ? dst[op.dst + k] : 0) + src[op.src + k];
          continue;
        }
        auto& q = channel(op.peer, r).queue;
        const Message m = q.front();
        q.pop_front();
        if (m.tag != op.tag || m.count != op.count) {
          failWith(fmt::format("rank {} step {}: from rank {} got tag {} count {}, expected tag {} count {}", r, s.step,
                               op.peer, m.tag, m.count, op.tag, op.count));
          break;
        }
        if (op.kind == algo::OpKind::Recv) {
          std::copy(sent.begin() + m.offset, sent.begin() + m.offset + m.count, dst.begin() + op.dst);
        } else {
          auto& src = buffer(s, op.srcBuf);
          if (!inBounds(r, src, op.src, op.count)) break;
          for (size_t k = 0; k < op.count; ++k) dst[op.dst + k] = src[op.src + k] + sent[m.offset + k];
        }
      }
      ++s.step;
      s.sendsPosted = false;
      s.stepSends.clear();
      s.stepRecvs.clear();
      s.sendsMatched = s.recvsArrived = 0;
    }
  }
  for (int r = 0; r < nranks && res.ok; ++r)
    if (ranks[r].step < ranks[r].schedule.numSteps())
      failWith(fmt::format("deadlock: rank {} stuck at step {} of {}", r, ranks[r].step, ranks[r].schedule.numSteps()));
  for (auto& [key, ch] : channels)
    if (!ch.queue.empty() && res.ok)
      failWith(fmt::format("{} unreceived message(s) from rank {} to {}", ch.queue.size(), key / nranks, key % nranks));
  for (auto& s : ranks) res.output.push_back(std::move(s.output));
  return res;
}

}  // namespace sncl::test
