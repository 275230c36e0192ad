/* sncl extensions beyond the NCCL-style API: control and observation of the emulated
 * supernode bus (the "bus" transport, docs/bus.md), for tests and benchmarks, the fault
 * statistics of a comm, and the names and sizes that sncl's variables and tools read. The
 * snclBus* calls fail with snclInvalidUsage on a comm that has no bus peers. */
#ifndef SNCL_SNCL_EXT_H_
#define SNCL_SNCL_EXT_H_

#include <stdint.h>

#include "sncl/sncl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Injects faults, in the SNCL_FAULTS grammar of docs/faults.md, e.g.
 * "link=n0.e0-n0.l1p0:down" or "jitter=0.1:50us;rank=3:kill@op=4". A fault without a
 * trigger applies at once; all ranks of the comm see link faults and jitter. */
snclResult_t snclBusInjectFault(snclComm_t comm, const char* spec);

/* Counters of one link direction of the comm's topology, shared by all its ranks. */
typedef struct {
  uint64_t bytes;     /* bytes that crossed it (a flow's share of a chunk on each link) */
  uint64_t chunks;    /* chunk transfers that used it */
  uint64_t errors;    /* transfers failed because it was down */
  uint64_t jittered;  /* transfers delayed by jitter that started on it */
  double busyUs;      /* modeled time it was reserved */
} snclBusCounters_t;

/* link "a-b": the direction a -> b; link NULL: the sum over every link direction. */
snclResult_t snclBusGetLinkCounters(snclComm_t comm, const char* link, snclBusCounters_t* out);

/* Modeled duration (microseconds of the modeled bus, not wall time) of this rank's last
 * call on comm (a collective, or a group's sends and receives) and of all its calls. */
snclResult_t snclBusModeledTimeUs(snclComm_t comm, double* lastCallUs, double* totalUs);

/* Start and end of this rank's last call in modeled microseconds since the comm's setup,
 * a clock common to all its ranks. A rank that enters a collective early waits for the
 * others in the model too; max(end) - max(start) over the ranks measures the collective
 * from the moment the last rank entered it. */
snclResult_t snclBusLastCallSpanUs(snclComm_t comm, double* startUs, double* endUs);

/* Fault handling of a comm (docs/faults.md): what this rank detected, agreed and did. */
typedef struct {
  uint64_t rounds;           /* recovery rounds this rank took part in */
  uint64_t detected;         /* ... that it started from its own failed call */
  uint64_t pulledIn;         /* ... that a side-channel message pulled it into */
  uint64_t linkFailures;     /* lost links agreed */
  uint64_t rankFailures;     /* lost ranks agreed */
  uint64_t reroutes;         /* calls re-run successfully around lost links */
  uint64_t unrecovered;      /* rounds that ended in an error for the call */
  uint64_t stalls;           /* steps without progress for over a quarter of the deadline that
                                then went on (a slow link or peer) */
  uint64_t jittered;         /* chunk transfers delayed by jitter on the bus (all ranks) */
  double lastRecoveryMs;     /* wall time from the failure of a call to the end of its re-run */
  double lastRetryModeledUs; /* modeled bus time of that call, failed attempt and re-run */
} snclFaultStats_t;

/* Works on every comm (the bus fields stay 0 without a bus). */
snclResult_t snclCommGetFaultStats(snclComm_t comm, snclFaultStats_t* out);

/* The plan this comm's planner chooses now for a collective ("allreduce", "allgather",
 * "reducescatter", "broadcast", "reduce", "alltoall", "gather", "scatter") of bytes (the
 * nccl-tests size): a NUL-terminated description such as "hier[node](ring/hd)"
 * in plan (truncated to planLen), and the planner's estimate in microseconds (may be NULL).
 * Fills the plan cache as a call of that size would; the same answer on every rank. */
snclResult_t snclCommExplainPlan(snclComm_t comm, const char* collective, size_t bytes, char* plan, size_t planLen,
                                 double* estimateUs);

/* A size as every SNCL_* variable and sncl tool reads it: a decimal number, optionally with
 * a fraction, then an optional K, M, G or T (powers of 1024, either case) and an optional
 * B or iB: "65536", "64K", "1.5M", "256KiB". snclInvalidArgument (with a message) unless it
 * is a whole number of bytes that fits in size_t. */
snclResult_t snclParseSize(const char* text, size_t* bytes);

/* The datatype a name means: NCCL's ("float16", "bfloat16", "float8e4m3", also with the
 * "nccl"/"sncl" prefix as in "ncclFloat32"), nccl-tests' ("half", "float", "double",
 * "f8e4m3") or the short forms ("f16", "bf16", "fp32", "e4m3"); case-insensitive. */
snclResult_t snclDataTypeFromName(const char* name, snclDataType_t* type);
/* NCCL's name of a datatype without the prefix ("float16"); "invalid" for an unknown one. */
const char* snclDataTypeName(snclDataType_t type);

/* The library's version and the source revision it was built from, e.g.
 * "0.1.0 (git 600054a)"; "(git unknown)" when built outside a git checkout. */
const char* snclGetBuildVersion(void);

#ifdef __cplusplus
}
#endif

#endif /* SNCL_SNCL_EXT_H_ */
