// The bus's link reservation calendar: a hold fills free time from its ready time on, gap
// by gap; a booking that comes late in wall-clock order but early on the modeled clock
// still gets the time that was free; capacity is kept by giving up the least time.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "transports/bus/calendar.h"

using sncl::bus::Calendar;

namespace {

// Zero-filled, as in the shared segment.
struct Empty {
  Empty() { memset(static_cast<void*>(&c), 0, sizeof c); }
  Calendar c;
};

}  // namespace

TEST_CASE("calendar: bookings queue on a busy link and start at once on a free one") {
  Empty e;
  Calendar& c = e.c;
  CHECK(c.book(100, 10) == 110);
  CHECK(c.book(100, 10) == 120);  // behind the first
  CHECK(c.book(105, 10) == 130);
  CHECK(c.book(500, 5) == 505);   // the link is free then
  CHECK(c.book(0, 0) == 0);       // nothing to move
}

TEST_CASE("calendar: a late booking with an early ready time uses the free time before later ones") {
  Empty e;
  Calendar& c = e.c;
  CHECK(c.book(1000, 10) == 1010);  // booked first, later on the modeled clock
  CHECK(c.book(100, 10) == 110);    // booked second, earlier: not behind the first
  CHECK(c.book(100, 10) == 120);
}

TEST_CASE("calendar: a hold is poured into the gaps from its ready time on") {
  Empty e;
  Calendar& c = e.c;
  CHECK(c.book(100, 10) == 110);  // busy 100-110
  CHECK(c.book(120, 10) == 130);  // busy 120-130
  // 25 units from 95: 95-100 (5), 110-120 (10), 130-140 (10).
  CHECK(c.book(95, 25) == 140);
  CHECK(c.book(0, 10) == 10);
  CHECK(c.book(95, 1) == 141);  // 95-140 is all busy now
}

TEST_CASE("calendar: over capacity, tiny holds are forgotten before gaps are closed") {
  Empty e;
  Calendar& c = e.c;
  // A chunk-sized booking, then many tiny ones far later, each alone in its gap.
  CHECK(c.book(0, 100) == 100);
  for (uint64_t i = 0; i < 3 * Calendar::kIntervals; ++i) c.book(10000 + 1000 * i, 1);
  CHECK(c.count <= Calendar::kIntervals);
  // The free time between the chunk and the tiny ones is still free.
  CHECK(c.book(200, 100) == 300);
  // And the chunk's own time is still busy.
  CHECK(c.book(0, 50) == 150);
}

TEST_CASE("calendar: one flow's successive chunks never share time however many it books") {
  Empty e;
  Calendar& c = e.c;
  uint64_t t = 0;
  for (int step = 0; step < 200; ++step) {
    const uint64_t ready = t + 3;  // a latency gap between steps
    const uint64_t a = c.book(ready, 50);
    const uint64_t b = c.book(ready, 50);
    REQUIRE(a == ready + 50);
    REQUIRE(b == ready + 100);
    t = b;
  }
}

TEST_CASE("calendar: concurrent bookers never get the same time") {
  Empty e;
  Calendar& c = e.c;
  constexpr int kThreads = 4, kEach = 2000;
  std::vector<std::vector<uint64_t>> ends(kThreads);
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k)
    threads.emplace_back([&, k] {
      for (int i = 0; i < kEach; ++i) ends[k].push_back(c.book(0, 10));
    });
  for (auto& th : threads) th.join();
  std::vector<uint64_t> all;
  for (auto& e : ends) all.insert(all.end(), e.begin(), e.end());
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i < all.size(); ++i) REQUIRE(all[i] == 10 * (i + 1));
}

TEST_CASE("calendar: a full calendar of old bookings never forgets the one just made") {
  Empty e;
  Calendar& c = e.c;
  // Old, long bookings with long gaps: the new short one is the cheapest to forget.
  for (uint64_t i = 0; i < Calendar::kIntervals; ++i) c.book(1000 * i, 100);
  const uint64_t ready = 100000;
  CHECK(c.book(ready, 5) == ready + 5);
  CHECK(c.book(ready, 5) == ready + 10);  // not the same time again
  CHECK(c.book(ready, 5) == ready + 15);
}
