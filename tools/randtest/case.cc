#include "tools/randtest/case.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <sstream>

namespace randtest {

namespace {

const char* const kCollNames[] = {"allreduce", "broadcast", "reduce",  "allgather", "reducescatter",
                                  "alltoall",  "gather",    "scatter", "sendrecv"};
const char* const kTypeNames[] = {"i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16", "e4m3", "e5m2"};
// Indexed by op: snclRedOp_t's built-in ops, then kPreMulSum.
const char* const kOpNames[] = {"sum",  "prod", "max", "min", "avg",  "band",
                                "bor",  "bxor", "land", "lor", "lxor", "premulsum"};
static_assert(std::size(kOpNames) == kPreMulSum + 1);
// The ops of every type; integers also have the bitwise and logical ones.
const int kFloatOps[] = {snclSum, snclProd, snclMax, snclMin, snclAvg, kPreMulSum};

bool integerOnly(int op) { return op >= snclBand && op <= snclLxor; }
const size_t kTypeSizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

bool isPrime(size_t x) {
  if (x < 2) return false;
  for (size_t d = 2; d * d <= x; ++d)
    if (x % d == 0) return false;
  return true;
}

// Most counts are small; some are large (up to maxCount). Their shapes favour the edges
// of chunking arithmetic: odd, prime, powers of two and their neighbours.
size_t drawCount(Rng& rng, size_t maxCount, bool allowLarge) {
  if (maxCount == 0) return 0;
  static const size_t kTiny[] = {0, 1, 2, 3, 5, 7, 8, 13, 31, 64, 127};
  size_t x;
  const double tier = static_cast<double>(rng.below(1000)) / 1000;
  if (tier < 0.25) return std::min(kTiny[rng.below(sizeof kTiny / sizeof kTiny[0])], maxCount);
  if (tier < 0.55 || !allowLarge) x = 1 + rng.below(4096);
  else if (tier < 0.85) x = 4096 + rng.below(1 << 18);
  else if (tier < 0.96) x = (1 << 18) + rng.below(std::max<size_t>(maxCount / 2, 1));
  else x = maxCount / 2 + rng.below(maxCount / 2 + 1);
  x = std::min(x, maxCount);
  switch (rng.below(5)) {
    case 0: x |= 1; break;  // odd
    case 1: {                // the next prime (bounded search; primes are dense enough)
      for (int i = 0; i < 2000 && !isPrime(x); ++i) ++x;
      break;
    }
    case 2: {  // a power of two
      size_t p = 1;
      while (p * 2 <= x) p *= 2;
      x = p;
      break;
    }
    case 3: {  // a power of two plus or minus a little
      size_t p = 1;
      while (p * 2 <= x) p *= 2;
      x = rng.chance(0.5) ? p + 1 + rng.below(7) : p - std::min<size_t>(p, 1 + rng.below(7));
      break;
    }
    default: break;
  }
  return std::min(x, maxCount);
}

// How many times count elements the call's largest buffer holds, at most.
size_t blocksOf(Coll c, int nranks) {
  switch (c) {
    case Coll::AllGather:
    case Coll::ReduceScatter:
    case Coll::AlltoAll:
    case Coll::Gather:
    case Coll::Scatter: return static_cast<size_t>(nranks);
    default: return 1;
  }
}

Call drawCall(Rng& rng, int nranks, const GenOptions& opt, bool allowLarge) {
  Call call;
  // Send/receive a little more often: its pairing and ordering have many shapes.
  const uint64_t k = rng.below(static_cast<uint64_t>(Coll::kCount) + 1);
  call.coll = static_cast<Coll>(std::min<uint64_t>(k, static_cast<uint64_t>(Coll::SendRecv)));
  call.type = static_cast<snclDataType_t>(rng.below(snclNumTypes));
  if (isReduction(call.coll)) {
    // Integers: a third of their reductions bitwise or logical, the rest as floats'.
    const bool integerOp = call.type <= snclUint64 && rng.chance(1.0 / 3);
    call.op = integerOp ? snclBand + static_cast<int>(rng.below(snclLxor - snclBand + 1))
                        : kFloatOps[rng.below(std::size(kFloatOps))];
  } else {
    call.op = kNoOp;
  }
  call.root = static_cast<int>(rng.below(kMaxRanks));
  call.inPlace = call.coll != Coll::SendRecv && rng.chance(0.4);
  call.offset = rng.chance(0.5) ? 0 : rng.range(1, 7);
  const size_t elem = elemSize(call.type);
  if (call.coll == Coll::SendRecv) {
    const int n = rng.range(1, 2 * nranks);
    for (int i = 0; i < n; ++i) {
      Msg m;
      m.src = static_cast<int>(rng.below(kMaxRanks));
      m.dst = static_cast<int>(rng.below(kMaxRanks));
      m.count = drawCount(rng, opt.maxBytes / elem / static_cast<size_t>(n), allowLarge);
      call.msgs.push_back(m);
    }
  } else {
    call.count = drawCount(rng, opt.maxBytes / elem / blocksOf(call.coll, nranks), allowLarge);
  }
  return call;
}

Case drawCase(const World& world, uint64_t seed, const GenOptions& opt) {
  Case c;
  c.world = world;
  c.seed = seed;
  Rng rng(seed);
  const int n = world.nranks;
  c.group = rng.chance(0.3);
  const int ncalls = c.group ? rng.range(2, 4) : 1;
  if (rng.chance(0.15)) {
    const int ncolors = rng.range(1, 3);
    for (int r = 0; r < n; ++r) {
      c.colors.push_back(rng.chance(0.08) ? SNCL_SPLIT_NOCOLOR : static_cast<int>(rng.below(ncolors)));
      c.keys.push_back(rng.range(-2, 3));
    }
  }
  // One large call per case at most keeps a case's time and memory bounded.
  for (int i = 0; i < ncalls; ++i) c.calls.push_back(drawCall(rng, n, opt, i == 0));
  c.stream = rng.chance(0.25);
  return c;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

bool parseInts(const std::string& s, std::vector<int>* out) {
  out->clear();
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long v = strtol(item.c_str(), &end, 10);
    if (item.empty() || *end) return false;
    out->push_back(static_cast<int>(v));
  }
  return true;
}

template <size_t N>
int lookup(const char* const (&names)[N], const std::string& s) {
  for (size_t i = 0; i < N; ++i)
    if (s == names[i]) return static_cast<int>(i);
  return -1;
}

// A whole number field of a case spec.
bool parseCount(const std::string& s, size_t* out) {
  char* end = nullptr;
  unsigned long long v = strtoull(s.c_str(), &end, 0);
  if (s.empty() || *end) return false;
  *out = static_cast<size_t>(v);
  return true;
}

bool parseCall(const std::string& tok, Call* call, std::string* error) {
  std::vector<std::string> f;
  std::stringstream ss(tok);
  std::string item;
  while (std::getline(ss, item, '.')) f.push_back(item);
  if (f.size() < 7) return *error = "call '" + tok + "' has too few fields", false;
  const int coll = lookup(kCollNames, f[0]), type = lookup(kTypeNames, f[1]);
  if (coll < 0 || type < 0) return *error = "unknown collective or type in '" + tok + "'", false;
  call->coll = static_cast<Coll>(coll);
  call->type = static_cast<snclDataType_t>(type);
  call->op = f[2] == "-" ? kNoOp : lookup(kOpNames, f[2]);
  if ((call->op == kNoOp) == isReduction(call->coll)) return *error = "bad op in '" + tok + "'", false;
  if (integerOnly(call->op) && call->type > snclUint64)
    return *error = "op " + f[2] + " takes integer types only, in '" + tok + "'", false;
  size_t root = 0, ip = 0, off = 0;
  if (f[3][0] != 'r' || !parseCount(f[3].substr(1), &root) || f[4][0] != 'n' || !parseCount(f[4].substr(1), &call->count) ||
      f[5].compare(0, 2, "ip") || !parseCount(f[5].substr(2), &ip) || f[6][0] != 'o' || !parseCount(f[6].substr(1), &off))
    return *error = "bad fields in '" + tok + "'", false;
  call->root = static_cast<int>(root);
  call->inPlace = ip != 0;
  call->offset = static_cast<int>(off);
  call->msgs.clear();
  if (call->coll == Coll::SendRecv) {
    if (f.size() < 8 || f[7][0] != 'm') return *error = "sendrecv '" + tok + "' has no messages", false;
    std::stringstream ms(f[7].substr(1));
    while (std::getline(ms, item, '/')) {
      Msg m;
      unsigned long long cnt = 0;
      if (sscanf(item.c_str(), "%d-%d:%llu", &m.src, &m.dst, &cnt) != 3)
        return *error = "bad message '" + item + "'", false;
      m.count = cnt;
      call->msgs.push_back(m);
    }
  }
  return true;
}

}  // namespace

uint64_t Rng::next() {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t mix(uint64_t a, uint64_t b) {
  Rng r(a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull));
  r.next();
  return r.next();
}

bool isReduction(Coll c) { return c == Coll::AllReduce || c == Coll::Reduce || c == Coll::ReduceScatter; }
bool hasRoot(Coll c) { return c == Coll::Broadcast || c == Coll::Reduce || c == Coll::Gather || c == Coll::Scatter; }
const char* collName(Coll c) { return kCollNames[static_cast<int>(c)]; }
const char* typeName(snclDataType_t t) { return kTypeNames[t]; }
const char* opName(int op) { return op == kNoOp ? "-" : kOpNames[op]; }
size_t elemSize(snclDataType_t t) { return kTypeSizes[t]; }

Session makeSession(uint64_t seed, uint64_t s, uint64_t firstIndex, const GenOptions& opt) {
  Session session;
  session.firstIndex = firstIndex;
  Rng rng(mix(seed, ~s));
  World& w = session.world;
  w.nranks = opt.ranks ? opt.ranks : rng.range(2, kMaxRanks);
  static const char* const kAlgos[] = {"", "", "", "", "direct", "direct", "ring,chain", "ring,chain", "tree", "hd"};
  w.algo = kAlgos[rng.below(10)];
  static const size_t kChunks[] = {256, 768, 4096, 65536};
  w.chunk = rng.chance(0.3) ? kChunks[rng.below(4)] : 0;
  if (opt.hosts) {
    const int nhosts = rng.range(2, std::min(3, w.nranks));
    for (int r = 0; r < w.nranks; ++r) w.hosts.push_back(static_cast<int>(rng.below(nhosts)));
  }
  // A tiny pipeline chunk makes a step per chunk: at most about 1024 of them per buffer,
  // so that a large call stays a test of the chunking, not of the machine's patience (a
  // 1.3 MB Reduce-Scatter in 256-byte chunks took 26 s on two loaded cores).
  GenOptions sized = opt;
  if (w.chunk) sized.maxBytes = std::min(opt.maxBytes, w.chunk * 1024);
  const int ncases = rng.range(4, 16);
  for (int j = 0; j < ncases; ++j) session.cases.push_back(drawCase(w, mix(seed, firstIndex + j), sized));
  return session;
}

size_t callBytes(const Call& call, int nranks) {
  if (call.coll == Coll::SendRecv) {
    size_t total = 0;
    for (const Msg& m : call.msgs) total += m.count;
    return total * elemSize(call.type);
  }
  return call.count * elemSize(call.type) * blocksOf(call.coll, nranks);
}

std::string formatCase(const Case& c) {
  char seed[32];
  snprintf(seed, sizeof seed, "0x%llx", static_cast<unsigned long long>(c.seed));
  std::string s = "n=" + std::to_string(c.world.nranks);
  if (!c.world.algo.empty()) s += " algo=" + c.world.algo;
  if (c.world.chunk) s += " chunk=" + std::to_string(c.world.chunk);
  if (!c.world.hosts.empty()) s += " hosts=" + join(c.world.hosts);
  s += std::string(" seed=") + seed + " group=" + (c.group ? "1" : "0");
  if (c.stream) s += " stream=1";
  if (!c.colors.empty()) s += " split=" + join(c.colors) + "/" + join(c.keys);
  for (const Call& k : c.calls) {
    s += std::string(" c=") + collName(k.coll) + "." + typeName(k.type) + "." + opName(k.op) + ".r" +
         std::to_string(k.root) + ".n" + std::to_string(k.count) + ".ip" + (k.inPlace ? "1" : "0") + ".o" +
         std::to_string(k.offset);
    if (k.coll == Coll::SendRecv) {
      s += ".m";
      for (size_t i = 0; i < k.msgs.size(); ++i)
        s += (i ? "/" : "") + std::to_string(k.msgs[i].src) + "-" + std::to_string(k.msgs[i].dst) + ":" +
             std::to_string(k.msgs[i].count);
    }
  }
  return s;
}

bool parseCase(const std::string& spec, Case* out, std::string* error) {
  Case c;
  std::stringstream ss(spec);
  std::string tok;
  bool haveN = false;
  while (ss >> tok) {
    const size_t eq = tok.find('=');
    if (eq == std::string::npos) return *error = "token '" + tok + "' has no '='", false;
    const std::string key = tok.substr(0, eq), val = tok.substr(eq + 1);
    size_t v = 0;
    if (key == "n") {
      if (!parseCount(val, &v) || v < 1 || v > kMaxRanks) return *error = "n must be 1..8", false;
      c.world.nranks = static_cast<int>(v);
      haveN = true;
    } else if (key == "algo") {
      c.world.algo = val;
    } else if (key == "chunk") {
      if (!parseCount(val, &c.world.chunk)) return *error = "bad chunk", false;
    } else if (key == "hosts") {
      if (!parseInts(val, &c.world.hosts)) return *error = "bad hosts", false;
    } else if (key == "seed") {
      if (!parseCount(val, &v)) return *error = "bad seed", false;
      c.seed = v;
    } else if (key == "group") {
      c.group = val == "1";
    } else if (key == "stream") {
      c.stream = val == "1";
    } else if (key == "split") {
      const size_t slash = val.find('/');
      if (slash == std::string::npos || !parseInts(val.substr(0, slash), &c.colors) ||
          !parseInts(val.substr(slash + 1), &c.keys))
        return *error = "bad split", false;
    } else if (key == "c") {
      Call call;
      if (!parseCall(val, &call, error)) return false;
      c.calls.push_back(call);
    } else {
      return *error = "unknown key '" + key + "'", false;
    }
  }
  const size_t n = static_cast<size_t>(c.world.nranks);
  if (!haveN || c.calls.empty()) return *error = "a spec needs n= and at least one c=", false;
  if (!c.colors.empty() && (c.colors.size() != n || c.keys.size() != n)) return *error = "split needs n colors and keys", false;
  if (!c.world.hosts.empty() && c.world.hosts.size() != n) return *error = "hosts needs n entries", false;
  *out = c;
  return true;
}

std::vector<Case> shrinkCandidates(const Case& c) {
  std::vector<Case> out;
  auto with = [&](auto&& change) {
    Case v = c;
    change(v);
    out.push_back(v);
  };
  for (size_t i = 0; c.calls.size() > 1 && i < c.calls.size(); ++i) with([&](Case& v) { v.calls.erase(v.calls.begin() + i); });
  if (c.group) with([](Case& v) { v.group = false; });
  if (c.stream) with([](Case& v) { v.stream = false; });
  if (!c.colors.empty()) with([](Case& v) { v.colors.clear(), v.keys.clear(); });
  auto fewer = [](Case& v, int n) {
    v.world.nranks = n;
    if (!v.colors.empty()) v.colors.resize(n), v.keys.resize(n);
    if (!v.world.hosts.empty()) v.world.hosts.resize(n);
  };
  if (c.world.nranks >= 4) with([&](Case& v) { fewer(v, c.world.nranks / 2); });
  if (c.world.nranks > 1) with([&](Case& v) { fewer(v, c.world.nranks - 1); });
  // Structure before sizes: size steps are many, and each failing one of a hang costs a
  // deadline.
  for (size_t i = 0; i < c.calls.size(); ++i) {
    const Call& k = c.calls[i];
    if (k.inPlace) with([&](Case& v) { v.calls[i].inPlace = false; });
    if (k.offset) with([&](Case& v) { v.calls[i].offset = 0; });
    const bool integer = k.type <= snclUint64;
    const snclDataType_t simple = integer ? snclInt32 : snclFloat32;
    if (k.type != simple) with([&](Case& v) {
      // Keep the byte count: a size threshold stays where it was.
      v.calls[i].count = k.count * elemSize(k.type) / elemSize(simple);
      for (Msg& m : v.calls[i].msgs) m.count = m.count * elemSize(k.type) / elemSize(simple);
      v.calls[i].type = simple;
    });
    if (k.op != kNoOp && k.op != snclSum) with([&](Case& v) { v.calls[i].op = snclSum; });
    if (k.root) with([&](Case& v) { v.calls[i].root = 0; });
  }
  if (!c.world.algo.empty()) with([](Case& v) { v.world.algo.clear(); });
  if (c.world.chunk) with([](Case& v) { v.world.chunk = 0; });
  for (size_t i = 0; i < c.calls.size(); ++i) {
    const Call& k = c.calls[i];
    // Counts: 1, a half, a quarter and a sixteenth less (not one less: a failure at sizes
    // of one shape would take as many steps as elements).
    const size_t n = k.count;
    for (size_t smaller : {size_t(1), n / 2, n - n / 4, n - n / 16}) {
      if (n > 1 && smaller < n && smaller > 0) with([&](Case& v) { v.calls[i].count = smaller; });
    }
    for (size_t m = 0; k.msgs.size() > 1 && m < k.msgs.size(); ++m)
      with([&](Case& v) { v.calls[i].msgs.erase(v.calls[i].msgs.begin() + m); });
    for (size_t m = 0; m < k.msgs.size(); ++m) {
      const size_t mc = k.msgs[m].count;
      if (mc > 1) with([&](Case& v) { v.calls[i].msgs[m].count = mc / 2; });
    }
  }
  return out;
}

}  // namespace randtest
