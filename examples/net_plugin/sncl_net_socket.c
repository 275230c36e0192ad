/* An example sncl network plugin: TCP sockets, nonblocking, polled (include/sncl/sncl_net.h,
 * docs/plugins.md). It listens on the IPv4 address of the interface SNCL_SOCKET_IFNAME names
 * (loopback by default). Each message on the wire is a header (tag, size) and the data; a
 * send comm and its receive comm are one TCP connection, so messages stay in order.
 *
 * Built as libsncl-net-example.so. The tests build two broken variants from this file:
 * -DSNCL_NET_EXAMPLE_WRONG_VERSION (the table says version 99) and
 * -DSNCL_NET_EXAMPLE_NO_SYMBOL (the table is exported under another name); a third,
 * -DSNCL_NET_EXAMPLE_NULL_ENTRY, leaves test NULL. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sncl/sncl_net.h"

#define MAX_REQUESTS 8 /* in flight per comm; more is "not now" (request NULL) */
#define HANDLE_MAGIC 0x534f434bu

typedef struct {
  snclNetInitArgs_t args;
  struct in_addr addr; /* where this rank listens */
} Context;

typedef struct {
  uint32_t magic;
  uint16_t port; /* network order */
  uint16_t pad;
  struct in_addr addr;
} Handle;

typedef struct {
  uint64_t tag;
  uint64_t size;
} Header;

struct Comm;

typedef struct {
  struct Comm* comm;
  int used;      /* posted and not yet released by test */
  int done;
  char* data;    /* send: the caller's data; receive: the posted buffer */
  size_t size;   /* send: bytes to send; receive: capacity, then bytes received */
  uint64_t tag;
  Header header; /* send: filled at post; receive: read from the wire */
  size_t moved;  /* bytes of header + data sent or received so far */
} Request;

typedef struct Comm {
  Context* ctx;
  int fd;
  int isSend;
  int connected;      /* send: the nonblocking connect finished */
  snclResult_t error; /* once set, every test fails with it */
  Request requests[MAX_REQUESTS];
  int order[MAX_REQUESTS]; /* posted requests oldest first, indexes into requests */
  int first, count;
} Comm;

#define LOG(ctx, level, ...) (ctx)->args.log((level), __VA_ARGS__)

static snclResult_t findAddress(Context* ctx) {
  const char* ifname = getenv("SNCL_SOCKET_IFNAME");
  if (!ifname || !*ifname) ifname = "lo";
  struct ifaddrs* list = NULL;
  if (getifaddrs(&list) != 0) {
    LOG(ctx, SNCL_NET_LOG_WARN, "socket plugin: getifaddrs: %s", strerror(errno));
    return snclSystemError;
  }
  int found = 0;
  for (struct ifaddrs* i = list; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || strcmp(i->ifa_name, ifname) != 0) continue;
    ctx->addr = ((struct sockaddr_in*)i->ifa_addr)->sin_addr;
    found = 1;
  }
  freeifaddrs(list);
  if (!found) {
    LOG(ctx, SNCL_NET_LOG_WARN, "socket plugin: interface %s (SNCL_SOCKET_IFNAME) has no IPv4 address", ifname);
    return snclSystemError;
  }
  return snclSuccess;
}

static snclResult_t netInit(const snclNetInitArgs_t* args, void** ctxOut) {
  Context* ctx = calloc(1, sizeof(Context));
  if (!ctx) return snclSystemError;
  ctx->args = *args;
  snclResult_t r = findAddress(ctx);
  if (r != snclSuccess) {
    free(ctx);
    return r;
  }
  char text[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &ctx->addr, text, sizeof(text));
  LOG(ctx, SNCL_NET_LOG_INFO, "socket plugin: rank %d of %d uses %s", args->rank, args->nranks, text);
  *ctxOut = ctx;
  return snclSuccess;
}

static snclResult_t netDevices(void* ctx, int* ndev) {
  (void)ctx;
  *ndev = 1;
  return snclSuccess;
}

static Comm* newComm(Context* ctx, int fd, int isSend) {
  Comm* c = calloc(1, sizeof(Comm));
  if (!c) return NULL;
  c->ctx = ctx;
  c->fd = fd;
  c->isSend = isSend;
  for (int i = 0; i < MAX_REQUESTS; ++i) c->requests[i].comm = c;
  return c;
}

static snclResult_t netListen(void* ctxv, int dev, void* handle, void** listenComm) {
  Context* ctx = ctxv;
  (void)dev;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    LOG(ctx, SNCL_NET_LOG_WARN, "socket plugin: socket: %s", strerror(errno));
    return snclSystemError;
  }
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr = ctx->addr;
  socklen_t len = sizeof(sa);
  if (bind(fd, (struct sockaddr*)&sa, sizeof(sa)) != 0 || listen(fd, 1024) != 0 ||
      getsockname(fd, (struct sockaddr*)&sa, &len) != 0) {
    LOG(ctx, SNCL_NET_LOG_WARN, "socket plugin: bind/listen: %s", strerror(errno));
    close(fd);
    return snclSystemError;
  }
  Handle h;
  memset(&h, 0, sizeof(h));
  h.magic = HANDLE_MAGIC;
  h.port = sa.sin_port;
  h.addr = sa.sin_addr;
  memset(handle, 0, SNCL_NET_HANDLE_MAXSIZE);
  memcpy(handle, &h, sizeof(h));
  Comm* c = newComm(ctx, fd, 0);
  if (!c) {
    close(fd);
    return snclSystemError;
  }
  *listenComm = c;
  return snclSuccess;
}

static snclResult_t netConnect(void* ctxv, int dev, const void* handle, void** sendComm) {
  Context* ctx = ctxv;
  (void)dev;
  Handle h;
  memcpy(&h, handle, sizeof(h));
  if (h.magic != HANDLE_MAGIC) {
    LOG(ctx, SNCL_NET_LOG_WARN, "socket plugin: a handle that this plugin did not make");
    return snclInvalidArgument;
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    LOG(ctx, SNCL_NET_LOG_WARN, "socket plugin: socket: %s", strerror(errno));
    return snclSystemError;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = h.port;
  sa.sin_addr = h.addr;
  if (connect(fd, (struct sockaddr*)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS) {
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &h.addr, text, sizeof(text));
    LOG(ctx, SNCL_NET_LOG_WARN, "socket plugin: connect to %s:%d: %s", text, ntohs(h.port), strerror(errno));
    close(fd);
    return snclRemoteError;
  }
  Comm* c = newComm(ctx, fd, 1);
  if (!c) {
    close(fd);
    return snclSystemError;
  }
  *sendComm = c;
  return snclSuccess;
}

static snclResult_t netAccept(void* listenComm, void** recvComm) {
  Comm* l = listenComm;
  *recvComm = NULL;
  int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) return snclSuccess;
    LOG(l->ctx, SNCL_NET_LOG_WARN, "socket plugin: accept: %s", strerror(errno));
    return snclSystemError;
  }
  Comm* c = newComm(l->ctx, fd, 0);
  if (!c) {
    close(fd);
    return snclSystemError;
  }
  c->connected = 1;
  *recvComm = c;
  return snclSuccess;
}

static snclResult_t post(Comm* c, void* data, size_t size, uint64_t tag, void** request) {
  *request = NULL;
  if (c->error != snclSuccess) return c->error;
  if (c->count == MAX_REQUESTS) return snclSuccess; /* not now */
  int slot = 0;
  while (slot < MAX_REQUESTS && c->requests[slot].used) ++slot;
  if (slot == MAX_REQUESTS) return snclSuccess; /* all finished ones not yet tested */
  Request* r = &c->requests[slot];
  r->used = 1;
  r->done = 0;
  r->data = data;
  r->size = size;
  r->tag = tag;
  r->moved = 0;
  r->header.tag = tag;
  r->header.size = size;
  c->order[(c->first + c->count) % MAX_REQUESTS] = slot;
  ++c->count;
  *request = r;
  return snclSuccess;
}

static snclResult_t netIsend(void* sendComm, const void* data, size_t size, uint64_t tag, void** request) {
  return post(sendComm, (void*)data, size, tag, request);
}

static snclResult_t netIrecv(void* recvComm, void* data, size_t size, uint64_t tag, void** request) {
  return post(recvComm, data, size, tag, request);
}

static snclResult_t failComm(Comm* c, snclResult_t code) {
  c->error = code;
  return code;
}

/* Sends or receives as much of the oldest request as the socket takes; 1 when it finished. */
static int advanceOne(Comm* c, Request* r) {
  const size_t hb = sizeof(Header);
  while (c->error == snclSuccess) {
    int inHeader = r->moved < hb;
    if (!inHeader && (!c->isSend ? r->moved == hb + r->header.size : r->moved == hb + r->size)) return 1;
    char* p = inHeader ? (char*)&r->header + r->moved : r->data + (r->moved - hb);
    size_t left = inHeader ? hb - r->moved : (c->isSend ? r->size : r->header.size) - (r->moved - hb);
    ssize_t n = c->isSend ? send(c->fd, p, left, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(c->fd, p, left, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
      LOG(c->ctx, SNCL_NET_LOG_WARN, "socket plugin: %s: %s", c->isSend ? "send" : "recv", strerror(errno));
      failComm(c, snclRemoteError);
      return 0;
    }
    if (n == 0 && !c->isSend) {
      LOG(c->ctx, SNCL_NET_LOG_WARN, "socket plugin: the peer closed the connection");
      failComm(c, snclRemoteError);
      return 0;
    }
    r->moved += (size_t)n;
    if (!c->isSend && r->moved == hb) {
      /* The header is in: the message must be the one posted (ordering is the caller's). */
      if (r->header.tag != r->tag || r->header.size > r->size) {
        LOG(c->ctx, SNCL_NET_LOG_WARN,
            "socket plugin: message of tag 0x%llx, %llu bytes arrived for a receive of tag 0x%llx, at most %zu bytes",
            (unsigned long long)r->header.tag, (unsigned long long)r->header.size, (unsigned long long)r->tag,
            r->size);
        failComm(c, snclInvalidArgument);
        return 0;
      }
    }
  }
  return 0;
}

static void progress(Comm* c) {
  if (c->isSend && !c->connected) {
    struct pollfd pfd = {c->fd, POLLOUT, 0};
    if (poll(&pfd, 1, 0) <= 0) return;
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) {
      LOG(c->ctx, SNCL_NET_LOG_WARN, "socket plugin: connect: %s", strerror(err));
      failComm(c, snclRemoteError);
      return;
    }
    c->connected = 1;
  }
  while (c->count > 0 && c->error == snclSuccess) {
    Request* r = &c->requests[c->order[c->first]];
    if (!advanceOne(c, r)) return;
    r->done = 1;
    c->first = (c->first + 1) % MAX_REQUESTS;
    --c->count;
  }
}

__attribute__((unused)) static snclResult_t netTest(void* request, int* done, size_t* size) {
  Request* r = request;
  Comm* c = r->comm;
  *done = 0;
  if (!r->done) progress(c);
  if (r->done) {
    *done = 1;
    if (size) *size = c->isSend ? r->size : (size_t)r->header.size;
    r->used = 0;
    return snclSuccess;
  }
  if (c->error != snclSuccess) {
    r->used = 0; /* released: the comm is only closed from now on */
    return c->error;
  }
  return snclSuccess;
}

static snclResult_t closeComm(void* comm) {
  Comm* c = comm;
  if (!c) return snclSuccess;
  close(c->fd);
  free(c);
  return snclSuccess;
}

static snclResult_t netFinalize(void* ctx) {
  free(ctx);
  return snclSuccess;
}

#if defined(SNCL_NET_EXAMPLE_NO_SYMBOL)
#define SNCL_NET_EXAMPLE_EXPORT snclNetPlugin_misspelled
#else
#define SNCL_NET_EXAMPLE_EXPORT snclNetPlugin_v1
#endif
#if defined(SNCL_NET_EXAMPLE_WRONG_VERSION)
#define SNCL_NET_EXAMPLE_VERSION 99
#else
#define SNCL_NET_EXAMPLE_VERSION SNCL_NET_PLUGIN_VERSION
#endif

__attribute__((visibility("default"))) const snclNet_v1_t SNCL_NET_EXAMPLE_EXPORT = {
    .version = SNCL_NET_EXAMPLE_VERSION,
    .name = "socket",
    .init = netInit,
    .devices = netDevices,
    .listen = netListen,
    .connect = netConnect,
    .accept = netAccept,
    .isend = netIsend,
    .irecv = netIrecv,
#if defined(SNCL_NET_EXAMPLE_NULL_ENTRY)
    .test = NULL,
#else
    .test = netTest,
#endif
    .closeSend = closeComm,
    .closeRecv = closeComm,
    .closeListen = closeComm,
    .finalize = netFinalize,
};
