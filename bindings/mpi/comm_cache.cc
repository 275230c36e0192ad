#include "bindings/mpi/comm_cache.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "bindings/mpi/common.h"
#include "bindings/mpi/requests.h"

namespace sncl_mpi {
namespace {

struct Entry {
  MPI_Comm mpi;
  snclComm_t comm;      // nullptr: served by PMPI for good, or released
  snclStream_t stream;  // the stream of every served call on comm
  long order;           // agreed at build: larger on every member than any comm built before
  bool drive = false;   // snclCommGetThreading's waiterDrives
  QueueMark mark{};     // calls queued on stream (run())
};

std::mutex mu;
std::atomic<int> keyval{MPI_KEYVAL_INVALID};  // made once, under mu; read without it
std::vector<Entry*> live;  // for MPI_Finalize, which does not free every communicator
long lastOrder = 0;        // the largest order of a comm this rank built

enum Released { kAtFree, kAtFinalize, kByMpi };
long built = 0;        // sncl comms
long released[3] = {};  // by Released

// sncl's deadline for a blocking wait (SNCL_TIMEOUT_MS, as the sncl comm reads it).
long deadlineMs() {
  const char* s = std::getenv("SNCL_TIMEOUT_MS");
  const long ms = s ? std::atol(s) : 0;
  return ms > 0 ? ms : 60000;
}

// Tests req until it completes (true) or SNCL_TIMEOUT_MS passed (false).
bool testWithin(MPI_Request* req) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(deadlineMs());
  for (int done = 0;;) {
    PMPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// The release's barrier, within the deadline: a member that never gets there (it died, or
// the program frees the communicator on some ranks only) leaves this rank to go on alone
// rather than wait for ever.
void barrierWithin(MPI_Comm comm, const char* what) {
  MPI_Request req;
  if (PMPI_Ibarrier(comm, &req) != MPI_SUCCESS || testWithin(&req)) return;
  std::fprintf(stderr,
               "sncl_mpi: rank %d: %s: not every rank of the communicator arrived within %ld ms "
               "(SNCL_TIMEOUT_MS); its sncl comm is destroyed without waiting for them\n",
               rankIn(comm), what, deadlineMs());
  PMPI_Request_free(&req);
}

// Completes e's requests and destroys its sncl comm and stream. barrier: every member
// calls this at the same point (MPI_Comm_free, MPI_Finalize), so they first wait for each
// other: a rank that destroyed its comm closes connections a slower peer may still read.
void release(Entry* e, bool barrier, Released how) {
  if (!e->comm) return;
  {
    std::lock_guard<std::mutex> lock(mu);
    ++released[how];
  }
  completeAllOn(e->stream);
  snclStreamSynchronize(e->stream);  // errors were reported by the calls' own waits
  if (barrier) barrierWithin(e->mpi, how == kAtFree ? "MPI_Comm_free" : "MPI_Finalize");
  snclCommDestroy(e->comm);
  snclStreamDestroy(e->stream);
  e->comm = nullptr;
  e->stream = nullptr;
  commGeneration.fetch_add(1, std::memory_order_acq_rel);  // every thread's memo of it (tCommMemo) goes
}

int deleteEntry(MPI_Comm, int, void* value, void*) {
  auto* e = static_cast<Entry*>(value);
  {
    std::lock_guard<std::mutex> lock(mu);
    std::erase(live, e);
  }
  release(e, false, kByMpi);  // released already unless MPI freed comm another way
  commGeneration.fetch_add(1, std::memory_order_acq_rel);
  delete e;
  return MPI_SUCCESS;
}

// Completes an exchange of the comm's setup within the deadline. Every rank reaches the
// setup at the same call (the choice to serve depends on what MPI requires equal), so one
// that waits past it means an erroneous program (ranks in different collectives): it says
// so and aborts rather than wait for ever.
void finishWithin(MPI_Request* req, MPI_Comm comm, const char* what) {
  if (testWithin(req)) return;
  std::fprintf(stderr,
               "sncl_mpi: rank %d: %s of a new sncl comm: not every rank of the communicator arrived within "
               "%ld ms (SNCL_TIMEOUT_MS); do the ranks make the same collective calls?\n",
               rankIn(comm), what, deadlineMs());
  PMPI_Abort(comm, 1);
}

// Collective over comm: rank 0 makes the id, a broadcast shares it, and an all-reduce of
// the outcome makes every rank take the same path even when one rank's init failed; the
// same all-reduce agrees the comm's teardown order (the max over its members of
// lastOrder + 1, a Lamport clock: two comms sharing a rank get different orders, in the
// order that rank built them).
Entry* build(MPI_Comm comm) {
  auto* e = new Entry{comm, nullptr, nullptr, 0};
  int inter = 0, rank = 0, size = 0;
  PMPI_Comm_test_inter(comm, &inter);
  if (inter) return e;  // the same answer on every rank: no agreement needed
  PMPI_Comm_rank(comm, &rank);
  PMPI_Comm_size(comm, &size);
  snclUniqueId id{};
  int ok = 1;
  if (rank == 0 && snclGetUniqueId(&id) != snclSuccess) ok = 0;
  // A failed root still sends its id so that the exchange completes; ok tells the others.
  struct {
    int ok;
    snclUniqueId id;
  } root{ok, id};
  MPI_Request req = MPI_REQUEST_NULL;
  PMPI_Ibcast(&root, sizeof(root), MPI_BYTE, 0, comm, &req);
  finishWithin(&req, comm, "the id exchange");
  ok = root.ok;
  id = root.id;
  snclComm_t c = nullptr;
  snclStream_t s = nullptr;
  if (ok && snclCommInitRank(&c, size, id, rank) != snclSuccess) {
    std::fprintf(stderr, "sncl_mpi: rank %d: sncl init failed (%s); this communicator uses MPI\n", rank,
                 snclGetLastError(nullptr));
    c = nullptr;
  }
  if (c) snclCommSetWaitHook(c, waitHook, nullptr);
  if (c && snclStreamCreate(&s) != snclSuccess) {
    std::fprintf(stderr, "sncl_mpi: rank %d: no sncl stream (%s); this communicator uses MPI\n", rank,
                 snclGetLastError(nullptr));
    s = nullptr;
  }
  long mine[2] = {c && s ? 0 : 1, 0}, all[2] = {0, 0};
  {
    std::lock_guard<std::mutex> lock(mu);
    mine[1] = lastOrder + 1;
  }
  PMPI_Iallreduce(mine, all, 2, MPI_LONG, MPI_MAX, comm, &req);
  finishWithin(&req, comm, "the outcome's agreement");
  {
    std::lock_guard<std::mutex> lock(mu);
    lastOrder = std::max(lastOrder, all[1]);
  }
  if (all[0]) {
    if (s) snclStreamDestroy(s);
    if (c) snclCommDestroy(c);
    return e;
  }
  e->comm = c;
  e->stream = s;
  snclThreading_t threading{};
  e->drive = snclCommGetThreading(c, &threading) == snclSuccess && threading.waiterDrives;
  e->order = all[1];
  std::lock_guard<std::mutex> lock(mu);
  ++built;
  return e;
}

Entry* find(MPI_Comm comm) {
  const int key = keyval.load(std::memory_order_acquire);
  if (key == MPI_KEYVAL_INVALID) return nullptr;
  void* value = nullptr;
  int found = 0;
  PMPI_Comm_get_attr(comm, key, &value, &found);
  return found ? static_cast<Entry*>(value) : nullptr;
}

}  // namespace

// Bumped whenever an Entry is released or deleted: a thread's memo (tCommMemo) is good
// while the number it saw stands.
std::atomic<uint64_t> commGeneration{0};
SNCL_MPI_THREAD_LOCAL constinit CommMemo tCommMemo;

bool commLookup(MPI_Comm comm, Target* t) {
  const uint64_t gen = commGeneration.load(std::memory_order_acquire);
  if (keyval.load(std::memory_order_acquire) == MPI_KEYVAL_INVALID) {
    std::lock_guard<std::mutex> lock(mu);
    int key = keyval.load();
    if (key == MPI_KEYVAL_INVALID) {
      if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, deleteEntry, &key, nullptr) != MPI_SUCCESS) return false;
      keyval.store(key, std::memory_order_release);
    }
  }
  Entry* e = find(comm);
  if (!e) {
    e = build(comm);
    {
      std::lock_guard<std::mutex> lock(mu);
      live.push_back(e);
    }
    PMPI_Comm_set_attr(comm, keyval.load(), e);
  }
  *t = Target{e->comm, e->stream, e->drive, &e->mark};
  tCommMemo = {true, comm, gen, *t};
  return e->comm != nullptr;
}

void releaseComm(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return;
  if (Entry* e = find(comm)) release(e, true, kAtFree);
}

void destroyAll() {
  std::vector<Entry*> todo;
  {
    std::lock_guard<std::mutex> lock(mu);
    todo = live;
  }
  // Newest first on every rank: a rank waits in the barrier of a comm only after every
  // newer comm it shares with its peers, which they release first too.
  std::stable_sort(todo.begin(), todo.end(), [](const Entry* a, const Entry* b) { return a->order > b->order; });
  for (Entry* e : todo) {
    release(e, true, kAtFinalize);
    PMPI_Comm_delete_attr(e->mpi, keyval.load());  // runs deleteEntry: MPI forgets it too
  }
  std::lock_guard<std::mutex> lock(mu);
  int key = keyval.exchange(MPI_KEYVAL_INVALID);
  if (key != MPI_KEYVAL_INVALID) PMPI_Comm_free_keyval(&key);
}

void printCommCounts(int worldRank) {
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr,
               "sncl_mpi: rank %d: sncl comms: %ld built, %ld released at MPI_Comm_free, %ld at MPI_Finalize, "
               "%ld by MPI\n",
               worldRank, built, released[kAtFree], released[kAtFinalize], released[kByMpi]);
}

}  // namespace sncl_mpi
