// Recursive halving-doubling All-Reduce schedules checked symbolically, no processes: every
// element reduced exactly once from every rank and delivered to every rank; step and message
// structure; the cost estimate.
#include <catch2/catch.hpp>

#include <bit>
#include <vector>

#include "algorithms/halving_doubling.h"
#include "tests/util/schedule_check.h"

using namespace sncl;

namespace {

// The ops of a step run concurrently (the symbolic run does them one by one): none may write
// memory that another op of the step reads or writes. Input counts as Output (in place).
bool stepsIndependent(const algo::Schedule& s) {
  struct Access {
    size_t op;
    algo::Buf buf;
    size_t begin, end;
    bool write;
  };
  auto buf = [](algo::Buf b) { return b == algo::Buf::Input ? algo::Buf::Output : b; };
  for (size_t step = 0; step < s.numSteps(); ++step) {
    std::vector<Access> accesses;
    for (size_t i = s.stepBegin(step); i < s.stepEnd[step]; ++i) {
      const algo::Op& op = s.ops[i];
      if (op.kind != algo::OpKind::Recv) accesses.push_back({i, buf(op.srcBuf), op.src, op.src + op.count, false});
      if (op.kind != algo::OpKind::Send) accesses.push_back({i, buf(op.dstBuf), op.dst, op.dst + op.count, true});
    }
    for (const Access& a : accesses)
      for (const Access& b : accesses)
        if (a.op != b.op && a.write && a.buf == b.buf && a.begin < b.end && b.begin < a.end) return false;
  }
  return true;
}

void checkHd(int nranks, size_t count, bool inPlace) {
  INFO("nranks " << nranks << " count " << count << " inPlace " << inPlace);
  auto res = test::runSymbolic(nranks, count, count, inPlace, [&](int rank, algo::Schedule* s) {
    algo::HalvingDoublingAllReduce::build(rank, nranks, count, s);
    if (!stepsIndependent(*s)) FAIL("rank " << rank << ": ops of a step overlap");
  });
  REQUIRE(res.ok);
  for (size_t i = 0; i < count; ++i) {
    uint64_t expect = 0;
    for (int r = 0; r < nranks; ++r) expect += test::symbolicKey(r, i);
    for (int r = 0; r < nranks; ++r)
      if (res.output[r][i] != expect) FAIL("rank " << r << " element " << i << " wrong");
  }
}

int log2Floor(int n) { return std::bit_width(static_cast<unsigned>(n)) - 1; }

}  // namespace

TEST_CASE("halving-doubling schedule is exact for 1..17 ranks", "[schedule][hd]") {
  for (int n = 1; n <= 17; ++n) {
    const size_t counts[] = {0, 1, 2, 7, size_t(n - 1), size_t(n), size_t(3 * n + 1), 1000};
    for (size_t count : counts) {
      checkHd(n, count, false);
      checkHd(n, count, true);
    }
  }
}

TEST_CASE("halving-doubling schedule is exact for larger rank counts", "[schedule][hd]") {
  for (int n : {31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 256, 257}) {
    checkHd(n, 5 * n + 3, false);
    checkHd(n, n / 2, true);  // fewer elements than ranks: empty blocks
  }
  checkHd(1000, 1000 + 24, true);
  checkHd(1023, 1500, false);
  checkHd(1024, 2048 + 5, false);
}

TEST_CASE("halving-doubling takes 2 log2 p steps, and 2 more on paired ranks", "[schedule][hd]") {
  for (int n = 2; n <= 70; ++n) {
    INFO("nranks " << n);
    const int p = 1 << log2Floor(n), extra = n - p;
    const size_t count = 4 * size_t(n);  // no empty block
    algo::Schedule s;
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      algo::HalvingDoublingAllReduce::build(r, n, count, &s);
      const bool sitsOut = r < 2 * extra && r % 2 == 0, paired = r < 2 * extra && r % 2 == 1;
      CHECK(s.numSteps() == (sitsOut ? 2 : 2 * size_t(log2Floor(p)) + (paired ? 2 : 0)));
      // Halving and doubling steps exchange with one partner each: one send, one receive.
      size_t sent = 0;
      for (size_t step = 0; step < s.numSteps(); ++step) {
        size_t sends = 0, recvs = 0;
        for (size_t i = s.stepBegin(step); i < s.stepEnd[step]; ++i) {
          sends += s.ops[i].kind == algo::OpKind::Send;
          recvs += s.ops[i].kind != algo::OpKind::Send;
          if (s.ops[i].kind == algo::OpKind::Send) sent += s.ops[i].count;
        }
        CHECK(sends <= 1);
        CHECK(recvs <= 1);
      }
      // Rabenseifner's volume: (p-1)/p of the data out while halving, as much while doubling,
      // plus the whole buffer once for the odd rank of a pair.
      const size_t blocksVolume = 2 * count / p * (p - 1);
      if (!sitsOut && count % p == 0) CHECK(sent == blocksVolume + (paired ? count : 0));
      if (sitsOut) CHECK(sent == count);
    }
  }
}

TEST_CASE("halving-doubling halves the message each step", "[schedule][hd]") {
  algo::Schedule s;
  algo::HalvingDoublingAllReduce::build(5, 16, 1600, &s);
  REQUIRE(s.numSteps() == 8);
  const size_t expect[] = {800, 400, 200, 100, 100, 200, 400, 800};
  for (size_t step = 0; step < 8; ++step) {
    for (size_t i = s.stepBegin(step); i < s.stepEnd[step]; ++i) CHECK(s.ops[i].count == expect[step]);
  }
  // Partners at distances 8, 4, 2, 1 then 1, 2, 4, 8 from rank 5.
  const int partner[] = {13, 1, 7, 4, 4, 7, 1, 13};
  for (size_t step = 0; step < 8; ++step) CHECK(s.ops[s.stepBegin(step)].peer == partner[step]);
}

TEST_CASE("halving-doubling cost estimate matches the formula by hand", "[schedule][hd]") {
  // 8 ranks, 1 MiB: 6 * 2 us + 2 * 7/8 * 1048576 * (1/1e4 + 1/2e4) us.
  CHECK(algo::HalvingDoublingAllReduce::estimateUs(8, 1 << 20, 2.0, 10.0, 20.0) == Approx(12 + 275.2512));
  // 6 ranks: p = 4, two pairs: 4 * 2 + 2 * 3/4 * 157.2864 + 2 * 2 + 2 * 157.2864.
  CHECK(algo::HalvingDoublingAllReduce::estimateUs(6, 1 << 20, 2.0, 10.0, 20.0) == Approx(562.5024));
  CHECK(algo::HalvingDoublingAllReduce::estimateUs(1, 1 << 20, 2.0, 10.0, 20.0) == Approx(1048576 / 2e4));
}
