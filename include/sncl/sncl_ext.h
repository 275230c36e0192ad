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

/* What one rank of comm holds in memory, by part (docs/faults.md, "Memory"). The retry
 * history is the part that grows with the calls: bounded by the budget (SNCL_MEM_BUDGET,
 * snclConfig_t.memBudget; 1 GiB by default). Set size to sizeof(snclMemoryUsage_t). */
typedef struct {
  size_t size;
  uint64_t budget;          /* the retry budget: what the history may hold */
  uint64_t retryHeld;       /* inputs kept now for ranks that may still be in their calls */
  uint64_t retryPeak;       /* the most held at once */
  uint64_t retryResident;   /* pages of the history touched so far: what it costs in RSS */
  uint64_t retryKept;       /* inputs copied */
  uint64_t retrySkipped;    /* finished calls not copied: every rank had finished them */
  uint64_t retryWaits;      /* waits for every rank to finish a call, to make room */
  uint64_t retryDropped;    /* kept calls let go early (ranks on several hosts, over budget) */
  uint64_t retryNotKept;    /* calls larger than the budget (a fault in them fails: docs/faults.md) */
  uint64_t retryOverBudget; /* inputs kept past the budget for a fault round's re-run */
  uint64_t scratchBytes;    /* schedule scratch and a catch-up's replay buffers */
  uint64_t scheduleBytes;   /* the built schedules' steps */
  uint64_t transportBytes;  /* transports' segments (shm FIFOs and cells, bus state) and slot pools */
  uint64_t stagingBytes;    /* staging areas of calls on buffers peers cannot map */
  uint64_t traceBytes;      /* the trace's event buffer (SNCL_TRACE) */
  uint64_t boardBytes;      /* the progress board the ranks of one machine share */
  uint64_t totalBytes;      /* the sum of the parts above (retryResident for the history) */
} snclMemoryUsage_t;

/* Waits for a call running on comm to end, then fills *out. */
snclResult_t snclCommGetMemoryUsage(snclComm_t comm, snclMemoryUsage_t* out);

/* The plan this comm's planner chooses now for a collective ("allreduce", "allgather",
 * "reducescatter", "broadcast", "reduce", "alltoall", "gather", "scatter", "scan",
 * "exscan"; not the v-forms, which a size does not describe) of bytes (the
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

/* Events: a mark in a stream's queue. snclEventRecord marks everything queued on stream so
 * far; the event is then done when those calls have finished. An event never recorded is
 * done. Re-recording moves the mark. The stream must outlive the calls on the event (after
 * snclStreamDestroy they fail with snclInvalidUsage). */
typedef struct snclEvent* snclEvent_t;
snclResult_t snclEventCreate(snclEvent_t* event);
snclResult_t snclEventDestroy(snclEvent_t event);
/* Marks everything queued on stream so far (stream must not be NULL). */
snclResult_t snclEventRecord(snclEvent_t event, snclStream_t stream);
/* snclSuccess once the marked calls are done, snclInProgress before, or the first error of
 * a call it covers (as soon as that call failed; the error stays with the stream). Never
 * blocks, as snclStreamQuery. */
snclResult_t snclEventQuery(snclEvent_t event);
/* Waits until the marked calls are done; returns as snclEventQuery. Bounded as
 * snclStreamSynchronize is: by the deadlines of the comms of the queued calls. */
snclResult_t snclEventSynchronize(snclEvent_t event);

/* Observation of a comm (docs/observability.md). SNCL_TRACE=<path> writes a Chrome trace
 * of each rank's calls, steps and fault rounds; the two calls below are the live view. */

/* One call as a profiler sees it. A group's sends and receives on a comm run as one call
 * named "sendrecv". Pointers are valid only during the callback. */
typedef struct {
  const char* name;        /* "allreduce", "broadcast", ..., "sendrecv" */
  uint64_t seq;            /* the comm's collective number from 0, equal on every rank; a
                              "sendrecv" carries the number of the next collective */
  size_t count;            /* elements as passed; "sendrecv": its sends plus receives */
  snclDataType_t datatype; /* "sendrecv": snclUint8 */
  snclRedOp_t op;          /* reductions (a pre-multiplied sum is snclSum); others snclSum */
  int root;                /* rooted collectives; -1 otherwise */
  size_t bytes;            /* count times the element size; "sendrecv": all bytes sent and received */
  const char* plan;        /* the planner's choice, e.g. "ring", "hier[node](ring/hd)"; "p2p"
                              for "sendrecv"; NULL in a call that failed before it was planned */
} snclProfilerCall_t;

/* Callbacks run on the thread that runs the call: the caller's for the NULL stream; for a
 * stream, the thread that waits for the call when the comm's waiterDrives
 * (snclCommGetThreading), else the stream's thread; or a comm's group worker when one thread
 * drives several comms in a group. callBegin comes once the plan is chosen, callEnd when the call returns; each
 * call gets both, in order. They run while the comm is locked: they must not make calls on
 * that comm (snclCommGetStatus excepted) and should return quickly. Either may be NULL. */
typedef struct {
  void* user;
  void (*callBegin)(void* user, snclComm_t comm, const snclProfilerCall_t* call);
  void (*callEnd)(void* user, snclComm_t comm, const snclProfilerCall_t* call, snclResult_t result);
} snclProfiler_v1_t;

/* Copies *profiler into the comm (NULL removes it); waits for a running call to end. */
snclResult_t snclCommSetProfiler(snclComm_t comm, const snclProfiler_v1_t* profiler);

/* What a comm is doing, for a call that seems to hang. */
typedef struct {
  uint64_t callsStarted;   /* calls run on this comm (a "sendrecv" group counts once) */
  uint64_t callsFinished;
  int inCall;              /* 1 while a call runs: the fields below describe it */
  char callName[32];       /* the running or last call ("" before the first) */
  uint64_t seq;            /* its seq, as in snclProfilerCall_t */
  uint32_t step;           /* the executor step it waits in (from 0) ... */
  uint32_t steps;          /* ... of the steps of its schedule (a re-run after a fault too) */
  double elapsedUs;        /* how long it has run; for the last call, how long it took (to
                              the tick of CLOCK_MONOTONIC_COARSE, a few ms) */
  snclResult_t lastResult; /* of the last finished call */
  char lastError[256];     /* message of the last failed call, truncated; "" if none failed */
  uint64_t faultRounds;    /* recovery rounds this rank took part in */
  uint32_t linksDown;      /* links agreed lost */
  uint32_t ranksLost;      /* ranks agreed lost */
} snclCommStatus_t;

/* Callable from any thread at any time, also while a call runs on comm: takes no lock
 * that a call holds. The fields describe one call consistently. */
snclResult_t snclCommGetStatus(snclComm_t comm, snclCommStatus_t* out);

/* A link of the comm's topology that its transports model (the bus), with the verdict of
 * docs/observability.md, "Links": whether its trouble hurts training ("fault": down,
 * flapping, slowed 2x or more) or is noise it absorbs ("jitter"). */
typedef struct {
  char name[64];        /* "a-b", both directions together */
  int state;            /* 0 up, 1 degraded, 2 down */
  int verdict;          /* 0 ok, 1 jitter, 2 fault */
  double slowdown;      /* degraded: transfers take this many times longer (1: full speed) */
  double jitterScore;   /* 1 + the mean delay jitter adds over the mean transfer time */
  uint64_t bytes;       /* bytes that crossed it, both directions */
  uint64_t transfers;   /* transfers that used it */
  uint64_t errors;      /* transfers failed because it was down */
  uint64_t jittered;    /* transfers jitter delayed */
  uint64_t downs;       /* times it went down */
  uint64_t faultAlarms; /* times it became a fault (a down, or a slowdown past 2x) */
} snclLinkStatus_t;

/* Fills up to maxLinks entries of links (NULL with maxLinks 0: only counts) and sets
 * *nlinks to the number of links (0 on a comm without modeled links). Any thread, any
 * time, like snclCommGetStatus. */
snclResult_t snclCommGetLinks(snclComm_t comm, snclLinkStatus_t* links, int maxLinks, int* nlinks);

/* How this rank of comm runs its work, decided at init from the CPUs that the comm's ranks
 * on this machine may use (their affinity masks, capped by cgroup CPU quotas); see
 * docs/architecture.md, "Threads". SNCL_PROGRESS=thread|caller overrides waiterDrives. */
typedef struct {
  int cpus;            /* CPUs this rank may use */
  int hostRanks;       /* ranks of the comm on this machine whose CPUs overlap this rank's, itself included */
  int hostCpus;        /* CPUs those ranks may use together */
  int oversubscribed;  /* 1: hostRanks > hostCpus: waits yield, then sleep; they never spin */
  int waiterDrives;    /* 1: work queued on a stream runs on the thread that waits for it
                          (snclStreamSynchronize, snclEventSynchronize);
                          0: on the stream's own thread, overlapping the caller */
  int spinMicros;      /* a wait spins this long before it sleeps (0: never) */
  char text[256];      /* the same in words, for logs and benchmark headers */
} snclThreading_t;
snclResult_t snclCommGetThreading(snclComm_t comm, snclThreading_t* out);

/* A function that the thread running a call on comm calls while the call waits for peers
 * (after a short spin, then between sleeps of at most a few hundred microseconds), so that
 * a runtime sncl is embedded in makes its own progress meanwhile: the MPI drop-in drives
 * MPI's progress engine, which a peer may need before it can join the call. It runs on
 * whichever thread runs the call (the caller's or a stream's), must return quickly and
 * must not call sncl on comm. hook NULL removes it. */
snclResult_t snclCommSetWaitHook(snclComm_t comm, void (*hook)(void* user), void* user);

/* Variable-count collectives (MPI's v-forms). Counts and displacements are in elements of
 * datatype, indexed by rank; the arrays are read during the call (a call queued on a stream
 * keeps its own copy). In place as MPI_IN_PLACE maps: AllGatherV with sendbuff ==
 * recvbuff + displs[rank] elements, GatherV at root likewise, ScatterV at root with recvbuff
 * == sendbuff + displs[root] elements, AlltoAllV with sendbuff == recvbuff and equal send and
 * receive counts and displacements. Arrays a rank does not use (GatherV's and ScatterV's off
 * the root) may be NULL, and so may recvbuff off GatherV's root and sendbuff off ScatterV's.
 * Every pair of ranks that the pattern connects exchanges a message, also of zero elements,
 * so counts that disagree across ranks fail the call (snclInvalidArgument) instead of
 * leaving a rank waiting for a message that never comes. */
snclResult_t snclAllGatherV(const void* sendbuff, size_t sendcount, void* recvbuff, const size_t* recvcounts,
                            const size_t* displs, snclDataType_t datatype, snclComm_t comm, snclStream_t stream);
snclResult_t snclAlltoAllV(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls, void* recvbuff,
                           const size_t* recvcounts, const size_t* rdispls, snclDataType_t datatype, snclComm_t comm,
                           snclStream_t stream);
snclResult_t snclGatherV(const void* sendbuff, size_t sendcount, void* recvbuff, const size_t* recvcounts,
                         const size_t* displs, snclDataType_t datatype, int root, snclComm_t comm, snclStream_t stream);
snclResult_t snclScatterV(const void* sendbuff, const size_t* sendcounts, const size_t* displs, void* recvbuff,
                          size_t recvcount, snclDataType_t datatype, int root, snclComm_t comm, snclStream_t stream);
/* sendbuff holds sum(recvcounts) elements, rank r's block at the prefix sum of recvcounts[0..r).
 * In place: sendbuff == recvbuff, which holds the whole input and gets the result at its start. */
snclResult_t snclReduceScatterV(const void* sendbuff, void* recvbuff, const size_t* recvcounts,
                                snclDataType_t datatype, snclRedOp_t op, snclComm_t comm, snclStream_t stream);
/* Inclusive and exclusive prefix reductions over ranks (MPI_Scan, MPI_Exscan); Exscan leaves
 * rank 0's recvbuff unchanged (it may be NULL there). In place: sendbuff == recvbuff. snclAvg
 * is refused (a prefix has no one divisor). */
snclResult_t snclScan(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t datatype, snclRedOp_t op,
                      snclComm_t comm, snclStream_t stream);
snclResult_t snclExscan(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t datatype, snclRedOp_t op,
                        snclComm_t comm, snclStream_t stream);

/* ---- Compressed All-Reduce (docs/compression.md) ----
 * An All-Reduce of float32 or bfloat16 data that sends int8 or fp8 e4m3 codes on the wire,
 * one float32 scale per block of blockElems values: 2*(n-1)/n * count bytes plus the scales
 * instead of 2*(n-1)/n * 4*count for float32. Every rank quantizes its input per block
 * (in n slices, slice j being the elements rank j owns), an All-to-All gives rank j every
 * rank's slice j, rank j decodes and sums them in float32 in rank order, quantizes the sum
 * once, and an All-Gather brings every reduced slice to every rank, which decodes them into
 * recvbuff. Every rank gets bit-identical results.
 *
 * Error bound, per element i of a block (scale_r: rank r's block scale of x_r (+ residual);
 * scale_out: the reduced block's; S: the exact sum), for snclSum:
 *   int8:  |result - S| <= sum_r scale_r/2 + scale_out/2 + float32 rounding
 *          (scale = max|x| of the block / 127, so <= max_r/254 per rank)
 *   e4m3:  |result - S| <= sum_r (|x_r| * 2^-4 + scale_r * 2^-10)
 *                          + (|S| + the inputs' error) * 2^-4 + scale_out * 2^-10 + float32 rounding
 *          (3 mantissa bits: half a step is 2^-4 of the value; 2^-10 * scale is half the
 *          subnormal step)
 * snclAvg: the bound of the sum divided by nranks. bfloat16 output: plus |result| * 2^-8.
 * A block that holds a NaN or an infinity (on any rank) gives NaN for every element of that
 * block of the result: never a finite value.
 *
 * op: snclSum or snclAvg; datatype: snclFloat32 or snclBfloat16 (others: snclInvalidArgument).
 * In place: sendbuff == recvbuff. Not inside a group (snclInvalidUsage). On a stream, the
 * call waits for the stream's earlier work and then runs on the calling thread: it returns
 * when done. All ranks must pass the same count, kind and blockElems. */
typedef enum { snclCompressNone = 0, snclCompressInt8 = 1, snclCompressFp8e4m3 = 2 } snclCompression_t;
typedef struct {
  size_t size;              /* sizeof(snclCompressOpts_t) */
  snclCompression_t kind;   /* snclCompressNone runs a plain snclAllReduce */
  size_t blockElems;        /* values per scale block; 0: 256; at most 1048576 */
  void* residual;           /* error feedback: NULL, or count values of datatype (zero at first)
                             * that sncl adds to the input before quantizing and overwrites with
                             * this rank's new quantization error (input, and on the slice it
                             * owns the reduced sum's), so that over repeated calls the errors
                             * cancel instead of adding up. Must not overlap the buffers. */
} snclCompressOpts_t;
snclResult_t snclAllReduceCompressed(const void* sendbuff, void* recvbuff, size_t count, snclDataType_t datatype,
                                     snclRedOp_t op, snclComm_t comm, snclStream_t stream,
                                     const snclCompressOpts_t* opts);
/* The comm-wide default: with SNCL_COMPRESS=int8 or fp8 (read at a comm's first All-Reduce),
 * a plain snclAllReduce of float32 or bfloat16, op snclSum or snclAvg, of at least
 * SNCL_COMPRESS_MIN_BYTES (default 65536) bytes, outside a group and on the NULL stream,
 * runs compressed (blockElems 256, no residual) -- unless the planner's estimate of the plain
 * All-Reduce is lower than that of the compressed one's All-to-All plus All-Gather at their
 * smaller sizes. The choice is logged at INFO (PLAN) once per size bucket. */
/* ---- end of compressed All-Reduce ---- */

/* ---- Bytes-moved counters (lib/api/api_counters.cc) ----
 * What this rank moved since the comm was made (summed over fault retries), for benchmarks
 * and tests that compare the memory traffic of a call with the algorithm's minimum:
 *   calls          calls finished on comm (collectives, and groups of sends/receives)
 *   bytesSent      message bytes this rank's transports sent
 *   bytesReceived  message bytes they received
 *   bytesCopied    bytes copied through memory for this rank: by the transports (shm: into
 *                  FIFO slots, and single-copy reads of a peer's buffer) and by the executor
 *                  (received bytes placed into their destination, local copies); a copy of
 *                  n bytes counts n (it reads n and writes n)
 *   bytesReduced   result bytes of the reductions this rank computed; a reduction of n bytes
 *                  counts n (it reads 2n and writes n)
 * Set size to sizeof(snclCounters_t) before the call: fields beyond size are not written, so
 * a program built against an older, shorter struct keeps working. Callable from any thread;
 * while a call runs the fields are read one by one (not one snapshot). */
typedef struct {
  size_t size;
  uint64_t calls;
  uint64_t bytesSent;
  uint64_t bytesReceived;
  uint64_t bytesCopied;
  uint64_t bytesReduced;
} snclCounters_t;
snclResult_t snclCommGetCounters(snclComm_t comm, snclCounters_t* counters);
/* ---- end of bytes-moved counters ---- */

#ifdef __cplusplus
}
#endif

#endif /* SNCL_SNCL_EXT_H_ */
