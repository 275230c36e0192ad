#include "lib/sim/layout_model.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "lib/topo/topo_file.h"

namespace sncl::sim {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxModelFileBytes = size_t(1) << 20;

Result readInt(const json& doc, const std::string& source, const char* key, int lo, int hi, bool required, int* out) {
  auto it = doc.find(key);
  if (it == doc.end()) {
    if (required) return fail(snclInvalidArgument, "{}: missing \"{}\"", source, key);
    return snclSuccess;
  }
  if (!it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi)
    return fail(snclInvalidArgument, "{}: \"{}\" must be an integer in [{}, {}], not {}", source, key, lo, hi,
                it->dump());
  *out = int(it->get<int64_t>());
  return snclSuccess;
}

bool parsePrecision(const std::string& s, Precision* out) {
  if (s == "fp32") *out = Precision::Fp32;
  else if (s == "fp16") *out = Precision::Fp16;
  else if (s == "bf16") *out = Precision::Bf16;
  else if (s == "fp8") *out = Precision::Fp8;
  else return false;
  return true;
}

}  // namespace

const char* precisionName(Precision p) {
  switch (p) {
    case Precision::Fp32: return "fp32";
    case Precision::Fp16: return "fp16";
    case Precision::Bf16: return "bf16";
    case Precision::Fp8: return "fp8";
  }
  return "?";
}

Result parseModelJson(std::string_view text, const std::string& source, ModelSpec* out) {
  json doc;
  SNCL_CHECK(topo::parseJsonText(text, source, &doc));
  if (!doc.is_object()) return fail(snclInvalidArgument, "{}: a model file is one JSON object", source);
  static const std::set<std::string> known = {"name",  "note",         "layers",    "hidden",     "heads",
                                              "seq",   "vocab",        "global_batch", "precision", "ffn_hidden",
                                              "experts", "top_k"};
  for (auto it = doc.begin(); it != doc.end(); ++it)
    if (!known.count(it.key()))
      return fail(snclInvalidArgument,
                  "{}: unknown key \"{}\" (known: layers, hidden, heads, seq, vocab, global_batch, precision, "
                  "ffn_hidden, experts, top_k, name, note)",
                  source, it.key());
  ModelSpec m;
  m.name = source;
  constexpr int kBig = 1 << 30;
  SNCL_CHECK(readInt(doc, source, "layers", 1, 1 << 16, true, &m.layers));
  SNCL_CHECK(readInt(doc, source, "hidden", 1, 1 << 20, true, &m.hidden));
  SNCL_CHECK(readInt(doc, source, "heads", 1, 1 << 16, true, &m.heads));
  SNCL_CHECK(readInt(doc, source, "seq", 1, 1 << 24, true, &m.seq));
  SNCL_CHECK(readInt(doc, source, "vocab", 1, kBig, true, &m.vocab));
  SNCL_CHECK(readInt(doc, source, "global_batch", 1, kBig, true, &m.globalBatch));
  SNCL_CHECK(readInt(doc, source, "ffn_hidden", 1, 1 << 22, false, &m.ffnHidden));
  SNCL_CHECK(readInt(doc, source, "experts", 1, 1 << 16, false, &m.experts));
  SNCL_CHECK(readInt(doc, source, "top_k", 1, 1 << 16, false, &m.topK));
  auto p = doc.find("precision");
  if (p == doc.end()) return fail(snclInvalidArgument, "{}: missing \"precision\" (fp32, fp16, bf16, fp8)", source);
  if (!p->is_string() || !parsePrecision(p->get<std::string>(), &m.precision))
    return fail(snclInvalidArgument, "{}: \"precision\" must be fp32, fp16, bf16 or fp8, not {}", source, p->dump());
  auto name = doc.find("name");
  if (name != doc.end()) {
    if (!name->is_string()) return fail(snclInvalidArgument, "{}: \"name\" must be a string", source);
    m.name = name->get<std::string>();
  }
  if (m.hidden % m.heads) return fail(snclInvalidArgument, "{}: hidden {} is not a multiple of heads {}", source, m.hidden, m.heads);
  if (m.topK > m.experts)
    return fail(snclInvalidArgument, "{}: top_k {} is more than the {} experts", source, m.topK, m.experts);
  *out = std::move(m);
  return snclSuccess;
}

Result loadModelFile(const std::string& path, ModelSpec* out) {
  std::string text;
  SNCL_CHECK(topo::readTextFile(path, kMaxModelFileBytes, &text));
  return parseModelJson(text, path, out);
}

double LayoutModel::activationBytes() const { return m_.precision == Precision::Fp32 ? 4 : 2; }
// Gradients accumulate over the micro-batches, and are all-reduced, in an fp32 buffer
// (Megatron-LM's main_grad): lower precision would lose small updates.
double LayoutModel::gradientBytes() const { return 4; }

double LayoutModel::layerDenseParams() const {
  const double h = m_.hidden;
  const double attention = 4 * h * h + 4 * h, norms = 4 * h;
  const double mlpOrRouter = moe() ? h * m_.experts : expertParams();
  return attention + norms + mlpOrRouter;
}

double LayoutModel::expertParams() const { return 2 * double(m_.hidden) * ffn() + ffn() + m_.hidden; }

double LayoutModel::embeddingParams() const { return (double(m_.vocab) + m_.seq) * m_.hidden; }

double LayoutModel::totalParams() const {
  const double experts = moe() ? m_.experts * expertParams() : 0;
  return m_.layers * (layerDenseParams() + experts) + embeddingParams();
}

double LayoutModel::activeParams() const {
  const double experts = moe() ? m_.topK * expertParams() : 0;
  return m_.layers * (layerDenseParams() + experts) + embeddingParams();
}

namespace {
// Forward FLOPs per token of one layer and of the logits.
double layerTokenFlops(const ModelSpec& m, double ffn, bool moe) {
  const double h = m.hidden;
  const double matmuls = 2 * (4 * h * h + 2 * h * ffn * m.topK) + (moe ? 2 * h * m.experts : 0);
  return matmuls + 4.0 * m.seq * h;
}
}  // namespace

double LayoutModel::stepFlops(bool recompute) const {
  const double tokens = double(m_.globalBatch) * m_.seq;
  const double passes = recompute ? 4 : 3;
  return tokens * (m_.layers * layerTokenFlops(m_, ffn(), moe()) * passes + 3 * 2.0 * m_.hidden * m_.vocab);
}

double LayoutModel::stageForwardFlops(const Layout& l, bool withLogits) const {
  const double tokens = double(l.microBatch) * m_.seq;
  const double layers = double(m_.layers) / l.pp * layerTokenFlops(m_, ffn(), moe());
  return tokens * (layers + (withLogits ? 2.0 * m_.hidden * m_.vocab : 0)) / l.tp;
}

double LayoutModel::deviceExpertParams(const Layout& l) const {
  if (!moe()) return 0;
  return double(m_.layers) / l.pp * (double(m_.experts) / l.ep) * expertParams() / l.tp;
}

double LayoutModel::deviceParams(const Layout& l) const {
  const double dense = double(m_.layers) / l.pp * layerDenseParams() + embeddingParams();
  return dense / l.tp + deviceExpertParams(l);
}

double LayoutModel::layerActivationBytes(const Layout& l) const {
  const double s = m_.seq, b = l.microBatch, h = m_.hidden, t = l.tp;
  const double split = 8 + m_.topK * 4 * ffn() / h;  // 24 with f = 4h and one expert
  const double perLayer = s * b * h * (10 + split / t) + 5.0 * m_.heads * s * s * b / t;
  return perLayer * activationBytes() / 2;  // the formula counts 2-byte activations
}

double LayoutModel::stageForwardTrafficBytes(const Layout& l) const {
  return 2 * double(m_.layers) / l.pp * layerActivationBytes(l);
}

MemoryUse LayoutModel::memory(const Layout& l) const {
  MemoryUse u;
  const double params = deviceParams(l);
  const bool fp32 = m_.precision == Precision::Fp32;
  u.weights = params * (fp32 ? 4 : 2);  // fp8 runs keep bf16 weights and cast them per use
  u.gradients = params * gradientBytes();
  u.optimizer = params * (fp32 ? 8 : 12);  // Adam's two moments, plus fp32 master weights
  const double layers = double(m_.layers) / l.pp, p = l.pp;
  const double m = l.microBatches(m_);
  const double inFlight = std::min(m, p) * (l.interleave > 1 ? 1 + (p - 1) / (p * l.interleave) : 1.0);
  const double full = layerActivationBytes(l);
  const double kept = l.recompute ? double(m_.seq) * l.microBatch * m_.hidden * activationBytes() : full;
  const double working = l.recompute ? full : 0;  // the layer being recomputed
  const double logits = 8.0 * m_.seq * l.microBatch * m_.vocab / l.tp;  // fp32 logits and their gradient
  const double first = inFlight * layers * kept + working + (l.pp == 1 ? logits : 0);
  const double last = layers * kept + working + logits;
  u.activations = std::max(first, last);
  return u;
}

}  // namespace sncl::sim
