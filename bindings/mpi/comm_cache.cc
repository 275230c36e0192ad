#include "bindings/mpi/comm_cache.h"

#include <cstdio>
#include <mutex>
#include <vector>

namespace sncl_mpi {
namespace {

struct Entry {
  MPI_Comm mpi;
  snclComm_t comm;  // nullptr: served by PMPI for good
};

std::mutex mu;
int keyval = MPI_KEYVAL_INVALID;
std::vector<Entry*> live;  // for MPI_Finalize, which does not free every communicator

int deleteEntry(MPI_Comm, int, void* value, void*) {
  auto* e = static_cast<Entry*>(value);
  {
    std::lock_guard<std::mutex> lock(mu);
    std::erase(live, e);
  }
  if (e->comm) snclCommDestroy(e->comm);
  delete e;
  return MPI_SUCCESS;
}

// Collective over comm: rank 0 makes the id, PMPI_Bcast shares it, and an all-reduce of
// the outcome makes every rank take the same path even when one rank's init failed.
snclComm_t build(MPI_Comm comm) {
  int inter = 0, rank = 0, size = 0;
  PMPI_Comm_test_inter(comm, &inter);
  if (inter) return nullptr;  // the same answer on every rank: no agreement needed
  PMPI_Comm_rank(comm, &rank);
  PMPI_Comm_size(comm, &size);
  snclUniqueId id{};
  int ok = 1;
  if (rank == 0 && snclGetUniqueId(&id) != snclSuccess) ok = 0;
  // A failed root still sends its id so that the exchange completes; ok tells the others.
  PMPI_Bcast(&ok, 1, MPI_INT, 0, comm);
  PMPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm);
  snclComm_t c = nullptr;
  if (ok && snclCommInitRank(&c, size, id, rank) != snclSuccess) {
    std::fprintf(stderr, "sncl_mpi: rank %d: sncl init failed (%s); this communicator uses MPI\n", rank,
                 snclGetLastError(nullptr));
    c = nullptr;
  }
  int mine = c != nullptr, all = 0;
  PMPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm);
  if (!all && c) {
    snclCommDestroy(c);
    c = nullptr;
  }
  return c;
}

}  // namespace

snclComm_t commFor(MPI_Comm comm) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (keyval == MPI_KEYVAL_INVALID &&
        PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, deleteEntry, &keyval, nullptr) != MPI_SUCCESS)
      return nullptr;
  }
  void* value = nullptr;
  int found = 0;
  PMPI_Comm_get_attr(comm, keyval, &value, &found);
  if (found) return static_cast<Entry*>(value)->comm;
  auto* e = new Entry{comm, build(comm)};
  {
    std::lock_guard<std::mutex> lock(mu);
    live.push_back(e);
  }
  PMPI_Comm_set_attr(comm, keyval, e);
  return e->comm;
}

void destroyAll() {
  std::vector<Entry*> todo;
  {
    std::lock_guard<std::mutex> lock(mu);
    todo = live;
  }
  // Deleting the attribute runs deleteEntry, so MPI forgets it too.
  for (Entry* e : todo) PMPI_Comm_delete_attr(e->mpi, keyval);
  std::lock_guard<std::mutex> lock(mu);
  if (keyval != MPI_KEYVAL_INVALID) PMPI_Comm_free_keyval(&keyval);
}

}  // namespace sncl_mpi
