// All-Reduce benchmark in nccl-tests' format, with MPI_Allreduce beside it.
//
// --compress int8|fp8|none (docs/compression.md): sncl's calls are snclAllReduceCompressed
// (none: the same entry, uncompressed, for A/B runs); results are checked against the
// error bound sncl_ext.h states instead of exactly, and at the end rank 0 prints, per size,
// the bytes a rank sends (compressed vs float32) and, on the emulated bus, the modeled time
// per call.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "perf/common/harness.h"
#include "sncl/sncl_ext.h"

namespace {

using perf::Call;

// --compress, taken off argv before the shared options see it.
struct Compress {
  bool on = false;
  snclCompression_t kind = snclCompressNone;
  const char* name = "none";
  std::mutex mu;
  // By count, by rank: the modeled duration of each call (snclBusModeledTimeUs's total
  // before and after). Ranks that enter late wait less: the least over ranks of call k is
  // the call's time from about when its last rank entered (a 2-core machine running 8
  // ranks delays their entries by far more than a call takes).
  std::map<size_t, std::vector<std::vector<double>>> modeled;
  int nranks = 0;
} gCompress;

double busFactor(int n) { return 2.0 * (n - 1) / n; }

snclResult_t runCompressed(const Call& c) {
  snclCompressOpts_t o{sizeof(o), gCompress.kind, 0, nullptr};
  double before = 0, after = 0;
  const bool bus = snclBusModeledTimeUs(c.comm, nullptr, &before) == snclSuccess;
  const snclResult_t r = snclAllReduceCompressed(c.send, c.recv, c.count, c.type, c.op, c.comm, nullptr, &o);
  if (bus && snclBusModeledTimeUs(c.comm, nullptr, &after) == snclSuccess) {
    std::lock_guard<std::mutex> lock(gCompress.mu);
    auto& perRank = gCompress.modeled[c.count];
    perRank.resize(size_t(c.nranks));
    perRank[size_t(c.rank)].push_back(after - before);
    gCompress.nranks = c.nranks;
  }
  return r;
}

snclResult_t run(const Call& c) {
  if (gCompress.on) return runCompressed(c);
  return snclAllReduce(c.send, c.recv, c.count, c.type, c.op, c.comm, nullptr);
}
int runMpi(const Call& c, MPI_Datatype type, MPI_Op op) {
  return MPI_Allreduce(c.send, c.recv, static_cast<int>(c.count), type, op, MPI_COMM_WORLD);
}
void fill(const Call& c) { perf::fillReduction(c, c.count); }

// The bound of sncl_ext.h for element i (blocks of 256 in n slices), from every rank's
// input (the harness's values are a function of rank and index).
size_t checkCompressed(const Call& c) {
  const int n = c.nranks;
  const bool int8 = gCompress.kind == snclCompressInt8;
  const double top = int8 ? 127.0 : 448.0, eps = std::ldexp(1.0, -23);
  const size_t slice = (c.count + n - 1) / n, block = 256;
  size_t wrong = 0;
  std::vector<double> in(size_t(n) * block), sum(block), ein(block), abssum(block);
  for (size_t b0 = 0; b0 < c.count;) {
    const size_t inSlice = b0 % slice;
    const size_t b1 = std::min(std::min(c.count, b0 + block - inSlice % block), b0 - inSlice + slice);
    const size_t len = b1 - b0;
    std::fill(sum.begin(), sum.end(), 0.0), std::fill(ein.begin(), ein.end(), 0.0);
    std::fill(abssum.begin(), abssum.end(), 0.0);
    double scales = 0;
    for (int r = 0; r < n; ++r) {
      double m = 0;
      for (size_t i = 0; i < len; ++i) m = std::max(m, std::fabs(perf::valueOf(c.type, snclSum, r, n, b0 + i)));
      scales += m / top;
      for (size_t i = 0; i < len; ++i) {
        const double x = perf::valueOf(c.type, snclSum, r, n, b0 + i);
        sum[i] += x;
        abssum[i] += std::fabs(x);
        ein[i] += int8 ? m / top / 2 : std::fabs(x) / 16 + m / top / 1024;
      }
    }
    double outMax = 0;
    for (size_t i = 0; i < len; ++i) outMax = std::max(outMax, std::fabs(sum[i]) + ein[i]);
    for (size_t i = 0; i < len; ++i) {
      const double eout = int8 ? outMax / top / 2 : (std::fabs(sum[i]) + ein[i]) / 16 + outMax / top / 1024;
      double bound = ein[i] + eout + 4 * (n + 2) * eps * (abssum[i] + scales * top + outMax);
      double want = sum[i];
      if (c.refOp == snclAvg) bound /= n, want /= n;
      if (c.type == snclBfloat16) bound += (std::fabs(want) + bound) / 256;
      if (!(std::fabs(perf::load(c.type, c.recv, b0 + i) - want) <= bound)) ++wrong;
    }
    b0 = b1;
  }
  return wrong;
}

size_t check(const Call& c) {
  if (gCompress.on && gCompress.kind != snclCompressNone) return checkCompressed(c);
  return perf::checkReduction(c, c.recv, c.count);
}

bool runGloo(const Call& c) { return c.gloo->allReduce(c.send, c.recv, c.count, c.type, c.refOp); }

// Bytes a rank sends per call: the composite's All-to-All and All-Gather of n slices, each
// ceil(count/n) one-byte codes and a float scale per 256, padded to 4; float32 ring: 2(n-1)/n.
void printCompressSummary() {
  if (gCompress.modeled.empty()) return;
  printf("# --compress %s: per rank per call, bytes sent (float32 ring for comparison) and modeled bus time\n"
         "# (median over calls of the least over this process's ranks)\n", gCompress.name);
  printf("# %12s %14s %14s %8s %14s\n", "count", "wire bytes", "fp32 bytes", "ratio", "modeled us");
  for (const auto& [count, perRank] : gCompress.modeled) {
    const size_t n = size_t(gCompress.nranks), slice = (count + n - 1) / n;
    const size_t sliceBytes = ((slice + 255) / 256 * 4 + slice + 3) / 4 * 4;
    const double fp32 = 2.0 * (n - 1) * count * 4 / n;
    const double wire = gCompress.kind == snclCompressNone ? fp32 : 2.0 * (n - 1) * sliceBytes;
    size_t calls = SIZE_MAX;
    for (const auto& v : perRank) calls = std::min(calls, v.size());
    std::vector<double> least;
    for (size_t k = 0; k < calls; ++k) {
      double m = perRank[0][k];
      for (const auto& v : perRank) m = std::min(m, v[k]);
      least.push_back(m);
    }
    std::sort(least.begin(), least.end());
    const double median = least.empty() ? -1 : least[least.size() / 2];
    printf("# %12zu %14.0f %14.0f %8.3f %14.2f\n", count, wire, fp32, wire / fp32, median);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (!strcmp(argv[i], "--compress") && i + 1 < argc) {
      const std::string v = argv[++i];
      gCompress.on = true;
      gCompress.name = argv[i];
      if (v == "int8") gCompress.kind = snclCompressInt8;
      else if (v == "fp8" || v == "e4m3") gCompress.kind = snclCompressFp8e4m3;
      else if (v == "none") gCompress.kind = snclCompressNone;
      else {
        fprintf(stderr, "%s: --compress takes int8, fp8 or none, not '%s'\n", argv[0], argv[i]);
        return 2;
      }
      continue;
    }
    args.push_back(argv[i]);
  }
  args.push_back(nullptr);
  perf::Collective c{"all_reduce", true, false, false, true, nullptr, nullptr, busFactor, run, runMpi, fill, check, runGloo};
  const int rc = perf::run(int(args.size()) - 1, args.data(), c);
  printCompressSummary();
  return rc;
}
