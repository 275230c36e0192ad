#include "bindings/torch/process_group_sncl.h"

#include <Python.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <algorithm>
#include <climits>
#include <cstring>

namespace sncl_torch {
namespace {

using Tensors = std::vector<at::Tensor>;

void checkCpu(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), "sncl ", what, ": tensors must be on the CPU, got one on ", t.device());
  TORCH_CHECK(t.layout() == at::kStrided, "sncl ", what, ": sparse tensors are not supported");
}

void checkDense(const at::Tensor& t, const char* what) {
  checkCpu(t, what);
  TORCH_CHECK(t.is_contiguous(), "sncl ", what, ": tensors must be contiguous");
}

at::Tensor& single(Tensors& ts, const char* what) {
  TORCH_CHECK(ts.size() == 1, "sncl ", what, ": takes one tensor per call, got ", ts.size());
  checkDense(ts[0], what);
  return ts[0];
}

size_t bytesOf(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }
char* ptr(const at::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

// The sncl dtype of a reduction, or false when sncl has none for it (int16, bool sums).
// Bool is bytes of 0 or 1, which min, max and the bitwise ops keep 0 or 1.
bool reduceType(at::ScalarType t, c10d::ReduceOp::RedOpType op, snclDataType_t* out) {
  switch (t) {
    case at::kFloat: *out = snclFloat32; return true;
    case at::kDouble: *out = snclFloat64; return true;
    case at::kHalf: *out = snclFloat16; return true;
    case at::kBFloat16: *out = snclBfloat16; return true;
    case at::kChar: *out = snclInt8; return true;
    case at::kByte: *out = snclUint8; return true;
    case at::kInt: *out = snclInt32; return true;
    case at::kLong: *out = snclInt64; return true;
    case at::kBool:
      *out = snclUint8;
      return op == c10d::ReduceOp::MIN || op == c10d::ReduceOp::MAX || op == c10d::ReduceOp::BAND ||
             op == c10d::ReduceOp::BOR || op == c10d::ReduceOp::BXOR;
    default: return false;
  }
}

const char* opName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

// The sncl op, and for PREMUL_SUM the factor (one element of the tensors' dtype). local:
// sncl lacks the dtype (int16, bool sums), so the job all-gathers the inputs and reduces
// them here, as gloo would: n times the traffic, same result.
struct RedOp {
  snclRedOp_t op = snclSum;
  snclDataType_t type = snclFloat32;
  at::Tensor factor;
  bool local = false;
  c10d::ReduceOp::RedOpType kind = c10d::ReduceOp::SUM;
};

RedOp redOp(const c10d::ReduceOp& op, at::ScalarType dtype, const char* what) {
  RedOp r;
  r.kind = op.op_;
  const bool bitwise = op.op_ == c10d::ReduceOp::BAND || op.op_ == c10d::ReduceOp::BOR || op.op_ == c10d::ReduceOp::BXOR;
  const bool integral = at::isIntegralType(dtype, /*includeBool=*/true);
  // Float tensors are refused, as gloo refuses them (sncl would too).
  TORCH_CHECK(!bitwise || integral, "sncl ", what, ": reduce op ", opName(op.op_),
              " takes integer or bool tensors, got ", c10::toString(dtype));
  if (!reduceType(dtype, op.op_, &r.type)) {
    const bool localOp = op.op_ == c10d::ReduceOp::SUM || op.op_ == c10d::ReduceOp::PRODUCT ||
                         op.op_ == c10d::ReduceOp::MIN || op.op_ == c10d::ReduceOp::MAX || bitwise;
    TORCH_CHECK(integral && localOp, "sncl ", what, ": dtype ", c10::toString(dtype), " is not supported for reduce op ",
                opName(op.op_), " (sncl reduces float32, float64, float16, bfloat16, int8, uint8, int32, int64; "
                "int16 and bool with SUM, PRODUCT, MIN, MAX and the bitwise ops)");
    r.local = true;
    return r;
  }
  switch (op.op_) {
    case c10d::ReduceOp::SUM: r.op = snclSum; break;
    case c10d::ReduceOp::AVG: r.op = snclAvg; break;
    case c10d::ReduceOp::PRODUCT: r.op = snclProd; break;
    case c10d::ReduceOp::MIN: r.op = snclMin; break;
    case c10d::ReduceOp::MAX: r.op = snclMax; break;
    case c10d::ReduceOp::BAND: r.op = snclBand; break;
    case c10d::ReduceOp::BOR: r.op = snclBor; break;
    case c10d::ReduceOp::BXOR: r.op = snclBxor; break;
    case c10d::ReduceOp::PREMUL_SUM: {
      // Only PREMUL_SUM carries a supplement, and it is always this type.
      auto* s = static_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(s, "sncl ", what, ": PREMUL_SUM without a factor");
      r.factor = s->tensor_factors.empty()
                     ? at::scalar_tensor(s->double_factor, at::TensorOptions().dtype(dtype))
                     : s->tensor_factors[0].to(at::kCPU, dtype).contiguous();
      TORCH_CHECK(r.factor.numel() == 1, "sncl ", what, ": PREMUL_SUM factor must have one element");
      break;
    }
    default:
      TORCH_CHECK(false, "sncl ", what, ": reduce op ", opName(op.op_), " is not supported");
  }
  return r;
}

// Row i of all is rank i's input; returns their reduction (one row).
at::Tensor reduceRows(const at::Tensor& all, c10d::ReduceOp::RedOpType kind) {
  const bool isBool = all.scalar_type() == at::kBool;
  switch (kind) {
    case c10d::ReduceOp::SUM: return isBool ? all.any(0) : all.sum(0).to(all.scalar_type());  // wraps like sncl
    case c10d::ReduceOp::PRODUCT: return isBool ? all.all(0) : all.prod(0).to(all.scalar_type());
    case c10d::ReduceOp::MIN: return isBool ? all.all(0) : std::get<0>(all.min(0));
    case c10d::ReduceOp::MAX: return isBool ? all.any(0) : std::get<0>(all.max(0));
    default: break;
  }
  at::Tensor acc = all[0].clone();
  for (int64_t i = 1; i < all.size(0); ++i) {
    if (kind == c10d::ReduceOp::BAND) acc.bitwise_and_(all[i]);
    else if (kind == c10d::ReduceOp::BOR) acc.bitwise_or_(all[i]);
    else acc.bitwise_xor_(all[i]);
  }
  return acc;
}

// Waits for what the job queued; the stream holds only this job's calls.
snclResult_t synced(snclResult_t r, snclStream_t s) { return r != snclSuccess ? r : snclStreamSynchronize(s); }

// Runs calls(op, stream) with r's op; a pre-multiplied sum lives for this job only.
template <class F>
snclResult_t withOp(snclComm_t comm, const RedOp& r, F&& calls) {
  if (!r.factor.defined()) return calls(r.op);
  snclRedOp_t op;
  snclResult_t res = snclRedOpCreatePreMulSum(&op, r.factor.data_ptr(), r.type, snclScalarHostImmediate, comm);
  if (res != snclSuccess) return res;
  res = calls(op);
  snclRedOpDestroy(op, comm);
  return res;
}

// A local reduction (RedOp::local) of every rank's flat: all-gathered, reduced here.
snclResult_t gatherReduce(const at::Tensor& flat, const RedOp& r, int n, snclComm_t comm, snclStream_t s,
                          at::Tensor* out) {
  at::Tensor all = at::empty({n, flat.numel()}, flat.options());
  const snclResult_t res = synced(snclAllGather(ptr(flat), ptr(all), bytesOf(flat), snclUint8, comm, s), s);
  if (res == snclSuccess) *out = reduceRows(all, r.kind);
  return res;
}

// Calls between snclGroupStart and snclGroupEnd; the group ends even when a call fails.
template <class F>
snclResult_t grouped(F&& calls) {
  snclResult_t r = snclGroupStart();
  if (r != snclSuccess) return r;
  r = calls();
  const snclResult_t end = snclGroupEnd();
  return r != snclSuccess ? r : end;
}

void checkSameAs(const at::Tensor& t, const at::Tensor& ref, const char* what) {
  checkCpu(t, what);
  TORCH_CHECK(t.scalar_type() == ref.scalar_type() && t.numel() == ref.numel(), "sncl ", what,
              ": every tensor of the list must match the input's dtype and number of elements");
}

void checkList(const Tensors& list, int size, const at::Tensor& ref, const char* what) {
  TORCH_CHECK(static_cast<int>(list.size()) == size, "sncl ", what, ": the tensor list needs ", size,
              " tensors (one per rank), got ", list.size());
  for (const auto& t : list) checkSameAs(t, ref, what);
}

void checkRank(int r, int size, const char* what) {
  TORCH_CHECK(r >= 0 && r < size, "sncl ", what, ": rank ", r, " is out of range [0, ", size, ")");
}

// Copies list[i] into block i of flat (one list tensor per block).
void packList(const Tensors& list, at::Tensor& flat) {
  const int64_t n = list.empty() ? 0 : list[0].numel();
  for (size_t i = 0; i < list.size(); ++i) flat.narrow(0, static_cast<int64_t>(i) * n, n).copy_(list[i].reshape({-1}));
}

void unpackList(const at::Tensor& flat, Tensors& list) {
  const int64_t n = list.empty() ? 0 : list[0].numel();
  for (size_t i = 0; i < list.size(); ++i)
    list[i].copy_(flat.narrow(0, static_cast<int64_t>(i) * n, n).view(list[i].sizes()));
}

}  // namespace

ProcessGroupSNCL::ProcessGroupSNCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size) {
  snclUniqueId id;
  const std::string key = "sncl_unique_id";
  if (rank == 0) {
    const snclResult_t r = snclGetUniqueId(&id);
    TORCH_CHECK(r == snclSuccess, "sncl: snclGetUniqueId failed: ", snclGetLastError(nullptr));
    store->set(key, std::vector<uint8_t>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    const std::vector<uint8_t> v = store->get(key);  // waits up to the store's timeout
    TORCH_CHECK(v.size() == sizeof(id.internal), "sncl: the store holds a unique id of ", v.size(),
                " bytes, expected ", sizeof(id.internal));
    std::memcpy(id.internal, v.data(), v.size());
  }
  snclConfig_t config = SNCL_CONFIG_INITIALIZER;
  config.timeoutMs = static_cast<int>(std::clamp<int64_t>(timeout.count(), 1, INT_MAX));
  config.commName = "torch";
  snclResult_t r = snclCommInitRankConfig(&comm_, size, id, rank, &config);
  TORCH_CHECK(r == snclSuccess, "sncl: rank ", rank, " of ", size, " failed to join: ", snclGetErrorString(r), ": ",
              snclGetLastError(nullptr));
  r = snclStreamCreate(&stream_);
  if (r != snclSuccess) {
    snclCommDestroy(comm_);
    TORCH_CHECK(false, "sncl: snclStreamCreate failed: ", snclGetLastError(nullptr));
  }
  issuer_ = std::make_unique<Issuer>(comm_, stream_);
  p2p_ = std::make_shared<P2pQueue>(rank, comm_, issuer_.get());
}

ProcessGroupSNCL::~ProcessGroupSNCL() {
  // Finishing queued work may complete futures whose Python callbacks need the GIL, and
  // the last reference often drops in Python: release the GIL while the issuer drains.
  p2p_->close();
  if (Py_IsInitialized() && PyGILState_Check()) {
    PyThreadState* state = PyEval_SaveThread();
    issuer_.reset();
    PyEval_RestoreThread(state);
  } else {
    issuer_.reset();
  }
  snclStreamDestroy(stream_);
  snclCommDestroy(comm_);
}

ProcessGroupSNCL::Ptr ProcessGroupSNCL::submit(c10d::OpType type, const char* what, Tensors outputs, JobFn job) {
  auto work = c10::make_intrusive<WorkSNCL>(rank_, type, std::move(outputs));
  p2p_->flush(std::string("the next collective call (") + what + ")");  // a call runs after the p2p posted before it
  issuer_->submit(work, what, std::move(job));
  return work;
}

ProcessGroupSNCL::Ptr ProcessGroupSNCL::broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) {
  at::Tensor t = single(tensors, "broadcast");
  const int root = static_cast<int>(opts.rootRank);
  checkRank(root, size_, "broadcast");
  snclComm_t comm = comm_;
  return submit(c10d::OpType::BROADCAST, "broadcast", tensors, [=](snclStream_t s) {
    return synced(snclBroadcast(ptr(t), ptr(t), bytesOf(t), snclUint8, root, comm, s), s);
  });
}

ProcessGroupSNCL::Ptr ProcessGroupSNCL::allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) {
  at::Tensor t = single(tensors, "allreduce");
  const RedOp r = redOp(opts.reduceOp, t.scalar_type(), "allreduce");
  snclComm_t comm = comm_;
  const int n = size_;
  return submit(c10d::OpType::ALLREDUCE, "allreduce", tensors, [=](snclStream_t s) {
    if (r.local) {
      at::Tensor sum;
      const snclResult_t e = gatherReduce(t.reshape({-1}), r, n, comm, s, &sum);
      if (e == snclSuccess) t.copy_(sum.view(t.sizes()));
      return e;
    }
    return withOp(comm, r, [&](snclRedOp_t op) {
      return synced(snclAllReduce(ptr(t), ptr(t), t.numel(), r.type, op, comm, s), s);
    });
  });
}

ProcessGroupSNCL::Ptr ProcessGroupSNCL::allreduce_coalesced(Tensors& tensors,
                                                            const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "sncl allreduce_coalesced: no tensors");
  for (const auto& t : tensors) {
    checkDense(t, "allreduce_coalesced");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(), "sncl allreduce_coalesced: tensors must share a dtype");
  }
  const RedOp r = redOp(opts.reduceOp, tensors[0].scalar_type(), "allreduce_coalesced");
  snclComm_t comm = comm_;
  Tensors ts = tensors;
  const int n = size_;
  return submit(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors, [=](snclStream_t s) {
    if (r.local) {
      Tensors parts;
      for (const auto& t : ts) parts.push_back(t.reshape({-1}));
      at::Tensor flat = at::cat(parts);
      at::Tensor sum;
      const snclResult_t e = gatherReduce(flat, r, n, comm, s, &sum);
      int64_t off = 0;
      for (const auto& t : ts) {
        if (e == snclSuccess) t.copy_(sum.narrow(0, off, t.numel()).view(t.sizes()));
        off += t.numel();
      }
      return e;
    }
    return withOp(comm, r, [&](snclRedOp_t op) {
      return synced(grouped([&] {
                      for (const auto& t : ts) {
                        const snclResult_t e = snclAllReduce(ptr(t), ptr(t), t.numel(), r.type, op, comm, s);
                        if (e != snclSuccess) return e;
                      }
                      return snclSuccess;
                    }),
                    s);
    });
  });
}

ProcessGroupSNCL::Ptr ProcessGroupSNCL::reduce(Tensors& tensors, const c10d::ReduceOptions& opts) {
  at::Tensor t = single(tensors, "reduce");
  const int root = static_cast<int>(opts.rootRank);
  checkRank(root, size_, "reduce");
  const RedOp r = redOp(opts.reduceOp, t.scalar_type(), "reduce");
  snclComm_t comm = comm_;
  const bool isRoot = rank_ == root;
  const int n = size_;
  return submit(c10d::OpType::REDUCE, "reduce", tensors, [=](snclStream_t s) {
    if (r.local) {
      at::Tensor sum;
      const snclResult_t e = gatherReduce(t.reshape({-1}), r, n, comm, s, &sum);
      if (e == snclSuccess && isRoot) t.copy_(sum.view(t.sizes()));
      return e;
    }
    return withOp(comm, r, [&](snclRedOp_t op) {
      return synced(snclReduce(ptr(t), isRoot ? ptr(t) : nullptr, t.numel(), r.type, op, root, comm, s), s);
    });
  });
}

ProcessGroupSNCL::Ptr ProcessGroupSNCL::allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                                                  const c10d::AllgatherOptions&) {
  at::Tensor in = single(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1, "sncl allgather: takes one output list per call, got ", outputs.size());
  checkList(outputs[0], size_, in, "allgather");
  Tensors outs = outputs[0];
  snclComm_t comm = comm_;
  const int n = size_;
  return submit(c10d::OpType::ALLGATHER, "allgather", outs, [=](snclStream_t s) mutable {
    at::Tensor flat = at::empty({n * in.numel()}, in.options());
    const snclResult_t r = synced(snclAllGather(ptr(in), ptr(flat), bytesOf(in), snclUint8, comm, s), s);
    if (r == snclSuccess) unpackList(flat, outs);
    return r;
  });
}

ProcessGroupSNCL::Ptr ProcessGroupSNCL::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                        const c10d::AllgatherOptions&) {
  checkDense(input, "_allgather_base");
  checkDense(output, "_allgather_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type() && output.numel() == size_ * input.numel(),
              "sncl _allgather_base: the output must hold world_size inputs of the input's dtype");
  at::Tensor in = input, out = output;
  snclComm_t comm = comm_;
  return submit(c10d::OpType::_ALLGATHER_BASE, "_allgather_base", {out}, [=](snclStream_t s) {
    return synced(snclAllGather(ptr(in), ptr(out), bytesOf(in), snclUint8, comm, s), s);
  });
}

ProcessGroupSNCL::Ptr ProcessGroupSNCL::allgather_coalesced(std::vector<Tensors>& outputs, Tensors& inputs,
                                                            const c10d::AllgatherOptions&) {
  TORCH_CHECK(outputs.size() == inputs.size(), "sncl allgather_coalesced: needs one output list per input, got ",
              outputs.size(), " lists for ", inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkDense(inputs[i], "allgather_coalesced");
    checkList(outputs[i], size_, inputs[i], "allgather_coalesced");
  }
  Tensors ins = inputs;
  std::vector<Tensors> outs = outputs;
  Tensors all;
  for (const auto& o : outs) all.insert(all.end(), o.begin(), o.end());
  snclComm_t comm = comm_;
  const int n = size_;
  return submit(c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", all, [=](snclStream_t s) mutable {
    Tensors flats;
    for (const auto& in : ins) flats.push_back(at::empty({n * in.numel()}, in.options()));
    const snclResult_t r = synced(grouped([&] {
                                    for (size_t i = 0; i < ins.size(); ++i) {
                                      const snclResult_t e = snclAllGather(ptr(ins[i]), ptr(flats[i]),
                                                                           bytesOf(ins[i]), snclUint8, comm, s);
                                      if (e != snclSuccess) return e;
                                    }
                                    return snclSuccess;
                                  }),
                                  s);
    if (r == snclSuccess)
      for (size_t i = 0; i < ins.size(); ++i) unpackList(flats[i], outs[i]);
    return r;
  });
}

ProcessGroupSNCL::Ptr ProcessGroupSNCL::gather(std::vector<Tensors>& outputs, Tensors& inputs,
                                               const c10d::GatherOptions& opts) {
  at::Tensor in = single(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  checkRank(root, size_, "gather");
  const bool isRoot = rank_ == root;
  Tensors outs;
  if (isRoot) {
    TORCH_CHECK(outputs.size() == 1, "sncl gather: the root takes one output list, got ", outputs.size());
    checkList(outputs[0], size_, in, "gather");
    outs = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "sncl gather: only the root passes output tensors");
  }
  snclComm_t comm = comm_;
  const int n = size_;
  return submit(c10d::OpType::GATHER, "gather", outs, [=](snclStream_t s) mutable {
    at::Tensor flat = isRoot ? at::empty({n * in.numel()}, in.options()) : at::Tensor();
    const snclResult_t r =
        synced(snclGather(ptr(in), isRoot ? ptr(flat) : nullptr, bytesOf(in), snclUint8, root, comm, s), s);
    if (r == snclSuccess && isRoot) unpackList(flat, outs);
    return r;
  });
}

ProcessGroupSNCL::Ptr ProcessGroupSNCL::scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                const c10d::ScatterOptions& opts) {
  at::Tensor out = single(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  checkRank(root, size_, "scatter");
  const bool isRoot = rank_ == root;
  Tensors ins;
  if (isRoot) {
    TORCH_CHECK(inputs.size() == 1, "sncl scatter: the root takes one input list, got ", inputs.size());
    checkList(inputs[0], size_, out, "scatter");
    ins = inputs[0];
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "sncl scatter: only the root passes input tensors");
  }
  snclComm_t comm = comm_;
  const int n = size_;
  return submit(c10d::OpType::SCATTER, "scatter", outputs, [=](snclStream_t s) {
    at::Tensor flat;
    if (isRoot) {
      flat = at::empty({n * out.numel()}, out.options());
      packList(ins, flat);
    }
    return synced(snclScatter(isRoot ? ptr(flat) : nullptr, ptr(out), bytesOf(out), snclUint8, root, comm, s), s);
  });
}

ProcessGroupSNCL::Ptr ProcessGroupSNCL::reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                       const c10d::ReduceScatterOptions& opts) {
  at::Tensor out = single(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1, "sncl reduce_scatter: takes one input list per call, got ", inputs.size());
  Tensors ins = inputs[0];
  TORCH_CHECK(static_cast<int>(ins.size()) == size_, "sncl reduce_scatter: the input list needs ", size_,
              " tensors (one per rank), got ", ins.size());
  // Uneven inputs (block p as long on every rank, block rank as long as the output) are
  // served too: each block is then reduced to its rank.
  bool even = true;
  for (const auto& t : ins) {
    checkCpu(t, "reduce_scatter");
    TORCH_CHECK(t.scalar_type() == out.scalar_type(), "sncl reduce_scatter: every input must have the output's dtype");
    even = even && t.numel() == out.numel();
  }
  TORCH_CHECK(ins[rank_].numel() == out.numel(), "sncl reduce_scatter: input ", rank_, " has ", ins[rank_].numel(),
              " elements, the output ", out.numel());
  const RedOp r = redOp(opts.reduceOp, out.scalar_type(), "reduce_scatter");
  snclComm_t comm = comm_;
  const int n = size_, me = rank_;
  return submit(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", outputs, [=](snclStream_t s) {
    Tensors flatIns;
    for (const auto& t : ins) flatIns.push_back(t.contiguous().reshape({-1}));
    int64_t off = 0;
    for (int p = 0; p < me; ++p) off += flatIns[p].numel();
    if (r.local) {
      at::Tensor sum;
      const snclResult_t e = gatherReduce(at::cat(flatIns), r, n, comm, s, &sum);
      if (e == snclSuccess) out.copy_(sum.narrow(0, off, out.numel()).view(out.sizes()));
      return e;
    }
    return withOp(comm, r, [&](snclRedOp_t op) {
      if (even) {
        at::Tensor flat = at::cat(flatIns);
        return synced(snclReduceScatter(ptr(flat), ptr(out), out.numel(), r.type, op, comm, s), s);
      }
      return synced(grouped([&] {
                      for (int p = 0; p < n; ++p) {
                        const at::Tensor& in = flatIns[p];
                        const snclResult_t e =
                            snclReduce(ptr(in), p == me ? ptr(out) : nullptr, in.numel(), r.type, op, p, comm, s);
                        if (e != snclSuccess) return e;
                      }
                      return snclSuccess;
                    }),
                    s);
    });
  });
}

ProcessGroupSNCL::Ptr ProcessGroupSNCL::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                             const c10d::ReduceScatterOptions& opts) {
  checkDense(input, "_reduce_scatter_base");
  checkDense(output, "_reduce_scatter_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type() && input.numel() == size_ * output.numel(),
              "sncl _reduce_scatter_base: the input must hold world_size outputs of the output's dtype");
  const RedOp r = redOp(opts.reduceOp, output.scalar_type(), "_reduce_scatter_base");
  at::Tensor in = input, out = output;
  snclComm_t comm = comm_;
  const int n = size_, me = rank_;
  return submit(c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", {out}, [=](snclStream_t s) {
    if (r.local) {
      at::Tensor sum;
      const snclResult_t e = gatherReduce(in, r, n, comm, s, &sum);
      if (e == snclSuccess) out.copy_(sum.narrow(0, me * out.numel(), out.numel()).view(out.sizes()));
      return e;
    }
    return withOp(comm, r, [&](snclRedOp_t op) {
      return synced(snclReduceScatter(ptr(in), ptr(out), out.numel(), r.type, op, comm, s), s);
    });
  });
}

namespace {

// Split sizes in rows of dim 0 (empty: equal splits) as byte counts and offsets.
void splitBytes(const at::Tensor& t, const std::vector<int64_t>& splits, int n, const char* side,
                std::vector<size_t>& counts, std::vector<size_t>& offsets) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const size_t rowBytes = rows == 0 ? 0 : bytesOf(t) / static_cast<size_t>(rows);
  counts.assign(n, 0);
  offsets.assign(n, 0);
  if (splits.empty()) {
    TORCH_CHECK(rows % n == 0, "sncl alltoall_base: dim 0 of the ", side, " (", rows,
                ") does not split evenly over ", n, " ranks");
  } else {
    TORCH_CHECK(static_cast<int>(splits.size()) == n, "sncl alltoall_base: ", side, " splits need ", n,
                " entries, got ", splits.size());
  }
  int64_t total = 0;
  for (int p = 0; p < n; ++p) {
    const int64_t rowsP = splits.empty() ? rows / n : splits[p];
    TORCH_CHECK(rowsP >= 0, "sncl alltoall_base: negative split");
    offsets[p] = static_cast<size_t>(total) * rowBytes;
    counts[p] = static_cast<size_t>(rowsP) * rowBytes;
    total += rowsP;
  }
  TORCH_CHECK(total == rows, "sncl alltoall_base: ", side, " splits add up to ", total, " rows, the tensor has ",
              rows);
}

// Grouped sends and receives: sncl has no all-to-all-v, and a group completes any order.
snclResult_t exchange(const std::vector<const char*>& sendPtr, const std::vector<size_t>& sendBytes,
                      const std::vector<char*>& recvPtr, const std::vector<size_t>& recvBytes, snclComm_t comm,
                      snclStream_t s) {
  return grouped([&] {
    for (size_t p = 0; p < sendPtr.size(); ++p) {
      const int peer = static_cast<int>(p);
      if (sendBytes[p]) {
        const snclResult_t r = snclSend(sendPtr[p], sendBytes[p], snclUint8, peer, comm, s);
        if (r != snclSuccess) return r;
      }
      if (recvBytes[p]) {
        const snclResult_t r = snclRecv(recvPtr[p], recvBytes[p], snclUint8, peer, comm, s);
        if (r != snclSuccess) return r;
      }
    }
    return snclSuccess;
  });
}

}  // namespace

ProcessGroupSNCL::Ptr ProcessGroupSNCL::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                      std::vector<int64_t>& outputSplits,
                                                      std::vector<int64_t>& inputSplits,
                                                      const c10d::AllToAllOptions&) {
  checkDense(input, "alltoall_base");
  checkDense(output, "alltoall_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "sncl alltoall_base: input and output dtypes differ");
  at::Tensor in = input, out = output;
  snclComm_t comm = comm_;
  const int n = size_;
  if (outputSplits.empty() && inputSplits.empty()) {
    TORCH_CHECK(in.numel() == out.numel() && in.numel() % n == 0, "sncl alltoall_base: input and output need ",
                "the same number of elements, divisible by ", n);
    return submit(c10d::OpType::ALLTOALL_BASE, "alltoall_base", {out}, [=](snclStream_t s) {
      return synced(snclAlltoAll(ptr(in), ptr(out), bytesOf(in) / n, snclUint8, comm, s), s);
    });
  }
  std::vector<size_t> sendBytes, sendOff, recvBytes, recvOff;
  splitBytes(in, inputSplits, n, "input", sendBytes, sendOff);
  splitBytes(out, outputSplits, n, "output", recvBytes, recvOff);
  std::vector<const char*> sendPtr(n);
  std::vector<char*> recvPtr(n);
  for (int p = 0; p < n; ++p) {
    sendPtr[p] = ptr(in) + sendOff[p];
    recvPtr[p] = ptr(out) + recvOff[p];
  }
  return submit(c10d::OpType::ALLTOALL_BASE, "alltoall_base", {out}, [=](snclStream_t s) {
    (void)in;  // keeps the input alive until the job ran
    return synced(exchange(sendPtr, sendBytes, recvPtr, recvBytes, comm, s), s);
  });
}

ProcessGroupSNCL::Ptr ProcessGroupSNCL::alltoall(Tensors& outputs, Tensors& inputs, const c10d::AllToAllOptions&) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "sncl alltoall: needs ", size_, " input and output tensors (one per rank)");
  std::vector<const char*> sendPtr(size_);
  std::vector<char*> recvPtr(size_);
  std::vector<size_t> sendBytes(size_), recvBytes(size_);
  for (int p = 0; p < size_; ++p) {
    checkDense(inputs[p], "alltoall");
    checkDense(outputs[p], "alltoall");
    sendPtr[p] = ptr(inputs[p]);
    recvPtr[p] = ptr(outputs[p]);
    sendBytes[p] = bytesOf(inputs[p]);
    recvBytes[p] = bytesOf(outputs[p]);
  }
  Tensors ins = inputs;
  snclComm_t comm = comm_;
  return submit(c10d::OpType::ALLTOALL, "alltoall", outputs, [=](snclStream_t s) {
    (void)ins;
    return synced(exchange(sendPtr, sendBytes, recvPtr, recvBytes, comm, s), s);
  });
}

// Queued: see p2p_queue.h for when they are issued and how tags pair them.
ProcessGroupSNCL::Ptr ProcessGroupSNCL::send(Tensors& tensors, int dstRank, int tag) {
  at::Tensor t = single(tensors, "send");
  checkRank(dstRank, size_, "send");
  return p2p_->post(true, t, dstRank, tag);
}

ProcessGroupSNCL::Ptr ProcessGroupSNCL::recv(Tensors& tensors, int srcRank, int tag) {
  at::Tensor t = single(tensors, "recv");
  checkRank(srcRank, size_, "recv");
  return p2p_->post(false, t, srcRank, tag);
}

void ProcessGroupSNCL::startCoalescing() { p2p_->flush("the start of a coalescing block"); }

void ProcessGroupSNCL::endCoalescing(std::vector<Ptr>&) { p2p_->flush("the end of a coalescing block"); }

ProcessGroupSNCL::Ptr ProcessGroupSNCL::barrier(const c10d::BarrierOptions&) {
  snclComm_t comm = comm_;
  // No rank leaves an all-reduce before every rank entered it; the issuer runs it after
  // every call issued before it.
  return submit(c10d::OpType::BARRIER, "barrier", {}, [=](snclStream_t s) {
    uint8_t token = 0;
    return synced(snclAllReduce(&token, &token, 1, snclUint8, snclMax, comm, s), s);
  });
}

}  // namespace sncl_torch
