// The data paths' copies of large blocks. Past the cache they bypass it (non-temporal
// stores): a rank that copies a peer's data into a buffer nobody reads soon moves 2 bytes
// of memory traffic per byte instead of 3 (no read-for-ownership of the destination), and
// leaves the caches to data that is used again. Within it they go through it, in a loop of
// our own rather than glibc's memcpy (copyCached).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sncl {

// Whether a working set of this many bytes (every buffer a transfer touches, on all ranks
// together) is more than 1.5 times a last-level cache of cacheBytes (0: unknown, taken as
// 32 MiB). Below it a plain memcpy wins by up to 2x: the source is still in the cache and
// the destination is read again soon. Measured on a 32 MiB L3, shared-buffer All-Gather
// (working set (n+1)S): 2 ranks 8 MiB (24 MiB) 360-420 us cached against 680-690
// streaming, 16 MiB (48) 1280-1320 against 1360-1430, 32 MiB (96) 3330-3580 against
// 2790-2840; 4 ranks 4 MiB (20) 320-590 against 700; 8 MiB (40) 1070-1150 against
// 1390-1410, 16 MiB (80) even, 32 MiB (160) streaming 1.2x faster. Two cores copying
// 16 MiB each (64 MiB): 760 us streaming against 1160 cached.
bool pastTheCache(size_t bytes, uint64_t cacheBytes);

// memcpy(dst, src, bytes) with non-temporal stores (a plain memcpy below 128 bytes or without
// SSE2); ranges must not overlap. For callers that know the whole transfer is past the
// cache although they copy it in smaller blocks.
void copyNonTemporal(void* dst, const void* src, size_t bytes);
// Below this copyCached is a plain memcpy: "rep movsb" starts slower (a 512-byte cell: 0.69-0.76
// us a call against 0.61-0.66).
constexpr size_t kFastStringsMinBytes = 1024;
// copyCached from kFastStringsMinBytes (out of line: the small copies of the cells stay a call
// to memcpy).
void copyCachedLarge(void* dst, const void* src, size_t bytes);
// memcpy(dst, src, bytes) through the caches, for the data paths' copies, which mostly
// write lines that a peer's core read last (a cell, a staging area, a FIFO slot).
// - On an Intel CPU with fast strings (ERMS), from kFastStringsMinBytes: "rep movsb".
//   2-rank All-Reduce of heap buffers, a core per rank, on a Sapphire Rapids: 4 KiB
//   1.65-1.68 us instead of 1.83-2.49, 1 MiB 179-204 instead of 234-240, 16 MiB 3178-3268
//   instead of 3812-3835 (glibc's memcpy takes "rep movsb" only above 2 KiB here). Likely
//   why: fast strings may claim a whole line without reading it from the core that holds
//   it, where a vector store must read it first.
// - Else from 2 KiB a vector loop with aligned stores instead of glibc's memcpy, whose
//   "rep movsb" runs at 1/14 of its speed on an AMD EPYC when the destination sits a few
//   bytes past the source's alignment (a page-aligned slot or staging area copied into a
//   malloc'ed buffer, 16 bytes past 64: 256 KiB in 90 us instead of 6.5 us; measured).
// SNCL_FAST_STRINGS=0/1 overrides the CPU check.
inline void copyCached(void* dst, const void* src, size_t bytes) {
  if (bytes < kFastStringsMinBytes) std::memcpy(dst, src, bytes);
  else copyCachedLarge(dst, src, bytes);
}
// Whether copyCached takes "rep movsb" (decided at its first large copy).
bool copiesUseFastStrings();

}  // namespace sncl
