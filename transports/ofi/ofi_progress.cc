// OfiTransport: posting, completion processing and delivery (see ofi_transport.h).
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <cstring>

#include "lib/log.h"
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
  // Behind earlier sends that wait for room: a peer's chunks go out in stream order.
  if (sendBacklog_.head != kNone || postChunks(index) == Post::Blocked) enqueue(sendBacklog_, index);
  return snclSuccess;
}

Result OfiTransport::irecv(int peer, uint64_t tag, size_t bytes, RecvSink sink, RequestId* id) {
  SNCL_CHECK(checkPost(peer, bytes));
  if (bytes && !sink.deliver)
    return fail(snclInvalidArgument, "ofi: rank {}: receive of {} bytes from rank {} without a sink", rank_, bytes, peer);
  Request* r = nullptr;
  SNCL_CHECK(startRequest(peer, false, tag, bytes, id, &r));
  r->sink = sink;
  const uint32_t index = *id & 0xffff;
  if (recvBacklog_.head != kNone || postChunks(index) == Post::Blocked) enqueue(recvBacklog_, index);
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
  progress();
  Request& r = requests_[index];
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

void OfiTransport::enqueue(Backlog& b, uint32_t index) {
  Request& r = requests_[index];
  r.queued = true;
  r.next = kNone;
  if (b.tail == kNone) b.head = index;
  else requests_[b.tail].next = index;
  b.tail = index;
}

// Posts the backlog in order and stops at the first request that cannot go further:
// later ones may be for the same peer, whose stream order must hold.
void OfiTransport::drain(Backlog& b) {
  while (b.head != kNone) {
    const uint32_t index = b.head;
    if (peers_[requests_[index].peer].error == snclSuccess && postChunks(index) == Post::Blocked) return;
    b.head = requests_[index].next;
    if (b.head == kNone) b.tail = kNone;
    requests_[index].queued = false;
  }
}

OfiTransport::Post OfiTransport::postChunks(uint32_t index) {
  Request& r = requests_[index];
  while (r.posted < r.chunks) {
    Post p = r.isSend ? postSendChunk(r, index) : postRecvChunk(r, index);
    if (p != Post::Done) return p;
  }
  return Post::Done;
}

OfiTransport::Post OfiTransport::postResult(ssize_t rc, int peer, const char* what) {
  if (rc == 0) return Post::Done;
  if (rc == -FI_EAGAIN) return Post::Blocked;
  failPeer(peer, snclRemoteError,
           fmt::format("ofi: rank {}: posting a {} rank {} ({}) failed: {}", rank_, what, peer, peers_[peer].address,
                       fi_strerror(static_cast<int>(-rc))));
  return Post::Failed;
}

OfiTransport::Post OfiTransport::postSendChunk(Request& r, uint32_t index) {
  const uint32_t c = r.posted;
  const size_t len = chunkLen(r, c);
  const char* src = r.src + static_cast<size_t>(c) * chunkBytes_;
  const uint64_t tag = chunkTag(rank_, r.firstSeq + c);
  const fi_addr_t addr = peers_[r.peer].addr;
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
  if (freeTx_.empty()) return Post::Blocked;
  Op& op = txOps_[freeTx_.back()];
  void* desc = r.desc;
  if (bounce_) {
    memcpy(op.buf, src, len);
    src = op.buf;
    desc = op.desc;
  }
  op.kind = OpKind::Send;
  op.req = index;
  op.gen = r.gen;
  op.chunk = c;
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
  if (op.mrEntry >= 0) registrar_.addRef(op.mrEntry);
  ++r.posted;
  return p;
}

OfiTransport::Post OfiTransport::postRecvChunk(Request& r, uint32_t index) {
  if (freeRx_.empty()) return Post::Blocked;
  const uint32_t slot = freeRx_.back();
  Op& op = rxOps_[slot];
  const uint32_t c = r.posted;
  op.kind = OpKind::Recv;
  op.req = index;
  op.gen = r.gen;
  op.chunk = c;
  op.peer = r.peer;
  op.done = false;
  fid_ep* ep = fabric_.ep();
  const size_t len = chunkLen(r, c);
  ssize_t rc = fabric_.tagged()
                   ? fi_trecv(ep, op.buf, len, op.desc, FI_ADDR_UNSPEC, chunkTag(r.peer, r.firstSeq + c), 0, &op.ctx)
                   : fi_recv(ep, op.buf, len, op.desc, peers_[r.peer].addr, &op.ctx);
  Post p = postResult(rc, r.peer, "receive from");
  if (p != Post::Done) return p;
  freeRx_.pop_back();
  op.busy = true;
  window_[index * nSlots_ + c % nSlots_] = slot;
  ++r.posted;
  return p;
}

void OfiTransport::progress() {
  fi_cq_tagged_entry entries[kCqBatch];
  for (;;) {
    ssize_t n = fi_cq_read(fabric_.cq(), entries, kCqBatch);
    if (n == -FI_EAGAIN) break;
    if (n == -FI_EAVAIL) {
      completeWithError();
      continue;
    }
    if (n < 0) {
      const std::string why = fi_strerror(static_cast<int>(-n));
      for (int p = 0; p < nranks_; ++p)
        if (peers_[p].connected)
          failPeer(p, snclSystemError, fmt::format("ofi: rank {}: reading the completion queue: {}", rank_, why));
      break;
    }
    for (ssize_t i = 0; i < n; ++i)
      complete(static_cast<Op*>(entries[i].op_context), entries[i].len, entries[i].data);
    if (n < kCqBatch) break;
  }
  // Completions freed slots and queue room: post what waited for them.
  drain(sendBacklog_);
  drain(recvBacklog_);
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
    case OpKind::HelloSend: return;
    case OpKind::HelloRecv:
      if (checkData_ && data != commId_)
        failPeer(op->peer, snclInvalidArgument,
                 fmt::format("ofi: rank {}: the endpoint of rank {} at {} belongs to another communicator", rank_,
                             op->peer, peers_[op->peer].address));
      return;
    case OpKind::Send: {
      if (Request* r = owner(op)) ++r->finished;
      freeOp(op);
      return;
    }
    case OpKind::Recv: {
      Request* r = owner(op);
      if (!r) {
        freeOp(op);  // its request failed and was released
        return;
      }
      op->done = true;
      op->len = len;
      op->data = data;
      deliver(*r, op->req);
      return;
    }
  }
}

// Hands the request's completed chunks to the sink in order, checking each against the
// message the receiver posted, and frees their slots.
void OfiTransport::deliver(Request& r, uint32_t index) {
  while (r.finished < r.posted) {
    Op& op = rxOps_[window_[index * nSlots_ + r.finished % nSlots_]];
    if (!op.done) return;
    const size_t expected = chunkLen(r, r.finished);
    if (op.len != expected || (checkData_ && op.data != r.check)) {
      const bool sizeDiffers = op.len != expected || static_cast<uint32_t>(op.data) != static_cast<uint32_t>(r.bytes);
      failPeer(r.peer, snclInvalidArgument,
               sizeDiffers ? fmt::format("ofi: rank {}: rank {} sent a message of another size than the {} bytes "
                                         "posted (tag {:#x}; chunk {} of {} bytes, {} arrived): counts differ across ranks",
                                         rank_, r.peer, r.bytes, r.tag, r.finished, expected, op.len)
                           : fmt::format("ofi: rank {}: rank {} sent a message with another tag than the posted {:#x} "
                                         "({} bytes): the ranks run different collectives",
                                         rank_, r.peer, r.tag, r.bytes));
      return;
    }
    if (op.len) r.sink.deliver(r.sink.ctx, static_cast<size_t>(r.finished) * chunkBytes_, op.buf, op.len);
    freeOp(&op);
    ++r.finished;
  }
}

void OfiTransport::completeWithError() {
  fi_cq_err_entry err{};
  if (fi_cq_readerr(fabric_.cq(), &err, 0) != 1) return;
  Op* op = static_cast<Op*>(err.op_context);
  const std::string text = fabric_.errorText(err.err, err.prov_errno, err.err_data, err.err_data_size);
  if (!op) {
    for (int p = 0; p < nranks_; ++p)
      if (peers_[p].connected) failPeer(p, snclRemoteError, fmt::format("ofi: rank {}: {}", rank_, text));
    return;
  }
  op->busy = false;
  const int peer = op->peer;
  const bool isRecv = op->kind == OpKind::Recv || op->kind == OpKind::HelloRecv;
  const Request* r = op->kind == OpKind::Send || op->kind == OpKind::Recv ? owner(op) : nullptr;
  if (op->kind == OpKind::Send || op->kind == OpKind::Recv) freeOp(op);
  if (err.err == FI_ECANCELED) return;  // the endpoint is closing
  if (err.err == FI_ETRUNC && r) {
    failPeer(peer, snclInvalidArgument,
             fmt::format("ofi: rank {}: rank {} sent more than the {} bytes posted (tag {:#x}): counts differ across ranks",
                         rank_, peer, r->bytes, r->tag));
    return;
  }
  failPeer(peer, snclRemoteError,
           fmt::format("ofi: rank {}: {} rank {} at {} failed over {}: {}", rank_, isRecv ? "receiving from" : "sending to",
                       peer, peers_[peer].address, fabric_.provider(), text));
}

void OfiTransport::freeOp(Op* op) {
  op->req = kNone;
  op->done = false;
  if (op->kind == OpKind::Recv) {
    freeRx_.push_back(static_cast<uint32_t>(op - rxOps_.data()));
    return;
  }
  if (op->mrEntry >= 0) registrar_.release(op->mrEntry);
  op->mrEntry = -1;
  freeTx_.push_back(static_cast<uint32_t>(op - txOps_.data()));
}

// A released request's chunks still held by the provider stay out of the pools until their
// completion arrives (owner() no longer finds the request, so complete() frees them).
void OfiTransport::releaseRequest(uint32_t index) {
  Request& r = requests_[index];
  if (!r.isSend) {
    for (uint32_t c = r.finished; c < r.posted; ++c) {
      Op& op = rxOps_[window_[index * nSlots_ + c % nSlots_]];
      if (op.done) freeOp(&op);
    }
  }
  if (r.queued) {
    Backlog& b = r.isSend ? sendBacklog_ : recvBacklog_;
    uint32_t prev = kNone;
    uint32_t i = b.head;
    while (i != index) {
      prev = i;
      i = requests_[i].next;
    }
    (prev == kNone ? b.head : requests_[prev].next) = r.next;
    if (b.tail == index) b.tail = prev;
  }
  if (r.mrEntry >= 0) registrar_.release(r.mrEntry);
  r.active = false;
  r.queued = false;
  const uint16_t gen = static_cast<uint16_t>(r.gen + 1);
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
