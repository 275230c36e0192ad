// Loads a network plugin (include/sncl/sncl_net.h): dlopen of SNCL_NET_PLUGIN, dlsym of
// snclNetPlugin_v1, and the checks that make a bad library a clear error instead of a
// crash (version, NULL entries). The library stays loaded while a NetPlugin refers to it.
#pragma once

#include <memory>
#include <string>

#include "lib/base/error.h"
#include "sncl/sncl_net.h"

namespace sncl::plugin {

struct NetPlugin {
  std::string path;                  // as given (a path, or the libsncl-net-<name>.so tried)
  const snclNet_v1_t* net = nullptr; // the checked table
  void* handle = nullptr;            // dlopen's, closed by the destructor
  ~NetPlugin();
};

// spec: a path (contains '/' or ends in ".so") or a name N, loaded as libsncl-net-N.so
// through the dynamic loader's search path. Errors: InvalidUsage (no such file, no
// snclNetPlugin_v1, another ABI version, a NULL entry or name), SystemError (dlopen's own
// failure, with its text). Every message names the file.
Result loadNetPlugin(const std::string& spec, std::shared_ptr<NetPlugin>* out);

}  // namespace sncl::plugin
