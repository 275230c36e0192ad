// The data paths' copies of large blocks. Past the cache they bypass it (non-temporal
// stores): a rank that copies a peer's data into a buffer nobody reads soon moves 2 bytes
// of memory traffic per byte instead of 3 (no read-for-ownership of the destination), and
// leaves the caches to data that is used again. Within it they go through it, in a loop of
// our own rather than glibc's memcpy (copyCached).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sncl {

// Whether a working set of this many bytes (every buffer a transfer touches, on all ranks
// together) reaches half of a last-level cache of cacheBytes (0: unknown, taken as 32 MiB).
// Below it a plain memcpy wins by up to 2x: the source is still in the cache and the
// destination is read again soon (measured on a 32 MiB L3: two cores copying 4 MiB each,
// 130-180 us cached against 320-350 us streaming; 16 MiB each, 760 us streaming against
// 1160 us cached).
bool pastTheCache(size_t bytes, uint64_t cacheBytes);

// memcpy(dst, src, bytes) with non-temporal stores (a plain memcpy below 128 bytes or without
// SSE2); ranges must not overlap. For callers that know the whole transfer is past the
// cache although they copy it in smaller blocks.
void copyNonTemporal(void* dst, const void* src, size_t bytes);
// memcpy(dst, src, bytes) through the caches, for the data paths' copies. From 2 KiB a
// vector loop with aligned stores instead of glibc's memcpy, whose "rep movsb" runs at
// 1/14 of its speed on the test machine's AMD EPYC when the destination sits a few bytes past the
// source's alignment (a page-aligned slot or staging area copied into a malloc'ed buffer,
// 16 bytes past 64: 256 KiB in 90 us instead of 6.5 us; measured).
void copyCached(void* dst, const void* src, size_t bytes);

}  // namespace sncl
