// The main job: what sncl does on a supernode, in one run of 8 ranks (mpirun -np 8) on the
// emulated bus (SNCL_TRANSPORT=bus, the topology of SNCL_TOPO_FILE; the quick start uses
// topologies/supernode-2plane-2x4.json: 2 nodes x 4 NPUs, each NPU on two bus planes).
//
//  1. An All-Reduce sweep, every result checked exactly: per size the plan the planner
//     chose, its estimate, and the time and bandwidth the bus models for the call (the
//     supernode's, not this machine's: the bus slows wall time by SNCL_BUS_TIMESCALE).
//  2. A link taken down in the middle of a loop of All-Reduces, by one rank between its
//     own calls (the others meet the failure wherever they are): every call still exact,
//     the reroute counted, the recovery time, and the plan and modeled time after it.
//
//   mpirun -np 8 -x SNCL_TRANSPORT=bus -x SNCL_TOPO_FILE=topologies/supernode-2plane-2x4.json
//       build/examples/supernode_job [--max-bytes 67108864] [--link n0.e1-n0.l1p0] [--calls 40]
//
// Exit status 0 when every result was exact and no call failed.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sncl/sncl.h"
#include "sncl/sncl_ext.h"

namespace {

struct Options {
  size_t maxBytes = 64u << 20;
  std::string link = "n0.e1-n0.l1p0";  // NPU 1 of node 0 into plane 0; plane 1 remains
  int calls = 40;
  size_t faultBytes = 4u << 20;
};

// Small integers: sums over 8 ranks are exact in float32, in any order.
float valueOf(int rank, int call, size_t i) { return float((rank * 7 + i * 13 + size_t(call) * 5) % 15); }

bool ok(snclResult_t r, snclComm_t comm, const char* what) {
  if (r == snclSuccess) return true;
  fprintf(stderr, "%s failed: %s (%s)\n", what, snclGetErrorString(r), snclGetLastError(comm));
  return false;
}

// One checked All-Reduce of count floats (call number `call`); the wrong elements, or -1.
long allReduce(snclComm_t comm, int rank, int nranks, int call, size_t count, std::vector<float>& in,
               std::vector<float>& out) {
  for (size_t i = 0; i < count; ++i) in[i] = valueOf(rank, call, i);
  if (!ok(snclAllReduce(in.data(), out.data(), count, snclFloat32, snclSum, comm, nullptr), comm, "snclAllReduce"))
    return -1;
  long wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    float sum = 0;
    for (int r = 0; r < nranks; ++r) sum += valueOf(r, call, i);
    wrong += out[i] != sum;
  }
  return wrong;
}

// The call's modeled duration on the bus's common clock: from the last rank's entry to the
// last rank's exit (what a timed collective on the supernode would show).
double modeledUs(snclComm_t comm) {
  double span[2] = {0, 0};
  snclBusLastCallSpanUs(comm, &span[0], &span[1]);
  double latest[2];
  MPI_Allreduce(span, latest, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return latest[1] - latest[0];
}

std::string plan(snclComm_t comm, size_t bytes, double* estimateUs) {
  char text[128] = "?";
  snclCommExplainPlan(comm, "allreduce", bytes, text, sizeof(text), estimateUs);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--max-bytes") { o.maxBytes = strtoull(argv[i + 1], nullptr, 10); continue; }
    if (a == "--link") { o.link = argv[i + 1]; continue; }
    if (a == "--calls") { o.calls = atoi(argv[i + 1]); continue; }
    if (rank == 0)
      fprintf(stderr, "usage: supernode_job [--max-bytes 67108864] [--link n0.e1-n0.l1p0] [--calls 40] (defaults shown)\n");
    MPI_Finalize();
    return 2;
  }
  snclUniqueId id;
  if (rank == 0 && snclGetUniqueId(&id) != snclSuccess) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  snclComm_t comm = nullptr;
  if (!ok(snclCommInitRank(&comm, nranks, id, rank), nullptr, "snclCommInitRank")) MPI_Abort(MPI_COMM_WORLD, 1);
  double probe = 0;
  if (snclBusModeledTimeUs(comm, &probe, nullptr) != snclSuccess) {
    if (rank == 0) fprintf(stderr, "supernode_job needs the emulated bus: SNCL_TRANSPORT=bus\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const size_t maxCount = std::max<size_t>(o.maxBytes, o.faultBytes) / sizeof(float);
  std::vector<float> in(maxCount), out(maxCount);
  long wrong = 0, failed = 0;
  int call = 0;

  if (rank == 0) {
    printf("# Part 1: All-Reduce (float32 sum) on the emulated supernode bus, %d ranks; every result checked.\n"
           "# Times are the bus's model of the supernode (its links' bandwidth and latency), not this\n"
           "# machine's: wall time runs slower by SNCL_BUS_TIMESCALE.\n"
           "#   plan        what the planner chose for this size (docs/planner.md)\n"
           "#   estimate    the planner's cost-model estimate (us)\n"
           "#   modeled     the bus's time for the call, last rank in to last rank out (us)\n"
           "#   busbw       nccl-tests' bus bandwidth of the modeled time: bytes/time x 2(n-1)/n (GB/s)\n"
           "#   est/model   estimate over modeled time (1.0: the planner predicts the bus exactly)\n"
           "#   wall        this machine's time per call, slowed bus included (ms)\n",
           nranks);
    printf("%12s  %-26s %10s %10s %8s %9s %9s  %s\n", "bytes", "plan", "estimate", "modeled", "busbw", "est/model",
           "wall", "check");
  }
  // A first call sets up what every later call reuses: not part of any row.
  if (allReduce(comm, rank, nranks, call++, 1, in, out) != 0) ++failed;
  for (size_t bytes = 8; bytes <= o.maxBytes; bytes *= 4) {
    const size_t count = bytes / sizeof(float);
    double estimate = 0;
    const std::string chosen = plan(comm, bytes, &estimate);
    const int reps = bytes <= (1u << 20) ? 5 : 2;
    double best = 1e300, wallMs = 0;
    long w = 0;
    for (int rep = 0; rep < reps; ++rep) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      const long r = allReduce(comm, rank, nranks, call++, count, in, out);
      wallMs += (MPI_Wtime() - t0) * 1e3 / reps;
      if (r < 0) ++failed;
      else w += r;
      best = std::min(best, modeledUs(comm));  // the least disturbed by this machine's load
    }
    long total = 0;
    MPI_Allreduce(&w, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    wrong += total;
    if (rank == 0)
      printf("%12zu  %-26s %10.2f %10.2f %8.2f %9.2f %9.2f  %s\n", bytes, chosen.c_str(), estimate, best,
             best > 0 ? double(bytes) / best / 1e3 * 2.0 * (nranks - 1) / nranks : 0.0, best > 0 ? estimate / best : 0.0,
             wallMs, total ? "WRONG" : "exact");
  }

  // Part 2: a link fails mid-job.
  const size_t count = o.faultBytes / sizeof(float);
  const int failAt = o.calls / 2;
  const int injector = nranks > 5 ? 5 : nranks - 1;
  double estimateBefore = 0, estimateAfter = 0;
  const std::string before = plan(comm, o.faultBytes, &estimateBefore);
  if (rank == 0)
    printf("\n# Part 2: %d All-Reduces of %zu bytes; rank %d takes link %s down before its call %d,\n"
           "# between its own calls, so the other ranks meet the failure wherever they are.\n",
           o.calls, o.faultBytes, injector, o.link.c_str(), failAt + 1);
  double modeledBefore = 0, modeledAfter = 0;
  long w = 0;
  for (int i = 0; i < o.calls; ++i) {
    if (rank == injector && i == failAt) {
      const std::string spec = "link=" + o.link + ":down";
      if (!ok(snclBusInjectFault(comm, spec.c_str()), comm, "snclBusInjectFault")) ++failed;
    }
    const long r = allReduce(comm, rank, nranks, call++, count, in, out);
    if (r < 0) {
      ++failed;
      break;  // the comm has an error now: later calls would fail with it
    }
    w += r;
    const double us = modeledUs(comm);
    if (i == failAt - 1) modeledBefore = us;
    if (i == o.calls - 1) modeledAfter = us;
  }
  const std::string after = plan(comm, o.faultBytes, &estimateAfter);
  snclFaultStats_t stats{};
  snclCommGetFaultStats(comm, &stats);
  long total = 0, failures = 0;
  MPI_Allreduce(&w, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&failed, &failures, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  wrong += total;
  double recovery[2] = {stats.lastRecoveryMs, -stats.lastRecoveryMs};
  double range[2];
  MPI_Allreduce(recovery, range, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  unsigned long long reroutes = stats.reroutes, maxReroutes = 0;
  MPI_Allreduce(&reroutes, &maxReroutes, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("calls exact: %s (%ld wrong elements, %ld failed calls over all ranks)\n", total || failures ? "NO" : "all",
           total, failures);
    printf("reroutes: %llu (calls re-run around the lost link), link failures agreed: %llu\n", maxReroutes,
           (unsigned long long)stats.linkFailures);
    printf("recovery: %.1f to %.1f ms wall per rank, from the failure to the end of the re-run\n", -range[1], range[0]);
    printf("plan for %zu bytes: before %s (estimate %.2f us), after %s (estimate %.2f us)\n", o.faultBytes,
           before.c_str(), estimateBefore, after.c_str(), estimateAfter);
    printf("modeled time per call: %.2f us before the failure, %.2f us after (one plane fewer for NPU %s)\n",
           modeledBefore, modeledAfter, o.link.substr(0, o.link.find('-')).c_str());
    printf("%s\n", wrong || failures ? "# FAILED" : "# OK: every result exact, no call failed");
  }
  snclCommDestroy(comm);
  MPI_Finalize();
  return wrong || failures ? 1 : 0;
}
