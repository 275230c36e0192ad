// Thread-locals that every call reads (the group depth, the log's rank, the spin switch,
// the last live handles): the initial-exec model reads them at a fixed offset from the
// thread pointer, where a shared library's default model calls __tls_get_addr for each
// (about 4% of an 8-byte All-Reduce). A library loaded with dlopen() (Python loading the
// torch backend) gets them from glibc's static TLS surplus, which is kept for such modules
// (glibc.rtld.optional_static_tls, 512 bytes): these take 44 bytes. Nothing else in libsncl
// uses the model.
#pragma once

#define SNCL_HOT_THREAD_LOCAL __attribute__((tls_model("initial-exec"))) thread_local
