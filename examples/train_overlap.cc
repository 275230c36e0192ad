// Data-parallel training with communication overlapped by computation — the point of
// streams. A small MLP (layers of dim x dim float weights) trains on synthetic data; in
// the backward pass each layer's gradient is one bucket, all-reduced (average) on an sncl
// stream as soon as it is computed while the next layer's gradient is computed. The same
// steps run again with every all-reduce after the whole backward pass (no overlap), and
// once with no communication at all, so that the share of communication hidden is measured:
//
//   hidden = (serial step - overlapped step) / (serial step - compute-only step)
//
// Both runs must end with bit-identical weights on every rank (checked).
//
//   mpirun -np 2 examples/train_overlap [--layers 8] [--dim 512] [--batch 64] [--steps 5]
// On the emulated supernode bus: add -x SNCL_TRANSPORT=bus.
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sncl/sncl.h"

namespace {

struct Config {
  int layers = 8, dim = 512, batch = 64, steps = 5;
};

enum class Mode { ComputeOnly, Serial, Overlap };

// c[m x n] = a^T[m x k] * b[k x n] where a is k x m (row-major): the weight gradient dW = X^T dY.
void matmulTn(const float* a, const float* b, float* c, int k, int m, int n) {
  std::memset(c, 0, sizeof(float) * static_cast<size_t>(m) * n);
  for (int p = 0; p < k; ++p)
    for (int i = 0; i < m; ++i) {
      const float av = a[static_cast<size_t>(p) * m + i];
      const float* brow = b + static_cast<size_t>(p) * n;
      float* crow = c + static_cast<size_t>(i) * n;
      for (int j = 0; j < n; ++j) crow[j] += av * brow[j];
    }
}

// c[m x n] = a[m x k] * b[k x n]
void matmul(const float* a, const float* b, float* c, int m, int k, int n) {
  std::memset(c, 0, sizeof(float) * static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i)
    for (int p = 0; p < k; ++p) {
      const float av = a[static_cast<size_t>(i) * k + p];
      const float* brow = b + static_cast<size_t>(p) * n;
      float* crow = c + static_cast<size_t>(i) * n;
      for (int j = 0; j < n; ++j) crow[j] += av * brow[j];
    }
}

struct Model {
  Config cfg;
  std::vector<std::vector<float>> w, grad, act;  // act[l]: input of layer l (batch x dim)
  std::vector<float> delta, next;

  explicit Model(const Config& c) : cfg(c) {
    const size_t wn = static_cast<size_t>(c.dim) * c.dim, an = static_cast<size_t>(c.batch) * c.dim;
    w.assign(c.layers, std::vector<float>(wn));
    grad.assign(c.layers, std::vector<float>(wn));
    act.assign(c.layers + 1, std::vector<float>(an));
    delta.assign(an, 0.f);
    next.assign(an, 0.f);
    // The same initial weights on every rank (a fixed pattern, no RNG state to share).
    for (int l = 0; l < c.layers; ++l)
      for (size_t i = 0; i < wn; ++i) w[l][i] = 0.02f * std::sin(0.37f * static_cast<float>(i % 9973) + l);
  }

  // Synthetic data differs per rank and step: each rank holds its own shard.
  void forward(int rank, int step) {
    const size_t an = act[0].size();
    for (size_t i = 0; i < an; ++i) act[0][i] = std::cos(0.01f * static_cast<float>(i) + 0.5f * rank + 0.1f * step);
    for (int l = 0; l < cfg.layers; ++l) {
      matmul(act[l].data(), w[l].data(), act[l + 1].data(), cfg.batch, cfg.dim, cfg.dim);
      for (float& v : act[l + 1]) v = v > 0 ? v : 0.01f * v;  // leaky ReLU
    }
  }
};

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool check(snclResult_t r, const char* what, snclComm_t comm) {
  if (r == snclSuccess) return true;
  fprintf(stderr, "%s failed: %s\n", what, snclGetLastError(comm));
  return false;
}

// One training run from the same initial weights; returns the mean step time (s), or < 0.
double train(Model& m, Mode mode, snclComm_t comm, snclStream_t stream, int rank) {
  const Config& c = m.cfg;
  const size_t wn = static_cast<size_t>(c.dim) * c.dim;
  const float lr = 0.01f;
  double total = 0;
  for (int step = 0; step < c.steps; ++step) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    m.forward(rank, step);
    // Loss: half the squared output; its gradient is the output itself.
    m.delta = m.act[c.layers];
    for (int l = c.layers - 1; l >= 0; --l) {
      matmulTn(m.act[l].data(), m.delta.data(), m.grad[l].data(), c.batch, c.dim, c.dim);
      if (mode == Mode::Overlap &&
          !check(snclAllReduce(m.grad[l].data(), m.grad[l].data(), wn, snclFloat32, snclAvg, comm, stream), "snclAllReduce", comm))
        return -1;
      if (l > 0) {  // delta for the layer below: (delta * W^T) masked by the activation's slope
        // next[b x dim] = delta[b x dim] * W^T: W is dim x dim row-major, so W^T row j = column j.
        std::fill(m.next.begin(), m.next.end(), 0.f);
        for (int b = 0; b < c.batch; ++b)
          for (int i = 0; i < c.dim; ++i) {
            const float* wrow = m.w[l].data() + static_cast<size_t>(i) * c.dim;
            const float* drow = m.delta.data() + static_cast<size_t>(b) * c.dim;
            float s = 0;
            for (int j = 0; j < c.dim; ++j) s += drow[j] * wrow[j];
            m.next[static_cast<size_t>(b) * c.dim + i] = s * (m.act[l][static_cast<size_t>(b) * c.dim + i] > 0 ? 1.f : 0.01f);
          }
        m.delta.swap(m.next);
      }
    }
    if (mode == Mode::Serial)
      for (int l = c.layers - 1; l >= 0; --l)
        if (!check(snclAllReduce(m.grad[l].data(), m.grad[l].data(), wn, snclFloat32, snclAvg, comm, stream), "snclAllReduce", comm))
          return -1;
    if (mode != Mode::ComputeOnly && !check(snclStreamSynchronize(stream), "snclStreamSynchronize", comm)) return -1;
    for (int l = 0; l < c.layers; ++l)
      for (size_t i = 0; i < wn; ++i) m.w[l][i] -= lr * m.grad[l][i];
    total += seconds(t0);
  }
  return total / c.steps;
}

bool parse(int argc, char** argv, Config* c) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = atoi(argv[i + 1]);
    if (v <= 0) return false;
    if (k == "--layers") c->layers = v;
    else if (k == "--dim") c->dim = v;
    else if (k == "--batch") c->batch = v;
    else if (k == "--steps") c->steps = v;
    else return false;
  }
  return argc % 2 == 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  Config cfg;
  if (!parse(argc, argv, &cfg)) {
    if (rank == 0) fprintf(stderr, "usage: %s [--layers N] [--dim N] [--batch N] [--steps N]\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  snclUniqueId id;
  if (rank == 0 && snclGetUniqueId(&id) != snclSuccess) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  snclComm_t comm;
  snclStream_t stream;
  if (snclCommInitRank(&comm, nranks, id, rank) != snclSuccess || snclStreamCreate(&stream) != snclSuccess) {
    fprintf(stderr, "rank %d: init failed: %s\n", rank, snclGetLastError(nullptr));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const double bucketMiB = 4.0 * cfg.dim * cfg.dim / (1 << 20);
  Model computeOnly(cfg), serial(cfg), overlap(cfg);
  // One untimed step first: pages touched, plans cached, transports warm.
  Config warm = cfg;
  warm.steps = 1;
  Model warmModel(warm);
  int code = 0;
  if (train(warmModel, Mode::Overlap, comm, stream, rank) < 0) code = 1;
  const double tc = code ? -1 : train(computeOnly, Mode::ComputeOnly, comm, stream, rank);
  const double ts = code ? -1 : train(serial, Mode::Serial, comm, stream, rank);
  const double to = code ? -1 : train(overlap, Mode::Overlap, comm, stream, rank);
  if (tc < 0 || ts < 0 || to < 0) code = 1;
  // The slowest rank's step times.
  double t[3] = {tc, ts, to};
  MPI_Allreduce(MPI_IN_PLACE, t, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  // Overlapped and serial training must agree bit for bit, and every rank must hold the
  // same weights.
  long mismatches = 0;
  for (int l = 0; l < cfg.layers; ++l)
    mismatches += std::memcmp(serial.w[l].data(), overlap.w[l].data(), serial.w[l].size() * sizeof(float)) != 0;
  std::vector<float> first(overlap.w[0]);
  MPI_Bcast(first.data(), static_cast<int>(first.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  mismatches += std::memcmp(first.data(), overlap.w[0].data(), first.size() * sizeof(float)) != 0;
  MPI_Allreduce(MPI_IN_PLACE, &mismatches, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &code, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && !code) {
    const double comm = t[1] - t[0], hidden = comm > 0 ? (t[1] - t[2]) / comm : 0;
    printf("# train_overlap: %d ranks, %d layers of %dx%d floats (%.1f MiB per bucket), batch %d, %d steps\n", nranks,
           cfg.layers, cfg.dim, cfg.dim, bucketMiB, cfg.batch, cfg.steps);
    printf("%-28s %10.2f ms\n", "step, compute only", 1e3 * t[0]);
    printf("%-28s %10.2f ms\n", "step, all-reduce after", 1e3 * t[1]);
    printf("%-28s %10.2f ms\n", "step, all-reduce overlapped", 1e3 * t[2]);
    printf("%-28s %10.2f ms\n", "communication (serial-only)", 1e3 * comm);
    printf("%-28s %9.0f %%\n", "communication hidden", 100 * hidden);
    printf("%-28s %10s\n", "weights identical", mismatches ? "NO" : "yes");
  }
  snclStreamDestroy(stream);
  snclCommDestroy(comm);
  MPI_Finalize();
  return code || mismatches ? 1 : 0;
}
