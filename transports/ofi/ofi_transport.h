// OfiTransport: how the libfabric transport works.
//
// One reliable-datagram endpoint (FI_EP_RDM) per transport, one completion queue, and an
// address vector holding the peers' endpoint names, all-gathered over the bootstrap.
//
// A message travels as chunks of at most chunkBytes (the smallest any rank asked for,
// within the provider's max_msg_size). Each chunk is one tagged message; its tag names the
// sender and the chunk's place in the pair's stream, (source rank << 40 | pair sequence),
// so both ends derive it without talking and a receive matches exactly one send. The remote
// CQ data of each chunk carries (hash of the message's tag, its byte count), which the
// receiver checks against what it posted: counts or tags that differ across ranks become
// InvalidArgument errors instead of silently mismatched data. Providers without FI_TAGGED
// get the same stream over FI_MSG: receives directed at the peer (FI_DIRECTED_RECV) and
// posted in order, matched in send order (FI_ORDER_SAS).
//
// Sends leave from the user's buffer: as it is when the provider needs no local
// registration, registered through the cache (ofi_mr.h) when it asks for FI_MR_LOCAL, or
// copied into send slots registered at setup (SNCL_OFI_MR=bounce). Tiny chunks are
// injected. Receives land in receive slots registered once at setup and are handed to the
// RecvSink in chunk order; a message longer than all slots streams through them, since a
// slot is reposted as soon as its chunk was delivered. Receiving in place is not possible:
// the sink decides where (and whether with a reduction) the bytes go.
//
// Progress happens in test(): it reads the completion queue, delivers chunks, and posts
// what waited for a slot or for room in the provider's queues (FIFO per direction, so a
// peer's chunks are posted in stream order and sends never wait behind receives). wait()
// sleeps on the CQ's file descriptor (FI_WAIT_FD, after fi_trywait) or, for providers
// without one, on an eventfd with a timeout; abort() writes that eventfd.
//
// At setup each rank sends a zero-byte hello to each peer and waits for theirs within the
// deadline: connections are made then rather than in the first collective, and a peer
// that does not answer fails setup with a message naming it and its address.
//
// Errors are per peer: an error completion (with fi_strerror's and the provider's text) or
// a mismatch fails the pair; its pending and later requests fail with that message.
//
// One thread drives a transport (setup, isend, irecv, test, wait); abort() may come from any.
#pragma once

#include <rdma/fabric.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "lib/clock.h"
#include "lib/transport.h"
#include "transports/ofi/ofi.h"
#include "transports/ofi/ofi_fabric.h"
#include "transports/ofi/ofi_mr.h"

namespace sncl::ofi {

class OfiTransport : public Transport {
 public:
  explicit OfiTransport(const OfiOptions& options);
  ~OfiTransport() override;

  const char* name() const override { return "ofi"; }
  Result setup(const TransportContext& ctx, const std::vector<int>& peers) override;
  Result isend(int peer, uint64_t tag, const void* data, size_t bytes, RequestId* req) override;
  Result irecv(int peer, uint64_t tag, size_t bytes, RecvSink sink, RequestId* req) override;
  Result test(RequestId req, bool* done) override;
  void wait(int64_t maxMicros) override;
  void abort() override;

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr uint64_t kControlBit = 1ull << 63;  // setup's hellos; data tags never set it
  static constexpr int kSeqBits = 40;
  enum class OpKind : uint8_t { Send, Recv, HelloSend, HelloRecv };
  enum class Post { Done, Blocked, Failed };

  // One posted operation. The provider's scratch comes first (FI_CONTEXT2 mode): the
  // completion's op_context points at it.
  struct Op {
    fi_context2 ctx;
    OpKind kind = OpKind::Send;
    bool busy = false;     // posted; its completion was not read yet
    bool done = false;     // a receive that completed and awaits in-order delivery
    uint16_t gen = 0;      // of the request it belongs to: completions of released ones are dropped
    uint32_t req = kNone;
    uint32_t chunk = 0;
    int32_t peer = -1;
    int mrEntry = -1;      // cached registration the send holds a reference on
    char* buf = nullptr;   // its slot (receives; sends under the bounce policy)
    void* desc = nullptr;  // the slot's registration descriptor
    size_t len = 0;        // bytes received
    uint64_t data = 0;     // remote CQ data received
  };

  struct Request {
    bool active = false;
    bool isSend = false;
    bool queued = false;     // in its direction's backlog
    uint16_t gen = 1;
    int32_t peer = -1;
    uint32_t next = kNone;   // backlog link
    uint64_t tag = 0;
    uint64_t check = 0;      // remote CQ data every chunk carries
    size_t bytes = 0;
    uint64_t firstSeq = 0;   // pair sequence of chunk 0
    uint32_t chunks = 0;
    uint32_t posted = 0;
    uint32_t finished = 0;   // sends: completed; receives: delivered
    const char* src = nullptr;
    void* desc = nullptr;    // send buffer's registration (cache policy)
    int mrEntry = -1;
    RecvSink sink;
  };

  struct Peer {
    bool connected = false;
    fi_addr_t addr = FI_ADDR_UNSPEC;
    uint64_t sendSeq = 0;
    uint64_t recvSeq = 0;
    Result error = snclSuccess;  // once set, every request with this peer fails with message
    std::string message;
    std::string address;         // for messages
  };

  struct Backlog {
    uint32_t head = kNone;
    uint32_t tail = kNone;
  };

  // setup (ofi_transport.cc)
  Result openEndpoint(size_t npeers, AddressRecord* mine);
  Result checkRecords(const std::vector<AddressRecord>& all, const std::vector<int>& peers);
  Result allocatePools(size_t npeers);
  Result connectPeers(const std::vector<AddressRecord>& all, const std::vector<int>& peers, Deadline deadline);
  Result postHellos(const std::vector<int>& peers, size_t* posted);

  // posting and progress (ofi_progress.cc)
  Result checkPost(int peer, size_t bytes);
  Result startRequest(int peer, bool isSend, uint64_t tag, size_t bytes, RequestId* id, Request** out);
  void enqueue(Backlog& b, uint32_t index);
  void drain(Backlog& b);
  Post postChunks(uint32_t index);
  Post postSendChunk(Request& r, uint32_t index);
  Post postRecvChunk(Request& r, uint32_t index);
  Post postResult(ssize_t rc, int peer, const char* what);
  void progress();
  void complete(Op* op, size_t len, uint64_t data);
  void completeWithError();
  void deliver(Request& r, uint32_t index);
  void freeOp(Op* op);
  Request* owner(const Op* op);
  void releaseRequest(uint32_t index);
  void failPeer(int peer, Result code, std::string message);
  size_t chunkLen(const Request& r, uint32_t chunk) const;
  uint64_t chunkTag(int source, uint64_t seq) const;

  OfiOptions options_;
  int rank_ = -1;
  int nranks_ = 0;
  uint64_t commId_ = 0;
  bool setupDone_ = false;
  bool useCache_ = false;    // register user buffers (else: direct or bounce)
  bool bounce_ = false;
  bool checkData_ = false;   // the provider carries 8 bytes of remote CQ data
  size_t chunkBytes_ = 0;
  size_t nSlots_ = 0;

  Fabric fabric_;
  Registrar registrar_;
  std::vector<Peer> peers_;  // by rank
  std::vector<Request> requests_;
  std::vector<uint32_t> freeRequests_;
  std::vector<Op> rxOps_;    // one per receive slot
  std::vector<Op> txOps_;
  std::vector<Op> helloOps_;
  std::vector<uint32_t> freeRx_;
  std::vector<uint32_t> freeTx_;
  std::vector<uint32_t> window_;  // request r's chunk c lives in rxOps_[window_[r * nSlots_ + c % nSlots_]]
  Backlog sendBacklog_;
  Backlog recvBacklog_;
  struct FreeDeleter {
    void operator()(char* p) const { free(p); }
  };
  std::unique_ptr<char, FreeDeleter> rxMemory_;
  std::unique_ptr<char, FreeDeleter> txMemory_;

  int abortFd_ = -1;  // eventfd: abort() makes it readable, so wait() returns at once
  std::atomic<bool> aborted_{false};
};

}  // namespace sncl::ofi
