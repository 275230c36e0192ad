// The benchmarks' output: nccl-tests' table (sncl out of place and in place, then each peer
// with the ratio sncl/peer in bus bandwidth, then the share of the ceiling), its footer,
// and the same rows as JSON (-J) for perf/plot.sh.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "perf/common/ceiling.h"
#include "perf/common/options.h"

namespace perf {

struct Measure {
  bool ran = false;
  double timeUs = 0;
  double algbw = 0;  // GB/s
  double busbw = 0;  // GB/s, nccl-tests' definition for the collective
  long wrong = 0;
  double movedBytes = -1;  // per rank per call, copied + reduced (snclCommGetCounters); -1: unknown
};

// Each rank's CPU list (its affinity when the benchmark started, indexed by rank) as one
// header line's text: "every rank: 0-1", or "rank 0: 0, rank 1: 1".
std::string placementText(const std::vector<std::string>& cpusOfRank);

// The least a rank must move through memory per call of the collective, as a multiple of
// the row's bytes S (mean over ranks; report.cc gives the formulas); -1: no formula.
double minMovedFactor(const std::string& collective, int nranks);

struct Row {
  size_t bytes = 0;
  size_t count = 0;
  snclDataType_t type = snclFloat32;
  snclRedOp_t op = snclSum;  // meaningless unless the collective reduces
  int root = -1;
  Measure sncl, snclInPlace;
  std::vector<Measure> peers;  // as Report's peers
};

class Report {
 public:
  struct Setup {
    std::string collective;
    bool reduces = false;
    bool hasInPlace = false;
    int nranks = 0, processes = 0, threads = 0;
    std::vector<Peer> peers;        // the peers that run (columns)
    const Ceiling* ceiling = nullptr;  // --ceiling's figures, or none
    std::string placement;          // each rank's CPUs, as placementText() gives them
    std::string threading;          // rank 0's snclCommGetThreading text
  };
  Report(const Options& o, Setup setup) : opt_(o), s_(std::move(setup)) {}

  void header() const;
  void row(const Row& r);  // prints it and keeps it for JSON
  // Max RSS in KiB of each process (getrusage), for the footer and the JSON.
  void setMaxRss(std::vector<long> kib) { maxRssKiB_ = std::move(kib); }
  // Per process: sncl's total (KiB), then its retry history's resident KiB.
  void setSnclMemory(std::vector<long> kib) { snclKiB_ = std::move(kib); }
  void footer() const;
  // false, with the reason on stderr, if the file cannot be written.
  bool writeJson(const std::string& path) const;

  long totalWrong() const { return totalWrong_; }

 private:
  double ceilingShare(const Measure& m) const;

  const Options& opt_;
  const Setup s_;
  std::vector<Row> rows_;
  long totalWrong_ = 0;
  std::vector<long> maxRssKiB_;
  std::vector<long> snclKiB_;
  double busSum_ = 0;
};

}  // namespace perf
