// OfiTransport: posting, completion processing and delivery (see ofi_transport.h).
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <cstring>

#include "lib/base/log.h"
#include "lib/base/trace.h"
#include "transports/ofi/ofi_transport.h"

namespace sncl::ofi {
namespace {

// What every chunk of a message carries as remote CQ data: a hash of its tag (high half)
// and its byte count (low half), so that a receiver tells which of the two differs.
uint64_t checkValue(uint64_t tag, size_t bytes) {
  const uint64_t h = (tag ^ (tag >> 29)) * 0xbf58476d1ce4e5b9ull;
  return (h & 0xffffffff00000000ull) | static_cast<uint32_t>(bytes);
}

constexpr int kCqBatch = 16;

}  // namespace

uint64_t OfiTransport::chunkTag(int source, uint64_t seq) const {
  return (static_cast<uint64_t>(source) << kSeqBits) | (seq & ((1ull << kSeqBits) - 1));
}

size_t OfiTransport::chunkLen(const Request& r, uint32_t chunk) const {
  const size_t offset = static_cast<size_t>(chunk) * chunkBytes_;
  return std::min(chunkBytes_, r.bytes - offset);
}

Result OfiTransport::checkPost(int peer, size_t bytes) {
  if (aborted_.load(std::memory_order_relaxed))
    return fail(snclInvalidUsage, "ofi: rank {}: the transport was aborted", rank_);
  if (!setupDone_) return fail(snclInvalidUsage, "ofi: isend/irecv before setup finished");
  if (peer < 0 || peer >= nranks_ || !peers_[peer].connected)
    return fail(snclInvalidArgument, "ofi: rank {} is not connected to rank {}", rank_, peer);
  if (peers_[peer].error != snclSuccess) return fail(peers_[peer].error, "{}", peers_[peer].message);
  return snclSuccess;
}

Result OfiTransport::startRequest(int peer, bool isSend, uint64_t tag, size_t bytes, RequestId* id, Request** out) {
  if (freeRequests_.empty())
    return fail(snclInvalidUsage, "ofi: rank {}: more than {} requests outstanding", rank_, requests_.size());
  // A rail's stall clock starts when it gets work after being idle.
  if (railChecks_ && freeRequests_.size() == requests_.size()) railProgress_ = Clock::now();
  const uint32_t index = freeRequests_.back();
  freeRequests_.pop_back();
  Request& r = requests_[index];
  const uint16_t gen = r.gen;
  r = Request{};
  r.gen = gen;
  r.active = true;
  r.isSend = isSend;
  r.peer = peer;
  r.tag = tag;
  r.check = checkValue(tag, bytes);
  r.bytes = bytes;
  r.chunks = bytes ? static_cast<uint32_t>((bytes + chunkBytes_ - 1) / chunkBytes_) : 1;
  uint64_t& seq = isSend ? peers_[peer].sendSeq : peers_[peer].recvSeq;
  r.firstSeq = seq;
  seq += r.chunks;
  *id = (static_cast<RequestId>(gen) << 16) | index;
  *out = &r;
  return snclSuccess;
}

Result OfiTransport::isend(int peer, uint64_t tag, const void* data, size_t bytes, RequestId* id) {
  SNCL_CHECK(checkPost(peer, bytes));
  if (bytes && !data)
    return fail(snclInvalidArgument, "ofi: rank {}: send of {} bytes to rank {} from a null buffer", rank_, bytes, peer);
  int mrEntry = -1;
  void* desc = nullptr;
  if (useCache_ && bytes) SNCL_CHECK(registrar_.acquire(data, bytes, &mrEntry, &desc));
  Request* r = nullptr;
  Result res = startRequest(peer, true, tag, bytes, id, &r);
  if (res != snclSuccess) {
    if (mrEntry >= 0) registrar_.release(mrEntry);
    return res;
  }
  r->src = static_cast<const char*>(data);
  r->mrEntry = mrEntry;
  r->desc = desc;
  const uint32_t index = *id & 0xffff;
  // Behind the peer's earlier sends that wait: its chunks go out in stream order.
  Peer& p = peers_[peer];
  if (p.sends.head == kNone && postChunks(index) != Post::Blocked) return snclSuccess;
  enqueue(p.sends, index);
  if (!p.sendListed) {
    p.sendListed = true;
    sendReady_.push_back(peer);
  }
  return snclSuccess;
}

Result OfiTransport::irecv(int peer, uint64_t tag, size_t bytes, RecvSink sink, RequestId* id) {
  SNCL_CHECK(checkPost(peer, bytes));
  if (bytes && !sink.deliver)
    return fail(snclInvalidArgument, "ofi: rank {}: receive of {} bytes from rank {} without a sink", rank_, bytes, peer);
  Request* r = nullptr;
  SNCL_CHECK(startRequest(peer, false, tag, bytes, id, &r));
  r->sink = sink;
  enqueue(peers_[peer].recvs, *id & 0xffff);
  deliver(peer);  // chunks that arrived before the irecv wait in the window
  if (directRecv_ && sink.dst) claimChunks(peer, *r);
  return snclSuccess;
}

Result OfiTransport::test(RequestId id, bool* done) {
  *done = false;
  const uint32_t index = id & 0xffff;
  if (index >= requests_.size() || !requests_[index].active || requests_[index].gen != id >> 16)
    return fail(snclInvalidUsage, "ofi: rank {}: unknown request id {:#x}", rank_, id);
  if (aborted_.load(std::memory_order_relaxed)) {
    releaseRequest(index);
    return fail(snclInvalidUsage, "ofi: rank {}: the transport was aborted", rank_);
  }
  Request& r = requests_[index];
  if (r.finished != r.chunks) progressIfDue();
  if (r.finished == r.chunks) {
    releaseRequest(index);
    *done = true;
    return snclSuccess;
  }
  const Peer& p = peers_[r.peer];
  if (p.error != snclSuccess) {
    releaseRequest(index);
    return fail(p.error, "{}", p.message);
  }
  return snclSuccess;
}

void OfiTransport::enqueue(RequestList& b, uint32_t index) {
  Request& r = requests_[index];
  r.queued = true;
  r.next = kNone;
  if (b.tail == kNone) b.head = index;
  else requests_[b.tail].next = index;
  b.tail = index;
}

void OfiTransport::unlink(RequestList& b, uint32_t index) {
  uint32_t prev = kNone;
  uint32_t i = b.head;
  while (i != index) {
    prev = i;
    i = requests_[i].next;
  }
  (prev == kNone ? b.head : requests_[prev].next) = requests_[index].next;
  if (b.tail == index) b.tail = prev;
  requests_[index].queued = false;
}

// Posts the peer's backlog in order and stops at the first request that cannot go further:
// later ones must not overtake it in the stream.
void OfiTransport::drainSends(int peer) {
  RequestList& b = peers_[peer].sends;
  while (b.head != kNone) {
    const uint32_t index = b.head;
    if (peers_[peer].error == snclSuccess && postChunks(index) == Post::Blocked) return;
    unlink(b, index);
  }
}

OfiTransport::Post OfiTransport::postChunks(uint32_t index) {
  Request& r = requests_[index];
  while (r.posted < r.chunks) {
    Post p = postSendChunk(r, index);
    if (p != Post::Done) return p;
  }
  return Post::Done;
}

OfiTransport::Post OfiTransport::postResult(ssize_t rc, int peer, const char* what) {
  if (rc == 0) return Post::Done;
  if (rc == -FI_EAGAIN) return Post::Blocked;
  const std::string why = fmt::format("posting a {} rank {} ({}) failed: {}", what, peer, peers_[peer].address,
                                      fi_strerror(static_cast<int>(-rc)));
  if (railChecks_) loseRail(why);
  else failPeer(peer, snclRemoteError, fmt::format("ofi: rank {}: {}", rank_, why));
  return Post::Failed;
}

OfiTransport::Post OfiTransport::postSendChunk(Request& r, uint32_t index) {
  const uint32_t c = r.posted;
  const size_t len = chunkLen(r, c);
  const char* src = r.src + static_cast<size_t>(c) * chunkBytes_;
  const uint64_t tag = chunkTag(rank_, r.firstSeq + c);
  Peer& peer = peers_[r.peer];
  const fi_addr_t addr = peer.addr;
  fid_ep* ep = fabric_.ep();
  const bool tagged = fabric_.tagged();
  if (len <= fabric_.injectSize()) {
    // Injected: the provider copies it now and reports no completion.
    ssize_t rc = checkData_ ? (tagged ? fi_tinjectdata(ep, src, len, r.check, addr, tag)
                                      : fi_injectdata(ep, src, len, r.check, addr))
                            : (tagged ? fi_tinject(ep, src, len, addr, tag) : fi_inject(ep, src, len, addr));
    Post p = postResult(rc, r.peer, "send to");
    if (p == Post::Done) ++r.posted, ++r.finished;
    return p;
  }
  // A credit per chunk in flight, as many as the peer has receive slots; each peer has as
  // many tx ops, so the pool is a safety net rather than something peers compete for.
  if (peer.sendsInFlight >= nSlots_ || freeTx_.empty()) return Post::Blocked;
  Op& op = txOps_[freeTx_.back()];
  void* desc = r.desc;
  if (bounce_) {
    memcpy(op.buf, src, len);
    src = op.buf;
    desc = op.desc;
  }
  op.req = index;
  op.gen = r.gen;
  op.peer = r.peer;
  op.mrEntry = r.mrEntry;
  ssize_t rc = checkData_ ? (tagged ? fi_tsenddata(ep, src, len, desc, r.check, addr, tag, &op.ctx)
                                    : fi_senddata(ep, src, len, desc, r.check, addr, &op.ctx))
                          : (tagged ? fi_tsend(ep, src, len, desc, addr, tag, &op.ctx)
                                    : fi_send(ep, src, len, desc, addr, &op.ctx));
  Post p = postResult(rc, r.peer, "send to");
  if (p != Post::Done) return p;
  freeTx_.pop_back();
  op.busy = true;
  ++peer.sendsInFlight;
  if (op.mrEntry >= 0) registrar_.addRef(op.mrEntry);
  ++r.posted;
  return p;
}

// Keeps the peer's window posted: a slot for every chunk up to nSlots_ past the next one
// to deliver. Slots hold whole chunks; the completion says how much arrived. Ops whose
// cancellation came back while the provider refused posts go first.
void OfiTransport::postSlots(int peer) {
  Peer& p = peers_[peer];
  for (uint64_t seq = p.deliverSeq; p.reposts && p.error == snclSuccess && seq < p.postSeq; ++seq) {
    Op& op = rxOps_[p.firstSlot + seq % nSlots_];
    if (!op.repost) continue;
    if (postRecv(peer, op, seq) != Post::Done) return;
    op.repost = false;
    --p.reposts;
  }
  while (p.error == snclSuccess && p.postSeq < p.deliverSeq + nSlots_) {
    Op& op = rxOps_[p.firstSlot + p.postSeq % nSlots_];
    if (postRecv(peer, op, p.postSeq) != Post::Done) return;
    ++p.postSeq;
  }
}

// Posts the window op for chunk seq: into the buffer of the receive it belongs to when
// that one takes its chunks directly, else into the op's slot.
OfiTransport::Post OfiTransport::postRecv(int peer, Op& op, uint64_t seq) {
  Peer& p = peers_[peer];
  fid_ep* ep = fabric_.ep();
  size_t len = chunkBytes_;
  char* to = directRecv_ ? directTarget(peer, seq, &len) : nullptr;
  ssize_t rc = fabric_.tagged() ? fi_trecv(ep, to ? to : op.buf, len, to ? nullptr : op.desc, p.addr,
                                           chunkTag(peer, seq), 0, &op.ctx)
                                : fi_recv(ep, op.buf, len, op.desc, p.addr, &op.ctx);
  Post result = postResult(rc, peer, "receive from");
  if (result == Post::Blocked && !p.slotsListed) {
    p.slotsListed = true;
    slotsReady_.push_back(peer);
  }
  if (result != Post::Done) return result;
  op.busy = true;
  op.direct = to != nullptr;
  op.seq = seq;
  return result;
}

// Where chunk seq of the peer's stream goes when its receive takes it directly (its
// length in *len), or nullptr: no receive claims it yet, or its receive is not a plain
// copy, or the chunk is small.
char* OfiTransport::directTarget(int peer, uint64_t seq, size_t* len) {
  for (uint32_t i = peers_[peer].recvs.head; i != kNone; i = requests_[i].next) {
    const Request& r = requests_[i];
    if (seq < r.firstSeq) return nullptr;
    if (seq - r.firstSeq >= r.chunks) continue;
    const uint32_t c = static_cast<uint32_t>(seq - r.firstSeq);
    const size_t l = chunkLen(r, c);
    if (!r.sink.dst || l < kDirectMinBytes) return nullptr;
    *len = l;
    return static_cast<char*>(r.sink.dst) + static_cast<size_t>(c) * chunkBytes_;
  }
  return nullptr;
}

// A new direct receive: its chunks already posted into slots are cancelled, to be posted
// into its buffer when the cancellation completes (completeWithError). A chunk that is
// arriving cannot be cancelled and completes into its slot. Chunks not posted yet go to
// the buffer when postSlots reaches them.
void OfiTransport::claimChunks(int peer, const Request& r) {
  const Peer& p = peers_[peer];
  fid_ep* ep = fabric_.ep();
  for (uint32_t c = r.finished; c < r.chunks; ++c) {
    const uint64_t seq = r.firstSeq + c;
    if (seq >= p.postSeq) return;
    if (chunkLen(r, c) < kDirectMinBytes) continue;
    Op& op = rxOps_[p.firstSlot + seq % nSlots_];
    if (!op.busy || op.direct || op.cancelling) continue;
    if (fi_cancel(&ep->fid, &op.ctx) == 0) op.cancelling = true;
  }
}

// A receive released before all its chunks came (a failed peer, an abort): the chunks
// posted into its buffer are cancelled, so that the caller's memory is not written later.
void OfiTransport::cancelDirect(const Request& r) {
  const Peer& p = peers_[r.peer];
  fid_ep* ep = fabric_.ep();
  for (uint32_t c = r.finished; c < r.chunks; ++c) {
    const uint64_t seq = r.firstSeq + c;
    if (seq < p.deliverSeq) continue;
    if (seq >= p.postSeq) return;
    Op& op = rxOps_[p.firstSlot + seq % nSlots_];
    if (op.busy && op.direct && !op.cancelling && fi_cancel(&ep->fid, &op.ctx) == 0) op.cancelling = true;
  }
}

// Reading an idle completion queue costs a system call on socket providers (tcp: an epoll
// over the provider's sockets, 1-2 us here) and a few loads on a NIC's. test() reads at most
// every other such time (a running mean of the reads that found nothing), so a waiting rank
// spends at most half its time reading and leaves the rest of the core to the peers that
// share it (3 ranks on 2 cores over tcp: 8 B All-Reduce 180-240 -> 100-130 us); the bytes of
// a socket provider take ten times as long. (Timed by extra reads at setup instead, a
// receive's first wait under load now and then slept through its bytes on a quiet fd.)
void OfiTransport::timeEmptyRead(int64_t startNs) {
  constexpr int64_t kMaxIntervalNs = 10'000;
  const int64_t ns = trace::nowNs() - startNs;
  emptyReadNs_ += (ns - emptyReadNs_) / 8;
  cqReadIntervalNs_ = std::min(2 * emptyReadNs_, kMaxIntervalNs);
}

bool OfiTransport::progressIfDue() {
  const int64_t now = trace::nowNs();
  return now - lastCqReadNs_ >= cqReadIntervalNs_ && progress();
}

bool OfiTransport::progress() {
  lastCqReadNs_ = trace::nowNs();
  fi_cq_tagged_entry entries[kCqBatch];
  bool completed = false;
  for (;;) {
    ssize_t n = fi_cq_read(fabric_.cq(), entries, kCqBatch);
    if (n == -FI_EAGAIN) {
      if (!completed) timeEmptyRead(lastCqReadNs_);
      break;
    }
    if (n == -FI_EAVAIL) {
      completed = true;
      completeWithError();
      continue;
    }
    if (n < 0) {
      const std::string why = fi_strerror(static_cast<int>(-n));
      if (railChecks_) loseRail("reading the completion queue: " + why);
      for (int p = 0; p < nranks_; ++p)
        if (peers_[p].connected)
          failPeer(p, snclSystemError, fmt::format("ofi: rank {}: reading the completion queue: {}", rank_, why));
      break;
    }
    completed |= n > 0;
    for (ssize_t i = 0; i < n; ++i)
      complete(static_cast<Op*>(entries[i].op_context), entries[i].len, entries[i].data);
    if (n < kCqBatch) break;
  }
  // Completions freed credits and queue room: post what waited for them. A peer leaves a
  // list once nothing of it waits (or it failed).
  for (size_t i = 0; i < slotsReady_.size();) {
    const int peer = slotsReady_[i];
    postSlots(peer);  // slotsListed stays set meanwhile: a refusal keeps the peer here
    const Peer& p = peers_[peer];
    if (p.error == snclSuccess && (p.postSeq < p.deliverSeq + nSlots_ || p.reposts)) {
      ++i;
      continue;
    }
    peers_[peer].slotsListed = false;
    slotsReady_[i] = slotsReady_.back();
    slotsReady_.pop_back();
  }
  for (size_t i = 0; i < sendReady_.size();) {
    const int peer = sendReady_[i];
    drainSends(peer);
    if (peers_[peer].sends.head != kNone) {
      ++i;
      continue;
    }
    peers_[peer].sendListed = false;
    sendReady_[i] = sendReady_.back();
    sendReady_.pop_back();
  }
  if (railChecks_) checkRail(completed);
  return completed;
}

OfiTransport::Request* OfiTransport::owner(const Op* op) {
  if (op->req == kNone) return nullptr;
  Request& r = requests_[op->req];
  return r.active && r.gen == op->gen ? &r : nullptr;
}

// The data field is read without looking at FI_REMOTE_CQ_DATA in the flags: the sockets
// provider delivers the data but not always the flag. Every chunk carries data, so a
// provider that announced cq_data_size >= 8 and loses it shows up as a mismatch.
void OfiTransport::complete(Op* op, size_t len, uint64_t data) {
  op->busy = false;
  switch (op->kind) {
    case OpKind::HelloSend: op->done = true; return;
    case OpKind::HelloRecv:
      op->done = true;
      if (checkData_ && data != commId_)
        failPeer(op->peer, snclInvalidArgument,
                 fmt::format("ofi: rank {}: the endpoint of rank {} at {} belongs to another communicator", rank_,
                             op->peer, peers_[op->peer].address));
      return;
    case OpKind::Send: {
      // Its credit is back; the peer's waiting sends go out in this progress's drain.
      if (Request* r = owner(op)) ++r->finished;
      --peers_[op->peer].sendsInFlight;
      freeTxOp(op);
      return;
    }
    case OpKind::Recv:
      op->cancelling = false;  // it arrived before the cancellation
      op->done = true;
      op->len = len;
      op->data = data;
      deliver(op->peer);
      return;
  }
}

// Hands the peer's arrived chunks, in sequence, to the irecvs in posting order, checking
// each against the message the receiver posted, and reposts their slots.
void OfiTransport::deliver(int peer) {
  Peer& p = peers_[peer];
  bool delivered = false;
  while (p.recvs.head != kNone && p.error == snclSuccess) {
    Op& op = rxOps_[p.firstSlot + p.deliverSeq % nSlots_];
    if (!op.done) break;
    const uint32_t index = p.recvs.head;
    Request& r = requests_[index];
    const size_t expected = chunkLen(r, r.finished);
    if (op.len != expected || (checkData_ && op.data != r.check)) {
      const bool sizeDiffers = op.len != expected || static_cast<uint32_t>(op.data) != static_cast<uint32_t>(r.bytes);
      failPeer(peer, snclInvalidArgument,
               sizeDiffers ? fmt::format("ofi: rank {}: rank {} sent a message of another size than the {} bytes "
                                         "posted (tag {:#x}; chunk {} of {} bytes, {} arrived): counts differ across ranks",
                                         rank_, peer, r.bytes, r.tag, r.finished, expected, op.len)
                           : fmt::format("ofi: rank {}: rank {} sent a message with another tag than the posted {:#x} "
                                         "({} bytes): the ranks run different collectives",
                                         rank_, peer, r.tag, r.bytes));
      return;
    }
    if (op.len && !op.direct) r.sink.deliver(r.sink.ctx, static_cast<size_t>(r.finished) * chunkBytes_, op.buf, op.len);
    op.done = false;
    op.direct = false;
    ++p.deliverSeq;
    delivered = true;
    if (++r.finished == r.chunks) unlink(p.recvs, index);
  }
  if (delivered) postSlots(peer);
}

void OfiTransport::completeWithError() {
  fi_cq_err_entry err{};
  if (fi_cq_readerr(fabric_.cq(), &err, 0) != 1) return;
  Op* op = static_cast<Op*>(err.op_context);
  const std::string text = fabric_.errorText(err.err, err.prov_errno, err.err_data, err.err_data_size);
  if (!op) {
    if (railChecks_) loseRail(text);
    for (int p = 0; p < nranks_; ++p)
      if (peers_[p].connected) failPeer(p, snclRemoteError, fmt::format("ofi: rank {}: {}", rank_, text));
    return;
  }
  op->busy = false;
  const int peer = op->peer;
  const bool isRecv = op->kind == OpKind::Recv || op->kind == OpKind::HelloRecv;
  if (op->kind == OpKind::Send) {
    --peers_[peer].sendsInFlight;
    freeTxOp(op);
  }
  if (err.err == FI_ECANCELED) {
    // Cancelled to go to its receive's buffer (claimChunks), or its released receive's
    // buffer back to the slot (cancelDirect); otherwise the endpoint is closing.
    if (op->kind != OpKind::Recv || !op->cancelling) return;
    op->cancelling = false;
    if (peers_[peer].error == snclSuccess && postRecv(peer, *op, op->seq) == Post::Blocked) {
      op->repost = true;
      ++peers_[peer].reposts;
    }
    return;
  }
  if (err.err == FI_ETRUNC && op->kind == OpKind::Recv) {
    size_t posted = 0;
    if (op->direct) directTarget(peer, op->seq, &posted);
    failPeer(peer, snclInvalidArgument,
             op->direct ? fmt::format("ofi: rank {}: rank {} sent more than the {} bytes posted for chunk {} of its "
                                      "stream: counts differ across ranks", rank_, peer, posted, op->seq)
                        : fmt::format("ofi: rank {}: rank {} sent a chunk larger than the {} bytes of a slot: the "
                                      "ranks disagree on SNCL_OFI_CHUNK_SIZE or on the protocol",
                                      rank_, peer, chunkBytes_));
    return;
  }
  const std::string why = fmt::format("{} rank {} at {} failed over {}: {}", isRecv ? "receiving from" : "sending to",
                                      peer, peers_[peer].address, fabric_.provider(), text);
  if (railChecks_) loseRail(why);  // a connection of the rail broke: the rail goes
  else failPeer(peer, snclRemoteError, fmt::format("ofi: rank {}: {}", rank_, why));
}

void OfiTransport::freeTxOp(Op* op) {
  op->req = kNone;
  if (op->mrEntry >= 0) registrar_.release(op->mrEntry);
  op->mrEntry = -1;
  freeTx_.push_back(static_cast<uint32_t>(op - txOps_.data()));
}

// A released send's chunks still held by the provider stay out of the pool until their
// completion arrives (owner() no longer finds the request). A released receive leaves
// its chunks in the window: only a failed peer or an aborted transport releases one early,
// and then nothing is delivered any more.
void OfiTransport::releaseRequest(uint32_t index) {
  Request& r = requests_[index];
  if (r.queued) unlink(r.isSend ? peers_[r.peer].sends : peers_[r.peer].recvs, index);
  if (!r.isSend && directRecv_ && r.finished != r.chunks) cancelDirect(r);
  if (r.mrEntry >= 0) registrar_.release(r.mrEntry);
  r.active = false;
  const uint16_t gen = static_cast<uint16_t>((r.gen + 1) & kGenMask);
  r.gen = gen ? gen : 1;  // ids never carry generation 0
  freeRequests_.push_back(index);
}

void OfiTransport::failPeer(int peer, Result code, std::string message) {
  Peer& p = peers_[peer];
  if (p.error != snclSuccess) return;  // the first failure tells the story
  log::warn("{}", message);
  p.error = code;
  p.message = std::move(message);
}

}  // namespace sncl::ofi
