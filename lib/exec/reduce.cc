// Data type metadata, the portable kernels, and the dispatcher that picks an instruction
// set once per process. The vector kernels are in reduce_avx2.cc and reduce_avx512.cc.
#include "lib/exec/reduce.h"

#include <strings.h>

#include <cstring>

#include "lib/base/env.h"
#include "lib/base/log.h"
#include "lib/exec/reduce_kernels.h"

namespace sncl {
namespace reduce_impl {
namespace {

// Portable kernels: one element per step, in plain C++ (the compiler may vectorize them
// for the baseline instruction set). memcpy loads accept any alignment.
template <class T>
T loadScalar(const T* p) {
  T v;
  memcpy(&v, p, sizeof(T));
  return v;
}
template <class T>
void storeScalar(T* p, T v) {
  memcpy(p, &v, sizeof(T));
}

template <class Int>
struct IntLanes {
  using T = Int;
  using R = Int;
  static constexpr size_t N = 1;
  static R load(const T* p) { return loadScalar(p); }
  static void store(T* p, R r) { storeScalar(p, r); }
  template <snclRedOp_t Op>
  static R combine(R a, R b) {
    // Unsigned arithmetic wraps where signed would overflow; Wide avoids the promotion of
    // small unsigned operands to (signed) int.
    using U = std::make_unsigned_t<T>;
    using Wide = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, U>;
    if constexpr (isBitwise(Op)) return bitwiseCombine<Op, T>(a, b);
    if constexpr (Op == snclSum) return T(U(Wide(U(a)) + Wide(U(b))));
    if constexpr (Op == snclProd) return T(U(Wide(U(a)) * Wide(U(b))));
    if constexpr (Op == snclMax) return a > b ? a : b;
    return a < b ? a : b;
  }
};

template <class Fl>
struct FloatOps {
  template <snclRedOp_t Op>
  static Fl combine(Fl a, Fl b) {
    if constexpr (Op == snclSum) return a + b;
    if constexpr (Op == snclProd) return a * b;
    return maxMinNumber<Op>(a, b);
  }
};

template <class Fl>
struct FloatLanes : FloatOps<Fl> {
  using T = Fl;
  using R = Fl;
  using Factor = Fl;
  static constexpr size_t N = 1;
  static R load(const T* p) { return loadScalar(p); }
  static void store(T* p, R r) { storeScalar(p, r); }
  static Factor scaleFactor(double f) { return Fl(f); }
  static R scale(R x, Factor f) { return x * f; }
};

template <class F, class Bits>
struct NarrowLanes : FloatOps<float> {
  using T = Bits;
  using R = float;
  using Factor = float;
  static constexpr size_t N = 1;
  static R load(const T* p) { return widenScalar<F>(loadScalar(p)); }
  static void store(T* p, R r) { storeScalar(p, T(narrowScalar<F>(r))); }
  static Factor scaleFactor(double f) { return float(f); }
  static R scale(R x, Factor f) { return mulRoundOdd(x, f); }
};

template <snclDataType_t D>
using Lanes = std::conditional_t<
    kIsInteger<D>, IntLanes<Storage<D>>,
    std::conditional_t<D == snclFloat32, FloatLanes<float>,
                       std::conditional_t<D == snclFloat64, FloatLanes<double>,
                                          NarrowLanes<FormatOf<D>, Storage<D>>>>>;

}  // namespace

const KernelTable& portableKernels() {
  static constexpr KernelTable table = makeTable<Lanes>();
  return table;
}

}  // namespace reduce_impl

namespace {

constexpr const char* kTypeNames[snclNumTypes] = {"int8",    "uint8",   "int32",    "uint32",
                                                   "int64",   "uint64",  "float16",  "float32",
                                                   "float64", "bfloat16", "float8e4m3", "float8e5m2"};
// dtypeSize's table (reduce.h) is in the enum's order.
static_assert(dtypeSize(snclInt8) == 1 && dtypeSize(snclUint32) == 4 && dtypeSize(snclUint64) == 8 &&
              dtypeSize(snclFloat16) == 2 && dtypeSize(snclFloat32) == 4 && dtypeSize(snclFloat64) == 8 &&
              dtypeSize(snclBfloat16) == 2 && dtypeSize(snclFloat8e4m3) == 1 && dtypeSize(snclFloat8e5m2) == 1);
constexpr const char* kOpNames[snclNumOps] = {"sum", "prod", "max", "min", "avg", "band",
                                               "bor", "bxor", "land", "lor",  "lxor"};
constexpr ReduceIsa kIsas[] = {ReduceIsa::Portable, ReduceIsa::Avx2, ReduceIsa::Avx512};

const reduce_impl::KernelTable& kernelsOf(ReduceIsa isa) {
  switch (isa) {
    case ReduceIsa::Avx512: return reduce_impl::avx512Kernels();
    case ReduceIsa::Avx2: return reduce_impl::avx2Kernels();
    default: return reduce_impl::portableKernels();
  }
}

struct Choice {
  ReduceIsa isa;
  const reduce_impl::KernelTable* kernels;
};

// Decided once: the best supported instruction set, unless SNCL_REDUCE_ISA names another
// supported one.
const Choice& choice() {
  static const Choice c = [] {
    ReduceIsa best = ReduceIsa::Portable;
    for (ReduceIsa isa : kIsas)
      if (reduceIsaSupported(isa)) best = isa;
    ReduceIsa pick = best;
    if (auto want = env::str("SNCL_REDUCE_ISA")) {
      bool known = false;
      for (ReduceIsa isa : kIsas) {
        if (strcasecmp(want->c_str(), reduceIsaName(isa)) != 0) continue;
        known = true;
        if (reduceIsaSupported(isa))
          pick = isa;
        else
          log::warn("SNCL_REDUCE_ISA={} is not supported by this CPU; using {}", *want, reduceIsaName(best));
      }
      if (!known) log::warn("SNCL_REDUCE_ISA={} is not one of portable, avx2, avx512; using {}", *want, reduceIsaName(best));
    }
    log::info("reduction kernels: {}", reduceIsaName(pick));
    return Choice{pick, &kernelsOf(pick)};
  }();
  return c;
}

// Avg, and the bitwise and logical ops of float types, have empty slots in the tables.
bool opValid(snclRedOp_t op) { return op >= snclSum && op < snclNumOps; }

}  // namespace

const char* dtypeName(snclDataType_t type) { return dtypeValid(type) ? kTypeNames[type] : "invalid"; }
const char* redOpName(snclRedOp_t op) { return op >= 0 && op < snclNumOps ? kOpNames[op] : "invalid"; }
bool dtypeInteger(snclDataType_t type) { return type >= snclInt8 && type <= snclUint64; }
bool redOpIntegerOnly(snclRedOp_t op) { return reduce_impl::isBitwise(op); }

bool dtypeFromName(std::string_view name, snclDataType_t* type) {
  struct Alias {
    const char* name;
    snclDataType_t type;
  };
  static constexpr Alias kAliases[] = {
      {"char", snclInt8},      {"i8", snclInt8},         {"u8", snclUint8},        {"int", snclInt32},
      {"i32", snclInt32},      {"u32", snclUint32},      {"i64", snclInt64},       {"u64", snclUint64},
      {"half", snclFloat16},   {"f16", snclFloat16},     {"fp16", snclFloat16},    {"float", snclFloat32},
      {"f32", snclFloat32},    {"fp32", snclFloat32},    {"double", snclFloat64},  {"f64", snclFloat64},
      {"fp64", snclFloat64},   {"bf16", snclBfloat16},   {"f8e4m3", snclFloat8e4m3}, {"fp8e4m3", snclFloat8e4m3},
      {"e4m3", snclFloat8e4m3}, {"f8e5m2", snclFloat8e5m2}, {"fp8e5m2", snclFloat8e5m2}, {"e5m2", snclFloat8e5m2}};
  const auto same = [](std::string_view a, const char* b) {
    return a.size() == strlen(b) && strncasecmp(a.data(), b, a.size()) == 0;
  };
  for (const char* prefix : {"nccl", "sncl"})
    if (name.size() > 4 && same(name.substr(0, 4), prefix)) name.remove_prefix(4);
  for (int t = 0; t < snclNumTypes; ++t)
    if (same(name, kTypeNames[t])) return *type = snclDataType_t(t), true;
  for (const Alias& a : kAliases)
    if (same(name, a.name)) return *type = a.type, true;
  return false;
}

ReduceFn reduceKernel(snclDataType_t type, snclRedOp_t op) {
  return dtypeValid(type) && opValid(op) ? choice().kernels->reduce[type][op] : nullptr;
}
ScaleFn scaleKernel(snclDataType_t type) { return dtypeValid(type) ? choice().kernels->scale[type] : nullptr; }
const char* reduceIsa() { return reduceIsaName(choice().isa); }

bool reduceIsaSupported(ReduceIsa isa) {
  // __builtin_cpu_supports also checks that the OS saves the AVX/AVX-512 registers.
  __builtin_cpu_init();
  switch (isa) {
    case ReduceIsa::Portable: return true;
    case ReduceIsa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case ReduceIsa::Avx512:
      return reduceIsaSupported(ReduceIsa::Avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
  }
  return false;
}

const char* reduceIsaName(ReduceIsa isa) {
  switch (isa) {
    case ReduceIsa::Portable: return "portable";
    case ReduceIsa::Avx2: return "avx2";
    case ReduceIsa::Avx512: return "avx512";
  }
  return "invalid";
}

ReduceFn reduceKernel(snclDataType_t type, snclRedOp_t op, ReduceIsa isa) {
  return dtypeValid(type) && opValid(op) && reduceIsaSupported(isa) ? kernelsOf(isa).reduce[type][op] : nullptr;
}
ScaleFn scaleKernel(snclDataType_t type, ReduceIsa isa) {
  return dtypeValid(type) && reduceIsaSupported(isa) ? kernelsOf(isa).scale[type] : nullptr;
}

}  // namespace sncl
