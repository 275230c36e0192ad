// Fidelity of the emulated bus: the modeled time of point-to-point transfers and of ring
// All-Reduce against the α-β prediction for the same schedule, computed from the
// topology's link figures, on 8 and 16 ranks (threads of this process) over three
// topologies: the default (nodes of 4 on a non-blocking bus Clos), a flat full mesh, and a
// two-plane Clos whose uplinks are the bottleneck. Public headers only.
//
//   bus_fidelity [maxBytes]      (default 16M; SNCL_BUS_TIMESCALE slows the links, default 100)
//
// Predictions: point-to-point S bytes: α + S/β of the route (β: the route's bandwidth,
// planes and spines combined). Ring All-Reduce in R rounds of chunks (SNCL_CHUNK_SIZE 1M
// per rank per step), 2(n-1) steps per round of b = S/(nR) bytes: the α-β time of that
// schedule edge by edge (ringPredictionUs), and beside it the textbook bound with every
// step at the bottleneck edge, 2(n-1)(R·α + S/(nβ)). They agree when all edges are alike.
#include <sncl/sncl.h>
#include <sncl/sncl_ext.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t kChunkBytes = 1u << 20;  // SNCL_CHUNK_SIZE, set below
constexpr int kReps = 3;

// One route class of a topology: latency (µs) and bandwidth (GB/s) of a single flow.
struct Route {
  double alphaUs;
  double betaGBs;
};

struct Topology {
  const char* name;
  const char* json;   // nullptr: the embedded default
  int perNode;        // endpoints per node (the mesh: all in one)
  Route inNode;
  Route acrossNodes;
};

// The default: ClosParams defaults, 50 GB/s 0.2 µs endpoint links, non-blocking 0.3 µs uplinks.
const Topology kDefault{"default Clos (4/node)", nullptr, 4, {0.4, 50}, {1.0, 50}};
// Full mesh of 100 GB/s, 0.5 µs links: every pair one hop.
const Topology kMesh{"full mesh",
                     R"({"generators": [{"type": "full_mesh", "endpoints": %d, "bw": 100, "lat": 0.5}]})", 1 << 30,
                     {0.5, 100}, {0.5, 100}};
// Two planes of 25 GB/s endpoint links; per plane 2 spines on 5 GB/s uplinks: a flow
// across nodes spreads over 4 uplinks (20 GB/s), below its 50 GB/s into the leaves.
const Topology kClos2{"2-plane Clos, thin uplinks",
                      R"({"generators": [{"type": "clos", "nodes": %d, "per_node": 4, "planes": 2, "spines": 2,
                          "bw": 25, "lat": 0.15, "uplink_bw": 5, "uplink_lat": 0.25}]})",
                      4, {0.3, 50}, {0.8, 20}};

double timeOf(const Route& r, double bytes) { return r.alphaUs + bytes / (r.betaGBs * 1e3); }

Route routeOf(const Topology& t, int a, int b) {
  return a / t.perNode == b / t.perNode ? t.inNode : t.acrossNodes;
}

double ringRounds(int n, size_t bytes) { return std::max(1.0, std::ceil(double(bytes) / (double(n) * kChunkBytes))); }

// The textbook figure: every step at the bottleneck edge, 2(n-1)(R·α + S/(nβ)).
double ringBottleneckUs(const Topology& t, int n, size_t bytes) {
  const double rounds = ringRounds(n, bytes), perStep = double(bytes) / n / rounds;
  double step = 0;
  for (int r = 0; r < n; ++r) step = std::max(step, timeOf(routeOf(t, r, (r + 1) % n), perStep));
  return 2.0 * (n - 1) * rounds * step;
}

// α-β of the same schedule edge by edge: rank r ends step s when its send of b bytes left
// (b/β of its out-edge after its previous step) and the block from r-1 arrived (α + b/β of
// the in-edge after r-1's previous step). Equal edges give the textbook figure; on mixed
// edges the slow ones are crossed only 2(n-1)R/n times each along the critical path.
double ringPredictionUs(const Topology& t, int n, size_t bytes) {
  const double rounds = ringRounds(n, bytes), perStep = double(bytes) / n / rounds;
  std::vector<double> done(n, 0.0), next(n);
  for (int s = 0; s < int(2 * (n - 1) * rounds); ++s) {
    for (int r = 0; r < n; ++r) {
      const Route out = routeOf(t, r, (r + 1) % n), in = routeOf(t, (r + n - 1) % n, r);
      next[r] = std::max(done[r] + perStep / (out.betaGBs * 1e3), done[(r + n - 1) % n] + timeOf(in, perStep));
    }
    done.swap(next);
  }
  return *std::max_element(done.begin(), done.end());
}

void onEveryRank(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

struct Span {
  double start = 0, end = 0;
};

bool check(snclResult_t r, snclComm_t comm, const char* what) {
  if (r == snclSuccess) return true;
  fprintf(stderr, "bus_fidelity: %s failed: %s\n", what, snclGetLastError(comm));
  return false;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Modeled All-Reduce time: from the moment the last rank entered to the last rank's end.
bool allReduceUs(std::vector<snclComm_t>& comms, size_t bytes, double* us) {
  const int n = int(comms.size());
  const size_t count = bytes / sizeof(float);
  std::vector<double> reps;
  for (int rep = 0; rep <= kReps; ++rep) {
    std::vector<Span> spans(n);
    std::vector<int> ok(n, 1);
    onEveryRank(n, [&](int r) {
      std::vector<float> buf(count, 1.0f);
      ok[r] = check(snclAllReduce(buf.data(), buf.data(), count, snclFloat32, snclSum, comms[r], nullptr), comms[r],
                    "snclAllReduce") &&
              check(snclBusLastCallSpanUs(comms[r], &spans[r].start, &spans[r].end), comms[r], "span") &&
              buf[count / 2] == float(n);
    });
    if (std::find(ok.begin(), ok.end(), 0) != ok.end()) return false;
    double start = 0, end = 0;
    for (const Span& s : spans) start = std::max(start, s.start), end = std::max(end, s.end);
    if (rep > 0) reps.push_back(end - start);  // rep 0 warms up
  }
  *us = median(reps);
  return true;
}

// Modeled one-way time of bytes from rank 0 to rank `to`: sender's start to receiver's end.
bool pointToPointUs(std::vector<snclComm_t>& comms, int to, size_t bytes, double* us) {
  std::vector<char> src(bytes, 1), dst(bytes);
  std::vector<double> reps;
  for (int rep = 0; rep <= kReps; ++rep) {
    Span send, recv;
    int ok = 1;
    onEveryRank(2, [&](int i) {
      if (i == 0) {
        // The receiver enters first, so that its clock ends at the arrival, not its entry.
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        ok &= check(snclSend(src.data(), bytes, snclInt8, to, comms[0], nullptr), comms[0], "snclSend") &&
              check(snclBusLastCallSpanUs(comms[0], &send.start, &send.end), comms[0], "span");
      } else {
        ok &= check(snclRecv(dst.data(), bytes, snclInt8, 0, comms[to], nullptr), comms[to], "snclRecv") &&
              check(snclBusLastCallSpanUs(comms[to], &recv.start, &recv.end), comms[to], "span");
      }
    });
    if (!ok) return false;
    if (rep > 0) reps.push_back(recv.end - send.start);
  }
  *us = median(reps);
  return true;
}

std::string writeTopology(const Topology& t, int n) {
  char path[] = "/tmp/sncl-bus-fidelity-XXXXXX.json";
  const int fd = mkstemps(path, 5);
  if (fd < 0) return "";
  const int arg = t.perNode > n ? n : n / t.perNode;
  const int len = dprintf(fd, t.json, arg);
  close(fd);
  return len > 0 ? path : "";
}

bool runTopology(const Topology& t, int n, size_t maxBytes, int* outside) {
  std::string file;
  if (t.json) {
    file = writeTopology(t, n);
    if (file.empty()) return false;
    setenv("SNCL_TOPO_FILE", file.c_str(), 1);
  } else {
    unsetenv("SNCL_TOPO_FILE");
  }
  std::vector<snclComm_t> comms(n);
  const snclResult_t init = snclCommInitAll(comms.data(), n, nullptr);
  if (!file.empty()) unlink(file.c_str());
  if (!check(init, nullptr, "snclCommInitAll")) return false;

  printf("\n# %s, %d ranks\n", t.name, n);
  printf("# %-11s %10s %12s %12s %8s %14s\n", "", "bytes", "modeled us", "alpha-beta", "ratio", "bottleneck us");
  bool ok = true;
  auto row = [&](const char* what, size_t bytes, double modeled, double predicted, double bottleneck) {
    const double ratio = modeled / predicted;
    const bool counted = bytes >= (1u << 20);
    if (counted && std::fabs(ratio - 1) > 0.10) ++*outside;
    printf("  %-11s %10zu %12.2f %12.2f %8.3f %14.2f%s\n", what, bytes, modeled, predicted, ratio, bottleneck,
           counted && std::fabs(ratio - 1) > 0.10 ? "  <- outside +-10%" : "");
  };
  for (size_t bytes = 64u << 10; ok && bytes <= maxBytes; bytes *= 4) {
    double us = 0;
    ok = pointToPointUs(comms, n - 1, bytes, &us);
    const double predicted = timeOf(routeOf(t, 0, n - 1), double(bytes));
    if (ok) row("p2p 0->last", bytes, us, predicted, predicted);
  }
  for (size_t bytes = 64u << 10; ok && bytes <= maxBytes; bytes *= 4) {
    double us = 0;
    ok = allReduceUs(comms, bytes, &us);
    if (ok) row("ring AR", bytes, us, ringPredictionUs(t, n, bytes), ringBottleneckUs(t, n, bytes));
  }
  for (snclComm_t c : comms) snclCommDestroy(c);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  size_t maxBytes = argc > 1 ? strtoull(argv[1], nullptr, 0) : (16u << 20);
  if (argc > 1 && (argv[1][strlen(argv[1]) - 1] == 'M' || argv[1][strlen(argv[1]) - 1] == 'm')) maxBytes <<= 20;
  setenv("SNCL_TRANSPORT", "bus", 1);
  setenv("SNCL_ALGO", "ring", 1);
  setenv("SNCL_CHUNK_SIZE", "1M", 1);
  const char* scale = getenv("SNCL_BUS_TIMESCALE");
  printf("# bus fidelity: modeled time vs alpha-beta prediction (timescale %s); ratio within +-10%% expected "
         "for >= 1 MiB\n",
         scale ? scale : "100 (default)");
  int outside = 0;
  for (int n : {8, 16})
    for (const Topology* t : {&kDefault, &kMesh, &kClos2})
      if (!runTopology(*t, n, maxBytes, &outside)) return 2;
  printf("\n# %d row(s) of >= 1 MiB outside +-10%%\n", outside);
  return outside ? 1 : 0;
}
