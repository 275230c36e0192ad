#include "lib/topo/draw.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <unordered_map>

namespace sncl::topo {
namespace {

bool isContainer(VertexKind k) {
  return k == VertexKind::Numa || k == VertexKind::Package || k == VertexKind::Node ||
         k == VertexKind::Rack || k == VertexKind::Supernode || k == VertexKind::Cluster;
}

std::string quote(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (c == '\n') o += "\\n";
    else if (uint8_t(c) >= 0x20) o += c;
  }
  return o + "\"";
}

const char* tierName(int tier) {
  switch (tier) {
    case 1: return " (leaf)";
    case 2: return " (spine)";
    case 3: return " (core)";
    default: return "";
  }
}

const char* linkColor(LinkKind k) {
  switch (k) {
    case LinkKind::Bus: return "royalblue";
    case LinkKind::Shm: return "gray40";
    case LinkKind::Pcie: return "purple";
    case LinkKind::Net: return "darkgreen";
  }
  return "black";
}

constexpr const char* kPlainColor[kNumLinkKinds] = {"blue", "gray", "purple", "green"};  // for the legend

struct Box {
  VertexId cluster = kNone;  // container it is drawn in
  VertexKind kind = VertexKind::Switch;
  int tier = 0;
  int count = 0;
  int planeLo = INT32_MAX, planeHi = -1;
  std::string first, last;
  bool fold = false;
  std::set<VertexId> folded;  // fold boxes: the containers folded into it
  size_t foldedEndpoints = 0;
  size_t internalLinks = 0;
};

struct Edge {
  size_t count = 0, down = 0, degraded = 0;
  double sum = 0, lo = 1e300, hi = 0;
  LinkKind kind = LinkKind::Bus;
};

class Drawer {
 public:
  Drawer(const Graph& g, bool detailed) : g_(g), detailed_(detailed) {}

  std::string run() {
    computeSiblings();
    for (VertexId v = 0; v < g_.vertexCount(); ++v) assign(v);
    for (LinkId l = 0; l < g_.linkCount(); ++l) addLink(l);
    return emit();
  }

 private:
  // Containers are folded when they are the 3rd..(n-1)th of more than four siblings.
  void computeSiblings() {
    std::map<std::pair<VertexId, int>, std::vector<VertexId>> groups;
    for (VertexId v = 0; v < g_.vertexCount(); ++v)
      if (isContainer(g_.vertexKind(v))) groups[{g_.parent(v), int(g_.vertexKind(v))}].push_back(v);
    folded_.assign(g_.vertexCount(), 0);
    if (detailed_) return;
    for (auto& [key, members] : groups)
      if (members.size() > 4)
        for (size_t i = 2; i + 1 < members.size(); ++i) folded_[members[i]] = 1;
  }

  void assign(VertexId v) {
    VertexKind kind = g_.vertexKind(v);
    bool linked = !g_.linksOf(v).empty();
    VertexId top = kNone;  // highest folded container holding v (or v itself)
    for (VertexId a = isContainer(kind) ? v : g_.parent(v); a != kNone; a = g_.parent(a))
      if (folded_[a]) top = a;
    std::string key;
    Box proto;
    if (top != kNone) {
      key = fmt::format("fold {} {}", g_.parent(top), int(g_.vertexKind(top)));
      proto.cluster = g_.parent(top);
      proto.kind = g_.vertexKind(top);
      proto.fold = true;
    } else if (isContainer(kind)) {
      if (!linked) return;
      key = fmt::format("self {}", v);  // a host that carries links: a box in its own cluster
      proto.cluster = v;
    } else if (detailed_) {
      key = fmt::format("v {}", v);
      proto.cluster = g_.parent(v);
    } else {
      // Planes share a box (its label gives their range): one edge per pair of boxes
      // instead of one per plane keeps a 7-plane bus readable.
      VertexId p = g_.parent(v);
      key = fmt::format("g {} {} {}", p, int(kind), g_.tier(v));
      proto.cluster = p;
    }
    auto [it, inserted] = boxIndex_.try_emplace(key, boxes_.size());
    if (inserted) {
      proto.kind = proto.fold ? proto.kind : kind;
      proto.tier = g_.tier(v);
      proto.first = g_.vertexName(v);
      boxes_.push_back(std::move(proto));
    }
    Box& b = boxes_[it->second];
    b.last = g_.vertexName(v);
    if (b.fold) {
      b.folded.insert(top);
      b.foldedEndpoints += kind == VertexKind::Endpoint;
    } else {
      ++b.count;
      if (g_.plane(v) >= 0) b.planeLo = std::min<int>(b.planeLo, g_.plane(v)), b.planeHi = std::max<int>(b.planeHi, g_.plane(v));
    }
    boxOf_[v] = it->second;
  }

  void addLink(LinkId l) {
    auto a = boxOf_.find(g_.linkA(l)), b = boxOf_.find(g_.linkB(l));
    if (a == boxOf_.end() || b == boxOf_.end()) return;
    kindSeen_[int(g_.linkKind(l))] = true;
    anyDown_ |= g_.linkState(l) == LinkState::Down;
    if (a->second == b->second) {
      ++boxes_[a->second].internalLinks;
      return;
    }
    // Higher tier first, so that dot puts spines above leaves above endpoints.
    size_t x = a->second, y = b->second;
    if (boxes_[x].tier < boxes_[y].tier || (boxes_[x].tier == boxes_[y].tier && x > y)) std::swap(x, y);
    Edge& e = edges_[{x, y}];
    double bw = g_.linkBandwidthGBps(l);
    ++e.count;
    e.sum += bw;
    e.lo = std::min(e.lo, bw);
    e.hi = std::max(e.hi, bw);
    e.kind = g_.linkKind(l);
    e.down += g_.linkState(l) == LinkState::Down;
    e.degraded += g_.linkState(l) == LinkState::Degraded;
  }

  std::string boxLabel(const Box& b) const {
    if (b.fold) {
      return fmt::format("... {} more {}s\n({} endpoints)", b.folded.size(), kindName(b.kind),
                         b.foldedEndpoints);
    }
    std::string s = b.count == 1 ? b.first : fmt::format("{} x {}{}\n{} .. {}", b.count, kindName(b.kind), tierName(b.tier), b.first, b.last);
    if (b.planeHi >= 0 && b.count > 1)
      s += b.planeLo == b.planeHi ? fmt::format("\nplane {}", b.planeLo) : fmt::format("\nplanes {}-{}", b.planeLo, b.planeHi);
    if (b.internalLinks) s += fmt::format("\n+{} links among them", b.internalLinks);
    return s;
  }

  std::string edgeLabel(const Edge& e) const {
    std::string s;
    if (e.count == 1) s = fmt::format("{:.4g} GB/s", e.sum);
    else if (e.lo == e.hi) s = fmt::format("{} x {:.4g} GB/s", e.count, e.lo);
    else s = fmt::format("{} links, {:.5g} GB/s", e.count, e.sum);
    if (e.down) s += fmt::format("\n{} down", e.down);
    if (e.degraded) s += fmt::format("\n{} degraded", e.degraded);
    return s;
  }

  void emitCluster(std::string& o, VertexId c, const std::map<VertexId, std::vector<VertexId>>& kids,
                   const std::map<VertexId, std::vector<size_t>>& inside, int depth) const {
    std::string pad(2 * depth, ' ');
    bool real = c != kNone;
    if (real) {
      o += fmt::format("{}subgraph cluster_{} {{\n{}  label={}; style=\"rounded\"; color=gray50; fontsize=13;\n", pad, c,
                       pad, quote(fmt::format("{} {} ({} endpoints)", kindName(g_.vertexKind(c)), g_.vertexName(c),
                                              endpointsUnder_.count(c) ? endpointsUnder_.at(c) : 0)));
    }
    if (auto it = inside.find(c); it != inside.end())
      for (size_t b : it->second) {
        const Box& x = boxes_[b];
        const char* fill = x.fold ? "white" : x.kind == VertexKind::Endpoint ? "lightblue"
                         : x.kind == VertexKind::Switch ? "lightgoldenrod1" : "gray90";
        o += fmt::format("{}  b{} [label={}, fillcolor={}{}];\n", pad, b, quote(boxLabel(x)), fill,
                         x.fold ? ", style=\"dashed\"" : "");
      }
    if (auto it = kids.find(c); it != kids.end())
      for (VertexId k : it->second) emitCluster(o, k, kids, inside, depth + 1);
    if (real) o += pad + "}\n";
  }

  std::string emit() {
    // Endpoints under each container, for cluster labels.
    for (size_t e = 0; e < g_.endpointCount(); ++e)
      for (VertexId a = g_.parent(g_.endpointVertex(EndpointId(e))); a != kNone; a = g_.parent(a)) ++endpointsUnder_[a];
    std::map<VertexId, std::vector<size_t>> inside;
    std::map<VertexId, std::vector<VertexId>> kids;
    std::set<VertexId> used;
    for (size_t b = 0; b < boxes_.size(); ++b) {
      inside[boxes_[b].cluster].push_back(b);
      for (VertexId c = boxes_[b].cluster; c != kNone && used.insert(c).second; c = g_.parent(c))
        kids[g_.parent(c)].push_back(c);
    }
    for (auto& [p, k] : kids) std::sort(k.begin(), k.end());
    std::string o = "graph topology {\n";
    // The legend names only the link kinds that appear.
    std::string legend;
    for (int k = 0; k < kNumLinkKinds; ++k)
      if (kindSeen_[k]) legend += fmt::format("; {}: {}", kPlainColor[k], kindName(LinkKind(k)));
    if (anyDown_) legend += "; red dashed: down";
    o += fmt::format("  label={}; labelloc=t; fontname=\"Helvetica\"; fontsize=18;\n",
                     quote(g_.name() + "\nedges: links x GB/s per direction" + legend));
    o += "  newrank=true; nodesep=0.25; ranksep=0.9;\n";
    o += "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=11];\n";
    o += "  edge [fontname=\"Helvetica\", fontsize=9];\n";
    emitCluster(o, kNone, kids, inside, 0);
    for (const auto& [ends, e] : edges_) {
      o += fmt::format("  b{} -- b{} [label={}, color={}{}];\n", ends.first, ends.second, quote(edgeLabel(e)),
                       e.down == e.count ? "red" : linkColor(e.kind),
                       e.down ? ", style=dashed" : e.degraded ? ", style=bold" : "");
    }
    return o + "}\n";
  }

  const Graph& g_;
  bool detailed_;
  std::vector<uint8_t> folded_;
  std::vector<Box> boxes_;
  std::unordered_map<std::string, size_t> boxIndex_;
  std::unordered_map<VertexId, size_t> boxOf_;
  std::map<std::pair<size_t, size_t>, Edge> edges_;
  std::unordered_map<VertexId, size_t> endpointsUnder_;
  std::array<bool, kNumLinkKinds> kindSeen_{};
  bool anyDown_ = false;
};

}  // namespace

std::string toDot(const Graph& g, const DrawOptions& opts) {
  size_t drawable = 0;
  for (VertexId v = 0; v < g.vertexCount(); ++v)
    drawable += !isContainer(g.vertexKind(v)) || !g.linksOf(v).empty();
  return Drawer(g, !opts.grouped && drawable <= opts.detailLimit).run();
}

}  // namespace sncl::topo
