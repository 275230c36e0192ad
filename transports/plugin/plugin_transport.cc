#include "transports/plugin/plugin_transport.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <thread>

#include "lib/base/env.h"
#include "lib/base/log.h"
#include "lib/net/bootstrap.h"

namespace sncl {

// Registered in transports/builtin.cc. Only with SNCL_NET_PLUGIN set: without it there is
// no library to load (lib/comm's chooseTransport says so before asking for one).
std::unique_ptr<Transport> createPluginTransport() {
  auto spec = env::str("SNCL_NET_PLUGIN");
  if (!spec) return nullptr;
  return std::make_unique<plugin::PluginTransport>(*spec);
}

namespace plugin {
namespace {

constexpr size_t kPoolCapacity = 4096;           // outstanding requests per comm
constexpr uint64_t kHelloTag = 0x534e434c48454c4full;  // "SNCLHELO", the first message of a pipe
constexpr uint64_t kHelloMagic = 0x736e636c2d6e6574ull;

// The core's first message on every send comm: who is on the other end of an accept.
struct Hello {
  uint64_t magic;
  uint64_t commId;
  int32_t rank;
  int32_t pad;
};

// What every rank publishes at setup: whether the plugin loaded and listens, and where.
struct Published {
  int32_t status;
  int32_t pad;
  char handle[SNCL_NET_HANDLE_MAXSIZE];
};

// The plugin's last WARN line on this thread, appended to the error of a call that fails.
thread_local std::string tLastWarn;

void pluginLog(snclNetLogLevel_t level, const char* fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  switch (level) {
    case SNCL_NET_LOG_WARN:
      tLastWarn = text;
      log::warn("net plugin: {}", text);
      break;
    case SNCL_NET_LOG_INFO: log::info(log::Subsys::Transport, "net plugin: {}", text); break;
    default: log::trace("net plugin: {}", text); break;
  }
}

}  // namespace

PluginTransport::~PluginTransport() {
  if (!net_) return;
  // Closing releases every plugin request still posted, so no plugin call touches a user
  // buffer or the staging after this.
  for (PeerLane& lane : lanes_) {
    if (lane.sendComm) net_->closeSend(lane.sendComm);
    if (lane.recvComm) net_->closeRecv(lane.recvComm);
  }
  if (listenComm_) net_->closeListen(listenComm_);
  if (ctx_) net_->finalize(ctx_);
}

Result PluginTransport::pluginError(Result code, const char* call, int peerRank) {
  std::string why = tLastWarn.empty() ? "" : ": " + tLastWarn;
  tLastWarn.clear();
  if (peerRank < 0)
    return fail(code, "network plugin {} ({}): {} failed with {}{}", net_->name, plugin_->path, call,
                resultName(code), why);
  return fail(code, "network plugin {}: rank {}: {} with rank {} failed with {}{}", net_->name, rank_, call, peerRank,
              resultName(code), why);
}

Result PluginTransport::loadAndListen(void* handle) {
  SNCL_CHECK(loadNetPlugin(spec_, &plugin_));
  net_ = plugin_->net;
  snclNetInitArgs_t args{};
  args.rank = rank_;
  args.nranks = static_cast<int>(laneOfRank_.size());
  args.commId = commId_;
  args.timeoutMs = timeoutMs_;
  args.log = pluginLog;
  tLastWarn.clear();
  Result r = net_->init(&args, &ctx_);
  if (r != snclSuccess) {
    ctx_ = nullptr;
    std::string why = tLastWarn.empty() ? "" : ": " + tLastWarn;
    tLastWarn.clear();
    return fail(snclSystemError, "network plugin {} ({}): init failed with {}{}", net_->name, plugin_->path,
                resultName(r), why);
  }
  int ndev = 0;
  if ((r = net_->devices(ctx_, &ndev)) != snclSuccess) return pluginError(r, "devices", -1);
  if (ndev < 1)
    return fail(snclSystemError, "network plugin {} ({}): no network device (devices() gave {})", net_->name,
                plugin_->path, ndev);
  if ((r = net_->listen(ctx_, 0, handle, &listenComm_)) != snclSuccess) return pluginError(r, "listen", -1);
  if (!listenComm_)
    return fail(snclSystemError, "network plugin {} ({}): listen returned no comm", net_->name, plugin_->path);
  return snclSuccess;
}

Result PluginTransport::setup(const TransportContext& ctx, const std::vector<int>& peers) {
  rank_ = ctx.rank;
  commId_ = ctx.commId;
  timeoutMs_ = ctx.timeoutMs;
  const Deadline deadline = Deadline::afterMs(ctx.timeoutMs);
  laneOfRank_.assign(ctx.nranks, -1);
  lanes_.resize(peers.size());
  for (size_t i = 0; i < peers.size(); ++i) {
    lanes_[i].rank = peers[i];
    laneOfRank_[peers[i]] = static_cast<int>(i);
  }

  // Load, listen and publish; a rank that failed says so in its slot, so that every rank
  // fails at once instead of waiting for it until the deadline.
  std::vector<Published> slots(ctx.nranks);
  Result local = snclSuccess;
  pieceBytes_ = env::bytes("SNCL_NET_PLUGIN_CHUNK", kDefaultPieceBytes);
  if (pieceBytes_ < 4096 || pieceBytes_ % 64 != 0 || pieceBytes_ > (1u << 30))
    local = fail(snclInvalidArgument, "SNCL_NET_PLUGIN_CHUNK={} must be a multiple of 64 from 4 KiB to 1 GiB",
                 pieceBytes_);
  if (local == snclSuccess) local = loadAndListen(slots[rank_].handle);
  std::string why = local == snclSuccess ? "" : lastError();
  slots[rank_].status = local;
  SNCL_CHECK(ctx.bootstrap->allGather(slots.data(), sizeof(Published), deadline));
  if (local != snclSuccess) return fail(local, "{}", why);
  for (int r = 0; r < ctx.nranks; ++r)
    if (slots[r].status != snclSuccess)
      return fail(snclRemoteError,
                  "plugin transport: rank {} could not load or start its network plugin ({}; see its log; "
                  "SNCL_NET_PLUGIN={} here)",
                  r, resultName(static_cast<Result>(slots[r].status)), spec_);

  // Everything the hot path uses, allocated and touched now.
  requests_.assign(kPoolCapacity, Request{});
  free_.clear();
  for (size_t i = kPoolCapacity; i-- > 0;) free_.push_back(static_cast<uint32_t>(i));
  stagingMemory_.assign(lanes_.size() * kPiecesInFlight * pieceBytes_, 0);
  for (size_t i = 0; i < lanes_.size(); ++i) lanes_[i].staging = stagingMemory_.data() + i * kPiecesInFlight * pieceBytes_;

  std::vector<char> handles(ctx.nranks * SNCL_NET_HANDLE_MAXSIZE);
  for (int r = 0; r < ctx.nranks; ++r)
    std::memcpy(handles.data() + r * SNCL_NET_HANDLE_MAXSIZE, slots[r].handle, SNCL_NET_HANDLE_MAXSIZE);
  SNCL_CHECK(connectAll(handles, deadline));
  log::info(log::Subsys::Transport, "plugin transport: rank {} connected to {} peers through {} ({}), pieces of {} bytes",
            rank_, lanes_.size(), net_->name, plugin_->path, pieceBytes_);
  return snclSuccess;
}

// Connects to every peer, accepts every peer, and learns who each accepted comm is from
// the hello that its sender sends first. All polled, under one deadline.
Result PluginTransport::connectAll(const std::vector<char>& handles, Deadline deadline) {
  const size_t n = lanes_.size();
  for (PeerLane& lane : lanes_) {
    Result r = net_->connect(ctx_, 0, handles.data() + lane.rank * SNCL_NET_HANDLE_MAXSIZE, &lane.sendComm);
    if (r != snclSuccess) return pluginError(r, "connect", lane.rank);
    if (!lane.sendComm)
      return fail(snclSystemError, "network plugin {}: connect to rank {} returned no comm", net_->name, lane.rank);
  }
  const Hello hello{kHelloMagic, commId_, rank_, 0};
  std::vector<Hello> heard(n);
  std::vector<void*> sendReq(n, nullptr), recvReq(n, nullptr), accepted(n, nullptr);
  std::vector<char> sent(n, 0), known(n, 0);
  size_t nSent = 0, nAccepted = 0, nKnown = 0;
  Result result = snclSuccess;
  auto poll = [&]() -> Result {
    bool progressed = false;
    for (size_t i = 0; i < n; ++i) {
      if (sent[i]) continue;
      Result r = snclSuccess;
      if (!sendReq[i]) r = net_->isend(lanes_[i].sendComm, &hello, sizeof(hello), kHelloTag, &sendReq[i]);
      if (r != snclSuccess) return pluginError(r, "isend (setup)", lanes_[i].rank);
      if (!sendReq[i]) continue;
      int done = 0;
      size_t size = 0;
      if ((r = net_->test(sendReq[i], &done, &size)) != snclSuccess) {
        sendReq[i] = nullptr;
        return pluginError(r, "connect (first send)", lanes_[i].rank);
      }
      if (done) sent[i] = 1, sendReq[i] = nullptr, ++nSent, progressed = true;
    }
    if (nAccepted < n) {
      void* comm = nullptr;
      Result r = net_->accept(listenComm_, &comm);
      if (r != snclSuccess) return pluginError(r, "accept", -1);
      if (comm) accepted[nAccepted++] = comm, progressed = true;
    }
    for (size_t j = 0; j < nAccepted; ++j) {
      if (known[j]) continue;
      Result r = snclSuccess;
      if (!recvReq[j]) r = net_->irecv(accepted[j], &heard[j], sizeof(Hello), kHelloTag, &recvReq[j]);
      if (r != snclSuccess) return pluginError(r, "irecv (setup)", -1);
      if (!recvReq[j]) continue;
      int done = 0;
      size_t size = 0;
      if ((r = net_->test(recvReq[j], &done, &size)) != snclSuccess) {
        recvReq[j] = nullptr;
        return pluginError(r, "accept (first receive)", -1);
      }
      if (!done) continue;
      recvReq[j] = nullptr;
      const Hello& h = heard[j];
      const bool served = h.rank >= 0 && h.rank < static_cast<int>(laneOfRank_.size()) && laneOfRank_[h.rank] >= 0;
      if (size != sizeof(Hello) || h.magic != kHelloMagic || h.commId != commId_ || !served ||
          lanes_[laneOfRank_[h.rank]].recvComm)
        return fail(snclRemoteError,
                    "plugin transport: rank {}: an accepted connection is not from a peer of this comm ({} bytes, "
                    "rank {}); a stale or foreign connection to this rank's listen address",
                    rank_, size, h.rank);
      lanes_[laneOfRank_[h.rank]].recvComm = accepted[j];
      accepted[j] = nullptr;
      known[j] = 1, ++nKnown, progressed = true;
    }
    if (!progressed) std::this_thread::sleep_for(std::chrono::microseconds(50));
    return snclSuccess;
  };
  while (nSent < n || nKnown < n) {
    if (aborted_.load()) {
      result = fail(snclInvalidUsage, "plugin transport: rank {}: aborted during setup", rank_);
      break;
    }
    if (deadline.expired()) {
      result = fail(snclTimeout,
                    "plugin transport: rank {}: setup timed out: {} of {} peers took this rank's first message, {} "
                    "connected to it (is SNCL_NET_PLUGIN the same on every rank?)",
                    rank_, nSent, n, nKnown);
      break;
    }
    if ((result = poll()) != snclSuccess) break;
  }
  // Accepted comms not given to a lane are this function's; closing them releases their
  // requests. Send requests still posted belong to lanes' comms, closed with the transport.
  for (void* comm : accepted)
    if (comm) net_->closeRecv(comm);
  return result;
}

Request* PluginTransport::acquire(RequestId* id) {
  if (free_.empty()) return nullptr;
  uint32_t index = free_.back();
  free_.pop_back();
  Request& r = requests_[index];
  *id = (static_cast<RequestId>(r.generation) << 16) | index;
  return &r;
}

Request* PluginTransport::find(RequestId id) {
  uint32_t index = id & 0xffff;
  if (index >= requests_.size()) return nullptr;
  Request& r = requests_[index];
  if (r.state == Request::State::Free || r.generation != id >> 16) return nullptr;
  return &r;
}

void PluginTransport::release(Request* r) {
  uint16_t generation = static_cast<uint16_t>(r->generation + 1);
  *r = Request{};
  r->generation = generation == 0 ? 1 : generation;
  free_.push_back(static_cast<uint32_t>(r - requests_.data()));
}

Result PluginTransport::isend(int peer, uint64_t tag, const void* data, size_t bytes, RequestId* req) {
  return post(peer, true, tag, bytes, data, RecvSink{}, req);
}

Result PluginTransport::irecv(int peer, uint64_t tag, size_t bytes, RecvSink sink, RequestId* req) {
  return post(peer, false, tag, bytes, nullptr, sink, req);
}

Result PluginTransport::post(int peer, bool isSend, uint64_t tag, size_t bytes, const void* data, RecvSink sink,
                             RequestId* req) {
  if (aborted_.load()) return fail(snclInvalidUsage, "plugin transport: rank {}: aborted", rank_);
  if (peer < 0 || peer >= static_cast<int>(laneOfRank_.size()) || laneOfRank_[peer] < 0)
    return fail(snclInvalidArgument, "plugin transport: rank {}: rank {} is not a peer of this transport", rank_, peer);
  PeerLane& lane = lanes_[laneOfRank_[peer]];
  if (lane.error != snclSuccess) return fail(lane.error, "{}", lane.errorText);
  Request* r = acquire(req);
  if (!r) return fail(snclInvalidUsage, "plugin transport: rank {}: more than {} requests outstanding", rank_, kPoolCapacity);
  const int dir = isSend ? 0 : 1;
  r->state = Request::State::Queued;
  r->isSend = isSend;
  r->peer = laneOfRank_[peer];
  r->tag = tag;
  r->bytes = bytes;
  r->pieces = bytes / pieceBytes_ + 1;
  r->sendData = static_cast<const char*>(data);
  r->sink = sink;
  if (lane.tail[dir]) lane.tail[dir]->next = r;
  else lane.head[dir] = r;
  lane.tail[dir] = r;
  if (!lane.cursor[dir]) lane.cursor[dir] = r;
  progress(lane);  // nonblocking: starts the first pieces at once
  return snclSuccess;
}

void PluginTransport::failPeer(PeerLane& lane, Result code, std::string text) {
  if (lane.error != snclSuccess) return;
  lane.error = code;
  lane.errorText = std::move(text);
  for (int dir = 0; dir < 2; ++dir) {
    for (Request* r = lane.head[dir]; r;) {
      Request* next = r->next;
      r->state = Request::State::Failed;
      r->next = nullptr;
      r = next;
    }
    lane.head[dir] = lane.tail[dir] = lane.cursor[dir] = nullptr;
    // The plugin's requests stay with its comm, which is used again only to close it.
    lane.count[dir] = 0;
  }
}

// Posts pieces while the ring has room, then completes finished pieces in order. Every
// message is bytes / pieceBytes + 1 pieces, the last one shorter than a staging slot
// (zero bytes when the size is a multiple), so that the sequence of piece sizes names the
// message's size and a receiver that expects another size sees a piece of the wrong size.
bool PluginTransport::progressDirection(PeerLane& lane, int dir) {
  const bool send = dir == 0;
  void* comm = send ? lane.sendComm : lane.recvComm;
  bool progressed = false;
  while (lane.count[dir] < kPiecesInFlight && lane.cursor[dir]) {
    Request* m = lane.cursor[dir];
    const size_t k = m->posted;
    const size_t len = k + 1 < m->pieces ? pieceBytes_ : m->bytes - k * pieceBytes_;
    Piece& piece = lane.inFlight[dir][(lane.first[dir] + lane.count[dir]) % kPiecesInFlight];
    int slot = 0;
    while (!send && lane.slotBusy[slot]) ++slot;  // a free one exists: count < kPiecesInFlight
    void* request = nullptr;
    Result r = send ? net_->isend(comm, m->sendData + k * pieceBytes_, len, m->tag, &request)
                    : net_->irecv(comm, lane.staging + slot * pieceBytes_, pieceBytes_, m->tag, &request);
    if (r != snclSuccess) {
      pluginError(r, send ? "isend" : "irecv", lane.rank);
      failPeer(lane, r, lastError());
      return true;
    }
    if (!request) break;
    piece = Piece{request, m, k, slot};
    if (!send) lane.slotBusy[slot] = true;
    ++lane.count[dir];
    if (++m->posted == m->pieces) lane.cursor[dir] = m->next;
    progressed = true;
  }
  while (lane.count[dir] > 0) {
    Piece& piece = lane.inFlight[dir][lane.first[dir]];
    int done = 0;
    size_t size = 0;
    Result r = net_->test(piece.request, &done, &size);
    if (r != snclSuccess) {
      if (r == snclInvalidArgument)
        fail(r, "plugin transport: rank {}: tag or size mismatch with rank {}: the plugin refused what rank {} sent "
                "for the receive of tag {:#x}, {} bytes (counts or calls differ across ranks){}",
             rank_, lane.rank, lane.rank, piece.message->tag, piece.message->bytes,
             tLastWarn.empty() ? "" : ": " + tLastWarn);
      else
        pluginError(r, send ? "send" : "receive", lane.rank);
      tLastWarn.clear();
      failPeer(lane, r, lastError());
      return true;
    }
    if (!done) break;
    Request* m = piece.message;
    if (!send) {
      const size_t expect = piece.index + 1 < m->pieces ? pieceBytes_ : m->bytes - piece.index * pieceBytes_;
      if (size != expect) {
        fail(snclInvalidArgument,
             "plugin transport: rank {}: size mismatch with rank {}: piece {} of the {}-byte message of tag {:#x} has "
             "{} bytes, {} expected (the ranks disagree on the message's size)",
             rank_, lane.rank, piece.index, m->bytes, m->tag, size, expect);
        failPeer(lane, snclInvalidArgument, lastError());
        return true;
      }
      if (size) m->sink.deliver(m->sink.ctx, piece.index * pieceBytes_, lane.staging + piece.slot * pieceBytes_, size);
      lane.slotBusy[piece.slot] = false;
    }
    lane.first[dir] = (lane.first[dir] + 1) % kPiecesInFlight;
    --lane.count[dir];
    if (++m->finished == m->pieces) {
      m->state = Request::State::Done;  // in order: m is the head
      lane.head[dir] = m->next;
      if (!lane.head[dir]) lane.tail[dir] = nullptr;
      m->next = nullptr;
    }
    progressed = true;
  }
  return progressed;
}

void PluginTransport::progress(PeerLane& lane) {
  // Bounded: each round either finishes a piece or stops.
  for (int round = 0; round < 8 && lane.error == snclSuccess; ++round) {
    bool any = progressDirection(lane, 0);
    if (lane.error == snclSuccess) any |= progressDirection(lane, 1);
    if (!any) break;
  }
}

Result PluginTransport::test(RequestId id, bool* done) {
  *done = false;
  Request* r = find(id);
  if (!r) return fail(snclInvalidArgument, "plugin transport: rank {}: request {:#x} is not outstanding", rank_, id);
  if (aborted_.load()) {
    release(r);
    return fail(snclInvalidUsage, "plugin transport: rank {}: aborted", rank_);
  }
  PeerLane& lane = lanes_[r->peer];
  if (r->state == Request::State::Queued) progress(lane);
  if (r->state == Request::State::Done) {
    release(r);
    *done = true;
    return snclSuccess;
  }
  if (r->state == Request::State::Failed) {
    release(r);
    return fail(lane.error, "{}", lane.errorText);
  }
  return snclSuccess;
}

void PluginTransport::wait(int64_t maxMicros) {
  // The ABI has no doorbell to sleep on: a short sleep lets other ranks on the core run.
  std::this_thread::sleep_for(std::chrono::microseconds(std::min<int64_t>(maxMicros, 100)));
}

void PluginTransport::abort() { aborted_.store(true); }

}  // namespace plugin
}  // namespace sncl
