// The unique id: the root's address and a secret, with a magic and checksum so that a
// garbage or corrupt id is rejected before any connection is tried. Also where the root is
// started from (snclGetUniqueId, or SNCL_COMM_ID on rank 0).
#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "lib/base/env.h"
#include "lib/base/hash.h"
#include "lib/net/bootstrap.h"
#include "lib/net/bootstrap_wire.h"

namespace sncl {

namespace wire {

void encodeId(const SocketAddress& root, const Secret& secret, snclUniqueId* id) {
  IdLayout layout{};
  layout.magic = kIdMagic;
  layout.version = kIdVersion;
  layout.secret = secret;
  layout.root = root;
  layout.checksum = fnv1a(&layout, offsetof(IdLayout, checksum));
  memcpy(id->internal, &layout, sizeof(layout));
}

IdLayout decodeId(const snclUniqueId& id) {
  IdLayout layout;
  memcpy(&layout, id.internal, sizeof(layout));
  return layout;
}

}  // namespace wire

namespace {

Result randomSecret(wire::Secret* secret) {
  size_t done = 0;
  while (done < secret->size()) {
    ssize_t n = getrandom(secret->data() + done, secret->size() - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(snclSystemError, "getrandom failed: {}", strerror(errno));
    done += static_cast<size_t>(n);
  }
  return snclSuccess;
}

}  // namespace

Result bootstrapCheckId(const snclUniqueId& id) {
  const wire::IdLayout layout = wire::decodeId(id);
  if (layout.magic != wire::kIdMagic) {
    return fail(snclInvalidArgument, "unique id is not an sncl id (magic {:#x}, expected {:#x})",
                layout.magic, wire::kIdMagic);
  }
  if (layout.checksum != fnv1a(&layout, offsetof(wire::IdLayout, checksum))) {
    return fail(snclInvalidArgument, "unique id is corrupt (checksum mismatch)");
  }
  if (layout.version != wire::kIdVersion) {
    return fail(snclInvalidArgument, "unique id has version {}, this library speaks {}", layout.version,
                wire::kIdVersion);
  }
  if (!isValidAddress(layout.root)) {
    return fail(snclInvalidArgument, "unique id names no valid root address");
  }
  return snclSuccess;
}

Result bootstrapCreateRoot(snclUniqueId* id) {
  if (!id) return fail(snclInvalidArgument, "bootstrapCreateRoot: id is NULL");
  SocketAddress address;
  SNCL_CHECK(findInterfaceAddress(&address));
  wire::Secret secret;
  SNCL_CHECK(randomSecret(&secret));
  return wire::startRoot(address, /*reuseAddr=*/false, secret, id);
}

Result bootstrapIdFromEnv(snclUniqueId* id, bool isRoot) {
  if (!id) return fail(snclInvalidArgument, "bootstrapIdFromEnv: id is NULL");
  auto commId = env::str("SNCL_COMM_ID");
  if (!commId) return fail(snclInvalidArgument, "SNCL_COMM_ID is not set (expected host:port)");
  SocketAddress address;
  SNCL_CHECK(parseHostPort(*commId, &address));
  // Nothing random can be shared here, so the secret is derived: from SNCL_COMM_SECRET when
  // set, else from the SNCL_COMM_ID string itself. The latter only keeps stray or mismatched
  // jobs apart; anyone who knows the address can rendezvous.
  const std::string seed = env::str("SNCL_COMM_SECRET").value_or(*commId);
  wire::Secret secret;
  uint64_t halves[2] = {fnv1a(seed.data(), seed.size()),
                        fnv1a(seed.data(), seed.size(), 0x84222325cbf29ce4ull)};
  memcpy(secret.data(), halves, sizeof(halves));
  if (isRoot) return wire::startRoot(address, /*reuseAddr=*/true, secret, id);
  wire::encodeId(address, secret, id);
  return snclSuccess;
}

}  // namespace sncl
