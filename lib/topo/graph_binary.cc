#include "lib/topo/graph_binary.h"

#include <cstring>
#include <limits>
#include <string>

#include "lib/base/hash.h"

namespace sncl::topo {
namespace {

constexpr char kMagic[8] = {'S', 'N', 'C', 'L', 'T', 'O', 'P', 'O'};
constexpr uint32_t kByteOrder = 0x01020304;  // reads as 0x04030201 on the other endianness
// Sizes of the stored element types: a build where they differ must not read the arrays.
constexpr uint32_t kTypeSizes = uint32_t(sizeof(float)) | uint32_t(sizeof(VertexId)) << 8 |
                                uint32_t(sizeof(int16_t)) << 16 | uint32_t(sizeof(uint64_t)) << 24;
static_assert(std::numeric_limits<float>::is_iec559, "the cache stores IEEE floats");

template <class T>
void put(std::vector<uint8_t>* out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out->insert(out->end(), p, p + sizeof(T));
}
template <class T>
void putArray(std::vector<uint8_t>* out, const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  out->insert(out->end(), p, p + v.size() * sizeof(T));
}

// Bounds-checked reads from the payload: every count is checked against what is left
// before anything is allocated for it.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : p_(b.data()), left_(b.size()) {}
  template <class T>
  bool get(T* v) {
    if (left_ < sizeof(T)) return false;
    std::memcpy(v, p_, sizeof(T));
    p_ += sizeof(T), left_ -= sizeof(T);
    return true;
  }
  template <class T>
  bool array(std::vector<T>* v, size_t count) {
    if (count > left_ / sizeof(T)) return false;
    v->resize(count);
    if (count) std::memcpy(v->data(), p_, count * sizeof(T));
    p_ += count * sizeof(T), left_ -= count * sizeof(T);
    return true;
  }
  size_t left() const { return left_; }

 private:
  const uint8_t* p_;
  size_t left_;
};

// Names come from JSON strings, which are UTF-8; the JSON writer refuses anything else.
bool validUtf8(const char* s, size_t n) {
  const auto* p = reinterpret_cast<const unsigned char*>(s);
  for (size_t i = 0; i < n;) {
    unsigned c = p[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (len == 0 || i + len > n) return false;
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return false;
      cp = cp << 6 | (p[i + k] & 0x3f);
    }
    static constexpr uint32_t kMinOf[5] = {0, 0, 0x80, 0x800, 0x10000};  // shorter forms are overlong
    if (cp < kMinOf[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

Result bad(const char* what) { return fail(snclInvalidArgument, "topology cache data: {}", what); }

}  // namespace

uint64_t graphBinaryChecksum(std::span<const uint8_t> bytes) {
  constexpr uint64_t kMul = 0x9e3779b97f4a7c15ull;
  uint64_t lane[4] = {kFnvBasis, kFnvBasis ^ 1, kFnvBasis ^ 2, kFnvBasis ^ 3};
  size_t i = 0, n = bytes.size();
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, bytes.data() + i + 8 * k, 8);
      lane[k] = (lane[k] ^ w) * kMul;
      lane[k] ^= lane[k] >> 29;
    }
  uint64_t h = n;
  for (uint64_t l : lane) h = fnvMix(h, l);
  return fnv1a(bytes.data() + i, n - i, h);
}

struct GraphBinary {
  static Result encode(const Graph& g, uint64_t key, std::vector<uint8_t>* out) {
    if (!g.finalized_) return fail(snclInvalidUsage, "topology cache: encoding a graph before finalize");
    size_t allNames = 0;
    for (const auto& s : g.vname_) allNames += s.size();
    if (allNames > UINT32_MAX) return fail(snclInvalidArgument, "topology cache: vertex names too long to store");
    std::vector<uint8_t> body;
    put(&body, uint32_t(g.name_.size()));
    body.insert(body.end(), g.name_.begin(), g.name_.end());
    put(&body, g.epoch_);
    uint32_t namesBytes = 0;
    std::vector<uint32_t> nameEnd;
    nameEnd.reserve(g.vname_.size());
    for (const auto& s : g.vname_) nameEnd.push_back(namesBytes += uint32_t(s.size()));
    put(&body, uint32_t(g.vname_.size()));
    put(&body, uint32_t(g.la_.size()));
    put(&body, uint32_t(g.rankOrder_.size()));
    put(&body, namesBytes);
    putArray(&body, g.vkind_);
    putArray(&body, g.vforwards_);
    putArray(&body, g.vtier_);
    putArray(&body, g.vplane_);
    putArray(&body, g.vparent_);
    putArray(&body, nameEnd);
    for (const auto& s : g.vname_) body.insert(body.end(), s.begin(), s.end());
    putArray(&body, g.la_);
    putArray(&body, g.lb_);
    putArray(&body, g.lbw_);
    putArray(&body, g.llat_);
    putArray(&body, g.lfactor_);
    putArray(&body, g.lkind_);
    putArray(&body, g.lstate_);
    putArray(&body, g.rankOrder_);

    out->insert(out->end(), kMagic, kMagic + sizeof(kMagic));
    put(out, kGraphBinaryVersion);
    put(out, kByteOrder);
    put(out, kTypeSizes);
    put(out, uint32_t(0));
    put(out, key);
    put(out, uint64_t(body.size()));
    put(out, graphBinaryChecksum(body));
    out->insert(out->end(), body.begin(), body.end());
    return snclSuccess;
  }

  static Result decode(std::span<const uint8_t> bytes, uint64_t key, Graph* out, bool verifyChecksum) {
    static_assert(sizeof(kMagic) + 4 * 4 + 3 * 8 == kGraphBinaryHeaderBytes);
    if (bytes.size() < kGraphBinaryHeaderBytes) return bad("shorter than its header");
    Reader h(bytes.first(kGraphBinaryHeaderBytes));
    char magic[8];
    uint32_t version = 0, order = 0, sizes = 0, reserved = 0;
    uint64_t storedKey = 0, length = 0, checksum = 0;
    for (char& c : magic) h.get(&c);
    h.get(&version), h.get(&order), h.get(&sizes), h.get(&reserved);
    h.get(&storedKey), h.get(&length), h.get(&checksum);
    if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) return bad("not a topology cache file (bad magic)");
    if (version != kGraphBinaryVersion)
      return fail(snclInvalidArgument, "topology cache data: format version {}, this sncl reads {}", version,
                  kGraphBinaryVersion);
    if (order != kByteOrder) return bad("written on a machine of another byte order");
    if (sizes != kTypeSizes || reserved != 0) return bad("written by a build with other type sizes");
    if (storedKey != key) return bad("made from another topology file (key mismatch)");
    std::span<const uint8_t> body = bytes.subspan(kGraphBinaryHeaderBytes);
    if (length != body.size())
      return fail(snclInvalidArgument, "topology cache data: {} payload bytes, the header says {}", body.size(),
                  length);
    if (verifyChecksum && graphBinaryChecksum(body) != checksum) return bad("checksum mismatch");

    Graph g;
    Reader r(body);
    uint32_t nameLen = 0, nv = 0, nl = 0, nrank = 0, namesBytes = 0;
    if (!r.get(&nameLen) || nameLen > r.left()) return bad("truncated graph name");
    std::vector<char> name;
    r.array(&name, nameLen);
    if (!validUtf8(name.data(), name.size())) return bad("the graph name is not UTF-8");
    g.name_.assign(name.begin(), name.end());
    if (!r.get(&g.epoch_) || !r.get(&nv) || !r.get(&nl) || !r.get(&nrank) || !r.get(&namesBytes))
      return bad("truncated counts");
    if (nv == 0 || nv >= kNone - 1) return bad("vertex count out of range");
    std::vector<uint8_t> vkind, vforwards, vtier;
    std::vector<int16_t> vplane;
    std::vector<VertexId> vparent;
    std::vector<uint32_t> nameEnd;
    std::vector<char> names;
    if (!r.array(&vkind, nv) || !r.array(&vforwards, nv) || !r.array(&vtier, nv) || !r.array(&vplane, nv) ||
        !r.array(&vparent, nv) || !r.array(&nameEnd, nv) || !r.array(&names, namesBytes))
      return bad("truncated vertex arrays");
    g.vname_.reserve(nv);
    bool anyEndpoint = false;
    for (uint32_t v = 0, begin = 0; v < nv; ++v) {
      if (vkind[v] >= kNumVertexKinds) return bad("unknown vertex kind");
      if (vforwards[v] > 1) return bad("forwards flag is not 0 or 1");
      // addVertex checks the name (non-empty, no '-', unique) and that the parent is an
      // earlier vertex, which also keeps the parent chains acyclic.
      if (nameEnd[v] < begin || nameEnd[v] > namesBytes) return bad("vertex name offsets out of range");
      if (!validUtf8(names.data() + begin, nameEnd[v] - begin)) return bad("a vertex name is not UTF-8");
      VertexAttrs a{VertexKind(vkind[v]), vparent[v], vforwards[v], vtier[v], vplane[v]};
      if (a.parent != kNone && a.parent >= v) return bad("a vertex's parent is not an earlier vertex");
      SNCL_CHECK(g.addVertex(std::string(names.data() + begin, nameEnd[v] - begin), a));
      anyEndpoint |= a.kind == VertexKind::Endpoint;
      begin = nameEnd[v];
    }
    if (nameEnd.back() != namesBytes) return bad("unused bytes after the vertex names");
    if (!anyEndpoint) return bad("no endpoint");

    if (nl > r.left() / (5 * sizeof(uint32_t) + 2)) return bad("truncated link arrays");
    if (!r.array(&g.la_, nl) || !r.array(&g.lb_, nl) || !r.array(&g.lbw_, nl) || !r.array(&g.llat_, nl) ||
        !r.array(&g.lfactor_, nl) || !r.array(&g.lkind_, nl) || !r.array(&g.lstate_, nl))
      return bad("truncated link arrays");
    for (uint32_t l = 0; l < nl; ++l) {
      // The float forms of the limits the parser checks before it stores floats.
      if (g.la_[l] >= nv || g.lb_[l] >= nv || g.la_[l] == g.lb_[l]) return bad("a link's vertex is out of range");
      if (g.lkind_[l] >= kNumLinkKinds) return bad("unknown link kind");
      if (!(g.lbw_[l] >= float(kMinBandwidthGBps) && g.lbw_[l] <= float(kMaxBandwidthGBps)))
        return bad("link bandwidth out of range");
      if (!(g.llat_[l] >= float(kMinLatencyUs) && g.llat_[l] <= float(kMaxLatencyUs)))
        return bad("link latency out of range");
      float f = g.lfactor_[l];
      switch (LinkState(g.lstate_[l])) {
        case LinkState::Up:
        case LinkState::Down:
          if (f != 1.0f) return bad("an up or down link with a degrade factor");
          break;
        case LinkState::Degraded:
          if (!(f >= float(kMinDegradeFactor) && f < 1.0f)) return bad("degrade factor out of range");
          break;
        default: return bad("unknown link state");
      }
    }
    std::vector<VertexId> rankOrder;
    if (!r.array(&rankOrder, nrank)) return bad("truncated rank order");
    if (r.left() != 0) return bad("bytes after the rank order");
    if (!rankOrder.empty()) SNCL_CHECK(g.setRankOrder(std::move(rankOrder)));
    SNCL_CHECK(g.finalize());
    // At most one link per pair of vertices, checked on the adjacency finalize built
    // (a hash set of a quarter million pairs would cost what the cache saves).
    std::vector<VertexId> seenFrom(nv, kNone);
    for (VertexId v = 0; v < nv; ++v)
      for (VertexId p : g.neighborsOf(v)) {
        if (seenFrom[p] == v) return bad("two links join the same pair of vertices");
        seenFrom[p] = v;
      }
    *out = std::move(g);
    return snclSuccess;
  }
};

Result encodeGraph(const Graph& g, uint64_t key, std::vector<uint8_t>* out) { return GraphBinary::encode(g, key, out); }

Result decodeGraph(std::span<const uint8_t> bytes, uint64_t key, Graph* out, bool verifyChecksum) {
  return GraphBinary::decode(bytes, key, out, verifyChecksum);
}

}  // namespace sncl::topo
