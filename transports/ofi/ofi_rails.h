// Rails: the ofi transport over several network interfaces (SNCL_OFI_IFACES), one
// OfiTransport each, bound to its interface's address and watching its own health
// (ofi_transport.h). Rail i of every host is on one network (the interfaces are listed in
// the same rail order on every host), so rail i of one rank reaches rail i of another.
//
// A pair's messages take the usable rails in turn (the k-th of each direction on the
// (k mod n)-th rail: both ends count alike). When a rail is lost, its requests fail with a
// per-peer error naming it, faultPending() and railsLost() report it, and the comm agrees
// (docs/faults.md): a rail lost while another remains is a Retry. reset() then parks every
// rail that any rank lost (the ranks exchange what they lost: a rank that had no traffic
// on the rail saw nothing), drains the others and opens them afresh: new endpoints, new
// addresses, a comm id salted by the attempt and the rail, so nothing of the failed
// attempt can be matched by the re-run. A rail that fails to open on some rank is dropped
// by all. With no rail left, reset() fails on every rank alike.
//
// A parked rail is watched (ofi_rail_watch.h); once its probes answer on a rank, that rank
// reports it (railsBack, faultPending) and the next reset takes it back if its probes
// answered on every rank.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lib/transport/transport.h"
#include "transports/ofi/ofi.h"

namespace sncl::ofi {

std::unique_ptr<Transport> createOfiRails(const OfiOptions& options);

}  // namespace sncl::ofi
