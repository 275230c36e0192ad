#include "perf/common/report.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

namespace perf {
namespace {

std::string wrongText(const Options& o, const Measure& m) { return o.check ? std::to_string(m.wrong) : "N/A"; }

nlohmann::json toJson(const Measure& m, bool checked) {
  nlohmann::json j{{"time_us", m.timeUs}, {"algbw_GBs", m.algbw}, {"busbw_GBs", m.busbw}};
  if (checked) j["wrong"] = m.wrong;
  return j;
}

}  // namespace

// Per rank, mean over ranks, in units of the row's S bytes; a copy or a reduction of n
// bytes counts n (snclCounters_t). With single-copy transfers a rank need only:
//   all_reduce      reduce its share of the others' data, then copy in the others' results:
//                   (n-1)/n + (n-1)/n = 2(n-1)/n
//   reduce_scatter  reduce its block with n-1 peers' blocks: (n-1)/n
//   reduce          (n-1) reductions of S over n ranks: (n-1)/n
//   all_gather, alltoall  copy in the n-1 other blocks, and its own out of place: 1
//   broadcast       every rank but the root copies S in, the root out of place copies S: 1
//   gather, scatter the root copies n-1 blocks of S/n (and its own): 1/n
//   sendrecv        receive S: 1
std::string placementText(const std::vector<std::string>& cpusOfRank) {
  if (cpusOfRank.empty()) return "?";
  if (std::all_of(cpusOfRank.begin(), cpusOfRank.end(), [&](const std::string& s) { return s == cpusOfRank[0]; }))
    return "every rank " + cpusOfRank[0];
  std::string out;
  for (size_t r = 0; r < cpusOfRank.size(); ++r) out += (r ? ", rank " : "rank ") + std::to_string(r) + ": " + cpusOfRank[r];
  return out;
}

double minMovedFactor(const std::string& c, int nranks) {
  const double n = nranks;
  if (c == "all_reduce") return 2 * (n - 1) / n;
  if (c == "reduce_scatter" || c == "reduce") return (n - 1) / n;
  if (c == "all_gather" || c == "alltoall" || c == "broadcast" || c == "sendrecv") return 1;
  if (c == "gather" || c == "scatter") return 1 / n;
  return -1;
}

// The ceiling a collective meets first: reductions add, the others copy.
double Report::ceilingShare(const Measure& m) const {
  if (!s_.ceiling) return 0;
  const double c = s_.reduces ? s_.ceiling->addGBs : s_.ceiling->copyGBs;
  return c > 0 ? m.busbw / c : 0;
}

void Report::header() const {
  printf("# sncl %s: %d ranks (%d processes x %d threads), %zu..%zu bytes x%zu, %d iterations, time: %s\n",
         s_.collective.c_str(), s_.nranks, s_.processes, s_.threads, opt_.minBytes, opt_.maxBytes, opt_.stepFactor,
         opt_.iters, opt_.average == 0 ? "rank 0" : opt_.average == 1 ? "mean of ranks" : opt_.average == 2 ? "min of ranks" : "max of ranks");
  printf("# buffers: %s; CPUs (affinity): %s\n",
         opt_.sharedBuffers ? "snclMemAlloc (-R 1; the peers' from the heap)" : "heap (-R 0)", s_.placement.c_str());
  printf("# sncl threading, rank 0: %s\n", s_.threading.c_str());
  if (s_.ceiling) {
    printf("# ceiling per rank, all ranks at once: memcpy %.2f GB/s, float a[i]+=b[i] %.2f GB/s; ceil%% = busbw / %s\n",
           s_.ceiling->copyGBs, s_.ceiling->addGBs, s_.reduces ? "a[i]+=b[i]" : "memcpy");
  }
  printf("#%11s %12s %8s %6s %5s %9s %7s %7s %6s %9s %7s %7s %6s", "size", "count", "type", "redop", "root", "time",
         "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  for (Peer p : s_.peers) printf(" %9s %7s %6s %9s", (std::string(peerName(p)) + "_time").c_str(), "busbw", "#wrong", ("sncl/" + std::string(peerName(p))).c_str());
  if (s_.ceiling) printf(" %6s", "ceil%");
  printf(" %8s %8s", "moved", "min");
  printf("\n#%11s %12s %8s %6s %5s %9s %7s %7s %6s %9s %7s %7s %6s", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)",
         "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  for (size_t i = 0; i < s_.peers.size(); ++i) printf(" %9s %7s %6s %9s", "(us)", "(GB/s)", "", "(busbw)");
  if (s_.ceiling) printf(" %6s", "");
  printf(" %8s %8s", "(xS)", "(xS)");
  printf("\n#%11s %12s %8s %6s %5s %33s %33s\n", "", "", "", "", "", "out-of-place", "in-place");
  fflush(stdout);
}

void Report::row(const Row& r) {
  printf(" %11zu %12zu %8s %6s %5d %9.2f %7.2f %7.2f %6s", r.bytes, r.count, kTypeNames[r.type],
         s_.reduces ? kOpNames[r.op] : "none", r.root, r.sncl.timeUs, r.sncl.algbw, r.sncl.busbw,
         wrongText(opt_, r.sncl).c_str());
  if (r.snclInPlace.ran)
    printf(" %9.2f %7.2f %7.2f %6s", r.snclInPlace.timeUs, r.snclInPlace.algbw, r.snclInPlace.busbw,
           wrongText(opt_, r.snclInPlace).c_str());
  else
    printf(" %9s %7s %7s %6s", "N/A", "N/A", "N/A", "N/A");
  for (const Measure& m : r.peers) {
    if (m.ran)
      printf(" %9.2f %7.2f %6s %9.2f", m.timeUs, m.busbw, wrongText(opt_, m).c_str(), m.timeUs / r.sncl.timeUs);
    else
      printf(" %9s %7s %6s %9s", "N/A", "N/A", "N/A", "N/A");
  }
  if (s_.ceiling) printf(" %6.1f", 100 * ceilingShare(r.sncl));
  const double minFactor = minMovedFactor(s_.collective, s_.nranks);
  if (r.sncl.movedBytes >= 0 && r.bytes > 0) printf(" %8.2f", r.sncl.movedBytes / static_cast<double>(r.bytes));
  else printf(" %8s", "N/A");
  if (minFactor >= 0) printf(" %8.2f", minFactor);
  else printf(" %8s", "N/A");
  printf("\n");
  fflush(stdout);
  totalWrong_ += r.sncl.wrong + r.snclInPlace.wrong;
  for (const Measure& m : r.peers) totalWrong_ += m.wrong;
  busSum_ += r.sncl.busbw;
  rows_.push_back(r);
}

void Report::footer() const {
  printf("# Out of bounds values : %ld %s\n", totalWrong_, totalWrong_ ? "FAILED" : "OK");
  printf("# moved: bytes copied + reduced per rank per call (mean of ranks, sncl out of place) in units of the\n"
         "# row's size S; min: the least a rank must move (perf/common/report.cc: all_reduce 2(n-1)/n)\n");
  printf("# Avg bus bandwidth    : %g\n", rows_.empty() ? 0.0 : busSum_ / static_cast<double>(rows_.size()));
  if (!maxRssKiB_.empty()) {
    printf("# max RSS per %s (MiB; sncl, the peers and the harness's buffers):", maxRssKiB_.size() == 1 ? "process" : "rank");
    for (long k : maxRssKiB_) printf(" %.1f", static_cast<double>(k) / 1024.0);
    printf("\n");
  }
  if (!snclKiB_.empty()) {
    printf("# sncl's own memory per %s at the end (MiB, snclCommGetMemoryUsage; retry history resident):",
           snclKiB_.size() == 2 ? "process" : "rank");
    for (size_t i = 0; i + 1 < snclKiB_.size(); i += 2)
      printf(" %.1f (%.1f)", static_cast<double>(snclKiB_[i]) / 1024.0, static_cast<double>(snclKiB_[i + 1]) / 1024.0);
    printf("\n");
  }
  printf("#\n");
  fflush(stdout);
}

bool Report::writeJson(const std::string& path) const {
  nlohmann::json j;
  char date[32];
  const time_t now = time(nullptr);
  strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  j["collective"] = s_.collective;
  j["date"] = date;
  j["nranks"] = s_.nranks;
  j["processes"] = s_.processes;
  j["threads"] = s_.threads;
  j["iterations"] = opt_.iters;
  j["checked"] = opt_.check != 0;
  std::vector<std::string> peers;
  for (Peer p : s_.peers) peers.emplace_back(peerName(p));
  j["peers"] = peers;
  if (s_.ceiling) j["ceiling"] = {{"memcpy_GBs", s_.ceiling->copyGBs}, {"add_GBs", s_.ceiling->addGBs}};
  nlohmann::json rows = nlohmann::json::array();
  for (const Row& r : rows_) {
    nlohmann::json row{{"bytes", r.bytes}, {"count", r.count}, {"type", kTypeNames[r.type]},
                       {"op", s_.reduces ? kOpNames[r.op] : "none"}, {"root", r.root},
                       {"sncl", toJson(r.sncl, opt_.check)}};
    if (r.snclInPlace.ran) row["sncl_inplace"] = toJson(r.snclInPlace, opt_.check);
    for (size_t i = 0; i < s_.peers.size(); ++i)
      if (r.peers[i].ran) row[peerName(s_.peers[i])] = toJson(r.peers[i], opt_.check);
    if (s_.ceiling) row["ceiling_share"] = ceilingShare(r.sncl);
    if (r.sncl.movedBytes >= 0) row["moved_bytes_per_rank"] = r.sncl.movedBytes;
    const double minFactor = minMovedFactor(s_.collective, s_.nranks);
    if (minFactor >= 0) row["min_moved_bytes_per_rank"] = minFactor * static_cast<double>(r.bytes);
    rows.push_back(std::move(row));
  }
  j["rows"] = std::move(rows);
  if (!maxRssKiB_.empty()) j["max_rss_kib"] = maxRssKiB_;
  if (!snclKiB_.empty()) j["sncl_memory_kib"] = snclKiB_;  // per process: total, retry history resident
  std::ofstream out(path);
  out << j.dump(1) << "\n";
  if (!out) {
    fprintf(stderr, "cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

}  // namespace perf
