#include "lib/base/copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
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

}  // namespace
#endif

void copyCached(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
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
