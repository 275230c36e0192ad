// Observation of a comm (docs/observability.md): SNCL_TRACE's per-rank Chrome traces and
// their merge by sncl-trace, the profiler hook, the status of a call that hangs, and a
// trace buffer too small for the run.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"
#include "tests/util/launcher.h"

using nlohmann::json;
using namespace sncl;

namespace {

enum class Kind { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AlltoAll, SendRecv, kCount };
const char* const kNames[] = {"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall", "sendrecv"};

struct Call {
  Kind kind;
  size_t count;
  int root;
  bool onStream;
};

// The same list on every rank: one generator, one seed.
std::vector<Call> planCalls(int n, int nranks, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<Call> calls;
  for (int i = 0; i < n; ++i) {
    Call c;
    c.kind = Kind(gen() % unsigned(Kind::kCount));
    c.count = 1 + gen() % 20000;
    c.root = int(gen() % unsigned(nranks));
    c.onStream = gen() % 3 == 0;
    calls.push_back(c);
  }
  return calls;
}

snclResult_t issue(const Call& c, snclComm_t comm, int rank, int nranks, std::vector<float>& in,
                   std::vector<float>& out, snclStream_t stream) {
  const size_t need = c.count * size_t(nranks);
  if (in.size() < need) in.assign(need, float(rank + 1));
  if (out.size() < need) out.assign(need, 0.f);
  snclStream_t s = c.onStream ? stream : nullptr;
  snclResult_t r = snclSuccess;
  switch (c.kind) {
    case Kind::AllReduce: r = snclAllReduce(in.data(), out.data(), c.count, snclFloat32, snclSum, comm, s); break;
    case Kind::Broadcast: r = snclBroadcast(in.data(), out.data(), c.count, snclFloat32, c.root, comm, s); break;
    case Kind::Reduce: r = snclReduce(in.data(), out.data(), c.count, snclFloat32, snclMax, c.root, comm, s); break;
    case Kind::AllGather: r = snclAllGather(in.data(), out.data(), c.count, snclFloat32, comm, s); break;
    case Kind::ReduceScatter:
      r = snclReduceScatter(in.data(), out.data(), c.count, snclFloat32, snclSum, comm, s);
      break;
    case Kind::AlltoAll: r = snclAlltoAll(in.data(), out.data(), c.count, snclFloat32, comm, s); break;
    case Kind::SendRecv:
      snclGroupStart();
      snclSend(in.data(), c.count, snclFloat32, (rank + 1) % nranks, comm, s);
      snclRecv(out.data(), c.count, snclFloat32, (rank + nranks - 1) % nranks, comm, s);
      r = snclGroupEnd();
      break;
    default: break;
  }
  if (r == snclSuccess && s) r = snclStreamSynchronize(s);
  return r;
}

std::string tempDir() {
  std::string pattern = std::string(getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp") + "/sncl-trace.XXXXXX";
  REQUIRE(mkdtemp(pattern.data()) != nullptr);
  return pattern;
}

bool load(const std::string& path, json* out) {
  std::ifstream in(path);
  if (!in) return false;
  try {
    *out = json::parse(in);
  } catch (const json::exception& e) {
    fprintf(stderr, "%s: %s\n", path.c_str(), e.what());
    return false;
  }
  return true;
}

// What is wrong with rank's trace of calls ("" if nothing): the Chrome format's fields on
// every event, the pid, one call event per call in order with its name and seq, steps
// that belong to the calls, no drops.
std::string checkRankTrace(const json& doc, int rank, const std::vector<Call>& calls) {
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array())
    return "no traceEvents array";
  if (doc.value("displayTimeUnit", "") != "ns") return "displayTimeUnit is not ns";
  std::vector<const json*> callEvents;
  std::set<uint64_t> callSeqs;
  size_t steps = 0;
  std::set<std::string> threadNames;
  bool processName = false;
  for (const json& e : doc["traceEvents"]) {
    if (!e.contains("ph") || !e.contains("pid") || !e.contains("name")) return "an event lacks ph, pid or name: " + e.dump();
    if (e["pid"] != rank) return "an event's pid is not the rank: " + e.dump();
    if (e["ph"] == "M") {
      if (e["name"] == "thread_name") threadNames.insert(e["args"]["name"].get<std::string>());
      if (e["name"] == "process_name")
        processName = e["args"]["name"].get<std::string>().rfind(fmt::format("rank {} (", rank), 0) == 0;
      continue;
    }
    if (!e.contains("ts") || !e["ts"].is_number() || !e.contains("dur") || !e["dur"].is_number())
      return "an event lacks a numeric ts or dur: " + e.dump();
    if (e["cat"] == "call") {
      callEvents.push_back(&e);
      callSeqs.insert(e["args"]["seq"].get<uint64_t>());
    }
    if (e["cat"] == "step") ++steps;
  }
  if (!processName) return "no process_name \"rank N (host)\"";
  if (callEvents.size() != calls.size()) return fmt::format("{} call events for {} calls", callEvents.size(), calls.size());
  uint64_t seq = 0;
  bool streamThread = false;
  for (size_t i = 0; i < calls.size(); ++i) {
    const json& e = *callEvents[i];
    if (e["name"] != kNames[int(calls[i].kind)])
      return fmt::format("call {} is {}, not {}", i, e["name"].dump(), kNames[int(calls[i].kind)]);
    if (e["args"]["seq"] != seq) return fmt::format("call {} has seq {}, not {}", i, e["args"]["seq"].dump(), seq);
    if (e["args"]["result"] != "success") return fmt::format("call {} has result {}", i, e["args"]["result"].dump());
    if (calls[i].kind != Kind::SendRecv) {
      ++seq;
      if (e["args"]["count"] != calls[i].count) return fmt::format("call {}: count {}", i, e["args"]["count"].dump());
      if (e["args"]["plan"].get<std::string>().empty()) return fmt::format("call {} has no plan", i);
    }
    streamThread |= calls[i].onStream;
  }
  for (const json& e : doc["traceEvents"])
    if (e.value("cat", "") == "step" && !callSeqs.count(e["args"]["seq"].get<uint64_t>()))
      return "a step of no call: " + e.dump();
  if (steps < calls.size()) return fmt::format("{} steps for {} calls", steps, calls.size());
  const auto named = [&](const char* prefix) {
    return std::any_of(threadNames.begin(), threadNames.end(), [&](const std::string& n) { return n.rfind(prefix, 0) == 0; });
  };
  if (!named("caller")) return "no caller thread track";
  if (streamThread && !named("stream thread")) return "no stream thread track";
  if (doc["otherData"].value("dropped", -1) != 0) return "events were dropped";
  if (doc["otherData"].value("rank", -1) != rank) return "otherData.rank is not the rank";
  return "";
}

// Set for a scope (the library reads these at comm init), then as it was.
class EnvVar {
 public:
  EnvVar(const char* name, const std::string& value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old, had_ = true;
    setenv(name, value.c_str(), 1);
  }
  ~EnvVar() {
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

}  // namespace

TEST_CASE("each rank writes a Chrome trace of its calls, and sncl-trace merges them", "[trace]") {
  constexpr int kRanks = 4, kCalls = 40;
  const std::string dir = tempDir();
  const auto calls = planCalls(kCalls, kRanks, 12345);
  {
    EnvVar trace("SNCL_TRACE", dir + "/trace.%r.json");  // read at comm init by the ranks
    // Heap buffers would take the staged path, which records no steps: the planner's
    // schedules, whose steps this test follows.
    EnvVar noStaging("SNCL_SHM_STAGE_BYTES", "0");
    auto exits = test::runRanks(kRanks, [&](int rank, int n, const snclUniqueId& id) {
      snclComm_t comm = nullptr;
      if (snclCommInitRank(&comm, n, id, rank) != snclSuccess) return 1;
      snclStream_t stream = nullptr;
      if (snclStreamCreate(&stream) != snclSuccess) return 1;
      std::vector<float> in, out;
      for (const Call& c : calls)
        if (issue(c, comm, rank, n, in, out, stream) != snclSuccess) {
          fprintf(stderr, "rank %d: %s\n", rank, snclGetLastError(comm));
          return 1;
        }
      snclStreamDestroy(stream);
      if (snclCommFinalize(comm) != snclSuccess) return 1;  // writes the file ...
      return snclCommDestroy(comm) == snclSuccess ? 0 : 1;   // ... once
    });
    REQUIRE(test::allSucceeded(exits));
  }
  std::vector<json> docs(kRanks);
  std::string files;
  for (int r = 0; r < kRanks; ++r) {
    const std::string path = fmt::format("{}/trace.{}.json", dir, r);
    INFO(path);
    REQUIRE(load(path, &docs[r]));
    CHECK(checkRankTrace(docs[r], r, calls) == "");
    CHECK(access(fmt::format("{}/trace.{}.2.json", dir, r).c_str(), F_OK) != 0);  // finalize wrote it, destroy did not
    files += " '" + path + "'";
  }
  // One clock for the ranks of a host: no rank leaves an all-reduce before every rank
  // entered it, so the ranks' intervals of each all-reduce overlap.
  std::vector<std::vector<std::pair<double, double>>> allReduces(kRanks);
  for (int r = 0; r < kRanks; ++r)
    for (const json& e : docs[r]["traceEvents"])
      if (e.value("cat", "") == "call" && e["name"] == "allreduce")
        allReduces[r].push_back({e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
  REQUIRE(!allReduces[0].empty());
  for (size_t k = 0; k < allReduces[0].size(); ++k) {
    double lastStart = 0, firstEnd = 1e300;
    for (int r = 0; r < kRanks; ++r) {
      REQUIRE(allReduces[r].size() == allReduces[0].size());
      lastStart = std::max(lastStart, allReduces[r][k].first);
      firstEnd = std::min(firstEnd, allReduces[r][k].second);
    }
    CHECK(lastStart <= firstEnd);
  }

  const std::string merged = dir + "/merged.json";
  REQUIRE(std::system(fmt::format("'{}' merge '{}'{} > /dev/null", SNCL_TRACE_TOOL, merged, files).c_str()) == 0);
  REQUIRE(std::system(fmt::format("'{}' check '{}' > /dev/null", SNCL_TRACE_TOOL, merged).c_str()) == 0);
  json all;
  REQUIRE(load(merged, &all));
  std::set<int> pids, named;
  size_t callEvents = 0;
  for (const json& e : all["traceEvents"]) {
    pids.insert(e["pid"].get<int>());
    if (e["ph"] == "M" && e["name"] == "process_name") named.insert(e["pid"].get<int>());
    callEvents += e.value("cat", "") == "call";
  }
  CHECK(pids == std::set<int>{0, 1, 2, 3});
  CHECK(named == pids);
  CHECK(callEvents == size_t(kRanks) * calls.size());
  // Two files of one rank are refused: the merge would mix two processes in one track.
  CHECK(std::system(fmt::format("'{}' merge '{}/bad.json'{}{} 2> /dev/null", SNCL_TRACE_TOOL, dir, files, files).c_str()) != 0);
  std::system(fmt::format("rm -rf '{}'", dir).c_str());
}

namespace {

struct Seen {
  bool begin;
  std::string name;
  uint64_t seq;
  size_t count;
  int root;
  std::string plan;
  snclResult_t result;
  std::thread::id thread;
};

void onBegin(void* user, snclComm_t, const snclProfilerCall_t* c) {
  static_cast<std::vector<Seen>*>(user)->push_back(
      {true, c->name, c->seq, c->count, c->root, c->plan ? c->plan : "", snclSuccess, std::this_thread::get_id()});
}
void onEnd(void* user, snclComm_t, const snclProfilerCall_t* c, snclResult_t r) {
  static_cast<std::vector<Seen>*>(user)->push_back(
      {false, c->name, c->seq, c->count, c->root, c->plan ? c->plan : "", r, std::this_thread::get_id()});
}

}  // namespace

TEST_CASE("the profiler hook sees every call begin and end, in order, on the thread that runs it", "[trace]") {
  constexpr int kRanks = 3, kCalls = 30;
  // Stream work on the stream's thread, whatever the CPUs (test_threading covers the
  // waiter running it).
  setenv("SNCL_PROGRESS", "thread", 1);
  std::vector<snclComm_t> comms(kRanks);
  const snclResult_t init = snclCommInitAll(comms.data(), kRanks, nullptr);
  REQUIRE(init == snclSuccess);
  const auto calls = planCalls(kCalls, kRanks, 777);
  std::vector<std::vector<Seen>> seen(kRanks);
  std::vector<std::thread::id> callers(kRanks);
  std::vector<int> failures(kRanks, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      callers[r] = std::this_thread::get_id();
      const snclProfiler_v1_t profiler{&seen[r], onBegin, onEnd};
      if (snclCommSetProfiler(comms[r], &profiler) != snclSuccess) ++failures[r];
      snclStream_t stream = nullptr;
      snclStreamCreate(&stream);
      std::vector<float> in, out;
      for (const Call& c : calls) failures[r] += issue(c, comms[r], r, kRanks, in, out, stream) != snclSuccess;
      // Removed: the last call is not seen.
      if (snclCommSetProfiler(comms[r], nullptr) != snclSuccess) ++failures[r];
      failures[r] += issue(calls[0], comms[r], r, kRanks, in, out, stream) != snclSuccess;
      snclStreamDestroy(stream);
    });
  for (auto& t : threads) t.join();
  unsetenv("SNCL_PROGRESS");
  for (int r = 0; r < kRanks; ++r) {
    INFO("rank " << r);
    CHECK(failures[r] == 0);
    REQUIRE(seen[r].size() == 2 * calls.size());
    uint64_t seq = 0;
    for (size_t i = 0; i < calls.size(); ++i) {
      const Seen& b = seen[r][2 * i];
      const Seen& e = seen[r][2 * i + 1];
      INFO("call " << i << " " << kNames[int(calls[i].kind)]);
      CHECK(b.begin);
      CHECK(!e.begin);
      CHECK(b.name == kNames[int(calls[i].kind)]);
      CHECK(e.name == b.name);
      CHECK(b.seq == seq);
      CHECK(e.seq == seq);
      CHECK(e.result == snclSuccess);
      CHECK(!b.plan.empty());
      CHECK(e.thread == b.thread);
      // The caller's thread for the NULL stream, the stream's thread otherwise.
      CHECK((b.thread == callers[r]) == !calls[i].onStream);
      if (calls[i].kind == Kind::SendRecv) {
        CHECK(b.count == 2);  // one send, one receive
        CHECK(b.plan == "p2p");
      } else {
        CHECK(b.count == calls[i].count);
        const bool rooted = calls[i].kind == Kind::Broadcast || calls[i].kind == Kind::Reduce;
        CHECK(b.root == (rooted ? calls[i].root : -1));
        ++seq;
      }
    }
  }
  for (snclComm_t c : comms) CHECK(snclCommDestroy(c) == snclSuccess);
}

TEST_CASE("snclCommGetStatus shows a call whose peers never join, from another thread", "[trace][status]") {
  // Rank 1 never joins rank 0's all-reduce: rank 0 waits in a step until it is aborted,
  // or until its deadline (section 2).
  const bool deadline = GENERATE(false, true);
  EnvVar timeout("SNCL_TIMEOUT_MS", deadline ? "1500" : "60000");
  const std::string dir = tempDir();
  std::vector<snclComm_t> comms(2);
  {
    EnvVar trace("SNCL_TRACE", dir + "/hang.%r.json");  // written at the abort
    REQUIRE(snclCommInitAll(comms.data(), 2, nullptr) == snclSuccess);
  }
  snclStream_t stream = nullptr;
  REQUIRE(snclStreamCreate(&stream) == snclSuccess);
  std::vector<float> in(1 << 16, 1.f), out(1 << 16);
  snclCommStatus_t st;
  REQUIRE(snclCommGetStatus(comms[0], &st) == snclSuccess);
  CHECK(st.callsStarted == 0);
  CHECK(st.inCall == 0);
  CHECK(std::string(st.callName).empty());
  // One call that completes (rank 1 joins it), then the one that hangs.
  std::vector<float> peerOut(1000);
  std::thread peer([&] { snclAllReduce(in.data(), peerOut.data(), 1000, snclFloat32, snclSum, comms[1], nullptr); });
  REQUIRE(snclAllReduce(in.data(), out.data(), 1000, snclFloat32, snclSum, comms[0], nullptr) == snclSuccess);
  peer.join();
  REQUIRE(snclAllReduce(in.data(), out.data(), in.size(), snclFloat32, snclSum, comms[0], stream) == snclSuccess);
  // Polled from this thread while the stream's thread runs the call.
  const auto t0 = std::chrono::steady_clock::now();
  bool inStep = false;
  while (!inStep && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    REQUIRE(snclCommGetStatus(comms[0], &st) == snclSuccess);
    inStep = st.inCall && st.steps > 0;
    if (!inStep) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  REQUIRE(inStep);
  CHECK(st.callsStarted == 2);
  CHECK(st.callsFinished == 1);
  CHECK(std::string(st.callName) == "allreduce");
  CHECK(st.seq == 1);
  CHECK(st.step < st.steps);
  CHECK(st.lastResult == snclSuccess);
  const double first = st.elapsedUs;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE(snclCommGetStatus(comms[0], &st) == snclSuccess);
  CHECK(st.inCall == 1);
  CHECK(st.elapsedUs >= first + 50000);  // the status's clock ticks every few ms
  if (!deadline) {
    CHECK(snclCommAbort(comms[0]) == snclSuccess);  // fails the call in flight, then frees the comm
    CHECK(snclStreamSynchronize(stream) != snclSuccess);
  } else {
    CHECK(snclStreamSynchronize(stream) != snclSuccess);
    REQUIRE(snclCommGetStatus(comms[0], &st) == snclSuccess);
    CHECK(st.inCall == 0);
    CHECK(st.callsFinished == 2);
    CHECK(st.lastResult != snclSuccess);
    CHECK(std::string(st.lastError).find("rank 0") != std::string::npos);  // the call's failure, as returned
    CHECK(st.faultRounds == 1);  // the deadline started a recovery round, which rank 1 never answered
    CHECK(st.elapsedUs >= 1000 * 1000.0);
    CHECK(snclCommAbort(comms[0]) == snclSuccess);
  }
  CHECK(snclStreamDestroy(stream) == snclSuccess);
  CHECK(snclCommAbort(comms[1]) == snclSuccess);
  // Rank 0's trace, written at the abort: the call that completed and the one that failed.
  json doc;
  REQUIRE(load(dir + "/hang.0.json", &doc));
  std::vector<std::string> results;
  for (const json& e : doc["traceEvents"])
    if (e.value("cat", "") == "call") results.push_back(e["args"]["result"].get<std::string>());
  REQUIRE(results.size() == 2);
  CHECK(results[0] == "success");
  CHECK(results[1] != "success");
  std::system(fmt::format("rm -rf '{}'", dir).c_str());
}

TEST_CASE("a trace buffer too small for the run counts what it dropped", "[trace]") {
  const std::string dir = tempDir();
  constexpr int kRanks = 2, kCalls = 20;
  std::vector<snclComm_t> comms(kRanks);
  {
    EnvVar trace("SNCL_TRACE", dir + "/small.json");  // no %r: small.rank<N>.json
    EnvVar events("SNCL_TRACE_EVENTS", "8");
    REQUIRE(snclCommInitAll(comms.data(), kRanks, nullptr) == snclSuccess);
  }
  std::vector<std::thread> threads;
  const std::vector<float> in(4096, 1.f);  // read by every rank
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      std::vector<float> mine(4096);
      for (int i = 0; i < kCalls; ++i) snclAllReduce(in.data(), mine.data(), 4096, snclFloat32, snclSum, comms[r], nullptr);
    });
  for (auto& t : threads) t.join();
  for (snclComm_t c : comms) REQUIRE(snclCommDestroy(c) == snclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    json doc;
    REQUIRE(load(fmt::format("{}/small.rank{}.json", dir, r), &doc));
    size_t kept = 0;
    bool marker = false;
    for (const json& e : doc["traceEvents"]) {
      kept += e["ph"] == "X";
      marker |= e["ph"] == "i" && e["name"].get<std::string>().find("dropped") != std::string::npos;
    }
    CHECK(kept == 8);
    CHECK(marker);
    CHECK(doc["otherData"]["capacity"] == 8);
    CHECK(doc["otherData"]["dropped"].get<uint64_t>() > 0);
    CHECK(doc["otherData"]["events"] == 8);
  }
  std::system(fmt::format("rm -rf '{}'", dir).c_str());
}
