#include "perf/common/gloo_peer.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

namespace perf {

struct GlooPeer::Impl {
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::chrono::milliseconds timeout;
};

GlooPeer::GlooPeer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GlooPeer::~GlooPeer() = default;

namespace {

// Calls f with a null pointer of the Gloo element type of t (nullptr type: not supported).
template <class F>
bool withType(snclDataType_t t, F&& f) {
  switch (t) {
    case snclInt8: return f(static_cast<int8_t*>(nullptr));
    case snclUint8: return f(static_cast<uint8_t*>(nullptr));
    case snclInt32: return f(static_cast<int32_t*>(nullptr));
    case snclUint32: return f(static_cast<uint32_t*>(nullptr));
    case snclInt64: return f(static_cast<int64_t*>(nullptr));
    case snclUint64: return f(static_cast<uint64_t*>(nullptr));
    case snclFloat16: return f(static_cast<gloo::float16*>(nullptr));
    case snclFloat32: return f(static_cast<float*>(nullptr));
    case snclFloat64: return f(static_cast<double*>(nullptr));
    default: return false;
  }
}

template <class T>
gloo::AllreduceOptions::Func reduceFunction(snclRedOp_t op) {
  using Fn = void (*)(void*, const void*, const void*, size_t);
  switch (op) {
    case snclSum: return static_cast<Fn>(&gloo::sum<T>);
    case snclProd: return static_cast<Fn>(&gloo::product<T>);
    case snclMax: return static_cast<Fn>(&gloo::max<T>);
    case snclMin: return static_cast<Fn>(&gloo::min<T>);
    default: return nullptr;
  }
}

// Gloo reports errors by throwing (gloo::Exception and friends).
template <class F>
bool guarded(const char* what, F&& f) {
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    fprintf(stderr, "gloo %s failed: %s\n", what, e.what());
    return false;
  }
}

}  // namespace

std::unique_ptr<GlooPeer> GlooPeer::connect(MPI_Comm comm, int timeoutMs) {
  int rank = 0, nranks = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &nranks);
  char dir[256] = {0};
  if (rank == 0) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "sncl-gloo-XXXXXX").string();
    if (tmpl.size() < sizeof(dir)) {
      memcpy(dir, tmpl.c_str(), tmpl.size());
      if (!mkdtemp(dir)) dir[0] = 0;
    }
  }
  MPI_Bcast(dir, sizeof(dir), MPI_CHAR, 0, comm);
  if (!dir[0]) {
    if (rank == 0) fprintf(stderr, "gloo: cannot create a directory for its file store\n");
    return nullptr;
  }
  auto impl = std::make_unique<Impl>();
  impl->timeout = std::chrono::milliseconds(timeoutMs);
  bool ok = guarded("connect", [&] {
    gloo::transport::tcp::attr attr("127.0.0.1");  // loopback only
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(dir);
    impl->context = std::make_shared<gloo::rendezvous::Context>(rank, nranks);
    impl->context->setTimeout(impl->timeout);
    impl->context->connectFullMesh(store, device);
  });
  int all = ok ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, comm);
  if (rank == 0) std::filesystem::remove_all(dir);
  if (!all) return nullptr;
  return std::unique_ptr<GlooPeer>(new GlooPeer(std::move(impl)));
}

bool GlooPeer::supports(snclDataType_t type, bool reduces, snclRedOp_t op) {
  return withType(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return !reduces || reduceFunction<T>(op) != nullptr;
  });
}

bool GlooPeer::allReduce(const void* send, void* recv, size_t count, snclDataType_t type, snclRedOp_t op) {
  return withType(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return guarded("allreduce", [&] {
      gloo::AllreduceOptions opts(impl_->context);
      opts.setInput(static_cast<T*>(const_cast<void*>(send)), count);
      opts.setOutput(static_cast<T*>(recv), count);
      opts.setReduceFunction(reduceFunction<T>(op));
      opts.setTimeout(impl_->timeout);
      gloo::allreduce(opts);
    });
  });
}

bool GlooPeer::broadcast(const void* send, void* recv, size_t count, snclDataType_t type, int root) {
  return withType(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return guarded("broadcast", [&] {
      gloo::BroadcastOptions opts(impl_->context);
      if (impl_->context->rank == root) opts.setInput(static_cast<T*>(const_cast<void*>(send)), count);
      opts.setOutput(static_cast<T*>(recv), count);
      opts.setRoot(root);
      opts.setTimeout(impl_->timeout);
      gloo::broadcast(opts);
    });
  });
}

bool GlooPeer::allGather(const void* send, void* recv, size_t count, snclDataType_t type) {
  return withType(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return guarded("allgather", [&] {
      gloo::AllgatherOptions opts(impl_->context);
      opts.setInput(static_cast<T*>(const_cast<void*>(send)), count);
      opts.setOutput(static_cast<T*>(recv), count * static_cast<size_t>(impl_->context->size));
      opts.setTimeout(impl_->timeout);
      gloo::allgather(opts);
    });
  });
}

bool GlooPeer::alltoAll(const void* send, void* recv, size_t count, snclDataType_t type) {
  return withType(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    return guarded("alltoall", [&] {
      const size_t total = count * static_cast<size_t>(impl_->context->size);
      gloo::AlltoallOptions opts(impl_->context);
      opts.setInput(static_cast<T*>(const_cast<void*>(send)), total);
      opts.setOutput(static_cast<T*>(recv), total);
      opts.setTimeout(impl_->timeout);
      gloo::alltoall(opts);
    });
  });
}

}  // namespace perf
