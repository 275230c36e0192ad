/* sncl: topology-aware collective communication library. Public C API.
 * Shapes follow NCCL's host API with the `sncl` prefix. */
#ifndef SNCL_SNCL_H_
#define SNCL_SNCL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SNCL_MAJOR 0
#define SNCL_MINOR 1
#define SNCL_PATCH 0
#define SNCL_VERSION_CODE (SNCL_MAJOR * 10000 + SNCL_MINOR * 100 + SNCL_PATCH)

typedef enum {
  snclSuccess = 0,
  snclSystemError = 1,     /* an OS call failed (shm, socket, thread) */
  snclInternalError = 2,   /* a bug in sncl */
  snclInvalidArgument = 3, /* bad pointer, count, dtype, op, rank, unique id */
  snclInvalidUsage = 4,    /* a call that is not allowed now (after abort, wrong order) */
  snclRemoteError = 5,     /* a peer failed or disagrees */
  snclInProgress = 6,      /* asynchronous work is not finished yet */
  snclTimeout = 7,         /* a deadline passed */
  snclNumResults = 8
} snclResult_t;

typedef enum {
  snclInt8 = 0, snclChar = 0,
  snclUint8 = 1,
  snclInt32 = 2, snclInt = 2,
  snclUint32 = 3,
  snclInt64 = 4,
  snclUint64 = 5,
  snclFloat16 = 6, snclHalf = 6,
  snclFloat32 = 7, snclFloat = 7,
  snclFloat64 = 8, snclDouble = 8,
  snclBfloat16 = 9,
  snclFloat8e4m3 = 10,
  snclFloat8e5m2 = 11,
  snclNumTypes = 12
} snclDataType_t;

/* Built-in reduction ops; snclRedOpCreatePreMulSum makes more (values >= snclNumOps). */
typedef enum {
  snclSum = 0,
  snclProd = 1,
  snclMax = 2,
  snclMin = 3,
  snclAvg = 4,
  /* sncl extensions (NCCL has none; MPI and torch need them): integer types only, any
     float type is refused with snclInvalidArgument. Logical ops give 1 or 0 (nonzero is
     true), except on a comm of one rank, where the result is the input. */
  snclBand = 5,
  snclBor = 6,
  snclBxor = 7,
  snclLand = 8,
  snclLor = 9,
  snclLxor = 10,
  snclNumOps = 11,
  snclMaxRedOp = 0x7fffffff
} snclRedOp_t;

/* Where the scalar of a pre-multiplied sum lives (NCCL's names; sncl runs on CPUs, so both
 * are host memory). Device: the pointer is kept and *scalar is read each time a call with
 * the op runs, so it must stay valid until the op is destroyed. HostImmediate: *scalar is
 * read once, when the op is created. */
typedef enum { snclScalarDevice = 0, snclScalarHostImmediate = 1 } snclScalarResidence_t;

#define SNCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[SNCL_UNIQUE_ID_BYTES];
} snclUniqueId;

typedef struct snclComm* snclComm_t;
typedef struct snclStream* snclStream_t;

#define SNCL_CONFIG_UNDEF_INT INT32_MIN
#define SNCL_SPLIT_NOCOLOR (-1)

typedef struct {
  size_t size;          /* sizeof(snclConfig_t), filled by SNCL_CONFIG_INITIALIZER */
  unsigned int magic;   /* guards against uninitialized configs */
  unsigned int version; /* SNCL_VERSION_CODE the caller compiled against */
  int blocking;         /* 1 (default): init blocks until ready; 0: returns snclInProgress */
  int timeoutMs;        /* deadline for every blocking wait; <= 0 or UNDEF: SNCL_TIMEOUT_MS or 60000 */
  const char* commName; /* shown in logs */
  int splitShare;       /* snclCommSplit: accepted for NCCL compatibility; a split comm
                           always gets resources of its own */
  size_t memBudget;     /* bytes a rank may hold of its calls' inputs for fault retry
                           (docs/faults.md, "Memory"); 0: SNCL_MEM_BUDGET or 1 GiB */
} snclConfig_t;

#define SNCL_CONFIG_INITIALIZER                                                  \
  {                                                                              \
    sizeof(snclConfig_t), 0x5c1c0f16u, SNCL_VERSION_CODE, SNCL_CONFIG_UNDEF_INT, \
        SNCL_CONFIG_UNDEF_INT, NULL, SNCL_CONFIG_UNDEF_INT, 0                    \
  }

/* Version as SNCL_VERSION_CODE. */
snclResult_t snclGetVersion(int* version);

/* Creates the rendezvous root in this process: call once, share the id with every rank. */
snclResult_t snclGetUniqueId(snclUniqueId* uniqueId);

snclResult_t snclCommInitRank(snclComm_t* comm, int nranks, snclUniqueId commId, int rank);
snclResult_t snclCommInitRankConfig(snclComm_t* comm, int nranks, snclUniqueId commId, int rank,
                                    snclConfig_t* config);
/* ndev ranks as threads of this process; devlist is ignored (may be NULL): sncl runs on CPUs. */
snclResult_t snclCommInitAll(snclComm_t* comms, int ndev, const int* devlist);

/* Finishes outstanding work; the comm must still be destroyed. With fault retry on (the
 * emulated bus's default, SNCL_RETRY) it is collective: every rank calls it, and it returns
 * once every rank finished its calls, so that a link failing in a peer's last call is still
 * recovered with this rank's help. */
snclResult_t snclCommFinalize(snclComm_t comm);
snclResult_t snclCommDestroy(snclComm_t comm);
/* Stops outstanding work without waiting for peers, then frees the comm. Never hangs. */
snclResult_t snclCommAbort(snclComm_t comm);

snclResult_t snclCommCount(const snclComm_t comm, int* count);
snclResult_t snclCommUserRank(const snclComm_t comm, int* rank);
/* The first error from asynchronous work (snclInProgress while init is pending). */
snclResult_t snclCommGetAsyncError(snclComm_t comm, snclResult_t* asyncError);

const char* snclGetErrorString(snclResult_t result);
/* The message of the last failed call on this thread (comm may be NULL). */
const char* snclGetLastError(snclComm_t comm);

/* Host memory every rank on this machine can map (NCCL's ncclMemAlloc): a collective whose
 * buffers all come from here has its ranks on one host read and write each other's buffers
 * in place, with no copy through the shared-memory transport (docs/architecture.md).
 * Page-aligned and faulted in on return; any buffer within an allocation qualifies.
 * size 0 or a NULL ptr is snclInvalidArgument. */
snclResult_t snclMemAlloc(void** ptr, size_t size);
/* NULL is a no-op; a pointer snclMemAlloc did not return is snclInvalidArgument. */
snclResult_t snclMemFree(void* ptr);

/* Streams: ordered asynchronous queues served by a progress thread. A NULL stream means
 * the call completes before it returns. */
snclResult_t snclStreamCreate(snclStream_t* stream);
snclResult_t snclStreamDestroy(snclStream_t stream);
/* Waits until every call enqueued so far finished; returns the first error among them. */
snclResult_t snclStreamSynchronize(snclStream_t stream);
/* snclSuccess when idle, snclInProgress while work is queued, or the first error. Never
 * blocks. On a rank without a spare core (snclCommGetThreading's waiterDrives) queued work
 * runs on the thread that synchronizes, or on the stream's thread if nobody synchronizes
 * within a millisecond: a program that polls gets it done sooner by synchronizing. */
snclResult_t snclStreamQuery(snclStream_t stream);

/* Collectives. Each takes NCCL's arguments and in-place rules; counts are in elements.
 * A NULL stream completes the call before it returns; inside a group, calls are issued at
 * snclGroupEnd. Pointer arguments that a rank does not use (sendbuff off the root of a
 * broadcast or scatter, recvbuff off the root of a reduce or gather) may be NULL. */

/* In-place when sendbuff == recvbuff. */
snclResult_t snclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           snclDataType_t datatype, snclRedOp_t op, snclComm_t comm,
                           snclStream_t stream);
/* root's sendbuff to every rank's recvbuff; in-place when sendbuff == recvbuff on root. */
snclResult_t snclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           snclDataType_t datatype, int root, snclComm_t comm,
                           snclStream_t stream);
/* Legacy in-place broadcast: snclBroadcast(buff, buff, ...). */
snclResult_t snclBcast(void* buff, size_t count, snclDataType_t datatype, int root,
                       snclComm_t comm, snclStream_t stream);
/* Reduction of every rank's sendbuff into root's recvbuff; in-place when equal on root. */
snclResult_t snclReduce(const void* sendbuff, void* recvbuff, size_t count,
                        snclDataType_t datatype, snclRedOp_t op, int root, snclComm_t comm,
                        snclStream_t stream);
/* recvbuff (nranks * sendcount) gets rank r's sendbuff at r * sendcount; in-place when
 * sendbuff == recvbuff + rank * sendcount. */
snclResult_t snclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           snclDataType_t datatype, snclComm_t comm, snclStream_t stream);
/* sendbuff (nranks * recvcount) reduced over ranks; rank r gets block r; in-place when
 * recvbuff == sendbuff + rank * recvcount. */
snclResult_t snclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               snclDataType_t datatype, snclRedOp_t op, snclComm_t comm,
                               snclStream_t stream);
/* count elements per peer: block p of sendbuff goes to rank p, block p of recvbuff comes
 * from rank p (both nranks * count); in-place when sendbuff == recvbuff. */
snclResult_t snclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          snclDataType_t datatype, snclComm_t comm, snclStream_t stream);
/* root's recvbuff (nranks * count) gets rank r's sendbuff at r * count; in-place when
 * sendbuff == recvbuff + root * count on root. */
snclResult_t snclGather(const void* sendbuff, void* recvbuff, size_t count,
                        snclDataType_t datatype, int root, snclComm_t comm,
                        snclStream_t stream);
/* Rank r's recvbuff gets block r of root's sendbuff (nranks * count); in-place when
 * recvbuff == sendbuff + root * count on root. */
snclResult_t snclScatter(const void* sendbuff, void* recvbuff, size_t count,
                         snclDataType_t datatype, int root, snclComm_t comm,
                         snclStream_t stream);

/* Point-to-point. The peer must post the matching call (same count and datatype); sends
 * and receives between two ranks match in posting order. Inside a group they are posted
 * together, so any order of them completes; a rank may send to itself inside a group. A
 * send completes when the transport has taken the data: one nobody receives fails at the
 * deadline if the transport cannot buffer it, and otherwise fails the pair's next message
 * (a tag mismatch) on both ranks. */
snclResult_t snclSend(const void* sendbuff, size_t count, snclDataType_t datatype, int peer,
                      snclComm_t comm, snclStream_t stream);
snclResult_t snclRecv(void* recvbuff, size_t count, snclDataType_t datatype, int peer,
                      snclComm_t comm, snclStream_t stream);

/* Groups: calls between snclGroupStart and snclGroupEnd (which nest; the outermost End
 * counts) are issued together at snclGroupEnd. Per comm, collectives run in issue order,
 * then all sends and receives at once; different comms run concurrently, so one thread
 * may drive several ranks' comms. A call's stream must be the same for all calls on its
 * comm in a group: the group's calls on a stream are queued there; those with a NULL
 * stream complete before snclGroupEnd returns. If a call inside the group fails, nothing
 * in it runs and snclGroupEnd returns that error. */
snclResult_t snclGroupStart(void);
snclResult_t snclGroupEnd(void);

/* A pre-multiplied sum for datatype on comm: each rank's input is multiplied by its own
 * *scalar (of datatype) before the sum. Valid only on comm and with datatype. */
snclResult_t snclRedOpCreatePreMulSum(snclRedOp_t* op, void* scalar, snclDataType_t datatype,
                                      snclScalarResidence_t residence, snclComm_t comm);
snclResult_t snclRedOpDestroy(snclRedOp_t op, snclComm_t comm);

/* Collective over comm's ranks: ranks with the same color form a new comm, ordered by
 * (key, rank in comm); SNCL_SPLIT_NOCOLOR gives *newcomm = NULL. The new comm has its own
 * bootstrap and resources; config fields left undefined (or a NULL config) are taken
 * from comm's. */
snclResult_t snclCommSplit(snclComm_t comm, int color, int key, snclComm_t* newcomm,
                           snclConfig_t* config);

/* Fault tolerance (docs/faults.md). A call that a lost rank (or a lost link without another
 * route) interrupts fails on every surviving rank with snclRemoteError within the comm's
 * deadline, and so do later calls; the survivors then shrink the comm.
 *
 * snclCommRevoke (NCCL 2.30's): this rank's call in flight on comm stops with
 * snclRemoteError, and so does every peer's call that waits (it is told over the comm's
 * bootstrap; a peer learns it at its next wait on another rank); later calls fail at once.
 * comm stays usable for snclCommShrink, snclCommSplit and destruction. revokeFlags:
 * SNCL_REVOKE_DEFAULT. */
#define SNCL_REVOKE_DEFAULT 0x00
snclResult_t snclCommRevoke(snclComm_t comm, int revokeFlags);

#define SNCL_SHRINK_DEFAULT 0x00 /* calls in flight on comm must have finished */
#define SNCL_SHRINK_ABORT 0x01   /* revoke comm first: calls in flight stop */

/* An agreement of the surviving ranks of comm: the members are the ranks that answered
 * within the deadline minus the union of every rank's excludeRanks (NULL, excludeCount 0:
 * the ranks comm agreed lost), renumbered densely in their old order, in a comm with its
 * own bootstrap and resources. Every member gets the same list; it takes a strict majority
 * of comm's ranks. A rank left out, or cut off from the majority, gets snclRemoteError and
 * no comm. config fields left undefined (or NULL) come from comm. */
snclResult_t snclCommShrink(snclComm_t comm, int* excludeRanks, int excludeCount, snclComm_t* newcomm,
                            snclConfig_t* config, int shrinkFlags);

/* Growing a comm (NCCL 2.29's semantics), e.g. a spare in a lost rank's place after a
 * shrink. One rank of comm makes a single-use id with snclCommGetUniqueId and hands it to
 * the new processes (out of band). Existing ranks call
 *   snclCommGrow(comm, nranks, root ? &id : NULL, -1, &newcomm, config)
 * and keep their rank numbers; each new process calls
 *   snclCommGrow(NULL, nranks, &id, rank, &newcomm, config)
 * with rank in [comm's size, nranks). With SNCL_TOPO_FILE every existing process keeps its
 * endpoint and a new one takes the first endpoint no rank holds, in the file's rank order.
 * config fields left undefined (or NULL) come from comm on existing ranks. */
snclResult_t snclCommGetUniqueId(snclComm_t comm, snclUniqueId* uniqueId);
snclResult_t snclCommGrow(snclComm_t comm, int nranks, const snclUniqueId* uniqueId, int rank, snclComm_t* newcomm,
                          snclConfig_t* config);

#ifdef __cplusplus
}
#endif

#endif /* SNCL_SNCL_H_ */
