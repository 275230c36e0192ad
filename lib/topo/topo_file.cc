#include "lib/topo/topo_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "lib/base/log.h"
#include "lib/topo/generators.h"

namespace sncl::topo {
namespace {

using json = nlohmann::json;

constexpr int kMaxDepth = 64;     // deeper nesting is never a topology, and costs stack
constexpr int64_t kMaxCount = 1 << 24;
constexpr size_t kMaxNameLength = 1024;   // a vertex name
constexpr size_t kMaxPrefixLength = 256;  // generated names add a little to a prefix
constexpr const char* kFormat = "sncl-topology/1";

// JSON pointer escaping of one reference token (RFC 6901).
std::string token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

// Where parsing is, and how to report a problem there.
struct Ctx {
  std::string source;
  const FileLimits& limits;
  Graph& g;
  // First vertex/link id made by each part of the file, to say where a duplicate came from.
  std::vector<std::pair<uint32_t, std::string>> vertexOrigin, linkOrigin;

  template <class... A>
  Result error(const std::string& ptr, fmt::format_string<A...> f, A&&... a) {
    return fail(snclInvalidArgument, "{}: {}: {}", source, ptr.empty() ? "/" : ptr,
                fmt::format(f, std::forward<A>(a)...));
  }
  std::string originOf(const std::vector<std::pair<uint32_t, std::string>>& origins, uint32_t id) {
    auto it = std::upper_bound(origins.begin(), origins.end(), id,
                               [](uint32_t x, const auto& o) { return x < o.first; });
    return it == origins.begin() ? "?" : std::prev(it)->second;
  }
  Result budget(const std::string& ptr, double vertices, double links) {
    double v = double(g.vertexCount()) + vertices, l = double(g.linkCount()) + links;
    if (v > limits.maxVertices)
      return error(ptr, "would make {:.0f} vertices, more than the limit of {:.0f}", v, limits.maxVertices);
    if (l > limits.maxLinks)
      return error(ptr, "would make {:.0f} links, more than the limit of {:.0f}", l, limits.maxLinks);
    return snclSuccess;
  }
};

std::string typeName(const json& j) { return j.type_name(); }

// Reads the members of one JSON object, remembering which keys it asked about, so that a
// key nobody asked about can be reported as unknown (with the known ones listed).
class ObjectReader {
 public:
  ObjectReader(Ctx& c, const json& j, std::string ptr, std::string what)
      : c_(c), j_(j), ptr_(std::move(ptr)), what_(std::move(what)) {}

  std::string path(const char* key) const { return ptr_ + "/" + token(key); }
  const std::string& ptr() const { return ptr_; }
  Ctx& ctx() { return c_; }
  const json* find(const char* key) {
    asked_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  Result missing(const char* key) { return c_.error(ptr_, "{} needs \"{}\"", what_, key); }

  Result integer(const char* key, int64_t lo, int64_t hi, int* out, bool required = false) {
    const json* v = find(key);
    if (!v) return required ? missing(key) : snclSuccess;
    if (!v->is_number_integer())
      return c_.error(path(key), "must be an integer, not {}", v->is_number() ? v->dump() : typeName(*v));
    bool neg = v->is_number_integer() && !v->is_number_unsigned() && v->get<int64_t>() < 0;
    if (!neg && v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(hi))
      return c_.error(path(key), "{} is not in [{}, {}]", v->dump(), lo, hi);
    int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) return c_.error(path(key), "{} is not in [{}, {}]", x, lo, hi);
    *out = int(x);
    return snclSuccess;
  }
  // A number in [lo, hi].
  Result number(const char* key, double lo, double hi, const char* unit, double* out,
                bool required = false) {
    const json* v = find(key);
    if (!v) return required ? missing(key) : snclSuccess;
    if (!v->is_number()) return c_.error(path(key), "must be a number, not {}", typeName(*v));
    double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
      return c_.error(path(key), "{}{} is not in [{}, {}]", v->dump(), unit, lo, hi);
    *out = x;
    return snclSuccess;
  }
  Result string(const char* key, std::string* out, bool required = false,
                size_t maxLength = kMaxNameLength) {
    const json* v = find(key);
    if (!v) return required ? missing(key) : snclSuccess;
    if (!v->is_string()) return c_.error(path(key), "must be a string, not {}", typeName(*v));
    *out = v->get<std::string>();
    if (out->size() > maxLength) return c_.error(path(key), "is longer than {} characters", maxLength);
    return snclSuccess;
  }
  Result boolean(const char* key, bool* out) {
    const json* v = find(key);
    if (!v) return snclSuccess;
    if (!v->is_boolean()) return c_.error(path(key), "must be true or false, not {}", typeName(*v));
    *out = v->get<bool>();
    return snclSuccess;
  }
  Result linkKind(const char* key, LinkKind* out) {
    std::string s;
    SNCL_CHECK(string(key, &s));
    if (s.empty()) return snclSuccess;
    if (!parseLinkKind(s, out))
      return c_.error(path(key), "unknown link kind \"{}\" (known: bus, shm, pcie, net)", s);
    return snclSuccess;
  }
  // bw, lat and kind under names prefix+"bw" etc.
  Result link(const std::string& prefix, LinkSpec* s) {
    keys_.push_back(prefix + "bw");
    keys_.push_back(prefix + "lat");
    keys_.push_back(prefix + "kind");
    size_t n = keys_.size();
    SNCL_CHECK(number(keys_[n - 3].c_str(), kMinBandwidthGBps, kMaxBandwidthGBps, " GB/s", &s->bwGBps));
    SNCL_CHECK(number(keys_[n - 2].c_str(), kMinLatencyUs, kMaxLatencyUs, " us", &s->latUs));
    return linkKind(keys_[n - 1].c_str(), &s->kind);
  }
  // Names a member nobody asked about.
  Result finish() {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (asked_.count(it.key())) continue;
      std::string known;
      for (const auto& k : asked_) known += (known.empty() ? "" : ", ") + k;
      return c_.error(path(it.key().c_str()), "unknown parameter \"{}\" for {} (known: {})", it.key(),
                      what_, known);
    }
    return snclSuccess;
  }

 private:
  Ctx& c_;
  const json& j_;
  std::string ptr_, what_;
  std::set<std::string> asked_;
  std::deque<std::string> keys_;  // stable storage for composed key names
};

Result expectObject(Ctx& c, const json& j, const std::string& ptr, const char* what) {
  if (!j.is_object()) return c.error(ptr, "{} must be an object, not {}", what, typeName(j));
  return snclSuccess;
}

// name and prefix; a cluster's supernode has neither (the cluster names them sn<i>).
Result readCommon(ObjectReader& r, bool nested, std::string* name, std::string* prefix) {
  if (nested) return snclSuccess;
  SNCL_CHECK(r.string("name", name, false, kMaxPrefixLength));
  return r.string("prefix", prefix, false, kMaxPrefixLength);
}

Result readFullMesh(ObjectReader& r, bool nested, FullMeshParams* p) {
  SNCL_CHECK(readCommon(r, nested, &p->name, &p->prefix));
  SNCL_CHECK(r.integer("endpoints", 1, kMaxCount, &p->endpoints, true));
  SNCL_CHECK(r.integer("per_node", 1, kMaxCount, &p->perNode));
  return r.link("", &p->link);
}

Result readClos(ObjectReader& r, bool nested, ClosParams* p) {
  SNCL_CHECK(readCommon(r, nested, &p->name, &p->prefix));
  SNCL_CHECK(r.integer("nodes", 1, kMaxCount, &p->nodes, true));
  SNCL_CHECK(r.integer("per_node", 1, kMaxCount, &p->perNode, true));
  SNCL_CHECK(r.integer("nodes_per_rack", 1, kMaxCount, &p->nodesPerRack));
  SNCL_CHECK(r.integer("planes", 1, 4096, &p->planes));
  SNCL_CHECK(r.integer("spines", 0, kMaxCount, &p->spines));
  SNCL_CHECK(r.link("", &p->link));
  return r.link("uplink_", &p->uplink);
}

Result readTorus(Ctx& c, ObjectReader& r, bool nested, TorusParams* p) {
  SNCL_CHECK(readCommon(r, nested, &p->name, &p->prefix));
  const json* dims = r.find("dims");
  if (!dims) return r.missing("dims");
  std::string dp = r.path("dims");
  if (!dims->is_array() || dims->empty() || dims->size() > 3)
    return c.error(dp, "must be an array of 1 to 3 sizes");
  for (size_t i = 0; i < dims->size(); ++i) {
    const json& d = (*dims)[i];
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > kMaxCount ||
        (d.is_number_unsigned() && d.get<uint64_t>() > uint64_t(kMaxCount)))
      return c.error(dp + "/" + std::to_string(i), "must be an integer in [1, {}], not {}", kMaxCount, d.dump());
    p->dims.push_back(int(d.get<int64_t>()));
  }
  SNCL_CHECK(r.boolean("wrap", &p->wrap));
  SNCL_CHECK(r.integer("per_node", 1, kMaxCount, &p->perNode));
  return r.link("", &p->link);
}

Result readFatTree(ObjectReader& r, bool nested, FatTreeParams* p) {
  SNCL_CHECK(readCommon(r, nested, &p->name, &p->prefix));
  SNCL_CHECK(r.integer("k", 2, 1024, &p->k, true));
  SNCL_CHECK(r.link("", &p->link));
  p->uplink = p->link;
  return r.link("uplink_", &p->uplink);
}

Result readHosts(ObjectReader& r, HostsParams* p) {
  int hosts = 0, perHost = 0, numa = 1;
  SNCL_CHECK(r.integer("hosts", 1, kMaxCount, &hosts, true));
  SNCL_CHECK(r.integer("per_host", 1, kMaxCount, &perHost, true));
  SNCL_CHECK(r.integer("numa_per_host", 1, 1024, &numa));
  // Checked before building the host list, which is as large as what it describes.
  SNCL_CHECK(r.ctx().budget(r.ptr(), 2 + double(hosts) * (1 + perHost + numa), double(hosts) * (1 + perHost + numa)));
  *p = uniformHosts(hosts, perHost, numa);
  SNCL_CHECK(readCommon(r, false, &p->name, &p->prefix));
  SNCL_CHECK(r.link("shm_", &p->shm));
  SNCL_CHECK(r.link("numa_", &p->numa));
  return r.link("nic_", &p->nic);
}

Result readGenerator(Ctx& c, const json& j, const std::string& ptr, bool nested, GeneratorParams* out);

Result readCluster(Ctx& c, ObjectReader& r, ClusterParams* p) {
  SNCL_CHECK(readCommon(r, false, &p->name, &p->prefix));
  SNCL_CHECK(r.integer("supernodes", 1, kMaxCount, &p->supernodes, true));
  const json* sn = r.find("supernode");
  if (!sn) return r.missing("supernode");
  GeneratorParams inner;
  SNCL_CHECK(readGenerator(c, *sn, r.path("supernode"), true, &inner));
  std::visit([&](auto& q) {
    using T = std::decay_t<decltype(q)>;
    if constexpr (std::is_constructible_v<SupernodeParams, T>) p->supernode = q;
  }, inner);
  if (const json* so = r.find("scaleout")) {
    std::string sp = r.path("scaleout");
    SNCL_CHECK(expectObject(c, *so, sp, "scaleout"));
    ObjectReader s(c, *so, sp, "scaleout");
    SNCL_CHECK(s.integer("endpoints_per_leaf", 1, kMaxCount, &p->scaleout.endpointsPerLeaf));
    SNCL_CHECK(s.integer("spines", 0, kMaxCount, &p->scaleout.spines));
    SNCL_CHECK(s.link("", &p->scaleout.nic));
    SNCL_CHECK(s.link("uplink_", &p->scaleout.uplink));
    SNCL_CHECK(s.finish());
  }
  return snclSuccess;
}

Result readGenerator(Ctx& c, const json& j, const std::string& ptr, bool nested, GeneratorParams* out) {
  SNCL_CHECK(expectObject(c, j, ptr, "a generator"));
  auto it = j.find("type");
  if (it == j.end()) return c.error(ptr, "a generator needs \"type\"");
  if (!it->is_string()) return c.error(ptr + "/type", "must be a string, not {}", typeName(*it));
  std::string type = it->get<std::string>();
  const char* known = nested ? "full_mesh, clos, torus, fat_tree"
                             : "full_mesh, clos, torus, fat_tree, hosts, cluster";
  ObjectReader r(c, j, ptr, fmt::format("generator \"{}\"", type));
  r.find("type");
  if (type == "full_mesh") SNCL_CHECK(readFullMesh(r, nested, &out->emplace<FullMeshParams>()));
  else if (type == "clos") SNCL_CHECK(readClos(r, nested, &out->emplace<ClosParams>()));
  else if (type == "torus") SNCL_CHECK(readTorus(c, r, nested, &out->emplace<TorusParams>()));
  else if (type == "fat_tree") SNCL_CHECK(readFatTree(r, nested, &out->emplace<FatTreeParams>()));
  else if (!nested && type == "hosts") SNCL_CHECK(readHosts(r, &out->emplace<HostsParams>()));
  else if (!nested && type == "cluster") SNCL_CHECK(readCluster(c, r, &out->emplace<ClusterParams>()));
  else return c.error(ptr + "/type", "unknown generator \"{}\" (known: {})", type, known);
  SNCL_CHECK(r.finish());
  std::string problem = checkParams(*out);
  if (!problem.empty()) return c.error(ptr, "{}", problem);
  return snclSuccess;
}

Result readGenerators(Ctx& c, const json& arr) {
  if (!arr.is_array()) return c.error("/generators", "must be an array, not {}", typeName(arr));
  for (size_t i = 0; i < arr.size(); ++i) {
    std::string ptr = "/generators/" + std::to_string(i);
    GeneratorParams p;
    SNCL_CHECK(readGenerator(c, arr[i], ptr, false, &p));
    GenSize size = sizeOf(p);
    SNCL_CHECK(c.budget(ptr, size.vertices, size.links));
    c.vertexOrigin.emplace_back(uint32_t(c.g.vertexCount()), ptr);
    c.linkOrigin.emplace_back(uint32_t(c.g.linkCount()), ptr);
    if (generate(c.g, p) != snclSuccess) {
      std::string why = lastError();
      return c.error(ptr, "{}", why);
    }
  }
  return snclSuccess;
}

// A name in the file that must already be a vertex.
Result lookup(Ctx& c, ObjectReader& r, const char* key, bool required, VertexId* out) {
  std::string name;
  SNCL_CHECK(r.string(key, &name, required));
  if (name.empty() && !required) return *out = kNone, snclSuccess;
  *out = c.g.findVertex(name);
  if (*out == kNone) return c.error(r.path(key), "no vertex named \"{}\"", name);
  return snclSuccess;
}

Result readVertices(Ctx& c, const json& arr) {
  if (!arr.is_array()) return c.error("/vertices", "must be an array, not {}", typeName(arr));
  for (size_t i = 0; i < arr.size(); ++i) {
    std::string ptr = "/vertices/" + std::to_string(i);
    SNCL_CHECK(expectObject(c, arr[i], ptr, "a vertex"));
    SNCL_CHECK(c.budget(ptr, 1, 0));
    ObjectReader r(c, arr[i], ptr, "a vertex");
    std::string name, kind;
    SNCL_CHECK(r.string("name", &name, true));
    if (name.empty() || name.find('-') != std::string::npos)
      return c.error(r.path("name"), "\"{}\" is not a vertex name (non-empty, no '-')", name);
    if (VertexId dup = c.g.findVertex(name); dup != kNone)
      return c.error(r.path("name"), "duplicate vertex name \"{}\" (first made by {})", name,
                     c.originOf(c.vertexOrigin, dup));
    SNCL_CHECK(r.string("kind", &kind, true));
    VertexAttrs a;
    if (!parseVertexKind(kind, &a.kind))
      return c.error(r.path("kind"), "unknown vertex kind \"{}\" (known: endpoint, switch, core, "
                     "numa, package, node, rack, supernode, cluster, nic, pci)", kind);
    SNCL_CHECK(lookup(c, r, "parent", false, &a.parent));
    bool fw = a.kind != VertexKind::Endpoint;
    SNCL_CHECK(r.boolean("forwards", &fw));
    a.forwards = fw;
    int tier = 0, plane = -1;
    SNCL_CHECK(r.integer("tier", 0, 255, &tier));
    SNCL_CHECK(r.integer("plane", -1, 32767, &plane));
    a.tier = uint8_t(tier);
    a.plane = int16_t(plane);
    SNCL_CHECK(r.finish());
    c.vertexOrigin.emplace_back(uint32_t(c.g.vertexCount()), ptr);
    SNCL_CHECK(c.g.addVertex(name, a));
  }
  return snclSuccess;
}

Result readLinks(Ctx& c, const json& arr) {
  if (!arr.is_array()) return c.error("/links", "must be an array, not {}", typeName(arr));
  for (size_t i = 0; i < arr.size(); ++i) {
    std::string ptr = "/links/" + std::to_string(i);
    SNCL_CHECK(expectObject(c, arr[i], ptr, "a link"));
    SNCL_CHECK(c.budget(ptr, 0, 1));
    ObjectReader r(c, arr[i], ptr, "a link");
    VertexId a, b;
    SNCL_CHECK(lookup(c, r, "a", true, &a));
    SNCL_CHECK(lookup(c, r, "b", true, &b));
    if (a == b) return c.error(ptr, "links \"{}\" to itself", c.g.vertexName(a));
    LinkSpec s{0, 0, LinkKind::Bus};
    SNCL_CHECK(r.number("bw", kMinBandwidthGBps, kMaxBandwidthGBps, " GB/s", &s.bwGBps, true));
    SNCL_CHECK(r.number("lat", kMinLatencyUs, kMaxLatencyUs, " us", &s.latUs, true));
    SNCL_CHECK(r.linkKind("kind", &s.kind));
    std::string state = "up";
    double factor = 1;
    SNCL_CHECK(r.string("state", &state));
    SNCL_CHECK(r.number("factor", kMinDegradeFactor, 1, "", &factor));
    if (state != "up" && state != "down" && state != "degraded")
      return c.error(r.path("state"), "unknown state \"{}\" (known: up, down, degraded)", state);
    if (state == "degraded" && !(factor < 1))
      return c.error(ptr, "a degraded link needs \"factor\" in [{}, 1)", kMinDegradeFactor);
    SNCL_CHECK(r.finish());
    if (LinkId dup = c.g.findLink(a, b); dup != kNone)
      return c.error(ptr, "duplicate link {}-{} (first made by {})", c.g.vertexName(a),
                     c.g.vertexName(b), c.originOf(c.linkOrigin, dup));
    c.linkOrigin.emplace_back(uint32_t(c.g.linkCount()), ptr);
    LinkId id;
    SNCL_CHECK(c.g.addLink(a, b, LinkAttrs{s.bwGBps, s.latUs, s.kind}, &id));
    if (state != "up")
      SNCL_CHECK(c.g.setLinkState(id, state == "down" ? LinkState::Down : LinkState::Degraded, factor));
  }
  return snclSuccess;
}

Result readRankMap(Ctx& c, const json& arr) {
  if (!arr.is_array()) return c.error("/rank_map", "must be an array, not {}", typeName(arr));
  std::vector<VertexId> endpoints;
  for (size_t v = 0; v < c.g.vertexCount(); ++v)
    if (c.g.vertexKind(VertexId(v)) == VertexKind::Endpoint) endpoints.push_back(VertexId(v));
  std::vector<VertexId> order;
  std::vector<int> rankOf(c.g.vertexCount(), -1);
  for (size_t i = 0; i < arr.size(); ++i) {
    std::string ptr = "/rank_map/" + std::to_string(i);
    const json& e = arr[i];
    VertexId v = kNone;
    if (e.is_string()) {
      v = c.g.findVertex(e.get<std::string>());
      if (v == kNone) return c.error(ptr, "no vertex named {}", e.dump());
      if (c.g.vertexKind(v) != VertexKind::Endpoint)
        return c.error(ptr, "{} is a {}, not an endpoint", e.dump(), kindName(c.g.vertexKind(v)));
    } else if (e.is_number_integer()) {
      bool inRange = !(e.is_number_integer() && !e.is_number_unsigned() && e.get<int64_t>() < 0) &&
                     e.get<uint64_t>() < endpoints.size();
      if (!inRange) return c.error(ptr, "endpoint index {} is not in [0, {})", e.dump(), endpoints.size());
      v = endpoints[e.get<uint64_t>()];
    } else {
      return c.error(ptr, "must be an endpoint name or index, not {}", typeName(e));
    }
    if (rankOf[v] >= 0)
      return c.error(ptr, "endpoint \"{}\" is already rank {}", c.g.vertexName(v), rankOf[v]);
    rankOf[v] = int(i);
    order.push_back(v);
  }
  return c.g.setRankOrder(std::move(order));
}

Result parseDocument(Ctx& c, const json& doc) {
  SNCL_CHECK(expectObject(c, doc, "", "a topology file"));
  ObjectReader top(c, doc, "", "a topology file");
  std::string format = kFormat, name, note;
  SNCL_CHECK(top.string("format", &format));
  if (format != kFormat)
    return c.error("/format", "\"{}\" is not a format this sncl reads (\"{}\")", format, kFormat);
  SNCL_CHECK(top.string("name", &name));
  SNCL_CHECK(top.string("note", &note));
  c.g.setName(name.empty() ? c.source : name);
  if (const json* gens = top.find("generators")) SNCL_CHECK(readGenerators(c, *gens));
  if (const json* verts = top.find("vertices")) SNCL_CHECK(readVertices(c, *verts));
  if (const json* links = top.find("links")) SNCL_CHECK(readLinks(c, *links));
  if (const json* map = top.find("rank_map")) SNCL_CHECK(readRankMap(c, *map));
  SNCL_CHECK(top.finish());
  bool anyEndpoint = false;
  for (size_t v = 0; v < c.g.vertexCount() && !anyEndpoint; ++v)
    anyEndpoint = c.g.vertexKind(VertexId(v)) == VertexKind::Endpoint;
  if (!anyEndpoint) return c.error("", "the topology has no endpoint (where would ranks run?)");
  return c.g.finalize();
}

struct TooDeep {};

// nlohmann's DOM builder with a nesting limit. (Its callback parser could do this too, but
// it rescans a container each time a child ends: quadratic on a file of 100k links.)
class DepthLimitedParser : public nlohmann::detail::json_sax_dom_parser<json> {
 public:
  explicit DepthLimitedParser(json& root) : json_sax_dom_parser(root, /*allow_exceptions=*/true) {}
  bool start_object(std::size_t n) { return deeper() && json_sax_dom_parser::start_object(n); }
  bool start_array(std::size_t n) { return deeper() && json_sax_dom_parser::start_array(n); }
  bool end_object() { return --depth_, json_sax_dom_parser::end_object(); }
  bool end_array() { return --depth_, json_sax_dom_parser::end_array(); }

 private:
  bool deeper() {
    if (++depth_ > kMaxDepth) throw TooDeep{};
    return true;
  }
  int depth_ = 0;
};

}  // namespace

Result parseJsonText(std::string_view text, const std::string& source, nlohmann::json* out) {
  json doc;
  try {
    DepthLimitedParser builder(doc);
    json::sax_parse(text.begin(), text.end(), &builder, nlohmann::detail::input_format_t::json,
                    /*strict=*/true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    // The byte offset points just past the offending character.
    size_t upto = std::min(text.size(), e.byte > 0 ? size_t(e.byte - 1) : size_t(0));
    size_t line = 1 + std::count(text.begin(), text.begin() + upto, '\n');
    size_t lineStart = text.rfind('\n', upto == 0 ? 0 : upto - 1);
    size_t col = upto - (lineStart == std::string_view::npos || upto == 0 ? 0 : lineStart + 1) + 1;
    std::string what = e.what();
    // nlohmann's text is "[json.exception...] parse error at line L, column C: <why>".
    size_t colon = what.find(": ", what.find("parse error"));
    return fail(snclInvalidArgument, "{}:{}:{}: JSON syntax error: {}", source, line, col,
                colon == std::string::npos ? what : what.substr(colon + 2));
  } catch (const TooDeep&) {
    return fail(snclInvalidArgument, "{}: nesting deeper than {} levels", source, kMaxDepth);
  } catch (const std::exception& e) {
    return fail(snclInvalidArgument, "{}: cannot parse: {}", source, e.what());
  }
  *out = std::move(doc);
  return snclSuccess;
}

Result readTextFile(const std::string& path, size_t maxBytes, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(snclInvalidArgument, "{}: cannot open: {}", path, strerror(errno));
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  if (size < 0 || size_t(size) > maxBytes)
    return fail(snclInvalidArgument, "{}: not a readable file of at most {} bytes", path, maxBytes);
  out->resize(size_t(size));
  in.seekg(0);
  in.read(out->data(), size);
  if (!in) return fail(snclInvalidArgument, "{}: read failed", path);
  return snclSuccess;
}

Result parseTopology(std::string_view text, const std::string& source, Graph* out,
                     const FileLimits& limits) {
  Graph g;
  Ctx c{source, limits, g, {}, {}};
  json doc;
  SNCL_CHECK(parseJsonText(text, source, &doc));
  try {
    SNCL_CHECK(parseDocument(c, doc));
  } catch (const std::bad_alloc&) {
    return fail(snclSystemError, "{}: out of memory while building the topology", source);
  } catch (const std::exception& e) {  // a bug: every value is type-checked before use
    return fail(snclInternalError, "{}: {}", source, e.what());
  }
  *out = std::move(g);
  return snclSuccess;
}

Result loadTopologyFile(const std::string& path, Graph* out, const FileLimits& limits) {
  std::string text;
  SNCL_CHECK(readTextFile(path, limits.maxFileBytes, &text));
  SNCL_CHECK(parseTopology(text, path, out, limits));
  log::info("topology {}: {} vertices, {} links, {} endpoints", path, out->vertexCount(),
            out->linkCount(), out->endpointCount());
  return snclSuccess;
}

std::string topologyToJson(const Graph& g) {
  auto q = [](const std::string& s) { return json(s).dump(); };
  std::string o;
  o += fmt::format("{{\n  \"format\": \"{}\",\n  \"name\": {},\n  \"vertices\": [", kFormat, q(g.name()));
  for (VertexId v = 0; v < g.vertexCount(); ++v) {
    o += fmt::format("{}\n    {{\"name\": {}, \"kind\": \"{}\"", v ? "," : "", q(g.vertexName(v)),
                     kindName(g.vertexKind(v)));
    if (g.parent(v) != kNone) o += fmt::format(", \"parent\": {}", q(g.vertexName(g.parent(v))));
    if (g.forwards(v) != (g.vertexKind(v) != VertexKind::Endpoint))
      o += fmt::format(", \"forwards\": {}", g.forwards(v));
    if (g.tier(v)) o += fmt::format(", \"tier\": {}", g.tier(v));
    if (g.plane(v) >= 0) o += fmt::format(", \"plane\": {}", g.plane(v));
    o += "}";
  }
  o += "\n  ],\n  \"links\": [";
  for (LinkId l = 0; l < g.linkCount(); ++l) {
    o += fmt::format("{}\n    {{\"a\": {}, \"b\": {}, \"bw\": {}, \"lat\": {}, \"kind\": \"{}\"", l ? "," : "",
                     q(g.vertexName(g.linkA(l))), q(g.vertexName(g.linkB(l))), float(g.linkNominalGBps(l)),
                     float(g.linkLatencyUs(l)), kindName(g.linkKind(l)));
    if (g.linkState(l) != LinkState::Up) o += fmt::format(", \"state\": \"{}\"", stateName(g.linkState(l)));
    if (g.linkState(l) == LinkState::Degraded) o += fmt::format(", \"factor\": {}", float(g.linkFactor(l)));
    o += "}";
  }
  o += "\n  ]";
  if (!g.rankOrder().empty()) {
    o += ",\n  \"rank_map\": [";
    for (size_t i = 0; i < g.rankOrder().size(); ++i)
      o += fmt::format("{}{}", i ? ", " : "", q(g.vertexName(g.rankOrder()[i])));
    o += "]";
  }
  o += "\n}\n";
  return o;
}

}  // namespace sncl::topo
