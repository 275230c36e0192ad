// Compressed All-Reduce (snclAllReduceCompressed, SNCL_COMPRESS; docs/compression.md):
// every element's error against the exact sum is checked against the bound the header
// states, on random data (uniform and Gaussian, printed seed) of random counts, on ranks as
// threads and as processes, sum and avg, float32 and bfloat16, int8 and fp8 e4m3; error
// feedback makes the mean of repeated calls converge; a link lost in either phase gives the
// same bits as a healthy run; bad arguments are refused by name.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lib/exec/quantize.h"
#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"
#include "tests/util/bus_ranks.h"
#include "tests/util/launcher.h"

using namespace sncl;

namespace {

uint64_t testSeed() {
  static const uint64_t seed = [] {
    const char* s = getenv("SNCL_TEST_SEED");
    uint64_t v = s ? strtoull(s, nullptr, 0) : std::random_device{}();
    printf("test_compressed seed %llu (SNCL_TEST_SEED=%llu repeats it)\n", (unsigned long long)v, (unsigned long long)v);
    return v;
  }();
  return seed;
}

float roundBf16(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  b = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
  memcpy(&f, &b, 4);
  return f;
}

enum class Dist { Uniform, Gaussian };

// Rank r's input: deterministic in (seed, r), so that every process can make every rank's.
std::vector<float> makeInput(uint64_t seed, int r, size_t count, Dist d, bool bf16) {
  std::mt19937_64 g(seed * 1000003u + uint64_t(r));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::normal_distribution<float> n(0.0f, 3.0f);
  std::vector<float> x(count);
  for (auto& v : x) v = d == Dist::Uniform ? u(g) : n(g);
  if (bf16)
    for (auto& v : x) v = roundBf16(v);
  return x;
}

struct Case {
  snclCompression_t kind = snclCompressInt8;
  snclRedOp_t op = snclSum;
  bool bf16 = false;
  size_t blockElems = 256;
};

// Elements whose error exceeds the bound of sncl_ext.h (printing the first few).
size_t countOutOfBound(const Case& c, const std::vector<std::vector<float>>& in, const float* out, size_t count) {
  const int n = int(in.size());
  const size_t slice = (count + n - 1) / n, block = c.blockElems;
  const bool int8 = c.kind == snclCompressInt8;
  const double top = int8 ? 127.0 : 448.0;
  const double eps = std::ldexp(1.0, -23);
  size_t bad = 0;
  std::vector<double> exact(count), ein(count), absSum(count), scaleSum(count);
  for (size_t b0 = 0; b0 < count;) {  // block by block, as the layout cuts them
    const size_t inSlice = b0 % slice;
    const size_t b1 = std::min({count, b0 + block - inSlice % block, b0 - inSlice + slice});
    double sumScales = 0;
    for (int r = 0; r < n; ++r) {
      double m = 0;
      for (size_t i = b0; i < b1; ++i) m = std::max(m, double(std::fabs(in[r][i])));
      const double scale = m / top;
      sumScales += scale;
      for (size_t i = b0; i < b1; ++i) {
        exact[i] += in[r][i];
        absSum[i] += std::fabs(in[r][i]);
        ein[i] += int8 ? scale / 2 : std::fabs(in[r][i]) * 0.0625 + scale * std::ldexp(1.0, -10);
      }
    }
    double outMax = 0;
    for (size_t i = b0; i < b1; ++i) outMax = std::max(outMax, std::fabs(exact[i]) + ein[i]);
    const double scaleOut = outMax / top;
    for (size_t i = b0; i < b1; ++i) {
      const double eout = int8 ? scaleOut / 2 : (std::fabs(exact[i]) + ein[i]) * 0.0625 + scaleOut * std::ldexp(1.0, -10);
      // float32 rounding: every decode, addition and the output's conversion.
      const double rounding = 4 * (n + 2) * eps * (absSum[i] + sumScales * top + outMax);
      double bound = ein[i] + eout + rounding;
      double want = exact[i];
      if (c.op == snclAvg) bound /= n, want /= n;
      if (c.bf16) bound += std::fabs(want) * std::ldexp(1.0, -8) + std::fabs(bound) * std::ldexp(1.0, -8);
      const double err = std::fabs(double(out[i]) - want);
      if (!(err <= bound)) {
        if (bad < 5)
          fprintf(stderr, "element %zu of %zu: result %.9g, exact %.9g, error %.3g > bound %.3g\n", i, count,
                  double(out[i]), want, err, bound);
        ++bad;
      }
    }
    b0 = b1;
  }
  return bad;
}

// Runs one compressed call on every rank of comms (threads); results widened to float.
std::vector<std::vector<float>> runThreads(std::vector<snclComm_t>& comms, const Case& c,
                                           const std::vector<std::vector<float>>& in, size_t count, bool inPlace,
                                           std::vector<snclResult_t>* results) {
  const int n = int(comms.size());
  std::vector<std::vector<float>> out(n, std::vector<float>(count));
  results->assign(n, snclSuccess);
  test::onEveryRank(n, [&](int r) {
    std::vector<uint16_t> h(count * 2 + 1), ho(count * 2 + 1);
    std::vector<float> send = in[r];
    const void* sb = send.data();
    void* rb = inPlace ? send.data() : out[r].data();
    if (c.bf16) {
      for (size_t i = 0; i < count; ++i) {
        uint32_t b;
        memcpy(&b, &send[i], 4);
        h[i] = uint16_t(b >> 16);
      }
      sb = h.data();
      rb = inPlace ? h.data() : ho.data();
    }
    snclCompressOpts_t o{sizeof(snclCompressOpts_t), c.kind, c.blockElems, nullptr};
    (*results)[r] = snclAllReduceCompressed(sb, rb, count, c.bf16 ? snclBfloat16 : snclFloat32, c.op, comms[r],
                                            nullptr, &o);
    if (c.bf16) {
      for (size_t i = 0; i < count; ++i) {
        uint32_t b = uint32_t(static_cast<uint16_t*>(rb)[i]) << 16;
        memcpy(&out[r][i], &b, 4);
      }
    } else if (inPlace) {
      out[r] = send;
    }
  });
  return out;
}

std::vector<snclComm_t> threadComms(int n) {
  std::vector<snclComm_t> comms(n);
  REQUIRE(snclCommInitAll(comms.data(), n, nullptr) == snclSuccess);
  return comms;
}

void destroy(std::vector<snclComm_t>& comms) {
  for (auto c : comms) CHECK(snclCommDestroy(c) == snclSuccess);
  comms.clear();
}

// Checks one case on threads: every rank within the bound, and every rank the same bits.
void checkCase(std::vector<snclComm_t>& comms, const Case& c, size_t count, Dist d, bool inPlace, uint64_t seed) {
  const int n = int(comms.size());
  INFO("n " << n << " count " << count << " kind " << c.kind << " op " << c.op << " bf16 " << c.bf16 << " block "
            << c.blockElems << " dist " << int(d) << " inPlace " << inPlace << " seed " << seed);
  std::vector<std::vector<float>> in(n);
  for (int r = 0; r < n; ++r) in[r] = makeInput(seed, r, count, d, c.bf16);
  std::vector<snclResult_t> results;
  auto out = runThreads(comms, c, in, count, inPlace, &results);
  for (int r = 0; r < n; ++r) REQUIRE(results[r] == snclSuccess);
  CHECK(countOutOfBound(c, in, out[0].data(), count) == 0);
  for (int r = 1; r < n && count; ++r) CHECK(memcmp(out[r].data(), out[0].data(), count * sizeof(float)) == 0);
}

size_t randomPrime(std::mt19937_64& g, size_t lo, size_t hi) {
  for (size_t v = std::uniform_int_distribution<size_t>(lo, hi)(g);; ++v) {
    bool prime = v > 1;
    for (size_t d = 2; d * d <= v && prime; ++d) prime = v % d != 0;
    if (prime) return v;
  }
}

}  // namespace

TEST_CASE("compressed: e4m3 codes round-trip and encode to the nearest", "[compressed][kernel]") {
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3Decode(uint8_t(c));
    if (std::isnan(v) || c == 0x80) continue;  // NaN codes; -0 encodes as +0's sign twin
    CHECK(int(e4m3Encode(v)) == c);
  }
  std::mt19937_64 g(testSeed());
  std::uniform_real_distribution<float> u(-448.0f, 448.0f);
  for (int i = 0; i < 100000; ++i) {
    const float v = i % 2 ? u(g) : u(g) * 1e-3f;
    const float q = e4m3Decode(e4m3Encode(v));
    float best = 1e30f;
    for (int c = 0; c < 256; ++c)
      if (!std::isnan(e4m3Decode(uint8_t(c)))) best = std::min(best, std::fabs(e4m3Decode(uint8_t(c)) - v));
    REQUIRE(std::fabs(q - v) == best);
  }
}

TEST_CASE("compressed: a non-finite value makes its block NaN, never finite", "[compressed][kernel]") {
  for (QuantKind k : {QuantKind::Int8, QuantKind::Fp8e4m3}) {
    std::vector<float> x(40, 1.0f), out(40);
    x[5] = INFINITY;
    x[30] = NAN;
    std::vector<char> slice(quantSliceBytes(40, 16));
    quantEncode(k, x.data(), 40, 40, 16, slice.data(), nullptr);
    quantDecodeTo(k, snclFloat32, slice.data(), 40, 40, 16, 1.0f, out.data());
    // Blocks [0, 16) (an infinity) and [16, 32) (a NaN) decode as NaN; [32, 40) exactly.
    for (size_t i = 0; i < 40; ++i) CHECK(std::isnan(out[i]) == (i < 32));
    for (size_t i = 32; i < 40; ++i) CHECK(out[i] == 1.0f);
  }
}

TEST_CASE("compressed: within the stated bound on threads, n = 1, 2, 3, 4, 8", "[compressed][threads]") {
  const uint64_t seed = testSeed();
  std::mt19937_64 g(seed);
  for (int n : {1, 2, 3, 4, 8}) {
    auto comms = threadComms(n);
    std::vector<size_t> counts = {0, 1, 2, size_t(n) - 1, randomPrime(g, 100, 5000),
                                  std::uniform_int_distribution<size_t>(1, 100000)(g) | 1};
    if (n == 4 || n == 8) counts.push_back((1u << 20) + std::uniform_int_distribution<size_t>(0, 999)(g));
    int k = 0;
    for (size_t count : counts) {
      for (snclCompression_t kind : {snclCompressInt8, snclCompressFp8e4m3}) {
        for (snclRedOp_t op : {snclSum, snclAvg}) {
          ++k;
          Case c{kind, op, false, (k % 3 == 0) ? size_t(37) : size_t(256)};
          checkCase(comms, c, count, k % 2 ? Dist::Uniform : Dist::Gaussian, k % 4 == 1, seed + k);
        }
      }
    }
    destroy(comms);
  }
}

TEST_CASE("compressed: bfloat16 input within the bound", "[compressed][bf16]") {
  const uint64_t seed = testSeed();
  auto comms = threadComms(3);
  for (size_t count : {size_t(1), size_t(997), size_t(65537)})
    for (snclCompression_t kind : {snclCompressInt8, snclCompressFp8e4m3})
      for (snclRedOp_t op : {snclSum, snclAvg})
        checkCase(comms, Case{kind, op, true, 256}, count, Dist::Gaussian, count == 997, seed + count);
  destroy(comms);
}

TEST_CASE("compressed: ranks as processes agree and stay within the bound", "[compressed][process]") {
  const uint64_t seed = testSeed();
  for (int n : {3, 8}) {
    const size_t count = n == 3 ? 100003 : 4099;
    auto exits = test::runRanks(n, [&](int rank, int nranks, const snclUniqueId& id) {
      snclComm_t comm = nullptr;
      if (snclCommInitRank(&comm, nranks, id, rank) != snclSuccess) return 2;
      int failures = 0;
      for (snclCompression_t kind : {snclCompressInt8, snclCompressFp8e4m3}) {
        std::vector<std::vector<float>> in(nranks);
        for (int r = 0; r < nranks; ++r) in[r] = makeInput(seed + kind, r, count, Dist::Gaussian, false);
        std::vector<float> out(count);
        snclCompressOpts_t o{sizeof(o), kind, 0, nullptr};
        if (snclAllReduceCompressed(in[rank].data(), out.data(), count, snclFloat32, snclSum, comm, nullptr, &o) !=
            snclSuccess) {
          fprintf(stderr, "rank %d: %s\n", rank, snclGetLastError(comm));
          ++failures;
          continue;
        }
        if (countOutOfBound(Case{kind, snclSum, false, 256}, in, out.data(), count)) ++failures;
      }
      if (snclCommDestroy(comm) != snclSuccess) ++failures;
      return failures ? 1 : 0;
    });
    INFO("n " << n << " seed " << seed);
    CHECK(test::allSucceeded(exits));
  }
}

TEST_CASE("compressed: error feedback makes the mean of repeated calls converge", "[compressed][residual]") {
  const uint64_t seed = testSeed();
  const int n = 4, K = 40;
  const size_t count = 5003;
  auto comms = threadComms(n);
  std::vector<std::vector<float>> in(n);
  for (int r = 0; r < n; ++r) in[r] = makeInput(seed, r, count, Dist::Gaussian, false);
  std::vector<double> exact(count);
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) exact[i] += in[r][i];
  for (snclCompression_t kind : {snclCompressInt8, snclCompressFp8e4m3}) {
    double meanError[2];
    for (int feedback = 0; feedback < 2; ++feedback) {
      std::vector<std::vector<double>> mean(n, std::vector<double>(count));
      test::onEveryRank(n, [&](int r) {
        std::vector<float> res(count, 0.0f), out(count);
        snclCompressOpts_t o{sizeof(o), kind, 0, feedback ? res.data() : nullptr};
        for (int k = 0; k < K; ++k) {
          if (snclAllReduceCompressed(in[r].data(), out.data(), count, snclFloat32, snclSum, comms[r], nullptr, &o) !=
              snclSuccess)
            return;
          for (size_t i = 0; i < count; ++i) mean[r][i] += out[i] / K;
        }
      });
      double e = 0;
      for (size_t i = 0; i < count; ++i) e += std::fabs(mean[0][i] - exact[i]) / count;
      meanError[feedback] = e;
    }
    printf("error feedback, kind %d, %d calls: mean |error| of the mean output %.3g without, %.3g with\n", int(kind), K,
           meanError[0], meanError[1]);
    INFO("kind " << kind << ": mean |error| of the mean without feedback " << meanError[0] << ", with "
                 << meanError[1]);
    CHECK(meanError[0] > 0);
    CHECK(meanError[1] < meanError[0] / 4);
  }
  destroy(comms);
}

TEST_CASE("compressed: bad arguments are refused by name", "[compressed][errors]") {
  auto comms = threadComms(2);
  float a[8] = {}, b[8] = {};
  int ia[8] = {};
  snclCompressOpts_t o{sizeof(o), snclCompressInt8, 0, nullptr};
  auto expect = [&](snclResult_t want, snclResult_t got, const char* text) {
    CHECK(got == want);
    CHECK(std::string(snclGetLastError(comms[0])).find(text) != std::string::npos);
  };
  expect(snclInvalidArgument, snclAllReduceCompressed(ia, ia, 8, snclInt32, snclSum, comms[0], nullptr, &o), "int32");
  expect(snclInvalidArgument, snclAllReduceCompressed(a, b, 8, snclFloat32, snclMax, comms[0], nullptr, &o), "max");
  expect(snclInvalidArgument, snclAllReduceCompressed(a, b, 8, snclFloat32, snclSum, comms[0], nullptr, nullptr),
         "opts is NULL");
  snclCompressOpts_t bad = o;
  bad.size = 3;
  expect(snclInvalidArgument, snclAllReduceCompressed(a, b, 8, snclFloat32, snclSum, comms[0], nullptr, &bad), "size");
  bad = o;
  bad.kind = static_cast<snclCompression_t>(3);
  expect(snclInvalidArgument, snclAllReduceCompressed(a, b, 8, snclFloat32, snclSum, comms[0], nullptr, &bad), "kind");
  bad = o;
  bad.blockElems = size_t(1) << 30;
  expect(snclInvalidArgument, snclAllReduceCompressed(a, b, 8, snclFloat32, snclSum, comms[0], nullptr, &bad),
         "blockElems");
  expect(snclInvalidArgument, snclAllReduceCompressed(nullptr, b, 8, snclFloat32, snclSum, comms[0], nullptr, &o),
         "sendbuff is NULL");
  expect(snclInvalidArgument, snclAllReduceCompressed(a, a + 1, 4, snclFloat32, snclSum, comms[0], nullptr, &o),
         "overlap");
  bad = o;
  bad.residual = b;
  expect(snclInvalidArgument, snclAllReduceCompressed(a, b, 8, snclFloat32, snclSum, comms[0], nullptr, &bad),
         "residual");
  REQUIRE(snclGroupStart() == snclSuccess);
  expect(snclInvalidUsage, snclAllReduceCompressed(a, b, 8, snclFloat32, snclSum, comms[0], nullptr, &o), "group");
  snclGroupEnd();
  expect(snclInvalidArgument, snclAllReduceCompressed(a, b, 8, snclFloat32, snclSum, nullptr, nullptr, &o), "NULL");
  destroy(comms);
}

TEST_CASE("compressed: snclCompressNone is the plain All-Reduce, and streams order the call", "[compressed][stream]") {
  auto comms = threadComms(3);
  const size_t count = 1001;
  std::vector<int> failures(3, 0);
  test::onEveryRank(3, [&](int r) {
    std::vector<float> in(count), out(count), out2(count);
    for (size_t i = 0; i < count; ++i) in[i] = float(r + 1) * float(i % 7);  // small integers: exact
    snclStream_t s = nullptr;
    if (snclStreamCreate(&s) != snclSuccess) return void(++failures[r]);
    snclCompressOpts_t none{sizeof(none), snclCompressNone, 0, nullptr};
    snclCompressOpts_t q{sizeof(q), snclCompressInt8, 0, nullptr};
    if (snclAllReduceCompressed(in.data(), out.data(), count, snclFloat32, snclSum, comms[r], s, &none) != snclSuccess)
      ++failures[r];
    // Queued behind the plain call on the stream: runs after it, on this thread.
    if (snclAllReduceCompressed(in.data(), out2.data(), count, snclFloat32, snclSum, comms[r], s, &q) != snclSuccess)
      ++failures[r];
    if (snclStreamSynchronize(s) != snclSuccess) ++failures[r];
    for (size_t i = 0; i < count; ++i) {
      const float want = 6.0f * float(i % 7);
      if (out[i] != want || std::fabs(out2[i] - want) > 6 * 6.0f / 127) ++failures[r];
    }
    snclStreamDestroy(s);
  });
  for (int r = 0; r < 3; ++r) CHECK(failures[r] == 0);
  destroy(comms);
}

TEST_CASE("compressed: SNCL_COMPRESS makes plain snclAllReduce compress large float sums", "[compressed][auto]") {
  const uint64_t seed = testSeed();
  setenv("SNCL_COMPRESS", "int8", 1);  // read by each comm at its first All-Reduce
  auto comms = threadComms(4);
  const int n = 4;
  for (size_t count : {size_t(1000), size_t(1u << 20)}) {
    INFO("count " << count);
    std::vector<std::vector<float>> in(n), out(n, std::vector<float>(count));
    for (int r = 0; r < n; ++r) in[r] = makeInput(seed, r, count, Dist::Uniform, false);
    std::vector<snclResult_t> res(n);
    test::onEveryRank(n, [&](int r) {
      res[r] = snclAllReduce(in[r].data(), out[r].data(), count, snclFloat32, snclSum, comms[r], nullptr);
    });
    for (int r = 0; r < n; ++r) REQUIRE(res[r] == snclSuccess);
    // The plain path adds in float32 exactly as a rank-order sum may; compressed results
    // are off by far more than float rounding somewhere, and within the int8 bound.
    double worst = 0;
    for (size_t i = 0; i < count; ++i) {
      double s = 0;
      for (int r = 0; r < n; ++r) s += in[r][i];
      worst = std::max(worst, std::fabs(out[0][i] - s));
    }
    if (count * sizeof(float) < 65536) {
      CHECK(worst < 1e-5);  // below SNCL_COMPRESS_MIN_BYTES: plain
    } else {
      CHECK(worst > 1e-4);  // compressed
      CHECK(countOutOfBound(Case{snclCompressInt8, snclSum, false, 256}, in, out[0].data(), count) == 0);
    }
  }
  unsetenv("SNCL_COMPRESS");
  destroy(comms);
}

TEST_CASE("compressed: a link lost in either phase gives the healthy run's bits", "[compressed][fault]") {
  const uint64_t seed = testSeed();
  const int n = 8;
  const size_t count = 300007;
  std::string topo = __FILE__;
  topo = topo.substr(0, topo.rfind("/tests/")) + "/topologies/supernode-2plane-2x4.json";
  setenv("SNCL_TOPO_FILE", topo.c_str(), 1);
  setenv("SNCL_BUS_DETECT_US", "50", 1);
  std::vector<std::vector<float>> in(n);
  for (int r = 0; r < n; ++r) in[r] = makeInput(seed, r, count, Dist::Gaussian, false);
  // A compressed call is two collectives: ops 1, 2 the first call (the reference), op 3 the
  // second call's All-to-All, op 4 its All-Gather.
  for (int op : {3, 4}) {
    INFO("link down at op " << op);
    auto comms = test::busComms(n, "link=n0.e1-n0.l1p0:down@op=" + std::to_string(op));
    REQUIRE(comms.size() == size_t(n));
    std::vector<std::vector<float>> out[2];
    for (auto& o : out) o.assign(n, std::vector<float>(count));
    std::vector<snclResult_t> res(n, snclSuccess);
    for (int call = 0; call < 2; ++call)
      test::onEveryRank(n, [&](int r) {
        snclCompressOpts_t o{sizeof(o), snclCompressFp8e4m3, 0, nullptr};
        snclResult_t x = snclAllReduceCompressed(in[r].data(), out[call][r].data(), count, snclFloat32, snclSum,
                                                 comms[r], nullptr, &o);
        if (x != snclSuccess) res[r] = x;
      });
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r << ": " << snclGetLastError(comms[r]));
      REQUIRE(res[r] == snclSuccess);
      CHECK(memcmp(out[1][r].data(), out[0][r].data(), count * sizeof(float)) == 0);
      snclFaultStats_t s{};
      REQUIRE(snclCommGetFaultStats(comms[r], &s) == snclSuccess);
      CHECK(s.reroutes == 1);
    }
    CHECK(countOutOfBound(Case{snclCompressFp8e4m3, snclSum, false, 256}, in, out[1][0].data(), count) == 0);
    test::destroyAll(comms);
  }
  unsetenv("SNCL_TOPO_FILE");
  unsetenv("SNCL_BUS_DETECT_US");
}
