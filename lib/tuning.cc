// Tuning files: what sncl-tune measured, read by the planner from SNCL_TUNING_FILE.
//   {"version": 1, "mem_gbs": 9.5,
//    "links": {"shm": {"alpha_us": 1.8, "beta_gbs": 6.2}, "net": {...}}}
// Link kinds are topo's names (bus, shm, pcie, net); "ofi" names net. Kinds a file leaves
// out keep their defaults.
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lib/cost_model.h"

namespace sncl {
namespace {

Result bad(const std::string& source, const std::string& where, const std::string& what) {
  return fail(snclInvalidArgument, "tuning file {}: {}: {}", source, where, what);
}

Result positive(const nlohmann::json& j, const std::string& source, const std::string& where, double* out) {
  if (!j.is_number()) return bad(source, where, "expected a number");
  const double v = j.get<double>();
  if (!std::isfinite(v) || v <= 0) return bad(source, where, fmt::format("{} is not a positive figure", v));
  *out = v;
  return snclSuccess;
}

}  // namespace

Result parseTuning(const std::string& text, const std::string& source, Tuning* out) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return bad(source, "syntax", e.what());
  }
  if (!doc.is_object()) return bad(source, "/", "expected an object");
  Tuning t = defaultTuning();
  t.source = source;
  for (auto& [key, value] : doc.items()) {
    if (key == "version") {
      if (!value.is_number_integer() || value.get<int64_t>() != 1) return bad(source, "/version", "only version 1 is known");
    } else if (key == "mem_gbs") {
      SNCL_CHECK(positive(value, source, "/mem_gbs", &t.memGBs));
    } else if (key == "links") {
      if (!value.is_object()) return bad(source, "/links", "expected an object of link kinds");
      for (auto& [kindName, fig] : value.items()) {
        topo::LinkKind kind;
        if (kindName == "ofi") kind = topo::LinkKind::Net;
        else if (!topo::parseLinkKind(kindName, &kind))
          return bad(source, "/links/" + kindName, "unknown link kind (bus, shm, pcie, net or ofi)");
        const std::string where = "/links/" + kindName;
        if (!fig.is_object()) return bad(source, where, "expected {\"alpha_us\": .., \"beta_gbs\": ..}");
        for (auto& [field, v] : fig.items()) {
          if (field == "alpha_us") SNCL_CHECK(positive(v, source, where + "/alpha_us", &t.kind[int(kind)].alphaUs));
          else if (field == "beta_gbs") SNCL_CHECK(positive(v, source, where + "/beta_gbs", &t.kind[int(kind)].betaGBs));
          else if (field != "samples") return bad(source, where + "/" + field, "unknown field");
        }
      }
    } else if (key != "machine") {
      return bad(source, "/" + key, "unknown field");
    }
  }
  *out = std::move(t);
  return snclSuccess;
}

Result loadTuning(const std::string& path, Tuning* out) {
  std::ifstream in(path);
  if (!in) return fail(snclInvalidArgument, "tuning file {}: cannot be read", path);
  std::stringstream text;
  text << in.rdbuf();
  return parseTuning(text.str(), path, out);
}

std::string tuningJson(const Tuning& t, const std::array<bool, topo::kNumLinkKinds>& measured) {
  nlohmann::json doc;
  doc["version"] = 1;
  doc["mem_gbs"] = t.memGBs;
  nlohmann::json links = nlohmann::json::object();
  for (int k = 0; k < topo::kNumLinkKinds; ++k)
    if (measured[k])
      links[topo::kindName(topo::LinkKind(k))] = {{"alpha_us", t.kind[k].alphaUs}, {"beta_gbs", t.kind[k].betaGBs}};
  doc["links"] = links;
  return doc.dump(2) + "\n";
}

}  // namespace sncl
