// Calibration: the least-squares fit sncl-tune uses, tuning files with step overheads
// (round trip, malformed input), and how the cost model applies them on the wall clock
// and on the emulated bus's modeled clock.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "lib/plan/cost_model.h"
#include "lib/plan/linear_fit.h"
#include "lib/topo/generators.h"
#include "lib/topo/route.h"

using namespace sncl;

namespace {

std::shared_ptr<CostModel> hostModel(int hosts, int perHost, Tuning tuning, CostClock clock = CostClock::Wall) {
  topo::HostsParams p = topo::uniformHosts(hosts, perHost, 1);
  p.shm = {50, 0.01, topo::LinkKind::Shm};
  p.nic = {2, 0.01, topo::LinkKind::Net};
  auto g = std::make_shared<topo::Graph>();
  REQUIRE(topo::generate(*g, p) == snclSuccess);
  REQUIRE(g->finalize() == snclSuccess);
  REQUIRE(g->mapRanks(hosts * perHost) == snclSuccess);
  std::vector<topo::VertexId> rv;
  for (int r = 0; r < hosts * perHost; ++r) rv.push_back(g->rankVertex(r));
  return std::make_shared<CostModel>(g, rv, tuning, clock);
}

}  // namespace

TEST_CASE("line fit recovers an exact line", "[tuning][fit]") {
  // One-way times of a transport with α = 3.5 µs and β = 6.25 GB/s.
  const std::vector<double> bytes = {8, 4096, 65536, 262144, 1048576, 4194304};
  std::vector<double> us;
  for (double b : bytes) us.push_back(3.5 + b / 6250.0);
  LineFit f;
  REQUIRE(fitLine(bytes, us, &f) == snclSuccess);
  CHECK(f.intercept == Approx(3.5).epsilon(1e-9));
  CHECK(1e-3 / f.slope == Approx(6.25).epsilon(1e-9));
  CHECK(f.rmsResidual == Approx(0).margin(1e-9));
  CHECK(f.maxRelResidual == Approx(0).margin(1e-9));
  // Weighting changes nothing when every sample is on the line.
  REQUIRE(fitLine(bytes, us, &f, FitWeight::Relative) == snclSuccess);
  CHECK(f.intercept == Approx(3.5).epsilon(1e-9));
  CHECK(1e-3 / f.slope == Approx(6.25).epsilon(1e-9));
}

TEST_CASE("line fit: a relative fit keeps α from the small sizes", "[tuning][fit]") {
  // α = 2 µs, β = 1 GB/s, and the largest size 10% slow (a loaded machine).
  const std::vector<double> bytes = {8, 64, 512, 4096, 1 << 20};
  std::vector<double> us;
  for (double b : bytes) us.push_back(2 + b / 1000);
  us.back() *= 1.1;
  LineFit plain, relative;
  REQUIRE(fitLine(bytes, us, &plain) == snclSuccess);
  REQUIRE(fitLine(bytes, us, &relative, FitWeight::Relative) == snclSuccess);
  CHECK(std::abs(relative.intercept - 2) < 0.5);
  CHECK(std::abs(plain.intercept - 2) > std::abs(relative.intercept - 2));
  const std::vector<double> zero = {0, 1, 2, 3, 4};
  CHECK(fitLine(bytes, zero, &relative, FitWeight::Relative) == snclInvalidArgument);
}

TEST_CASE("line fit: least squares through noisy samples, residuals reported", "[tuning][fit]") {
  // y = 1 + 2x with +-1 alternating: the fit is the line itself, every residual 1.
  const std::vector<double> x = {0, 1, 2, 3};
  const std::vector<double> y = {2, 2, 6, 6};
  LineFit f;
  REQUIRE(fitLine(x, y, &f) == snclSuccess);
  CHECK(f.slope == Approx(1.6));
  CHECK(f.intercept == Approx(1.6));
  CHECK(f.rmsResidual > 0.5);
  CHECK(f.maxRelResidual > 0.1);
}

TEST_CASE("line fit: bad input is an error, not a line", "[tuning][fit]") {
  LineFit f;
  const std::vector<double> one = {1}, two = {1, 2}, same = {4, 4, 4}, three = {1, 2, 3};
  CHECK(fitLine(one, one, &f) == snclInvalidArgument);
  CHECK(fitLine(two, three, &f) == snclInvalidArgument);
  CHECK(fitLine(same, three, &f) == snclInvalidArgument);
  CHECK(std::string(lastError()).find("same x") != std::string::npos);
  const std::vector<double> nan = {1, std::nan("")};
  CHECK(fitLine(two, nan, &f) == snclInvalidArgument);
}

TEST_CASE("tuning file: measured figures and step overheads round-trip", "[tuning][file]") {
  Tuning t = defaultTuning();
  t.kind[int(topo::LinkKind::Shm)] = {2.25, 5.5};
  t.kind[int(topo::LinkKind::Bus)] = {0.0, 50.0};  // the emulator's own α is zero
  t.memGBs = 7.5;
  t.stepOverheadUs = {{2, 0.5}, {4, 4.0}, {8, 20.0}};
  t.stagedMaxBytes = {{2, 12345}, {4, 0}, {8, kStagedAnySize}};
  std::array<bool, topo::kNumLinkKinds> measured{};
  measured[int(topo::LinkKind::Shm)] = measured[int(topo::LinkKind::Bus)] = true;
  const std::string path = "test_tuning_roundtrip.json";
  {
    std::ofstream f(path);
    f << tuningJson(t, measured);
  }
  Tuning back;
  REQUIRE(loadTuning(path, &back) == snclSuccess);
  std::remove(path.c_str());
  CHECK(back.source == path);
  CHECK(back.memGBs == 7.5);
  CHECK(back.kind[int(topo::LinkKind::Shm)].alphaUs == 2.25);
  CHECK(back.kind[int(topo::LinkKind::Shm)].betaGBs == 5.5);
  CHECK(back.kind[int(topo::LinkKind::Bus)].alphaUs == 0.0);
  // Not measured: the default stays.
  CHECK(back.kind[int(topo::LinkKind::Net)].alphaUs == defaultTuning().kind[int(topo::LinkKind::Net)].alphaUs);
  CHECK(back.stepOverheadUs == t.stepOverheadUs);
  CHECK(back.stagedMaxBytes == t.stagedMaxBytes);
}

TEST_CASE("tuning file: the staging crossover per rank count", "[tuning][file]") {
  // The defaults: what the test machine measured (two ranks never stage).
  CHECK(defaultTuning().stagedMaxAt(2) == 0);
  CHECK(defaultTuning().stagedMaxAt(3) == kStagedAnySize);
  CHECK(defaultTuning().stagedMaxAt(32) == kStagedAnySize);
  CHECK(Tuning{}.stagedMaxAt(4) == 0);
  Tuning t;
  REQUIRE(parseTuning(R"({"version": 1, "staged_max_bytes": {"8": "any", "4": 0, "2": 4096}})", "s.json", &t) ==
          snclSuccess);
  CHECK(t.stagedMaxAt(1) == 4096);  // below the first entry: the first
  CHECK(t.stagedMaxAt(2) == 4096);
  CHECK(t.stagedMaxAt(3) == 4096);  // the largest rank count at or below
  CHECK(t.stagedMaxAt(4) == 0);
  CHECK(t.stagedMaxAt(7) == 0);
  CHECK(t.stagedMaxAt(8) == kStagedAnySize);
  CHECK(t.stagedMaxAt(100) == kStagedAnySize);
  // A file's entries replace the defaults rather than merge with them.
  REQUIRE(parseTuning(R"({"staged_max_bytes": {"4": 1024}})", "s.json", &t) == snclSuccess);
  CHECK(t.stagedMaxAt(2) == 1024);
  CHECK(t.stagedMaxAt(16) == 1024);
  // A file without the field keeps the defaults.
  REQUIRE(parseTuning(R"({"mem_gbs": 5})", "s.json", &t) == snclSuccess);
  CHECK(t.stagedMaxBytes == defaultTuning().stagedMaxBytes);
}

TEST_CASE("tuning file: step overhead between and beyond the measured rank counts", "[tuning][file]") {
  Tuning t;
  REQUIRE(parseTuning(R"({"version": 1, "step_overhead_us": {"8": 20, "2": 0.5, "4": 4}})", "s.json", &t) == snclSuccess);
  CHECK(t.stepOverheadAt(1) == 0.5);
  CHECK(t.stepOverheadAt(2) == 0.5);
  CHECK(t.stepOverheadAt(6) == Approx(12.0));  // halfway between 4 and 8
  CHECK(t.stepOverheadAt(8) == 20.0);
  CHECK(t.stepOverheadAt(16) == Approx(40.0));  // each rank past the last adds its share
  CHECK(Tuning{}.stepOverheadAt(8) == 0.0);
}

TEST_CASE("tuning file: malformed step overheads and figures name the field", "[tuning][file]") {
  const std::pair<const char*, const char*> bad[] = {
      {R"({"step_overhead_us": [1, 2]})", "/step_overhead_us"},
      {R"({"step_overhead_us": {"eight": 3}})", "/step_overhead_us/eight"},
      {R"({"step_overhead_us": {"0": 3}})", "/step_overhead_us/0"},
      {R"({"step_overhead_us": {"4": -1}})", "/step_overhead_us/4"},
      {R"({"step_overhead_us": {"4": "slow"}})", "/step_overhead_us/4"},
      {R"({"links": {"bus": {"alpha_us": 0, "beta_gbs": 0}}})", "/links/bus/beta_gbs"},
      {R"({"links": {"shm": {"alpha_us": 1e999}}})", "syntax"},
      {R"({"steps": {}})", "/steps"},
      {R"({"staged_max_bytes": {}})", "/staged_max_bytes"},
      {R"({"staged_max_bytes": [65536]})", "/staged_max_bytes"},
      {R"({"staged_max_bytes": {"two": 65536}})", "/staged_max_bytes/two"},
      {R"({"staged_max_bytes": {"2": -1}})", "/staged_max_bytes/2"},
      {R"({"staged_max_bytes": {"2": 1.5}})", "/staged_max_bytes/2"},
      {R"({"staged_max_bytes": {"2": "all"}})", "/staged_max_bytes/2"},
  };
  for (auto [text, expect] : bad) {
    INFO(text);
    Tuning t;
    CHECK(parseTuning(text, "bad.json", &t) == snclInvalidArgument);
    const std::string msg = lastError();
    CHECK(msg.find("bad.json") != std::string::npos);
    CHECK(msg.find(expect) != std::string::npos);
  }
}

TEST_CASE("cost model: the wall clock charges every step the measured overhead", "[tuning][cost]") {
  Tuning base = defaultTuning();
  Tuning loaded = base;
  loaded.stepOverheadUs = {{2, 1.0}, {8, 25.0}};
  auto plain = hostModel(1, 8, base), slow = hostModel(1, 8, loaded);
  const std::vector<Flow> step = {{0, 1, 64}, {1, 2, 64}};
  CHECK(slow->stepOverheadUs() == 25.0);
  CHECK(slow->stepUs(step) == Approx(plain->stepUs(step) + 25.0));
  // A step of local copies only sends nothing: no overhead.
  const std::vector<Flow> copy = {{3, 3, 64}};
  CHECK(slow->stepUs(copy) == Approx(plain->stepUs(copy)));
}

TEST_CASE("cost model: the bus's modeled clock charges only its links", "[tuning][cost][bus]") {
  topo::ClosParams p;
  p.nodes = 2;
  p.perNode = 4;
  p.planes = 1;
  p.spines = 1;
  p.link = {50, 0.2, topo::LinkKind::Bus};
  p.uplink = {50, 0.3, topo::LinkKind::Bus};
  auto g = std::make_shared<topo::Graph>();
  REQUIRE(topo::generate(*g, p) == snclSuccess);
  REQUIRE(g->finalize() == snclSuccess);
  REQUIRE(g->mapRanks(8) == snclSuccess);
  std::vector<topo::VertexId> rv;
  for (int r = 0; r < 8; ++r) rv.push_back(g->rankVertex(r));
  Tuning t = defaultTuning();
  t.stepOverheadUs = {{8, 30.0}};
  t.kind[int(topo::LinkKind::Bus)] = {0.0, 1.0};  // a per-rank cap the emulator does not have
  CostModel bus(g, rv, t, CostClock::BusModeled);
  topo::Route r;
  REQUIRE(g->route(rv[0], rv[1], &r) == snclSuccess);
  // 1 MB on one 50 GB/s route: the route's latency plus 20 µs, nothing else.
  const double mb = 1e6;
  CHECK(bus.stepUs(std::vector<Flow>{{0, 1, mb}}) == Approx(r.latencyUs + 20.0));
  // Two flows out of rank 0 share its endpoint link.
  CHECK(bus.stepUs(std::vector<Flow>{{0, 1, mb}, {0, 2, mb}}) == Approx(r.latencyUs + 40.0));
  CHECK(bus.stepOverheadUs() == 0.0);
  CHECK(mb / bus.memBytesPerUs() == Approx(0.0).margin(1e-12));
  CostModel wall(g, rv, t, CostClock::Wall);
  CHECK(wall.stepUs(std::vector<Flow>{{0, 1, mb}}) > 1000.0);  // 1 GB/s cap plus the overhead
}
