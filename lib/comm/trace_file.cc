// The trace file of one rank (docs/observability.md): Chrome's JSON Object Format,
// {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}, which
// chrome://tracing and Perfetto open and `sncl-trace merge` joins across ranks.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>

#include "lib/base/log.h"
#include "lib/comm/comm.h"
#include "lib/comm/fault.h"
#include "lib/comm/observe.h"
#include "lib/exec/reduce.h"

namespace sncl {
namespace {

using Out = fmt::memory_buffer;

void jsonString(Out& out, std::string_view s) {
  out.push_back('"');
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", unsigned(static_cast<unsigned char>(c)));
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

// Microseconds with the nanoseconds as a fraction, exactly (a double would round them).
void micros(Out& out, int64_t ns) {
  if (ns < 0) {
    out.push_back('-');
    ns = -ns;
  }
  fmt::format_to(std::back_inserter(out), "{}.{:03}", ns / 1000, ns % 1000);
}

const char* roleName(uint8_t role) {
  switch (trace::Role(role)) {
    case trace::Role::Stream: return "stream thread";
    case trace::Role::GroupWorker: return "group worker";
    default: return "caller";
  }
}

const char* verdictName(int32_t v) {
  switch (Verdict(v)) {
    case Verdict::Retry: return "retry";
    case Verdict::LinkLost: return "link lost";
    case Verdict::RankLost: return "rank lost";
    case Verdict::Failed: return "failed";
    case Verdict::CutOff: return "cut off";
  }
  return "?";
}

// The common head of an event: phase, name, category, process, thread, time.
void head(Out& out, int pid, const trace::Event& e, std::string_view name, const char* cat) {
  out.append(std::string_view("{\"ph\":\"X\",\"name\":"));
  jsonString(out, name);
  fmt::format_to(std::back_inserter(out), ",\"cat\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":", cat, pid, e.tid);
  micros(out, e.startNs);
  out.append(std::string_view(",\"dur\":"));
  micros(out, e.durNs);
}

void callEvent(Out& out, const snclComm* comm, const trace::Event& e) {
  const bool sendRecv = e.b[0] == kSendRecvColl;
  const char* name = sendRecv ? kSendRecvName : collName(CollType(e.b[0]));
  head(out, comm->rank, e, name, "call");
  auto it = std::back_inserter(out);
  fmt::format_to(it, ",\"args\":{{\"seq\":{},", e.seq);
  if (sendRecv) {
    fmt::format_to(it, "\"sends\":{},\"recvs\":{},", e.u[2] >> 32, e.u[2] & 0xffffffffu);
  } else {
    fmt::format_to(it, "\"count\":{},\"dtype\":\"{}\",", e.u[0], dtypeName(snclDataType_t(e.b[1])));
    if (reduces(CollType(e.b[0]))) fmt::format_to(it, "\"op\":\"{}\",", e.i[1] < 0 ? "premulsum" : redOpName(snclRedOp_t(e.i[1])));
    if (e.i[3] >= 0) fmt::format_to(it, "\"root\":{},", e.i[3]);
  }
  fmt::format_to(it, "\"bytes\":{},\"plan\":", e.u[1]);
  const auto& plans = comm->obs.planNames;
  jsonString(out, sendRecv ? "p2p" : e.i[0] >= 0 && size_t(e.i[0]) < plans.size() ? plans[size_t(e.i[0])].text : "none");
  fmt::format_to(it, ",\"result\":\"{}\"}}}}", resultName(Result(e.i[2])));
}

void peerArg(Out& out, const char* key, int32_t peer) {
  if (peer == -1) return;
  if (peer == -2) fmt::format_to(std::back_inserter(out), ",\"{}\":\"several\"", key);
  else fmt::format_to(std::back_inserter(out), ",\"{}\":{}", key, peer);
}

void stepEvent(Out& out, const snclComm* comm, const trace::Event& e) {
  head(out, comm->rank, e, fmt::format("step {}/{}", e.i[0], e.i[1]), "step");
  auto it = std::back_inserter(out);
  const uint64_t c = e.u[2];
  fmt::format_to(it, ",\"args\":{{\"seq\":{},\"step\":{},\"steps\":{},\"sends\":{},\"recvs\":{},\"reduces\":{},"
                 "\"copies\":{},\"sendBytes\":{},\"recvBytes\":{}",
                 e.seq, e.i[0], e.i[1], c >> 48, c >> 32 & 0xffff, c >> 16 & 0xffff, c & 0xffff, e.u[0], e.u[1]);
  peerArg(out, "sendPeer", e.i[2]);
  peerArg(out, "recvPeer", e.i[3]);
  out.append(std::string_view("}}"));
}

void roundEvent(Out& out, const snclComm* comm, const TraceState& t, const trace::Event& e) {
  head(out, comm->rank, e, fmt::format("fault round {}", e.i[0]), "fault");
  auto it = std::back_inserter(out);
  fmt::format_to(it, ",\"args\":{{\"seq\":{},\"round\":{},\"attempt\":{},\"verdict\":\"{}\",\"code\":\"{}\","
                 "\"transportResets\":{},\"coordinated\":{},\"pulledIn\":{}",
                 e.seq, e.i[0], e.i[3], verdictName(e.i[1]), resultName(Result(e.i[2])), e.u[1], e.b[0] != 0,
                 e.b[1] != 0);
  if (e.u[0] < t.rounds.size()) {
    const RoundInfo& info = t.rounds[e.u[0]];
    out.append(std::string_view(",\"agreed\":"));
    jsonString(out, info.agreed);
    out.append(std::string_view(",\"linksLost\":"));
    jsonString(out, info.links);
    out.append(std::string_view(",\"ranksLost\":"));
    jsonString(out, info.ranksLost);
  }
  out.append(std::string_view("}}"));
}

void metadata(Out& out, const char* what, int pid, uint32_t tid, std::string_view key, std::string_view value,
              bool quoted) {
  fmt::format_to(std::back_inserter(out), "{{\"ph\":\"M\",\"name\":\"{}\",\"pid\":{},\"tid\":{},\"args\":{{\"{}\":",
                 what, pid, tid, key);
  if (quoted) jsonString(out, value);
  else out.append(value);
  out.append(std::string_view("}},\n"));
}

// Paths this process wrote, so that two comms of one rank number (a split, a shrink) do
// not overwrite each other's file.
std::string uniquePath(std::string path) {
  static std::mutex mu;
  static std::set<std::string> written;
  std::lock_guard<std::mutex> lock(mu);
  if (written.insert(path).second) return path;
  const size_t dot = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0 ? path.size() - 5 : path.size();
  for (int k = 2;; ++k) {
    std::string alt = path.substr(0, dot) + fmt::format(".{}", k) + path.substr(dot);
    if (written.insert(alt).second) return alt;
  }
}

}  // namespace

std::string tracePath(const std::string& pattern, int rank) {
  std::string out;
  bool hasRank = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char c = pattern[++i];
    if (c == 'r') out += std::to_string(rank), hasRank = true;
    else if (c == 'p') out += std::to_string(getpid());
    else if (c == '%') out += '%';
    else out += '%', out += c;
  }
  if (hasRank) return out;
  // No %r: the rank goes before a .json ending (trace.json -> trace.rank3.json).
  if (out.size() >= 5 && out.compare(out.size() - 5, 5, ".json") == 0) out.resize(out.size() - 5);
  return out + fmt::format(".rank{}.json", rank);
}

Result traceWrite(snclComm* comm) {
  TraceState* t = comm->obs.trace.get();
  if (!t || t->written) return snclSuccess;
  t->written = true;
  const std::string path = uniquePath(tracePath(t->pattern, comm->rank));
  const std::string tmp = path + ".tmp";  // renamed when whole: a reader never sees half a file
  FILE* f = fopen(tmp.c_str(), "w");
  if (!f) return fail(snclSystemError, "SNCL_TRACE: cannot write {}: {}", tmp, strerror(errno));
  bool ok = true;
  Out out;
  // Written in pieces: the whole text of a full buffer would be hundreds of MB.
  const auto flush = [&](size_t above) {
    if (out.size() <= above) return;
    ok = ok && fwrite(out.data(), 1, out.size(), f) == out.size();
    out.clear();
  };
  const trace::Buffer& buf = t->buffer;
  const int pid = comm->rank;
  const char* host = comm->peers.size() > size_t(comm->rank) ? comm->peers[size_t(comm->rank)].hostname : "";
  out.append(std::string_view("{\"traceEvents\":[\n"));
  metadata(out, "process_name", pid, 0, "name", fmt::format("rank {} ({})", comm->rank, host), true);
  metadata(out, "process_sort_index", pid, 0, "sort_index", std::to_string(comm->rank), false);
  // One track per thread that ran calls, named by its role.
  std::vector<std::pair<uint32_t, uint8_t>> threads;
  for (size_t i = 0; i < buf.size(); ++i) {
    const std::pair<uint32_t, uint8_t> th{buf[i].tid, buf[i].role};
    if (std::find(threads.begin(), threads.end(), th) == threads.end()) threads.push_back(th);
  }
  for (const auto& [tid, role] : threads)
    metadata(out, "thread_name", pid, tid, "name", fmt::format("{} {}", roleName(role), tid), true);
  int64_t lastNs = 0;
  for (size_t i = 0; i < buf.size(); ++i) {
    const trace::Event& e = buf[i];
    switch (trace::Kind(e.kind)) {
      case trace::Kind::Call: callEvent(out, comm, e); break;
      case trace::Kind::Step: stepEvent(out, comm, e); break;
      case trace::Kind::Round: roundEvent(out, comm, *t, e); break;
      default: continue;
    }
    out.append(std::string_view(",\n"));
    lastNs = std::max(lastNs, e.startNs + e.durNs);
    flush(1 << 20);
  }
  if (buf.dropped()) {  // visible on the timeline too, at the end of what was kept
    fmt::format_to(std::back_inserter(out), "{{\"ph\":\"i\",\"s\":\"p\",\"name\":\"trace buffer full: {} events "
                   "dropped (SNCL_TRACE_EVENTS={})\",\"cat\":\"trace\",\"pid\":{},\"tid\":0,\"ts\":",
                   buf.dropped(), buf.capacity(), pid);
    micros(out, lastNs);
    out.append(std::string_view("},\n"));
  }
  // The process's labels come last, so that the list ends without a comma.
  metadata(out, "process_labels", pid, 0, "labels", fmt::format("comm {}", comm->name), true);
  out.resize(out.size() - 2);
  fmt::format_to(std::back_inserter(out), "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"rank\":{},\"nranks\":{},"
                 "\"host\":", comm->rank, comm->nranks);
  jsonString(out, host);
  out.append(std::string_view(",\"comm\":"));
  jsonString(out, comm->name);
  fmt::format_to(std::back_inserter(out), ",\"commId\":\"{:016x}\",\"osPid\":{},\"events\":{},\"capacity\":{},"
                 "\"dropped\":{},\"clock\":\"CLOCK_MONOTONIC\"}}}}\n",
                 comm->commId, getpid(), buf.size(), buf.capacity(), buf.dropped());
  flush(0);
  if (fclose(f) != 0 || !ok || rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return fail(snclSystemError, "SNCL_TRACE: cannot write {}: {}", path, strerror(err));
  }
  log::info(log::Subsys::Init, "comm {} rank {}: trace of {} events ({} dropped) written to {}", comm->name,
            comm->rank, buf.size(), buf.dropped(), path);
  return snclSuccess;
}

}  // namespace sncl
