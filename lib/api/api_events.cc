// Events: snclEventRecord marks what is queued on a stream so far (the stream's ticket), so
// that a caller can wait for or poll one call among many queued, not only the whole stream.
#include <mutex>
#include <unordered_set>

#include "lib/api/api_checks.h"
#include "lib/base/error.h"
#include "lib/comm/stream.h"
#include "sncl/sncl_ext.h"

using sncl::fail;
using sncl::Result;

struct snclEvent {
  snclStream* stream = nullptr;  // nullptr: never recorded (complete, as CUDA's events)
  uint64_t streamUid = 0;        // tells the stream from a later one at the same address
  uint64_t ticket = 0;
};

namespace {

// Live events, so that a destroyed or stray event gets InvalidArgument instead of a crash.
struct Events {
  std::mutex mu;
  std::unordered_set<const snclEvent*> live;
};
Events& events() {
  static Events e;
  return e;
}
bool isLive(const snclEvent* e) {
  std::lock_guard<std::mutex> lock(events().mu);
  return events().live.count(e) > 0;
}

// The event's stream if it is still that stream; InvalidUsage when it was destroyed.
Result streamOf(snclEvent* e, const char* fn, snclStream** out) {
  if (!e || !isLive(e)) return fail(snclInvalidArgument, "{}: event is not a live event", fn);
  *out = e->stream;
  if (!e->stream) return snclSuccess;
  bool live = false;
  {
    sncl::ExpectedErrors quiet;  // reported below, once, as what it means here
    live = sncl::api::checkStream(e->stream, fn) == snclSuccess;
  }
  // The uid is read only from a live stream: a stream at a reused address has another one.
  if (!live || e->stream->uid() != e->streamUid)
    return fail(snclInvalidUsage, "{}: the stream the event was recorded on was destroyed", fn);
  return snclSuccess;
}

}  // namespace

SNCL_API snclResult_t snclEventCreate(snclEvent_t* event) {
  if (!event) return fail(snclInvalidArgument, "snclEventCreate: event is NULL");
  *event = new snclEvent();
  std::lock_guard<std::mutex> lock(events().mu);
  events().live.insert(*event);
  return snclSuccess;
}

SNCL_API snclResult_t snclEventDestroy(snclEvent_t event) {
  if (!event) return fail(snclInvalidArgument, "snclEventDestroy: event is NULL");
  {
    std::lock_guard<std::mutex> lock(events().mu);
    if (!events().live.erase(event)) return fail(snclInvalidArgument, "snclEventDestroy: event is not a live event");
  }
  delete event;
  return snclSuccess;
}

SNCL_API snclResult_t snclEventRecord(snclEvent_t event, snclStream_t stream) {
  if (!event || !isLive(event)) return fail(snclInvalidArgument, "snclEventRecord: event is not a live event");
  if (!stream) return fail(snclInvalidArgument, "snclEventRecord: stream is NULL (calls on it complete at once)");
  SNCL_CHECK(sncl::api::checkStream(stream, "snclEventRecord"));
  event->stream = stream;
  event->streamUid = stream->uid();
  event->ticket = stream->ticket();
  return snclSuccess;
}

SNCL_API snclResult_t snclEventQuery(snclEvent_t event) {
  snclStream* s = nullptr;
  SNCL_CHECK(streamOf(event, "snclEventQuery", &s));
  return s ? s->eventQuery(event->ticket) : snclSuccess;
}

SNCL_API snclResult_t snclEventSynchronize(snclEvent_t event) {
  snclStream* s = nullptr;
  SNCL_CHECK(streamOf(event, "snclEventSynchronize", &s));
  return s ? s->eventWait(event->ticket) : snclSuccess;
}
