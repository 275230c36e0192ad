// The model behind `sncl-sim --advise` (docs/simulator.md, "Parallel layout advice"): what a
// transformer costs in FLOPs and device memory under a parallel layout (tensor x pipeline x
// data, x expert parallelism for MoE), from its shape. Communication is not here: the search
// (layout_search.h) prices it by simulating the library's schedules on the topology.
//
// FLOPs are the standard dense count: per token and layer 2 x (4h^2 + 2 h f_active) for the
// matrix products plus 4 s h for attention scores and values; the logits 2 h V. A step runs
// forward once, backward twice that, and with activation recomputation the forward once more:
// with recomputation and f = 4h this is Narayanan et al.'s 96 B s l h^2 (1 + s/6h + V/16lh).
//
// Memory per device: weights, gradients and optimizer state per parameter by precision
// (mixed precision: 2 B weights, gradients accumulated and all-reduced in fp32, fp32 master
// weights and both Adam moments, 18 B per parameter for fp16/bf16/fp8; fp32: 16 B), the activations of the micro-batches in flight on the first stage (Korthikanti
// et al. 2022, without sequence parallelism: s b h (10 + 24/t + 5 a s / (h t)) bytes per layer
// and micro-batch with f = 4h; with full recomputation 2 s b h per layer plus one layer's
// working set), and the last stage's logits.
#pragma once

#include <string>

#include "lib/base/error.h"

namespace sncl::sim {

enum class Precision { Fp32, Fp16, Bf16, Fp8 };

struct ModelSpec {
  std::string name;    // the file's name, for output
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int seq = 0;
  int vocab = 0;
  int globalBatch = 0;  // sequences per step
  Precision precision = Precision::Bf16;
  int ffnHidden = 0;    // 0: 4 x hidden
  int experts = 1;      // > 1: every layer's MLP is a mixture of this many experts
  int topK = 1;         // experts each token goes to
};

// A JSON object with layers, hidden, heads, seq, vocab, global_batch, precision (fp32, fp16,
// bf16, fp8), optional ffn_hidden, experts, top_k, name, note; other keys are refused.
Result parseModelJson(std::string_view text, const std::string& source, ModelSpec* out);
Result loadModelFile(const std::string& path, ModelSpec* out);

// A parallel layout. Ranks are numbered tensor-fastest, then data, then pipeline (Megatron's
// order); expert-parallel groups are ep consecutive data-parallel ranks.
struct Layout {
  int tp = 1, pp = 1, dp = 1, ep = 1;
  int microBatch = 1;
  int interleave = 1;      // model chunks per pipeline stage (1: plain 1F1B)
  bool recompute = false;  // full activation recomputation
  int gpus() const { return tp * pp * dp; }
  int microBatches(const ModelSpec& m) const { return m.globalBatch / (dp * microBatch); }
};

struct MemoryUse {  // bytes on the most loaded device
  double weights = 0, gradients = 0, optimizer = 0, activations = 0;
  double total() const { return weights + gradients + optimizer + activations; }
};

class LayoutModel {
 public:
  explicit LayoutModel(const ModelSpec& m) : m_(m) {}
  const ModelSpec& spec() const { return m_; }

  double ffn() const { return m_.ffnHidden > 0 ? m_.ffnHidden : 4.0 * m_.hidden; }
  bool moe() const { return m_.experts > 1; }
  double activationBytes() const;  // per element of an activation or gradient in flight
  double gradientBytes() const;    // per parameter, as all-reduced

  // Parameters: one layer's outside its MLP experts, one expert, the embeddings.
  double layerDenseParams() const;
  double expertParams() const;
  double embeddingParams() const;
  double totalParams() const;   // N
  double activeParams() const;  // what one token meets (MoE: top_k experts per layer)

  // FLOPs of one step over the global batch; hardware counts recomputation, model does not.
  double stepFlops(bool recompute) const;
  // Forward FLOPs of one micro-batch through one pipeline stage's layers on one device
  // (1/tp of them), plus the logits when the stage is the last.
  double stageForwardFlops(const Layout& l, bool withLogits) const;
  // Parameters held by one device of the first pipeline stage (it holds the embedding).
  double deviceParams(const Layout& l) const;
  // Of those, the experts' (all-reduced over dp/ep instead of dp).
  double deviceExpertParams(const Layout& l) const;
  MemoryUse memory(const Layout& l) const;
  // Memory traffic of the forward's element-wise work (norms, softmax, dropout, activation
  // functions, bias adds) of one micro-batch through one stage on one device: each of the
  // activations a layer keeps for its backward written once and read once.
  double stageForwardTrafficBytes(const Layout& l) const;

 private:
  double layerActivationBytes(const Layout& l) const;  // one layer, one micro-batch, kept for backward
  ModelSpec m_;
};

const char* precisionName(Precision p);

}  // namespace sncl::sim
