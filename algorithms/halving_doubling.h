// Recursive halving-doubling All-Reduce (Rabenseifner), for latency-bound sizes: 2 log2 p
// message latencies instead of the ring's 2(n-1), with the ring's bandwidth term.
//
// Among p = 2^floor(log2 n) ranks, the data is cut into p nearly equal blocks.
// - Reduce-scatter by recursive halving: at the step with distance d = p/2, p/4, ..., 1 a
//   rank exchanges with rank ^ d, keeps the half of its current blocks on its own side of d
//   and folds the partner's copy of that half into it. Afterwards rank v owns block v, reduced
//   over all ranks (and only there, so every rank later gets the same bits).
// - All-gather by recursive doubling: distances 1, 2, ..., p/2, each rank sends the blocks
//   it owns and receives the partner's, doubling what it owns.
// Non powers of two: r = n - p. First the ranks 2i and 2i+1 (i < r) pair up: the even one
// sends all its data to the odd one, which folds it in and takes part in place of both; at
// the end the odd one sends the result back. So those ranks take 2 log2 p + 2 steps.
#pragma once

#include <cstddef>

#include "algorithms/schedule.h"

namespace sncl::algo {

struct HalvingDoublingAllReduce {
  // Fills out (cleared first) with rank's steps. Messages are whole halves (no chunking).
  static void build(int rank, int nranks, size_t count, Schedule* out);

  // Closed-form α-β estimate (µs) for bytes per rank, alphaUs per message, betaGBs link and
  // memGBs reduction bandwidth. With p and r as above, a participating rank receives
  // (p-1)/p of the data while halving (and reduces it) and as much while doubling; a pair
  // adds one whole-buffer message (and reduction) before and one message after:
  //   2 log2 p * alphaUs + 2 (p-1)/p * bytes * (1/beta + 1/mem)
  //     + [r > 0] * (2 alphaUs + 2 bytes * (1/beta + 1/mem)).
  // One rank: bytes / mem (the copy).
  static double estimateUs(int nranks, size_t bytes, double alphaUs, double betaGBs, double memGBs);
};

}  // namespace sncl::algo
