#include "tests/util/schedule_check.h"

#include <deque>
#include <map>
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
  std::vector<uint64_t> data;
};

struct RankState {
  algo::Schedule schedule;
  std::vector<uint64_t> input, output, scratch;
  size_t step = 0;
  bool sendsPosted = false;
  std::vector<std::pair<std::pair<int, int>, size_t>> stepSends;  // (channel, index) of this step's sends
};

// Per direction of a pair: messages sent, and receives posted by the receiver so far.
struct Channel {
  std::deque<Message> queue;
  size_t sent = 0;
  size_t recvsPosted = 0;
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
  std::map<std::pair<int, int>, Channel> channels;  // (from, to)
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
  }
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
    for (const Access& a : accesses)
      for (const Access& b : accesses)
        if (a.op != b.op && a.write && a.buf == b.buf && a.off < b.off + b.count && b.off < a.off + a.count)
          return failWith(fmt::format("rank {} step {}: op {} writes [{}, {}) which op {} of the same step {}", r,
                                      s.step, a.op - begin, a.off, a.off + a.count, b.op - begin,
                                      b.write ? "writes" : "reads"));
  };
  // Rounds until every rank finished or nothing moves; bounded by the total step count.
  bool progressed = true;
  while (progressed && res.ok) {
    progressed = false;
    for (int r = 0; r < nranks && res.ok; ++r) {
      RankState& s = ranks[r];
      if (s.step >= s.schedule.numSteps()) continue;
      const uint32_t begin = s.schedule.stepBegin(s.step), end = s.schedule.stepEnd[s.step];
      if (!s.sendsPosted) {
        checkHazards(r, s, begin, end);
        for (uint32_t i = begin; i < end && res.ok; ++i) {
          const algo::Op& op = s.schedule.ops[i];
          if (op.kind != algo::OpKind::Send) continue;
          auto& src = buffer(s, op.srcBuf);
          if (!inBounds(r, src, op.src, op.count)) break;
          Channel& ch = channels[{r, op.peer}];
          ch.queue.push_back({op.tag, std::vector<uint64_t>(src.begin() + op.src, src.begin() + op.src + op.count)});
          s.stepSends.push_back({{r, op.peer}, ch.sent++});
        }
        for (uint32_t i = begin; i < end; ++i) {
          const algo::Op& op = s.schedule.ops[i];
          if (op.kind == algo::OpKind::Recv || op.kind == algo::OpKind::RecvReduce) ++channels[{op.peer, r}].recvsPosted;
        }
        s.sendsPosted = true;
        progressed = true;
      }
      // Receives of one step come from distinct messages; check availability first.
      std::map<int, size_t> needed;
      for (uint32_t i = begin; i < end; ++i) {
        const algo::Op& op = s.schedule.ops[i];
        if (op.kind == algo::OpKind::Recv || op.kind == algo::OpKind::RecvReduce) ++needed[op.peer];
      }
      bool ready = true;
      for (auto& [peer, n] : needed) ready &= channels[{peer, r}].queue.size() >= n;
      // A send completes only once its receiver posted the matching receive: transports
      // buffer a bounded amount (a FIFO, a window of slots), so a schedule must not rely on it.
      for (auto& [channel, index] : s.stepSends) ready &= channels[channel].recvsPosted > index;
      if (!ready) continue;
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
        auto& q = channels[{op.peer, r}].queue;
        Message m = std::move(q.front());
        q.pop_front();
        if (m.tag != op.tag || m.data.size() != op.count) {
          failWith(fmt::format("rank {} step {}: from rank {} got tag {} count {}, expected tag {} count {}", r, s.step,
                               op.peer, m.tag, m.data.size(), op.tag, op.count));
          break;
        }
        if (op.kind == algo::OpKind::Recv) {
          std::copy(m.data.begin(), m.data.end(), dst.begin() + op.dst);
        } else {
          auto& src = buffer(s, op.srcBuf);
          if (!inBounds(r, src, op.src, op.count)) break;
          for (size_t k = 0; k < op.count; ++k) dst[op.dst + k] = src[op.src + k] + m.data[k];
        }
      }
      ++s.step;
      s.sendsPosted = false;
      s.stepSends.clear();
      progressed = true;
    }
  }
  for (int r = 0; r < nranks && res.ok; ++r)
    if (ranks[r].step < ranks[r].schedule.numSteps())
      failWith(fmt::format("deadlock: rank {} stuck at step {} of {}", r, ranks[r].step, ranks[r].schedule.numSteps()));
  for (auto& [key, ch] : channels)
    if (!ch.queue.empty() && res.ok)
      failWith(fmt::format("{} unreceived message(s) from rank {} to {}", ch.queue.size(), key.first, key.second));
  for (auto& s : ranks) res.output.push_back(std::move(s.output));
  return res;
}

}  // namespace sncl::test
