// Sizes as every sncl variable and tool reads them, so that "64K" means one thing
// everywhere: a decimal number with an optional fraction, then an optional K, M, G or T
// (powers of 1024, either case) and an optional B or iB ("65536", "4M", "1.5K", "256KiB").
// The result must be a whole number of bytes that fits in 64 bits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sncl {

bool parseSize(std::string_view text, uint64_t* bytes);
// The other way, for messages: "512 B", "64 KiB", "1.5 GiB" (at most one decimal).
std::string sizeText(uint64_t bytes);

}  // namespace sncl
