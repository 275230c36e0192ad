// Thread-locals read on every call: the initial-exec model reads them at a fixed offset
// from the thread pointer, where a shared library's default calls __tls_get_addr (7% of an
// 8-byte call). Safe here, unlike in libsncl (which Python dlopen()s through the torch
// backend): the drop-in is preloaded or linked, so its TLS is allocated when the program starts.
#pragma once

#define SNCL_MPI_THREAD_LOCAL __attribute__((tls_model("initial-exec"))) thread_local
