// Typed access to SNCL_* environment variables.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace sncl::env {

std::optional<std::string> str(const char* name);
// Parses an integer; a malformed value is logged and the default used.
int64_t integer(const char* name, int64_t dflt);
// A size as lib/base/size_text.h reads it; a malformed value is logged and the default used.
uint64_t bytes(const char* name, uint64_t dflt);
// Default deadline for blocking waits: SNCL_TIMEOUT_MS, else 60000.
int64_t timeoutMs();

}  // namespace sncl::env
