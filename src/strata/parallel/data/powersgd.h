#pragma once
#include <ATen/core/Generator.h>

#include <map>

#include "strata/parallel/data/comm_hook.h"

namespace strata {

struct PowerSgdOptions {
  int64_t rank = 1;            // matrix approximation rank r
  int64_t start_iter = 1000;   // plain all-reduce for the steps before
  double min_compression = 2;  // compress only when (n*m) / ((n+m)*r) exceeds this
  bool error_feedback = true;  // add last step's compression error to the gradient
  bool warm_start = true;      // reuse last step's Q instead of a random one
  double orth_eps = 0;         // Gram-Schmidt epsilon
  int64_t seed = 0;            // random initial Q: the same on every rank
};

// Whether an n x m gradient is worth compressing at rank r (PyTorch's rule):
// uncompressed n*m elements against (n + m) * r.
bool powersgd_should_compress(int64_t n, int64_t m, int64_t r, double min_compression);

// Orthonormalizes the columns of a (n, r) matrix in place: Gram-Schmidt for r <= 2
// (eps guards against all-zero columns), Householder QR above, as PyTorch does.
void powersgd_orthogonalize(at::Tensor& m, double eps);

// Note [PowerSGD]: Vogels et al. 2019 with PyTorch's semantics (powerSGD_hook). Each
// gradient M (viewed as shape[0] x rest) is approximated by P Q^T of rank r with one
// power iteration: P = M Q, all-reduce P, orthogonalize P, Q = M^T P, all-reduce Q,
// M ~ P Q^T / N. Vectors and small matrices (compression below min_compression) are
// all-reduced as they are in one flat buffer. With error feedback the difference
// between what a rank wanted to send and what the group agreed on is added to its
// next gradient; with warm start Q carries over between steps. Before start_iter the
// plain average is used (early training is sensitive to compression error).
// Two deliberate departures, both for gradients that are exactly zero (a parameter
// unused in a step): orthogonalization leaves an all-zero column zero instead of
// dividing by zero (PyTorch fills the gradient with NaN there), and a warm-start Q
// that came back all-zero is redrawn, since P = M Q and Q = M^T P would otherwise
// stay zero for good.
//
// Overlap without reordering: launch() computes P for its bucket and starts the
// uncompressed and P all-reduces; the second half (Q) of the buckets already in
// flight is advanced at the next launch and at finish, always on the backward
// thread, so every rank issues the same collectives in the same order.
class PowerSgdHook : public CommHook {
 public:
  explicit PowerSgdHook(PowerSgdOptions o);
  std::string name() const override { return "powersgd"; }
  void launch(GradBucket& b, HookComm& comm) override;
  void finish(std::vector<GradBucket>& buckets, HookComm& comm) override;
  int64_t iteration() const { return iter_; }

 private:
  struct State {  // per bucket, kept across steps
    at::Tensor error, p_mem, q_mem;
  };
  struct Flight {  // per bucket, this step
    GradBucket* bucket = nullptr;
    bool plain = false;
    int stage = 1;  // 1: P and uncompressed in flight; 2: Q in flight
    at::Tensor input_copy, uncompressed_mem;
    std::vector<at::Tensor> matrices, ps, qs, uncompressed;
    CommWork plain_work, unc_work, p_work, q_work;
  };
  void advance(Flight& f, HookComm& comm);  // stage 1 -> 2

  PowerSgdOptions o_;
  std::map<int64_t, State> state_;
  std::vector<Flight> flights_;
  int64_t iter_ = 0;
  at::Generator gen_;
};

}  // namespace strata
