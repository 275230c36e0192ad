#include "transports/plugin/plugin_loader.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstring>

#include "lib/base/log.h"

namespace sncl::plugin {

NetPlugin::~NetPlugin() {
  if (handle) dlclose(handle);
}

namespace {

bool looksLikePath(const std::string& spec) {
  return spec.find('/') != std::string::npos ||
         (spec.size() > 3 && spec.compare(spec.size() - 3, 3, ".so") == 0);
}

// The first NULL entry of the table, or nullptr when all are set.
const char* missingEntry(const snclNet_v1_t& n) {
#define SNCL_NET_ENTRY(field) \
  if (!n.field) return #field;
  SNCL_NET_ENTRY(name)
  SNCL_NET_ENTRY(init)
  SNCL_NET_ENTRY(devices)
  SNCL_NET_ENTRY(listen)
  SNCL_NET_ENTRY(connect)
  SNCL_NET_ENTRY(accept)
  SNCL_NET_ENTRY(isend)
  SNCL_NET_ENTRY(irecv)
  SNCL_NET_ENTRY(test)
  SNCL_NET_ENTRY(closeSend)
  SNCL_NET_ENTRY(closeRecv)
  SNCL_NET_ENTRY(closeListen)
  SNCL_NET_ENTRY(finalize)
#undef SNCL_NET_ENTRY
  return nullptr;
}

}  // namespace

Result loadNetPlugin(const std::string& spec, std::shared_ptr<NetPlugin>* out) {
  if (spec.empty()) return fail(snclInvalidUsage, "SNCL_NET_PLUGIN is empty: give the path or name of a plugin");
  auto p = std::make_shared<NetPlugin>();
  p->path = looksLikePath(spec) ? spec : "libsncl-net-" + spec + ".so";
  struct stat st;
  if (looksLikePath(spec) && stat(p->path.c_str(), &st) != 0)
    return fail(snclInvalidUsage, "network plugin {}: no such file (SNCL_NET_PLUGIN={})", p->path, spec);
  dlerror();
  p->handle = dlopen(p->path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!p->handle) {
    const char* why = dlerror();
    return fail(snclSystemError, "network plugin {}: cannot load it: {}", p->path, why ? why : "unknown dlopen error");
  }
  dlerror();
  void* sym = dlsym(p->handle, SNCL_NET_PLUGIN_SYMBOL);
  if (!sym) {
    const char* why = dlerror();
    return fail(snclInvalidUsage, "network plugin {}: no symbol {} ({}); is it an sncl network plugin?", p->path,
                SNCL_NET_PLUGIN_SYMBOL, why ? why : "NULL");
  }
  const auto* net = static_cast<const snclNet_v1_t*>(sym);
  if (net->version != SNCL_NET_PLUGIN_VERSION)
    return fail(snclInvalidUsage, "network plugin {}: its {} has ABI version {}, this sncl wants version {}", p->path,
                SNCL_NET_PLUGIN_SYMBOL, net->version, SNCL_NET_PLUGIN_VERSION);
  if (const char* field = missingEntry(*net))
    return fail(snclInvalidUsage, "network plugin {}: {}.{} is NULL (every entry must be set)", p->path,
                SNCL_NET_PLUGIN_SYMBOL, field);
  p->net = net;
  log::info(log::Subsys::Transport, "network plugin {} loaded from {}", net->name, p->path);
  *out = std::move(p);
  return snclSuccess;
}

}  // namespace sncl::plugin
