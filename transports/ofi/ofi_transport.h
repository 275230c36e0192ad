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
// InvalidArgument errors instead of silently mismatched data. Every receive is directed at
// its peer's address (FI_DIRECTED_RECV): a stranger's message that reaches the endpoint
// (a port reused from a closed job whose sender still retransmits) matches nothing.
// Providers without FI_TAGGED get the same stream over FI_MSG: receives posted in order,
// matched in send order (FI_ORDER_SAS).
//
// Sends leave from the user's buffer: as it is when the provider needs no local
// registration, registered through the cache (ofi_mr.h) when it asks for FI_MR_LOCAL, or
// copied into send slots registered at setup (SNCL_OFI_MR=bounce). Tiny chunks are
// injected. Each peer has its own send backlog (FIFO, so its chunks go out in stream
// order) and at most `slots` chunks in flight: a peer that cannot take more holds up only
// its own sends.
//
// Receives land in a window of receive slots per peer (SNCL_OFI_SLOTS, default 4), each
// registered once at setup and posted ahead of any irecv for the peer's next chunks in
// sequence: every incoming chunk has a buffer whether or not the caller has asked for it
// yet. That is what keeps direct algorithms, which post all sends before their receives,
// out of a cycle under rendezvous protocols (ofi_rxm above its 16 KiB eager limit), where
// a send completes only once the receiver has a buffer for it. Completed slots wait
// until irecvs claim them in posting order; each is handed to the RecvSink in chunk order
// and reposted for the chunk `slots` further on.
//
// A receive that is a plain copy into contiguous memory (RecvSink::dst) takes its chunks
// above the eager limit (kDirectMinBytes) straight into that memory instead, on tagged
// providers that need no local registration: its chunks' slots, already posted, are
// cancelled (fi_cancel), and each one whose cancellation completes is posted again into
// the request's buffer. A chunk that arrived or started to arrive first stays in its slot
// and is copied as before. On 2 cores over tcp a slot's copy is a second pass over every
// byte on the receiving core, beside the provider's own read from its socket. A released
// receive (a failed peer, an abort) cancels the chunks still posted into its buffer; one
// the provider had already begun to fill may still be written until the endpoint closes.
//
// Chunks beyond a peer's window (at most `slots`, the sender's credits) wait in the
// provider as unexpected messages. The transport leaves ofi_rxm's receive buffers per
// connection (FI_OFI_RXM_MSG_RX_SIZE, default 128) to the user: the provider reads the
// variable once per process, and setenv would race with other threads' getenv. Direct
// collectives over tcp;ofi_rxm (libfabric 1.17) pass with it at 2 and any window; at 1
// they stalled now and then, whatever the window.
//
// Progress happens in test() and wait(): both read the completion queue, deliver chunks,
// repost slots, and post what waited for a slot, a credit or room in the provider's
// queues. wait() returns at once when its read found a completion (the caller's request
// may be done); otherwise it sleeps on the CQ's file descriptor (FI_WAIT_FD, after
// fi_trywait) or, for providers without one, on an eventfd with a timeout; abort() writes
// that eventfd.
//
// Under manual progress a send may complete only once its receiver calls in again:
// ofi_rxd (reliability over udp, libfabric 1.17) acknowledges inside the receiver's CQ
// reads and drops an ack it cannot post, and udp drops datagrams under load, so when a
// message's last ack is lost the sender's retransmission is answered only by the
// receiver's next read. A rank whose own requests are done must go on calling test() or
// wait() (its next call of the comm does) while peers wait on sends to it; one that
// stops for good leaves such a send pending until the sender's deadline. Under ASan at 3
// ranks on 2 cores, ofi_rxd once stalled with every request pending, and closing that
// endpoint then never returned (a loop inside libfabric): tcp;ofi_rxm is the provider to run.
//
// At setup the lower rank of each pair sends a zero-byte hello and the higher one answers
// once it arrived (both post their receives at once), so that a connection is made once,
// from one side, rather than by two simultaneous connects; each rank waits for its
// peers' hellos within the deadline, and a peer that does not answer fails setup with a
// message naming it and its address. The receive windows are posted after the hellos:
// under FI_MSG a peer's first message must meet the hello's receive.
//
// Errors are per peer: an error completion (with fi_strerror's and the provider's text) or
// a mismatch fails the pair; its pending and later requests fail with that message.
//
// As one rail of several (ofi_rails.h; options.railDetectMs > 0) the endpoint binds to its
// interface's address and watches the rail (ofi_rail_health.cc): an error completion or a
// failed post, the interface losing its carrier, or requests outstanding with no completion
// for railDetectMs while a probe of the peer's rail address (a TCP connect to a listener
// of the peer's transport, which the peer's kernel answers whether or not its process
// reads the rail) gets no answer, loses the whole rail: every peer's requests fail with
// the rail named, and railLost() says so. A peer that is merely slow answers the probe.
//
// One thread drives a transport (setup, isend, irecv, test, wait); abort() may come from any.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <rdma/fabric.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "lib/base/clock.h"
#include "lib/transport/transport.h"
#include "transports/ofi/ofi.h"
#include "transports/ofi/ofi_fabric.h"
#include "transports/ofi/ofi_mr.h"
#include "transports/ofi/ofi_rail_watch.h"

namespace sncl::ofi {

class OfiTransport : public Transport {
 public:
  explicit OfiTransport(const OfiOptions& options);
  ~OfiTransport() override;

  const char* name() const override { return "ofi"; }
  Result setup(const TransportContext& ctx, const std::vector<int>& peers) override;
  size_t memoryBytes() const override { return poolBytes_; }
  Result isend(int peer, uint64_t tag, const void* data, size_t bytes, RequestId* req) override;
  Result irecv(int peer, uint64_t tag, size_t bytes, RecvSink sink, RequestId* req) override;
  Result test(RequestId req, bool* done) override;
  void wait(int64_t maxMicros) override;
  void abort() override;

  // Request ids are (generation << 16 | index) with generations below 2^11: the top five
  // bits are free for the rail that a request went on (ofi_rails.cc).
  static constexpr RequestId kIdBits = 27;

  bool railLost() const { return railLost_; }  // rail checks only (ofi_rail_health.cc)
  // A lost rail's watch (ofi_rail_watch.h), with this rail's probe listener: peers that
  // probe the rail keep being answered after the endpoint is parked. Null without rail checks.
  std::unique_ptr<RailWatch> takeWatch();

  // wait() in parts, for waiting on several rails at once (ofi_rails.cc): one read of the
  // completion queue (true: it completed something); how long to keep reading before
  // sleeping; the descriptors to sleep on (-1: not now, a read has work to do).
  bool progressNow() { return setupDone_ && !aborted_.load(std::memory_order_relaxed) && progress(); }
  int64_t spinMicros() const { return setupDone_ ? wait_.spinHere() : 0; }
  int yieldsHere() const { return setupDone_ ? wait_.yields : 0; }
  int sleepFds(pollfd fds[2]);
  // Sends posted to the provider and not completed (ofi_rails.cc drains them before a close).
  bool sendsInFlight() const { return freeTx_.size() != txOps_.size(); }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr uint16_t kGenMask = (1u << (kIdBits - 16)) - 1;
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
    bool done = false;     // a receive slot holding a chunk not delivered yet; a completed hello
    uint16_t gen = 0;      // sends: of their request, so completions of released ones are dropped
    uint32_t req = kNone;  // sends only: receive slots belong to their peer, not to a request
    int32_t peer = -1;
    int mrEntry = -1;      // cached registration the send holds a reference on
    char* buf = nullptr;   // its slot (receives; sends under the bounce policy)
    void* desc = nullptr;  // the slot's registration descriptor
    // Receives only:
    bool direct = false;      // posted into its request's buffer, not the slot
    bool cancelling = false;  // fi_cancel asked; its cancellation posts it again (postRecv)
    bool repost = false;      // cancelled, and the provider refused the new post
    uint64_t seq = 0;         // the chunk of the peer's stream it is posted for
    size_t len = 0;        // bytes received
    uint64_t data = 0;     // remote CQ data received
  };

  struct Request {
    bool active = false;
    bool isSend = false;
    bool queued = false;     // in its peer's send backlog or receive queue
    uint16_t gen = 1;
    int32_t peer = -1;
    uint32_t next = kNone;   // link in that list
    uint64_t tag = 0;
    uint64_t check = 0;      // remote CQ data every chunk carries
    size_t bytes = 0;
    uint64_t firstSeq = 0;   // pair sequence of chunk 0
    uint32_t chunks = 0;
    uint32_t posted = 0;     // sends only
    uint32_t finished = 0;   // sends: completed; receives: delivered
    const char* src = nullptr;
    void* desc = nullptr;    // send buffer's registration (cache policy)
    int mrEntry = -1;
    RecvSink sink;
  };

  struct RequestList {
    uint32_t head = kNone;
    uint32_t tail = kNone;
  };

  struct Peer {
    bool connected = false;
    bool sendListed = false;     // in sendReady_
    bool slotsListed = false;    // in slotsReady_
    fi_addr_t addr = FI_ADDR_UNSPEC;
    uint64_t sendSeq = 0;        // chunks assigned to isends
    uint64_t recvSeq = 0;        // chunks assigned to irecvs
    uint64_t postSeq = 0;        // next chunk a receive slot is posted for
    uint64_t deliverSeq = 0;     // next chunk handed to a sink
    uint32_t firstSlot = 0;      // the window is rxOps_[firstSlot, firstSlot + nSlots_)
    uint32_t sendsInFlight = 0;  // posted send chunks not completed (at most nSlots_)
    uint32_t reposts = 0;        // window ops whose cancellation came back and wait for a post
    RequestList sends;           // isends waiting for a credit, a tx op or queue room
    RequestList recvs;           // irecvs not fully delivered, in posting order
    Result error = snclSuccess;  // once set, every request with this peer fails with message
    std::string message;
    std::string address;         // for messages
    sockaddr_in probe{};         // the peer's rail probe listener (port 0: none)
  };

  // setup (ofi_transport.cc)
  Result openEndpoint(size_t npeers, AddressRecord* mine);
  Result checkRecords(const std::vector<AddressRecord>& all, const std::vector<int>& peers);
  Result allocatePools(const std::vector<int>& peers);
  Result connectPeers(const std::vector<AddressRecord>& all, const std::vector<int>& peers, Deadline deadline);
  Result postHellos();

  // posting and progress (ofi_progress.cc)
  Result checkPost(int peer, size_t bytes);
  Result startRequest(int peer, bool isSend, uint64_t tag, size_t bytes, RequestId* id, Request** out);
  void enqueue(RequestList& b, uint32_t index);
  void unlink(RequestList& b, uint32_t index);
  void drainSends(int peer);
  Post postChunks(uint32_t index);
  Post postSendChunk(Request& r, uint32_t index);
  void postSlots(int peer);
  Post postRecv(int peer, Op& op, uint64_t seq);
  char* directTarget(int peer, uint64_t seq, size_t* len);
  void claimChunks(int peer, const Request& r);
  void cancelDirect(const Request& r);
  Post postResult(ssize_t rc, int peer, const char* what);
  bool progress();  // true if it read a completion
  // test()'s read: only when cqReadIntervalNs_ passed since the last read.
  bool progressIfDue();
  void timeEmptyRead(int64_t startNs);  // a read that found nothing took since startNs
  void complete(Op* op, size_t len, uint64_t data);
  void completeWithError();
  void deliver(int peer);
  void freeTxOp(Op* op);
  Request* owner(const Op* op);
  void releaseRequest(uint32_t index);
  void failPeer(int peer, Result code, std::string message);
  size_t chunkLen(const Request& r, uint32_t chunk) const;
  uint64_t chunkTag(int source, uint64_t seq) const;

  // rail checks (ofi_rail_health.cc)
  Result openRailChecks(const std::string& node, AddressRecord* mine);
  void checkRail(bool completed);
  bool probePeers(std::string* why);
  void loseRail(const std::string& why);

  OfiOptions options_;
  int rank_ = -1;
  int nranks_ = 0;
  uint64_t commId_ = 0;
  bool setupDone_ = false;
  WaitPolicy wait_;  // the comm's: spin before sleeping or not
  int64_t cqReadIntervalNs_ = 0;  // test() reads the completion queue at most this often
  int64_t lastCqReadNs_ = 0;      // steady clock of the last read
  int64_t emptyReadNs_ = 0;       // running mean of the reads that found nothing
  bool useCache_ = false;    // register user buffers (else: direct or bounce)
  bool bounce_ = false;
  bool checkData_ = false;   // the provider carries 8 bytes of remote CQ data
  bool directRecv_ = false;  // receives may be posted into the caller's buffers
  // Chunks sent eagerly are copied out of their slots: one that arrives while its slot is
  // being cancelled becomes unexpected and is copied by the provider anyway, and eager
  // chunks taken directly made 8 ranks on 2 cores slower (2 hosts x 4, 512 KiB All-Reduce,
  // 128 KiB messages: 3346-7667 against 3105-3952 us). A rendezvous waits for the receiver's
  // buffer whichever it is, and then moves the bytes once.
  static constexpr size_t kDirectMinBytes = kEagerBytes + 1;
  size_t chunkBytes_ = 0;
  size_t nSlots_ = 0;

  Fabric fabric_;
  Registrar registrar_;
  std::vector<Peer> peers_;  // by rank
  std::vector<Request> requests_;
  std::vector<uint32_t> freeRequests_;
  std::vector<Op> rxOps_;    // nSlots_ receive slots per peer; chunk s of a peer in its slot s % nSlots_
  std::vector<Op> txOps_;    // nSlots_ per peer: credits never wait for another peer's
  std::vector<Op> helloOps_; // per peer: receive, send
  std::vector<uint32_t> freeTx_;
  std::vector<int> sendReady_;   // peers whose send backlog waits (capacity: all peers)
  std::vector<int> slotsReady_;  // peers with a slot to (re)post that the provider refused
  struct FreeDeleter {
    void operator()(char* p) const { free(p); }
  };
  std::unique_ptr<char, FreeDeleter> rxMemory_;
  std::unique_ptr<char, FreeDeleter> txMemory_;
  size_t poolBytes_ = 0;  // of rxMemory_ and txMemory_

  bool railChecks_ = false;  // one rail of several: an interface named
  bool railLost_ = false;
  int ifFd_ = -1;             // a datagram socket for the interface's flags
  int probeFd_ = -1;          // this rail's probe listener; peers' kernels connect to it
  sockaddr_in railAddr_{};
  Clock::time_point railProgress_;   // the last completion, or the first request after idle
  Clock::time_point nextRailCheck_;

  int abortFd_ = -1;  // eventfd: abort() makes it readable, so wait() returns at once
  std::atomic<bool> aborted_{false};
};

}  // namespace sncl::ofi
