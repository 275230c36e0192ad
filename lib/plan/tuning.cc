// Tuning files: what sncl-tune measured, read by the planner from SNCL_TUNING_FILE.
//   {"version": 1, "mem_gbs": 9.5,
//    "links": {"shm": {"alpha_us": 1.8, "beta_gbs": 6.2}, "net": {...}}}
//    "step_overhead_us": {"2": 0.4, "8": 21.0},
//    "staged_max_bytes": {"2": 65536, "3": "any"}}
// Link kinds are topo's names (bus, shm, pcie, net); "ofi" names net. Kinds a file leaves
// out keep their defaults. "machine" is free-form (what it was measured on).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lib/plan/cost_model.h"

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

Result nonNegative(const nlohmann::json& j, const std::string& source, const std::string& where, double* out) {
  if (!j.is_number()) return bad(source, where, "expected a number");
  const double v = j.get<double>();
  if (!std::isfinite(v) || v < 0) return bad(source, where, fmt::format("{} is not a time (>= 0)", v));
  *out = v;
  return snclSuccess;
}

Result rankCount(const std::string& key, const std::string& source, const std::string& where, int* out) {
  char* end = nullptr;
  const long n = std::strtol(key.c_str(), &end, 10);
  if (key.empty() || *end != '\0' || n < 1 || n > (1 << 20)) return bad(source, where, "key is not a rank count");
  *out = int(n);
  return snclSuccess;
}

}  // namespace

double Tuning::stepOverheadAt(int n) const {
  if (stepOverheadUs.empty()) return 0.0;
  if (n <= stepOverheadUs.front().first) return stepOverheadUs.front().second;
  for (size_t i = 1; i < stepOverheadUs.size(); ++i) {
    const auto [n1, u1] = stepOverheadUs[i];
    if (n > n1) continue;
    const auto [n0, u0] = stepOverheadUs[i - 1];
    return u0 + (u1 - u0) * double(n - n0) / double(n1 - n0);
  }
  const auto [nl, ul] = stepOverheadUs.back();
  return ul * double(n) / double(nl);
}

uint64_t Tuning::stagedMaxAt(int n) const {
  if (stagedMaxBytes.empty()) return 0;
  uint64_t bytes = stagedMaxBytes.front().second;
  for (const auto& [ranks, max] : stagedMaxBytes)
    if (ranks <= n) bytes = max;
  return bytes;
}

Result parseTuning(const std::string& text, const std::string& source, Tuning* out) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse errors, and numbers out of range
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
        if (!fig.is_object()) return bad(source, where, "expected {\"alpha_us\": .., \"beta_gbs\": .., \"cpu_us\": ..}");
        t.measured[int(kind)] = true;
        for (auto& [field, v] : fig.items()) {
          if (field == "alpha_us") SNCL_CHECK(nonNegative(v, source, where + "/alpha_us", &t.kind[int(kind)].alphaUs));
          else if (field == "beta_gbs") SNCL_CHECK(positive(v, source, where + "/beta_gbs", &t.kind[int(kind)].betaGBs));
          else if (field == "cpu_us") SNCL_CHECK(nonNegative(v, source, where + "/cpu_us", &t.kind[int(kind)].cpuUs));
          else if (field != "samples") return bad(source, where + "/" + field, "unknown field");
        }
      }
    } else if (key == "step_overhead_us") {
      // {"ranks": µs, ...}: keys are rank counts.
      if (!value.is_object()) return bad(source, "/step_overhead_us", "expected an object of rank count -> us");
      for (auto& [ranks, v] : value.items()) {
        const std::string where = "/step_overhead_us/" + ranks;
        int n = 0;
        SNCL_CHECK(rankCount(ranks, source, where, &n));
        double us = 0;
        SNCL_CHECK(nonNegative(v, source, where, &us));
        t.stepOverheadUs.emplace_back(n, us);
      }
      std::sort(t.stepOverheadUs.begin(), t.stepOverheadUs.end());
    } else if (key == "staged_max_bytes") {
      // {"ranks": bytes or "any", ...}; the file's entries replace the defaults.
      if (!value.is_object() || value.empty())
        return bad(source, "/staged_max_bytes", "expected an object of rank count -> bytes per rank or \"any\"");
      t.stagedMaxBytes.clear();
      for (auto& [ranks, v] : value.items()) {
        const std::string where = "/staged_max_bytes/" + ranks;
        int n = 0;
        SNCL_CHECK(rankCount(ranks, source, where, &n));
        if (v.is_string() && v.get<std::string>() == "any") t.stagedMaxBytes.emplace_back(n, kStagedAnySize);
        else if (v.is_number_unsigned()) t.stagedMaxBytes.emplace_back(n, v.get<uint64_t>());
        else return bad(source, where, "expected bytes per rank (an integer >= 0) or \"any\"");
      }
      std::sort(t.stagedMaxBytes.begin(), t.stagedMaxBytes.end());
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
      links[topo::kindName(topo::LinkKind(k))] = {
          {"alpha_us", t.kind[k].alphaUs}, {"beta_gbs", t.kind[k].betaGBs}, {"cpu_us", t.kind[k].cpuUs}};
  doc["links"] = links;
  if (!t.stepOverheadUs.empty()) {
    nlohmann::json steps = nlohmann::json::object();
    for (const auto& [n, us] : t.stepOverheadUs) steps[std::to_string(n)] = us;
    doc["step_overhead_us"] = steps;
  }
  if (!t.stagedMaxBytes.empty()) {
    nlohmann::json staged = nlohmann::json::object();
    for (const auto& [n, bytes] : t.stagedMaxBytes)
      staged[std::to_string(n)] = bytes == kStagedAnySize ? nlohmann::json("any") : nlohmann::json(bytes);
    doc["staged_max_bytes"] = staged;
  }
  return doc.dump(2) + "\n";
}

}  // namespace sncl
