// Throughput of the reduction kernels next to this machine's plain float loop a[i] += b[i]
// (baseline_add.cc, -O3 -march=native), measured in the same run. A program, not a test.
//
//   reduce_kernels_bench [--sizes 256K,64M] [--types all|float32,float16,...]
//                        [--ops all|sum,prod,max,min,scale] [--isa best|all|portable,avx2,avx512]
//                        [--oop] [--trials 7]
//
// A size is per buffer. Reductions run in place (dst = a) like the baseline, or into a
// third buffer with --oop (baseline c[i] = a[i] + b[i]). Bytes moved per call: 3 x count x
// size for a reduction (and the baseline), 2 x count x size for scale (avg over 8 ranks:
// the input times 1/8, or divided by 8, always into the third buffer).
// Buffers are 64-byte aligned and pre-faulted. Each figure is the best of --trials runs of
// at least 20 ms of this thread's CPU time (so that other processes' time slices on a
// shared machine do not count). The baseline runs in turns with each kernel, and "x base"
// divides by its best figure from those same turns.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "lib/base/size_text.h"
#include "lib/exec/reduce.h"

namespace sncl::bench {
void addInPlace(float* __restrict a, const float* __restrict b, size_t n);
void addOutOfPlace(float* __restrict c, const float* __restrict a, const float* __restrict b, size_t n);
}  // namespace sncl::bench

using namespace sncl;

namespace {

struct Options {
  std::vector<size_t> sizes{256 << 10, 64 << 20};
  std::vector<snclDataType_t> types;
  std::vector<std::string> ops{"sum", "prod", "max", "min", "scale"};
  std::vector<ReduceIsa> isas;
  bool outOfPlace = false;
  int trials = 7;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  for (size_t start = 0, end; start <= s.size(); start = end + 1) {
    end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) parts.push_back(s.substr(start, end - start));
  }
  return parts;
}

// A reduction kernel's op by name (every built-in op but avg, which is sum then scale).
bool kernelOp(const std::string& name, snclRedOp_t* out) {
  for (int k = 0; k < snclNumOps; ++k) {
    if (k == snclAvg || name != redOpName(snclRedOp_t(k))) continue;
    if (out) *out = snclRedOp_t(k);
    return true;
  }
  return false;
}

[[noreturn]] void usage(const char* why) {
  fprintf(stderr,
          "%s\nusage: reduce_kernels_bench [--sizes 256K,64M] [--types all|float32,...] "
          "[--ops all|sum,prod,max,min,scale,band,bor,bxor,land,lor,lxor] [--isa best|all|portable,avx2,avx512] [--oop] [--trials N]\n",
          why);
  exit(2);
}

size_t parseSize(const std::string& s) {
  uint64_t v = 0;
  if (!sncl::parseSize(s, &v) || v == 0) usage(("bad size " + s).c_str());
  return size_t(v);
}

Options parse(int argc, char** argv) {
  Options o;
  std::string isas = "best", types = "all";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + arg).c_str());
      return argv[++i];
    };
    if (arg == "--sizes") {
      o.sizes.clear();
      for (const std::string& s : split(value())) o.sizes.push_back(parseSize(s));
    } else if (arg == "--types") {
      types = value();
    } else if (arg == "--ops") {
      std::string v = value();
      if (v == "all") o.ops.insert(o.ops.end(), {"band", "bor", "bxor", "land", "lor", "lxor"});
      else o.ops = split(v);
    } else if (arg == "--isa") {
      isas = value();
    } else if (arg == "--oop") {
      o.outOfPlace = true;
    } else if (arg == "--trials") {
      o.trials = atoi(value().c_str());
      if (o.trials < 1) usage("--trials must be positive");
    } else {
      usage(("unknown argument " + arg).c_str());
    }
  }
  for (int t = 0; t < snclNumTypes; ++t) {
    std::vector<std::string> want = split(types);
    for (const std::string& name : want) {
      snclDataType_t named;
      if (name == "all" || (dtypeFromName(name, &named) && named == t)) o.types.push_back(snclDataType_t(t));
    }
  }
  if (o.types.empty()) usage(("no known type in " + types).c_str());
  for (const std::string& op : o.ops)
    if (op != "scale" && !kernelOp(op, nullptr)) usage(("unknown op " + op).c_str());
  for (ReduceIsa isa : {ReduceIsa::Portable, ReduceIsa::Avx2, ReduceIsa::Avx512}) {
    bool named = false;
    for (const std::string& name : split(isas)) named |= name == "all" || name == reduceIsaName(isa);
    if ((named || (isas == "best" && reduceIsaName(isa) == std::string(reduceIsa()))) && reduceIsaSupported(isa))
      o.isas.push_back(isa);
  }
  if (o.isas.empty()) usage(("no supported instruction set in " + isas).c_str());
  return o;
}

// A 64-byte aligned buffer, written once so that its pages are faulted in before timing.
struct Buffer {
  explicit Buffer(size_t bytes) : data(static_cast<unsigned char*>(aligned_alloc(64, (bytes + 63) / 64 * 64))) {
    if (!data) usage("out of memory");
    memset(data, 0, bytes);
  }
  ~Buffer() { free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  unsigned char* data;
};

// Values near 1, so that repeated in-place sums and products stay clear of subnormals
// (whose slow paths would measure the CPU, not the kernel).
void fillNearOne(snclDataType_t type, unsigned char* p, size_t count, int salt) {
  for (size_t i = 0; i < count; ++i) {
    unsigned k = unsigned(i * 7 + salt) % 8;
    switch (type) {
      case snclFloat16: { uint16_t v = uint16_t(0x3c00 + k); memcpy(p + 2 * i, &v, 2); break; }
      case snclBfloat16: { uint16_t v = uint16_t(0x3f80 + k); memcpy(p + 2 * i, &v, 2); break; }
      case snclFloat8e4m3: p[i] = uint8_t(0x38 + k % 8); break;
      case snclFloat8e5m2: p[i] = uint8_t(0x3c + k % 4); break;
      case snclFloat32: { float v = 1 + k / 1024.0f; memcpy(p + 4 * i, &v, 4); break; }
      case snclFloat64: { double v = 1 + k / 1024.0; memcpy(p + 8 * i, &v, 8); break; }
      default: { uint64_t v = k + 1; memcpy(p + dtypeSize(type) * i, &v, dtypeSize(type)); }
    }
  }
}

// This thread's CPU time: on a shared machine, time spent descheduled is not the kernel's.
double cpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// fn run back to back for at least 20 ms of CPU time, as GB/s.
class Timed {
 public:
  Timed(std::function<void()> fn, double bytesPerCall) : fn_(std::move(fn)), bytes_(bytesPerCall) {
    fn_();  // warm up caches, branch predictors, the dispatcher
    double t0 = cpuSeconds();
    fn_();
    double once = cpuSeconds() - t0;
    reps_ = once > 0 ? long(0.02 / once) + 1 : 1000;
  }
  double rate() const {
    double start = cpuSeconds();
    for (long r = 0; r < reps_; ++r) fn_();
    return bytes_ * double(reps_) / (cpuSeconds() - start) / 1e9;
  }

 private:
  std::function<void()> fn_;
  double bytes_;
  long reps_;
};

std::string sizeName(size_t bytes) {
  if (bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes % (1 << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  printf("# reduce kernels; the dispatcher picks %s. Best of %d trials, thread CPU time; bytes moved =\n"
         "# 3 x count x size (scale: 2 x). Baseline: float %s, plain loop compiled -O3 -march=native,\n"
         "# timed in turns with each kernel. Kernels run %s.\n",
         reduceIsa(), o.trials, o.outOfPlace ? "c[i] = a[i] + b[i]" : "a[i] += b[i]",
         o.outOfPlace ? "into a third buffer" : "in place (dst = a)");
  for (size_t bytes : o.sizes) {
    // The baseline has float buffers of its own; the kernels' hold each type in turn.
    Buffer a(bytes), b(bytes), c(bytes), baseA(bytes), baseB(bytes), baseC(bytes);
    size_t floats = bytes / sizeof(float);
    fillNearOne(snclFloat32, baseA.data, floats, 0);
    fillNearOne(snclFloat32, baseB.data, floats, 3);
    auto* fa = reinterpret_cast<float*>(baseA.data);
    auto* fb = reinterpret_cast<float*>(baseB.data);
    auto* fc = reinterpret_cast<float*>(baseC.data);
    Timed base([&] { o.outOfPlace ? bench::addOutOfPlace(fc, fa, fb, floats) : bench::addInPlace(fa, fb, floats); },
               3.0 * double(bytes));
    printf("\n## %s per buffer\n%-11s %-6s %-9s %9s %9s %7s\n", sizeName(bytes).c_str(), "type", "op", "isa",
           "GB/s", "base GB/s", "x base");
    for (snclDataType_t type : o.types) {
      size_t count = bytes / dtypeSize(type), moved = count * dtypeSize(type);
      for (const std::string& op : o.ops) {
        for (ReduceIsa isa : o.isas) {
          fillNearOne(type, a.data, count, 0);
          fillNearOne(type, b.data, count, 3);
          unsigned char *pa = a.data, *pb = b.data, *pc = c.data, *dst = o.outOfPlace ? pc : pa;
          std::function<void()> run;
          double bytesPerCall = 3.0 * double(moved);
          if (op == "scale") {
            // avg over 8 ranks, into c so that repeated calls keep scaling the same input
            ScaleFn fn = scaleKernel(type, isa);
            run = [=] { fn(pc, pa, count, 1.0 / 8, 8); };
            bytesPerCall = 2.0 * double(moved);
          } else {
            snclRedOp_t redOp = snclSum;
            kernelOp(op, &redOp);
            ReduceFn fn = reduceKernel(type, redOp, isa);
            if (!fn) continue;  // band ... lxor on a float type: no such kernel
            run = [=] { fn(dst, pa, pb, count); };
          }
          Timed kernel(run, bytesPerCall);
          double best = 0, bestBase = 0;
          for (int t = 0; t < o.trials; ++t) {
            bestBase = std::max(bestBase, base.rate());
            best = std::max(best, kernel.rate());
          }
          printf("%-11s %-6s %-9s %9.1f %9.1f %7.2f\n", dtypeName(type), op.c_str(), reduceIsaName(isa), best, bestBase,
                 best / bestBase);
          fflush(stdout);
        }
      }
    }
  }
  return 0;
}
