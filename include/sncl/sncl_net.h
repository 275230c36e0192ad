/* sncl network plugins: the C ABI of an external transport loaded with dlopen.
 *
 * A plugin is a shared library that exports one symbol, snclNetPlugin_v1, of type
 * snclNet_v1_t. sncl loads the library named by SNCL_NET_PLUGIN (a path, or a name N for
 * libsncl-net-N.so found by the dynamic loader), checks the version and that no function
 * pointer is NULL, and drives it as the "plugin" transport (docs/plugins.md).
 *
 * The plugin moves bytes; sncl does everything else. Every call is nonblocking: sncl owns
 * the deadlines and polls (connect, accept, isend, irecv and test return at once), so a
 * plugin never has to know how long anything may take. sncl cuts large messages into
 * pieces no larger than the receive buffers it posts, and it checks the sizes it gets.
 *
 * Threads: all calls on one context come from one thread at a time (a comm runs one call
 * at a time), so a plugin needs no locks of its own for a context and its comms. Several
 * contexts (one per communicator) may be used from different threads at once.
 *
 * Only <stddef.h>, <stdint.h> and sncl.h's snclResult_t are needed to write a plugin. */
#ifndef SNCL_NET_H_
#define SNCL_NET_H_

#include <stddef.h>
#include <stdint.h>

#include "sncl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version a plugin puts in snclNet_v1_t.version, and the one this sncl loads. A
 * future layout gets a new version and a new symbol (snclNetPlugin_v2), so that one
 * library can serve several sncl releases. */
#define SNCL_NET_PLUGIN_VERSION 1
#define SNCL_NET_PLUGIN_SYMBOL "snclNetPlugin_v1"

/* Bytes of a listen handle: what a rank publishes so that others can connect to it (an
 * address, a port, a key). sncl exchanges exactly this many bytes per rank. */
#define SNCL_NET_HANDLE_MAXSIZE 128

typedef enum {
  SNCL_NET_LOG_WARN = 1, /* something failed: say what, the core returns the error */
  SNCL_NET_LOG_INFO = 2, /* setup facts (addresses, devices), shown with SNCL_DEBUG=INFO */
  SNCL_NET_LOG_TRACE = 3 /* per-message detail, SNCL_DEBUG=TRACE */
} snclNetLogLevel_t;

/* Logs through sncl (its prefix, its levels, its SNCL_DEBUG filter), printf-style. The
 * core keeps the last WARN line of the calling thread and appends it to the error it
 * reports when the call then fails, so a plugin explains its failures by logging them. */
typedef void (*snclNetLogger_t)(snclNetLogLevel_t level, const char* fmt, ...);

/* What the core tells a plugin when it makes a context (one per communicator). */
typedef struct {
  int rank;             /* this rank in the communicator, for log lines */
  int nranks;           /* ranks in the communicator */
  uint64_t commId;      /* equal on all ranks of the communicator, unique per communicator */
  int64_t timeoutMs;    /* the communicator's deadline; the core enforces it, a plugin may
                           use it to size its own internal waits (it should have none) */
  snclNetLogger_t log;  /* never NULL */
} snclNetInitArgs_t;

/* The table a plugin exports. Every function pointer must be set (a NULL one is refused
 * at load). Functions return snclSuccess or an error; on an error they should log why at
 * SNCL_NET_LOG_WARN first. After an error on a send or receive comm the core uses that
 * comm only to close it.
 *
 * Messages: a send comm (made by connect) and the receive comm the peer accepted for it
 * are one ordered, reliable pipe. The n-th isend on a send comm matches the n-th irecv on
 * its receive comm, whatever their tags: the plugin sends the tag and the size with the
 * data, and the receiving side fails the receive with snclInvalidArgument when the tag
 * differs from the posted one or the size exceeds the posted one (never writing past the
 * posted buffer). The core then reports a tag or size mismatch naming the peer. A send
 * may complete as soon as its data is handed over (it need not wait for the receive). */
typedef struct {
  /* SNCL_NET_PLUGIN_VERSION. First, so that the core reads it before trusting anything
   * else in a table of another version. */
  uint32_t version;
  /* Short name for log lines and errors ("socket", "ib"). */
  const char* name;

  /* Makes a context for one communicator. *ctx is passed back to devices, listen,
   * connect and finalize. The plugin keeps no global state a second context could see. */
  snclResult_t (*init)(const snclNetInitArgs_t* args, void** ctx);
  /* Number of network devices (>= 1 to be usable); sncl uses device 0 today. */
  snclResult_t (*devices)(void* ctx, int* ndev);
  /* Starts listening on dev: fills handle (at most SNCL_NET_HANDLE_MAXSIZE bytes, which
   * the core sends to every other rank) and returns a listen comm for accept. */
  snclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  /* Starts a connection to the rank that published handle; returns a send comm at once.
   * The connection may finish later, inside isend and test (nonblocking). */
  snclResult_t (*connect)(void* ctx, int dev, const void* handle, void** sendComm);
  /* Takes one incoming connection if there is one: *recvComm is NULL when none is waiting
   * yet (the core calls again until its deadline). Connections arrive in any order; the
   * core identifies the sender by the first message, which it sends itself. */
  snclResult_t (*accept)(void* listenComm, void** recvComm);

  /* Posts a send of size bytes (0 allowed) with tag. data stays valid and unchanged until
   * test reports the request done. *request NULL means "not now" (too many in flight):
   * the core tests earlier requests and posts again. */
  snclResult_t (*isend)(void* sendComm, const void* data, size_t size, uint64_t tag, void** request);
  /* Posts a receive into data of at most size bytes with the expected tag. *request NULL
   * means "not now", as for isend. */
  snclResult_t (*irecv)(void* recvComm, void* data, size_t size, uint64_t tag, void** request);
  /* Advances the request's comm and reports whether request finished (*done = 1); for a
   * receive, *size is the number of bytes the sender sent. A finished or failed request
   * is released by this call; the core never tests it again. Errors: snclInvalidArgument
   * for a tag or size mismatch, snclRemoteError for a peer that closed or failed,
   * snclSystemError for a local failure. */
  snclResult_t (*test)(void* request, int* done, size_t* size);

  /* Close a comm, releasing every request still posted on it (the core never tests them
   * again). Called also after errors and after an abort, so they must not block. */
  snclResult_t (*closeSend)(void* sendComm);
  snclResult_t (*closeRecv)(void* recvComm);
  snclResult_t (*closeListen)(void* listenComm);
  /* Frees a context after all its comms were closed. */
  snclResult_t (*finalize)(void* ctx);
} snclNet_v1_t;

#ifdef __cplusplus
}
#endif

#endif /* SNCL_NET_H_ */
