// The bootstrap's wire protocol, shared by its parts (all structs in host byte order: one
// job, one ABI):
//   rank -> root  RootHello {magic, secret, rank, nranks, rank's listen address}
//   root -> rank 0  RootReply {result, bytes} + nranks listen addresses (the table)
//   parent -> child  the table, as a Frame of kind Rendezvous (bootstrap_rendezvous.cc)
//   rank -> root  RankReport {magic, rank, missing, result}: "rank `missing` did not get the
//                 table to me"; the root answers every waiting rank with an error
//   root -> rank  RootReply {result, bytes} + error text, on any error
//   rank -> peer  PeerHello {magic, secret, rank} once per connection (lazily, on first send)
//   rank -> peer  Frame {kind, tag, bytes} + payload, for every message
// A rank closes its root connection once it has the table: the root is done when every
// rank has closed (or was told of an error).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "lib/base/error.h"
#include "lib/net/socket.h"
#include "sncl/sncl.h"

namespace sncl::wire {

constexpr uint32_t kIdMagic = 0x4c434e53;      // "SNCL"
constexpr uint32_t kIdVersion = 1;
constexpr uint32_t kHelloMagic = 0x6f6c6548;   // "Helo"
constexpr uint32_t kReportMagic = 0x74706552;  // "Rept"
constexpr int32_t kMaxRanks = 1 << 20;
constexpr size_t kMaxErrorText = 1024;
constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 30;
// How long the root or a rank waits for the hello of a connection that was accepted: a real
// rank sends it right after connecting, so only a stray or broken client takes longer.
constexpr int kHelloTimeoutMs = 5000;

using Secret = std::array<uint8_t, 16>;

struct IdLayout {
  uint32_t magic;
  uint32_t version;
  Secret secret;
  SocketAddress root;
  uint8_t reserved[SNCL_UNIQUE_ID_BYTES - 4 - 4 - 16 - sizeof(SocketAddress) - 8];
  uint64_t checksum;  // FNV-1a over every byte before it
};
static_assert(sizeof(IdLayout) == SNCL_UNIQUE_ID_BYTES);

struct RootHello {
  uint32_t magic;
  Secret secret;
  int32_t rank;
  int32_t nranks;
  SocketAddress listenAddress;
};

struct RootReply {
  int32_t result;  // snclSuccess: nranks addresses follow; otherwise `bytes` of error text
  uint32_t bytes;
};

struct RankReport {
  uint32_t magic;
  int32_t rank;     // who reports
  int32_t missing;  // the rank that should have sent the table (-1: the root itself)
  int32_t result;   // what waiting for it ended in (Timeout, RemoteError, ...)
};

struct PeerHello {
  uint32_t magic;
  Secret secret;
  int32_t rank;
};

struct FrameHeader {
  uint32_t kind;
  uint32_t tag;
  uint64_t bytes;
};

// Constant time, so a stray client cannot learn the secret byte by byte from timing.
inline bool sameSecret(const Secret& a, const Secret& b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

IdLayout decodeId(const snclUniqueId& id);
void encodeId(const SocketAddress& root, const Secret& secret, snclUniqueId* id);

// Starts the root's thread listening on address and fills id (bootstrap_root.cc).
Result startRoot(const SocketAddress& address, bool reuseAddr, const Secret& secret, snclUniqueId* id);

}  // namespace sncl::wire
