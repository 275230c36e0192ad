// RailWatch: a lost rail, watched for its return (ofi_rails.h).
//
// Once every rank dropped a rail, its endpoint is parked and nothing uses the rail. Each
// rank keeps the rail's probe listener (peers' probes of the rail reach it; it accepts
// and closes them, so its backlog stays free) and probes the rail itself in the
// background: every interval, when the interface has its carrier, a non-blocking TCP
// connect from the rail's address to each peer's listener. A cycle in which every peer's
// kernel answered (accepted or refused) counts; one that did not (no route, no answer
// within the probe's deadline) sets the count back to 0. Nothing here blocks: step()
// starts a cycle or reads the answers that came.
#pragma once

#include <netinet/in.h>

#include <string>
#include <vector>

#include "lib/base/clock.h"

namespace sncl::ofi {

// True when the interface is up and has its carrier (fd: any datagram socket).
bool interfaceRunning(int fd, const std::string& iface);

class RailWatch {
 public:
  // Takes listenFd (this rank's probe listener on the rail); peers: their listeners.
  RailWatch(std::string iface, sockaddr_in railAddr, int listenFd, std::vector<sockaddr_in> peers);
  ~RailWatch();
  RailWatch(const RailWatch&) = delete;
  RailWatch& operator=(const RailWatch&) = delete;

  // Rate-limited: cheap to call at every collective.
  void step(Clock::time_point now);
  // Probe cycles in a row in which every peer answered.
  int answeredCycles() const { return answered_; }

 private:
  void startCycle(Clock::time_point now);
  void readAnswers(Clock::time_point now);
  void endCycle(bool answered);
  void closeProbes();

  std::string iface_;
  sockaddr_in railAddr_;
  int listenFd_ = -1;
  int flagsFd_ = -1;  // a datagram socket for the interface's flags
  std::vector<sockaddr_in> peers_;
  std::vector<int> probes_;  // this cycle's connects still open, by peer (-1: answered)
  bool inCycle_ = false;
  bool cycleFailed_ = false;
  int answered_ = 0;
  Clock::time_point cycleEnds_{};
  Clock::time_point nextCycle_{};
};

}  // namespace sncl::ofi
