// sncl-randtest: a differential property test of sncl's collectives against a host
// reference (docs/testing.md). From a seed it generates sessions (a world of 2..8 forked
// ranks with a random algorithm choice and chunk size) of random cases (collective, type,
// op, root, count, in-place, offset, group, split), runs them, checks every rank's result,
// shrinks each failure to a small case and prints the command that replays it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "sncl/sncl_ext.h"
#include "tools/randtest/case.h"
#include "tools/randtest/session.h"

using namespace randtest;

namespace {

struct Options {
  uint64_t seed = 1;
  uint64_t cases = 0;    // 0: no case limit
  double seconds = 0;    // 0: no time limit
  int ranks = 0;         // 0: random per session
  int64_t session = -1;  // run only this session of the seed
  size_t maxBytes = 32u << 20;
  std::string replay;
  bool shrink = true;
  double shrinkSeconds = 300;
  int shrinkTimeoutMs = 8000;  // shrinking meets the same hang many times: detect it sooner
  bool verbose = false;
  SessionOptions run;
};

const char* statusName(Status s) {
  static const char* names[] = {"PASS", "WRONG", "ERROR", "HANG"};
  return names[s];
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void usage() {
  fprintf(stderr,
          "usage: sncl-randtest [--seed N] [--cases N | --seconds S] [--ranks 1-8|random]\n"
          "                     [--transport shm|bus|ofi|mixed] [--max-bytes B] [--timeout-ms MS]\n"
          "                     [--session K] [--replay 'SPEC'] [--no-shrink] [--shrink-seconds S]\n"
          "                     [--shrink-timeout-ms MS] [-v] [--version]\n"
          "  --seed N         the run's seed (every rank derives the same cases from it; default 1)\n"
          "  --cases N        stop after N cases; --seconds S: stop starting sessions after S seconds\n"
          "                   (default: neither, run until interrupted)\n"
          "  --ranks          world size of every session (default: random 2..8)\n"
          "  --transport      shm (default), bus (emulated bus), ofi (SNCL_TRANSPORT=ofi for every\n"
          "                   pair) or mixed (ranks on 2-3 virtual hosts: shm within, ofi between)\n"
          "  --max-bytes B    largest buffer of one rank in one call (e.g. 64K, 1.5M; default 32M)\n"
          "  --timeout-ms MS  the comms' deadline (SNCL_TIMEOUT_MS, default 20000); a case that\n"
          "                   runs twice as long and 10 s more is killed and reported as a HANG\n"
          "  --shrink-seconds S  time spent shrinking one failure (default 300); --shrink-timeout-ms MS:\n"
          "                   the comms' deadline while shrinking (default 8000)\n"
          "  --session K      run only session K of the seed (replays a failure that needs its session)\n"
          "  --replay SPEC    run exactly one case, as printed by a failure\n");
}

bool parseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "-v" || a == "--verbose") o->verbose = true;
    else if (a == "--no-shrink") o->shrink = false;
    else if (a == "-h" || a == "--help") return false;
    else if (a == "--version") {
      printf("sncl-randtest %s\n", snclGetBuildVersion());
      exit(0);
    }
    else if (!(v = value())) return fprintf(stderr, "%s needs a value\n", a.c_str()), false;
    else if (a == "--seed") o->seed = strtoull(v, nullptr, 0);
    else if (a == "--cases") o->cases = strtoull(v, nullptr, 0);
    else if (a == "--seconds") o->seconds = atof(v);
    else if (a == "--session") o->session = atoll(v);
    else if (a == "--shrink-seconds") o->shrinkSeconds = atof(v);
    else if (a == "--timeout-ms") o->run.timeoutMs = atoi(v);
    else if (a == "--shrink-timeout-ms") o->shrinkTimeoutMs = atoi(v);
    else if (a == "--replay") o->replay = v;
    else if (a == "--transport") o->run.transport = v;
    else if (a == "--ranks") o->ranks = std::string(v) == "random" ? 0 : atoi(v);
    else if (a == "--max-bytes") {
      if (snclParseSize(v, &o->maxBytes) != snclSuccess) return fprintf(stderr, "bad --max-bytes: %s\n", snclGetLastError(nullptr)), false;
    } else return fprintf(stderr, "unknown argument %s\n", a.c_str()), false;
  }
  const std::string& t = o->run.transport;
  if (t != "shm" && t != "bus" && t != "ofi" && t != "mixed") return fprintf(stderr, "unknown transport %s\n", t.c_str()), false;
  if (o->ranks < 0 || o->ranks > kMaxRanks) return fprintf(stderr, "--ranks must be 1..8 or random\n"), false;
  if (o->run.timeoutMs < 1000) return fprintf(stderr, "--timeout-ms must be at least 1000\n"), false;
  return true;
}

struct Failure {
  Status status;
  std::string original, shrunk, note;
  bool alone = true;  // fails when replayed on its own
  int seen = 1;
};

class Driver {
 public:
  explicit Driver(const Options& o) : o_(o) {}

  CaseOutcome runOne(const Case& c, bool shrinking = false) {
    SessionOptions run = o_.run;
    if (shrinking) run.timeoutMs = std::min(run.timeoutMs, o_.shrinkTimeoutMs);
    std::vector<CaseOutcome> out = runSession(c.world, {c}, run);
    if (out.empty()) return {kError, 0, 0, "the session ran nothing"};
    return out[0];
  }

  std::string replayCommand(const std::string& spec) const {
    return "sncl-randtest --transport " + o_.run.transport + " --timeout-ms " + std::to_string(o_.run.timeoutMs) +
           " --replay '" + spec + "'";
  }

  // Records a failure of c; shrinks it unless one like it (same kind, same collectives) was.
  void failed(const Case& c, const CaseOutcome& o, uint64_t session) {
    std::string key = statusName(o.status);
    std::set<std::string> colls;
    for (const Call& k : c.calls) colls.insert(collName(k.coll));
    for (const std::string& s : colls) key += " " + s;
    printf("%s in session %llu: %s\n  case: %s\n", statusName(o.status), static_cast<unsigned long long>(session),
           o.note.c_str(), formatCase(c).c_str());
    fflush(stdout);
    if (auto it = byKey_.find(key); it != byKey_.end()) {
      ++failures_[it->second].seen;
      printf("  like failure %zu (not shrunk again)\n", it->second + 1);
      return;
    }
    Failure f{o.status, formatCase(c), formatCase(c), o.note};
    if (o_.shrink) shrink(c, o, &f, session);
    byKey_[key] = failures_.size();
    failures_.push_back(f);
  }

  void shrink(const Case& c, const CaseOutcome& o, Failure* f, uint64_t session) {
    const auto t0 = std::chrono::steady_clock::now();
    CaseOutcome again = runOne(c, true);
    if (again.status != o.status) {
      f->alone = false;
      printf("  does not fail on its own (%s); replay its session: sncl-randtest --transport %s --seed %llu "
             "--session %llu --max-bytes %zu%s\n",
             statusName(again.status), o_.run.transport.c_str(), static_cast<unsigned long long>(o_.seed),
             static_cast<unsigned long long>(session), o_.maxBytes, o_.ranks ? (" --ranks " + std::to_string(o_.ranks)).c_str() : "");
      return;
    }
    Case best = c;
    int attempts = 0;
    bool improved = true;
    // Greedy: take the first simpler variant that still fails the same way, until none
    // does or the budget is spent.
    while (improved && since(t0) < o_.shrinkSeconds && attempts < 300) {
      improved = false;
      for (const Case& v : shrinkCandidates(best)) {
        if (since(t0) >= o_.shrinkSeconds) break;
        ++attempts;
        CaseOutcome r = runOne(v, true);
        if (o_.verbose) printf("  shrink try %s: %s\n", formatCase(v).c_str(), statusName(r.status));
        if (r.status != o.status) continue;
        best = v;
        printf("  still fails: %s\n", formatCase(v).c_str());
        f->note = r.note;
        improved = true;
        break;
      }
    }
    f->shrunk = formatCase(best);
    printf("  shrunk in %d tries (%.0f s): %s\n  replay: %s\n  note: %s\n", attempts, since(t0), f->shrunk.c_str(),
           replayCommand(f->shrunk).c_str(), f->note.c_str());
    fflush(stdout);
  }

  int run() {
    const auto t0 = std::chrono::steady_clock::now();
    if (!o_.replay.empty()) {
      Case c;
      std::string error;
      if (!parseCase(o_.replay, &c, &error)) return fprintf(stderr, "--replay: %s\n", error.c_str()), 2;
      CaseOutcome out = runOne(c);
      count(c, out, 0);
      printf("%s: %s\n", statusName(out.status), out.note.c_str());
    } else {
      GenOptions gen;
      gen.maxBytes = o_.maxBytes;
      gen.ranks = o_.ranks;
      gen.hosts = o_.run.transport == "mixed";
      uint64_t index = 0;
      // Bounded: by --cases, --seconds, or the single --session; without any, 100 cases.
      const uint64_t maxCases = o_.cases ? o_.cases : (o_.seconds > 0 || o_.session >= 0) ? UINT64_MAX : 100;
      for (uint64_t s = 0; cases_ < maxCases; ++s) {
        if (o_.seconds > 0 && since(t0) >= o_.seconds) break;
        Session session = makeSession(o_.seed, s, index, gen);
        index += session.cases.size();
        if (o_.session >= 0 && static_cast<int64_t>(s) != o_.session) continue;
        std::vector<Case> pending = session.cases;
        if (pending.size() > maxCases - cases_) pending.resize(maxCases - cases_);
        while (!pending.empty()) {
          if (o_.verbose)
            printf("session %llu: %d ranks, algo '%s', chunk %zu, %zu cases\n", static_cast<unsigned long long>(s),
                   session.world.nranks, session.world.algo.c_str(), session.world.chunk, pending.size());
          std::vector<CaseOutcome> out = runSession(session.world, pending, o_.run);
          for (size_t i = 0; i < out.size(); ++i) {
            if (o_.verbose) printf("  %s %s\n", statusName(out[i].status), formatCase(pending[i]).c_str());
            count(pending[i], out[i], s);
          }
          if (out.empty()) break;
          pending.erase(pending.begin(), pending.begin() + static_cast<ptrdiff_t>(out.size()));
        }
        if (o_.session >= 0) break;
      }
    }
    report(since(t0));
    return wrong_ + errors_ + hangs_ ? 1 : 0;
  }

 private:
  void count(const Case& c, const CaseOutcome& o, uint64_t session) {
    ++cases_;
    ops_ += o.ops;
    wrong_ += o.status == kWrong;
    errors_ += o.status == kError;
    hangs_ += o.status == kHang;
    if (o.status != kPass && o_.replay.empty()) failed(c, o, session);
    else if (o.status != kPass) {
      Failure f{o.status, formatCase(c), formatCase(c), o.note};
      if (o_.shrink) shrink(c, o, &f, session);
      failures_.push_back(f);
    }
  }

  void report(double seconds) {
    for (size_t i = 0; i < failures_.size(); ++i) {
      const Failure& f = failures_[i];
      printf("failure %zu: %s (%d case%s)\n  smallest: %s\n  replay: %s\n  note: %s\n", i + 1, statusName(f.status), f.seen,
             f.seen == 1 ? "" : "s", f.shrunk.c_str(), f.alone ? replayCommand(f.shrunk).c_str() : "(needs its session, see above)",
             f.note.c_str());
    }
    printf("sncl-randtest: transport %s, seed %llu: %llu cases, %llu rank-ops, %llu wrong, %llu errors, %llu hangs, "
           "%zu distinct failures, %.1f s\n",
           o_.run.transport.c_str(), static_cast<unsigned long long>(o_.seed), static_cast<unsigned long long>(cases_),
           static_cast<unsigned long long>(ops_), static_cast<unsigned long long>(wrong_),
           static_cast<unsigned long long>(errors_), static_cast<unsigned long long>(hangs_), failures_.size(), seconds);
    fflush(stdout);
  }

  const Options o_;
  uint64_t cases_ = 0, ops_ = 0, wrong_ = 0, errors_ = 0, hangs_ = 0;
  std::vector<Failure> failures_;
  std::map<std::string, size_t> byKey_;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parseArgs(argc, argv, &o)) {
    usage();
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  return Driver(o).run();
}
