// Copies of large blocks that bypass the caches (non-temporal stores): a rank that copies a
// peer's data into a buffer nobody reads soon moves 2 bytes of memory traffic per byte
// instead of 3 (no read-for-ownership of the destination), and leaves the caches to data
// that is used again.
#pragma once

#include <cstddef>

namespace sncl {

// Copies below this size, or on a machine without SSE2, are a plain memcpy: they fit the
// caches, where a later reader finds them.
constexpr size_t kStreamingCopyMinBytes = 256u << 10;

// memcpy(dst, src, bytes) with non-temporal stores from kStreamingCopyMinBytes; ranges
// must not overlap.
void copyStreaming(void* dst, const void* src, size_t bytes);
// The same at any size: for callers that know the whole transfer is large although they
// copy it in small blocks.
void copyNonTemporal(void* dst, const void* src, size_t bytes);

}  // namespace sncl
