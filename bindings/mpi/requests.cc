#include "bindings/mpi/requests.h"

#include <sched.h>

#include <mutex>
#include <unordered_map>
#include <vector>

namespace sncl_mpi {
namespace {

struct Pending {
  MPI_Request req = MPI_REQUEST_NULL;
  snclEvent_t event = nullptr;
  snclStream_t stream = nullptr;
  bool drive = false;  // Target::drive
  MPI_Comm comm = MPI_COMM_NULL;
  Kind kind = kAllreduce;
  std::unique_ptr<Job> job;
  bool done = false;        // MPI_Grequest_complete was called
  int error = MPI_SUCCESS;  // what MPI_Wait reports (through queryFn)
};

std::mutex mu;
using PendingMap = std::unordered_map<MPI_Request, Pending*>;
PendingMap pending;  // ours, until MPI frees them
// What freed requests leave for the next ones (under mu): their Pending with its event, and
// their map node, so that a nonblocking call allocates none of them (four allocations and
// frees were a third of a small one's time). Bounded: a burst of requests frees the rest.
constexpr size_t kSpares = 64;
std::vector<Pending*> spares;
std::vector<PendingMap::node_type> spareNodes;

Pending* lookup(MPI_Request r) {
  if (r == MPI_REQUEST_NULL) return nullptr;
  std::lock_guard<std::mutex> lock(mu);
  auto it = pending.find(r);
  return it == pending.end() ? nullptr : it->second;
}

// A collective's status: empty (MPI_ANY_SOURCE, MPI_ANY_TAG, 0 elements), or the error.
int queryFn(void* state, MPI_Status* status) {
  const auto* p = static_cast<Pending*>(state);
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_ANY_SOURCE;
  status->MPI_TAG = MPI_ANY_TAG;
  return p->error;
}

int freeFn(void* state) {
  auto* p = static_cast<Pending*>(state);
  recycle(std::move(p->job));
  {
    std::lock_guard<std::mutex> lock(mu);
    PendingMap::node_type node = pending.extract(p->req);
    if (!node.empty() && spareNodes.size() < kSpares) spareNodes.push_back(std::move(node));
    if (spares.size() < kSpares) {
      spares.push_back(p);
      return MPI_SUCCESS;
    }
  }
  snclEventDestroy(p->event);  // outside the lock: it takes the events' own
  delete p;
  return MPI_SUCCESS;
}

// A Pending with an event: a freed one's, or a new one (nullptr when no event can be made).
Pending* takePending() {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!spares.empty()) {
      Pending* p = spares.back();
      spares.pop_back();
      const snclEvent_t event = p->event;
      *p = Pending{};
      p->event = event;
      return p;
    }
  }
  auto* p = new Pending;
  if (snclEventCreate(&p->event) != snclSuccess) {
    delete p;
    return nullptr;
  }
  return p;
}

// Records p as ours under its request (a freed request's node when there is one).
void addPending(Pending* p) {
  std::lock_guard<std::mutex> lock(mu);
  if (spareNodes.empty()) {
    pending[p->req] = p;
    return;
  }
  PendingMap::node_type node = std::move(spareNodes.back());
  spareNodes.pop_back();
  node.key() = p->req;
  node.mapped() = p;
  pending.insert(std::move(node));
}

int cancelFn(void*, int) { return MPI_SUCCESS; }  // a collective cannot be cancelled (MPI-3.1 3.8.4)

// Completes p once its event is done (wait: after waiting for it); true when complete.
bool complete(Pending* p, bool wait) {
  if (p->done) return true;
  const snclResult_t r =
      wait ? waitProgressing(
                 p->drive, [p] { return snclEventQuery(p->event); }, [p] { return snclEventSynchronize(p->event); })
           : snclEventQuery(p->event);
  if (r == snclInProgress) return false;
  if (r == snclSuccess) {
    if (p->job->after) p->job->after();
  } else {
    p->error = failed(r, p->kind, p->comm);
  }
  p->done = true;
  PMPI_Grequest_complete(p->req);
  return true;
}

// Ours among reqs[0..n), and whether any other request is active.
std::vector<Pending*> oursIn(int n, const MPI_Request* reqs, bool* othersActive) {
  std::vector<Pending*> ours;
  *othersActive = false;
  for (int i = 0; i < n; ++i) {
    if (Pending* p = lookup(reqs[i])) ours.push_back(p);
    else if (reqs[i] != MPI_REQUEST_NULL) *othersActive = true;
  }
  return ours;
}

// Completes those of ours that are done; true when one of them is complete.
bool completeDone(const std::vector<Pending*>& ours) {
  bool any = false;
  for (Pending* p : ours) any |= complete(p, false);
  return any;
}

}  // namespace

int startRequest(Kind k, MPI_Comm comm, const Target& t, std::unique_ptr<Job> job, MPI_Request* req) {
  Pending* p = takePending();
  const snclResult_t r = p ? snclEventRecord(p->event, t.stream) : snclSystemError;
  if (r != snclSuccess) {
    // The call is queued already: wait for it so that its buffers are not freed under it.
    snclStreamSynchronize(t.stream);
    if (p) snclEventDestroy(p->event);
    delete p;
    *req = MPI_REQUEST_NULL;
    return failed(r, k, comm);
  }
  p->stream = t.stream;
  p->drive = t.drive;
  p->comm = comm;
  p->kind = k;
  p->job = std::move(job);
  const int rc = PMPI_Grequest_start(queryFn, freeFn, cancelFn, p, req);
  if (rc != MPI_SUCCESS) {
    snclStreamSynchronize(t.stream);
    snclEventDestroy(p->event);
    delete p;
    return rc;
  }
  p->req = *req;
  addPending(p);
  return MPI_SUCCESS;
}

void completeAllOn(snclStream_t stream) {
  std::vector<Pending*> todo;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [req, p] : pending)
      if (p->stream == stream) todo.push_back(p);
  }
  for (Pending* p : todo) complete(p, true);
}

}  // namespace sncl_mpi

using namespace sncl_mpi;

extern "C" {

int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  if (Pending* p = request ? lookup(*request) : nullptr) complete(p, true);
  return PMPI_Wait(request, status);
}

int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  if (Pending* p = request ? lookup(*request) : nullptr) complete(p, false);
  return PMPI_Test(request, flag, status);
}

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  bool others = false;
  // The stream runs them in order: waiting in array order costs no overlap.
  for (Pending* p : oursIn(count, requests, &others)) complete(p, true);
  return PMPI_Waitall(count, requests, statuses);
}

int MPI_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
  bool others = false;
  completeDone(oursIn(count, requests, &others));
  return PMPI_Testall(count, requests, flag, statuses);
}

int MPI_Testany(int count, MPI_Request requests[], int* index, int* flag, MPI_Status* status) {
  bool others = false;
  completeDone(oursIn(count, requests, &others));
  return PMPI_Testany(count, requests, index, flag, status);
}

int MPI_Testsome(int incount, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[]) {
  bool others = false;
  completeDone(oursIn(incount, requests, &others));
  return PMPI_Testsome(incount, requests, outcount, indices, statuses);
}

// Waitany and Waitsome return at the first completion, ours or MPI's: without other active
// requests they wait for our earliest call; with some, they poll both.
int MPI_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
  bool others = false;
  const auto ours = oursIn(count, requests, &others);
  if (ours.empty()) return PMPI_Waitany(count, requests, index, status);
  for (;;) {
    if (completeDone(ours)) return PMPI_Waitany(count, requests, index, status);
    if (!others) {
      complete(ours.front(), true);
      return PMPI_Waitany(count, requests, index, status);
    }
    int flag = 0;
    const int rc = PMPI_Testany(count, requests, index, &flag, status);
    if (rc != MPI_SUCCESS || flag) return rc;
    sched_yield();
  }
}

int MPI_Waitsome(int incount, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[]) {
  bool others = false;
  const auto ours = oursIn(incount, requests, &others);
  if (ours.empty()) return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
  for (;;) {
    if (completeDone(ours)) return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
    if (!others) {
      complete(ours.front(), true);
      return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
    }
    const int rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
    if (rc != MPI_SUCCESS || *outcount > 0) return rc;
    sched_yield();
  }
}

// Freeing a collective's request is erroneous in MPI; a program that does so anyway gets
// the call finished first, so that MPI can free the request at once.
int MPI_Request_free(MPI_Request* request) {
  if (Pending* p = request ? lookup(*request) : nullptr) complete(p, true);
  return PMPI_Request_free(request);
}

int MPI_Request_get_status(MPI_Request request, int* flag, MPI_Status* status) {
  if (Pending* p = lookup(request)) complete(p, false);
  return PMPI_Request_get_status(request, flag, status);
}

}  // extern "C"
