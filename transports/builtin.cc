// The built-in transports, by name. Adding one is one line in SNCL_BUILTIN_TRANSPORTS:
// its name and the factory defined in transports/<name>/.
#include <memory>
#include <string>
#include <vector>

#include "lib/transport/transport.h"

// clang-format off
#define SNCL_BUILTIN_TRANSPORTS(X) \
  X("shm", createResettableShmTransport) \
  X("ofi", createOfiTransport) \
  X("bus", createBusTransport) \
  X("plugin", createPluginTransport)
// clang-format on

namespace sncl {

#define SNCL_DECLARE_FACTORY(name, factory) std::unique_ptr<Transport> factory();
SNCL_BUILTIN_TRANSPORTS(SNCL_DECLARE_FACTORY)
#undef SNCL_DECLARE_FACTORY

namespace {

struct BuiltinTransport {
  const char* name;
  TransportFactory create;
};

#define SNCL_TABLE_ENTRY(name, factory) {name, factory},
constexpr BuiltinTransport kBuiltins[] = {SNCL_BUILTIN_TRANSPORTS(SNCL_TABLE_ENTRY)};
#undef SNCL_TABLE_ENTRY

}  // namespace

// nullptr for a name that is not built in.
std::unique_ptr<Transport> createTransport(const std::string& name) {
  for (const BuiltinTransport& t : kBuiltins)
    if (name == t.name) return t.create();
  return nullptr;
}

std::vector<std::string> transportNames() {
  std::vector<std::string> names;
  for (const BuiltinTransport& t : kBuiltins) names.emplace_back(t.name);
  return names;
}

}  // namespace sncl
