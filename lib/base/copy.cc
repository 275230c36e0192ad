#include "lib/base/copy.h"

#include <cstdint>
#include <cstring>

#include "lib/base/env.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <emmintrin.h>
#endif

namespace sncl {

bool pastTheCache(size_t bytes, uint64_t cacheBytes) {
  const uint64_t cache = cacheBytes != 0 ? cacheBytes : uint64_t{32} << 20;
  return bytes > cache + cache / 2;
}

#if defined(__x86_64__)
namespace {

// memcpy in rounds of 64 bytes with unaligned loads and 16-byte aligned stores: cached
// (Stream false) or non-temporal (true, fenced before return: streaming stores are weakly
// ordered, and whoever is told the data is there must see it).
template <bool Stream>
void copyRounds(char* d, const char* s, size_t bytes) {
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  std::memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    if constexpr (Stream) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
    } else {
      _mm_store_si128(reinterpret_cast<__m128i*>(d + i), a);
      _mm_store_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
      _mm_store_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
      _mm_store_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
    }
  }
  if constexpr (Stream) _mm_sfence();
  std::memcpy(d + i, s + i, bytes - i);
}

// An Intel CPU with fast strings (ERMS): "rep movsb" measured faster there (lib/base/copy.h).
bool intelFastStrings() {
  unsigned top = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &top, &b, &c, &d)) return false;
  const bool intel = b == 0x756e6547 && d == 0x49656e69 && c == 0x6c65746e;  // "Genu" "ineI" "ntel"
  if (!intel || top < 7) return false;
  unsigned a = 0;
  __cpuid_count(7, 0, a, b, c, d);
  return (b >> 9) & 1;
}

// SNCL_FAST_STRINGS: 1 or 0 forces the choice (for measuring it), else the CPU decides.
// Never under a sanitizer, which sees memcpy's accesses but not an instruction's.
bool useFastStrings() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return false;
#else
  const int64_t forced = env::integer("SNCL_FAST_STRINGS", -1);
  return forced >= 0 ? forced != 0 : intelFastStrings();
#endif
}

void copyFastStrings(void* d, const void* s, size_t n) {
  asm volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
}

}  // namespace
#endif

bool copiesUseFastStrings() {
#if defined(__x86_64__)
  static const bool fastStrings = useFastStrings();
  return fastStrings;
#else
  return false;
#endif
}

void copyCachedLarge(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  if (copiesUseFastStrings()) return copyFastStrings(dst, src, bytes);
  if (bytes >= 2048) return copyRounds<false>(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
#endif
  std::memcpy(dst, src, bytes);
}

void copyNonTemporal(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  if (bytes >= 128) return copyRounds<true>(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
#endif
  std::memcpy(dst, src, bytes);
}

}  // namespace sncl
