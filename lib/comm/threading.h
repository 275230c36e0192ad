// The threading model of a rank: which thread runs a call's work and how its waits wait,
// decided at init from the CPUs the ranks of this machine run on (their affinity masks and
// cgroup quotas, exchanged at init) — the one place that reads them.
//
//   a core per rank, none spare (mpirun's default binding at np <= 2, Slurm's
//   --cpu-bind=cores, pinned workers, or as many ranks as cores unbound):
//     blocking calls run on the caller's thread; stream work runs on the thread that waits
//     for it (snclStreamSynchronize, an event wait), the stream's thread only picks up work
//     nobody waits for; waits spin before they sleep (the core is the rank's own).
//   spare cores (more usable CPUs than ranks sharing them, at least two per rank):
//     stream work runs on the stream's thread, overlapping the caller; waits spin.
//   oversubscribed (more ranks than the CPUs they share):
//     as a core per rank, but waits never spin: they yield (the peer waited for may need
//     this core), then sleep.
//
// SNCL_PROGRESS=thread|caller overrides who runs stream work (auto: as above).
#pragma once

#include <string>
#include <vector>

#include "lib/base/cpus.h"
#include "lib/base/wait_policy.h"
#include "lib/transport/transport.h"

namespace sncl {

struct ThreadModel {
  CpuSummary cpus;            // this rank's
  int hostRanks = 1;          // ranks of the comm on this machine whose CPUs overlap this rank's, itself included
  int hostCpus = 1;           // the CPUs those ranks can use together
  bool oversubscribed = false;  // hostRanks > hostCpus
  // Ranks per CPU on the comm's busiest machine (at least 1), equal on every rank: the
  // planner's cost of a message's CPU (lib/plan/cost_model.h).
  double busiestShare = 1.0;
  bool waiterDrives = true;   // stream work runs on the thread that waits for it
  bool forced = false;        // SNCL_PROGRESS set it
  WaitPolicy wait;
  std::string describe() const;  // one line for INFO and the benchmarks
};

// rank's model from every rank's CPUs (cpus[r]) and machine (peers[r].bootId). Fails only
// on a malformed SNCL_PROGRESS.
Result decideThreads(int rank, const std::vector<PeerInfo>& peers, const std::vector<CpuSummary>& cpus,
                     ThreadModel* out);

// Whether a helper thread has a core of its own for stream work created on this thread
// (its CPU set and SNCL_PROGRESS); a stream's comms can still make it the waiter's.
bool helperHasCore();

}  // namespace sncl
