// sncl-trace: works on the per-rank trace files that SNCL_TRACE writes (docs/observability.md).
//
//   sncl-trace merge OUT IN...   one file with a process track per rank, for chrome://tracing
//                                or Perfetto (ui.perfetto.dev)
//   sncl-trace check FILE...     checks each file's structure and prints what it holds
//
// A file's otherData says its rank and comm. The merged file's pid is the rank; when the
// inputs come from several comms (a split, a shrink), comm k's ranks are 1000*k + rank.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sncl/sncl_ext.h"

using nlohmann::json;

namespace {

constexpr const char* kUsage = R"(usage: sncl-trace merge OUT IN...   merge ranks' SNCL_TRACE files into OUT
       sncl-trace check FILE...     check files' structure and print their calls
       sncl-trace --version         the library's version and git revision
)";

bool load(const std::string& path, json* out, std::string* why) {
  std::ifstream in(path);
  if (!in) {
    *why = "cannot open it";
    return false;
  }
  try {
    *out = json::parse(in);
  } catch (const json::exception& e) {
    *why = e.what();
    return false;
  }
  return true;
}

// The problems of one trace, empty when it is well formed: an object with a traceEvents
// array whose every event has ph, name and pid, and ts unless it is metadata.
std::vector<std::string> problems(const json& doc) {
  std::vector<std::string> out;
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    out.push_back("not an object with a traceEvents array");
    return out;
  }
  size_t index = 0;
  for (const json& e : doc["traceEvents"]) {
    const auto has = [&](const char* key) { return e.is_object() && e.contains(key); };
    if (!has("ph") || !e["ph"].is_string() || !has("name") || !has("pid")) {
      out.push_back(fmt::format("event {} lacks ph, name or pid", index));
    } else if (e["ph"] != "M" && (!has("ts") || !e["ts"].is_number())) {
      out.push_back(fmt::format("event {} ({}) has no numeric ts", index, e["name"].dump()));
    } else if (e["ph"] == "X" && (!has("dur") || !e["dur"].is_number())) {
      out.push_back(fmt::format("event {} ({}) is complete but has no dur", index, e["name"].dump()));
    }
    if (out.size() >= 10) break;
    ++index;
  }
  return out;
}

int check(const std::vector<std::string>& files) {
  int bad = 0;
  for (const std::string& path : files) {
    json doc;
    std::string why;
    if (!load(path, &doc, &why)) {
      fmt::print(stderr, "{}: not JSON: {}\n", path, why);
      ++bad;
      continue;
    }
    const auto list = problems(doc);
    for (const std::string& p : list) fmt::print(stderr, "{}: {}\n", path, p);
    if (!list.empty()) {
      ++bad;
      continue;
    }
    std::map<std::string, std::map<long long, size_t>> calls;  // name -> pid -> count
    size_t steps = 0, rounds = 0;
    for (const json& e : doc["traceEvents"]) {
      const std::string cat = e.value("cat", "");
      if (cat == "call") ++calls[e["name"].get<std::string>()][e["pid"].get<long long>()];
      steps += cat == "step";
      rounds += cat == "fault";
    }
    const json other = doc.value("otherData", json::object());
    fmt::print("{}: {} events, {} dropped; {} steps, {} fault rounds\n", path, doc["traceEvents"].size(),
               other.value("dropped", uint64_t(0)), steps, rounds);
    for (const auto& [name, perPid] : calls) {
      std::string ranks;
      for (const auto& [pid, n] : perPid) ranks += fmt::format(" {}:{}", pid, n);
      fmt::print("  {} (pid:calls){}\n", name, ranks);
    }
  }
  return bad ? 1 : 0;
}

struct Input {
  std::string path;
  json doc;
  long long rank = 0;
  std::string commId, comm, host;
};

int merge(const std::string& outPath, const std::vector<std::string>& files) {
  std::vector<Input> inputs;
  std::vector<std::string> comms;  // ids in order of appearance
  for (const std::string& path : files) {
    Input in;
    in.path = path;
    std::string why;
    if (!load(path, &in.doc, &why)) {
      fmt::print(stderr, "sncl-trace: {}: not JSON: {}\n", path, why);
      return 1;
    }
    const auto list = problems(in.doc);
    if (!list.empty()) {
      fmt::print(stderr, "sncl-trace: {}: {}\n", path, list.front());
      return 1;
    }
    const json other = in.doc.value("otherData", json::object());
    if (!other.contains("rank") || !other["rank"].is_number_integer()) {
      fmt::print(stderr, "sncl-trace: {}: no otherData.rank: not a file of SNCL_TRACE\n", path);
      return 1;
    }
    in.rank = other["rank"].get<long long>();
    in.commId = other.value("commId", "");
    in.comm = other.value("comm", "");
    in.host = other.value("host", "");
    if (std::find(comms.begin(), comms.end(), in.commId) == comms.end()) comms.push_back(in.commId);
    for (const Input& prior : inputs)
      if (prior.rank == in.rank && prior.commId == in.commId) {
        fmt::print(stderr, "sncl-trace: {} and {} are both rank {} of comm {}\n", prior.path, path, in.rank, in.comm);
        return 1;
      }
    inputs.push_back(std::move(in));
  }
  json events = json::array();
  json ranks = json::array();
  uint64_t dropped = 0;
  for (Input& in : inputs) {
    const size_t k = size_t(std::find(comms.begin(), comms.end(), in.commId) - comms.begin());
    const long long pid = comms.size() == 1 ? in.rank : 1000 * (long long)k + in.rank;
    for (json& e : in.doc["traceEvents"]) {
      e["pid"] = pid;
      if (comms.size() > 1 && e["ph"] == "M" && e["name"] == "process_name")
        e["args"]["name"] = fmt::format("comm {} rank {} ({})", in.comm, in.rank, in.host);
      events.push_back(std::move(e));
    }
    const json other = in.doc.value("otherData", json::object());
    dropped += other.value("dropped", uint64_t(0));
    ranks.push_back({{"file", in.path}, {"pid", pid}, {"rank", in.rank}, {"host", in.host}, {"comm", in.comm},
                     {"events", other.value("events", uint64_t(0))}, {"dropped", other.value("dropped", uint64_t(0))}});
  }
  const json out = {{"traceEvents", std::move(events)},
                    {"displayTimeUnit", "ns"},
                    {"otherData", {{"ranks", std::move(ranks)}, {"dropped", dropped}, {"mergedBy", "sncl-trace"}}}};
  std::ofstream file(outPath);
  file << out.dump() << '\n';
  file.close();
  if (!file) {
    fmt::print(stderr, "sncl-trace: cannot write {}\n", outPath);
    return 1;
  }
  fmt::print("{}: {} ranks, {} events{}\n", outPath, inputs.size(), out["traceEvents"].size(),
             dropped ? fmt::format(" ({} dropped by the ranks' buffers: raise SNCL_TRACE_EVENTS)", dropped) : "");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "--version") {
    printf("sncl-trace %s\n", snclGetBuildVersion());
    return 0;
  }
  if (cmd == "-h" || cmd == "--help") {
    printf("%s", kUsage);
    return 0;
  }
  if (cmd == "merge" && argc >= 4) return merge(argv[2], std::vector<std::string>(argv + 3, argv + argc));
  if (cmd == "check" && argc >= 3) return check(std::vector<std::string>(argv + 2, argv + argc));
  fmt::print(stderr, "{}", kUsage);
  return 2;
}
