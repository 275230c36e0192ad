// Shell helpers of the tests that make network namespaces of their own (veth pairs between
// "hosts"): running `ip` commands and removing namespaces that a killed earlier run left.
#pragma once

#include <string>

namespace sncl::test {

// Runs cmd through the shell, its output discarded; true when it exited 0.
bool sh(const std::string& cmd);
// Runs cmd through the shell and returns what it printed.
std::string shOut(const std::string& cmd);
// Deletes the namespaces named prefix + one letter + "-" + pid whose process is gone.
void removeStaleNamespaces(const std::string& prefix);

}  // namespace sncl::test
