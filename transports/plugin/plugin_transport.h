// The "plugin" transport: sncl's Transport over an external network plugin's table
// (include/sncl/sncl_net.h, loaded by plugin_loader.*). It adds what the plugin ABI
// leaves to the core: peer identification after accept, per-pair ordering of whole
// messages, pieces no larger than the receive staging, size checks, deadlines, abort.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "lib/transport/transport.h"
#include "transports/plugin/plugin_loader.h"

namespace sncl::plugin {

// Default bytes of one piece (one receive staging slot); SNCL_NET_PLUGIN_CHUNK changes it.
constexpr size_t kDefaultPieceBytes = 256 << 10;
// Plugin sends and receives in flight per peer and direction. Receives have one staging
// slot each, so this many pieces of a pair can be on the wire at once.
constexpr int kPiecesInFlight = 2;

struct Request {
  enum class State : uint8_t { Free, Queued, Done, Failed };
  State state = State::Free;
  bool isSend = false;
  uint16_t generation = 1;
  int32_t peer = -1;         // index into the transport's peers
  uint64_t tag = 0;
  size_t bytes = 0;
  size_t pieces = 0;         // bytes / pieceBytes + 1: the last piece is shorter than a slot
  size_t posted = 0;         // pieces handed to the plugin
  size_t finished = 0;       // pieces the plugin completed (in order)
  const char* sendData = nullptr;
  RecvSink sink;
  Request* next = nullptr;   // in its peer's queue of the same direction
};

// A plugin request of one piece, in its peer's ring of kPiecesInFlight.
struct Piece {
  void* request = nullptr;
  Request* message = nullptr;
  size_t index = 0;          // which piece of the message
  int slot = 0;              // receive staging slot
};

struct PeerLane {
  int rank = -1;
  void* sendComm = nullptr;
  void* recvComm = nullptr;
  // Messages in posting order; cursor: the first with pieces not yet posted.
  Request* head[2] = {nullptr, nullptr};  // [0] sends, [1] receives
  Request* tail[2] = {nullptr, nullptr};
  Request* cursor[2] = {nullptr, nullptr};
  Piece inFlight[2][kPiecesInFlight];
  int first[2] = {0, 0};
  int count[2] = {0, 0};
  bool slotBusy[kPiecesInFlight] = {};
  char* staging = nullptr;   // kPiecesInFlight slots of pieceBytes
  Result error = snclSuccess;
  std::string errorText;
};

class PluginTransport final : public Transport {
 public:
  explicit PluginTransport(std::string spec) : spec_(std::move(spec)) {}
  ~PluginTransport() override;
  const char* name() const override { return "plugin"; }
  Result setup(const TransportContext& ctx, const std::vector<int>& peers) override;
  Result isend(int peer, uint64_t tag, const void* data, size_t bytes, RequestId* req) override;
  Result irecv(int peer, uint64_t tag, size_t bytes, RecvSink sink, RequestId* req) override;
  Result test(RequestId req, bool* done) override;
  void wait(int64_t maxMicros) override;
  void abort() override;

 private:
  Result loadAndListen(void* handle);
  Result connectAll(const std::vector<char>& handles, Deadline deadline);
  Result post(int peer, bool isSend, uint64_t tag, size_t bytes, const void* data, RecvSink sink, RequestId* req);
  Request* acquire(RequestId* id);
  Request* find(RequestId id);
  void release(Request* r);
  // Advances both directions of one peer; a failure fails the peer's requests.
  void progress(PeerLane& lane);
  bool progressDirection(PeerLane& lane, int dir);
  void failPeer(PeerLane& lane, Result code, std::string text);
  // The plugin's code as a Result with a message naming the call, the peer and the
  // plugin's last WARN line.
  Result pluginError(Result code, const char* call, int peerRank);

  std::string spec_;
  std::shared_ptr<NetPlugin> plugin_;
  const snclNet_v1_t* net_ = nullptr;
  void* ctx_ = nullptr;
  void* listenComm_ = nullptr;
  int rank_ = -1;
  uint64_t commId_ = 0;
  int64_t timeoutMs_ = 60000;
  size_t pieceBytes_ = kDefaultPieceBytes;
  std::vector<PeerLane> lanes_;
  std::vector<int> laneOfRank_;     // -1 for ranks this transport does not serve
  std::vector<Request> requests_;   // the pool, allocated at setup
  std::vector<uint32_t> free_;
  std::vector<char> stagingMemory_;
  std::atomic<bool> aborted_{false};
};

}  // namespace sncl::plugin

namespace sncl {
std::unique_ptr<Transport> createPluginTransport();
}  // namespace sncl
