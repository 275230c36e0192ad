// FNV-1a, the one hash sncl uses for ids, checksums and table keys: small, stable across
// builds and machines (a checksum must agree between ranks), and good enough for keys.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sncl {

constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

inline uint64_t fnv1a(const void* data, size_t bytes, uint64_t hash = kFnvBasis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * kFnvPrime;
  return hash;
}

// One 64-bit word at a time: for keys made of numbers, where hashing bytewise is 8x the work.
inline uint64_t fnvMix(uint64_t hash, uint64_t word) { return (hash ^ word) * kFnvPrime; }

}  // namespace sncl
