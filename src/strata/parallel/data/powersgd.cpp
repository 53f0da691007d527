#include "strata/parallel/data/powersgd.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <limits>

#include "strata/core/errors.h"
#include "strata/memory/tracking_allocator.h"

namespace strata {

bool powersgd_should_compress(int64_t n, int64_t m, int64_t r, double min_compression) {
  const double uncompressed = static_cast<double>(n) * static_cast<double>(m);
  const double compressed = static_cast<double>(n + m) * static_cast<double>(r);
  return compressed * min_compression < uncompressed;
}

void powersgd_orthogonalize(at::Tensor& m, double eps) {
  const int64_t cols = m.size(1);
  if (cols > 2 && m.scalar_type() != at::kHalf && m.scalar_type() != at::kBFloat16) {
    auto [q, r] = at::linalg_qr(m, "reduced");
    m.copy_(q);
    return;
  }
  for (int64_t i = 0; i < cols; ++i) {
    at::Tensor col = m.narrow(1, i, 1);
    at::Tensor norm = at::linalg_vector_norm(col, 2, {0}, /*keepdim=*/true);
    // An all-zero column (a parameter without gradient) stays zero; PyTorch's
    // version divides by zero there and fills the gradient with NaN.
    if (eps > 0)
      norm.add_(eps);
    else
      norm.clamp_min_(std::numeric_limits<float>::min());
    col.div_(norm);
    if (i + 1 < cols) {
      at::Tensor rest = m.narrow(1, i + 1, cols - i - 1);
      rest.sub_((col * rest).sum(0, /*keepdim=*/true) * col);
    }
  }
}

PowerSgdHook::PowerSgdHook(PowerSgdOptions o)
    : o_(o), gen_(at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(o.seed))) {
  STRATA_CHECK(o_.rank > 0, "parallel.powersgd_rank=", o_.rank, " must be positive");
}

void PowerSgdHook::launch(GradBucket& b, HookComm& comm) {
  // Second half of the buckets launched before this one (Note [PowerSGD]).
  for (auto& f : flights_)
    if (!f.plain && f.stage == 1) advance(f, comm);
  Flight f;
  f.bucket = &b;
  at::Tensor& input = b.buffer;
  const double world = static_cast<double>(comm.size());
  if (iter_ < o_.start_iter) {
    f.plain = true;
    input.div_(world);
    f.plain_work = comm.all_reduce(input);
    flights_.push_back(std::move(f));
    return;
  }
  MemoryScope scope(Category::kCommBuffers);
  State& st = state_[b.index];
  if (o_.error_feedback) {
    if (st.error.defined())
      input.add_(st.error);
    else
      st.error = at::zeros_like(input);
    f.input_copy = input.clone();
  }
  int64_t p_size = 0, q_size = 0;
  std::vector<int64_t> ranks;
  for (auto& g : b.grads) {
    at::Tensor mat = g.dim() == 0 ? g.view({1, 1}) : g.view({g.size(0), -1});
    const int64_t n = mat.size(0), m = mat.size(1);
    const int64_t r = std::min({n, m, o_.rank});
    if (powersgd_should_compress(n, m, r, o_.min_compression)) {
      f.matrices.push_back(mat);
      ranks.push_back(r);
      p_size += n * r;
      q_size += m * r;
    } else {
      f.uncompressed.push_back(g);
    }
  }
  const bool randomize = !o_.warm_start || !st.p_mem.defined();
  if (randomize) {
    st.p_mem = at::empty({p_size}, input.options());
    st.q_mem = at::empty({q_size}, input.options());
  }
  int64_t pi = 0, qi = 0;
  for (size_t k = 0; k < f.matrices.size(); ++k) {
    const int64_t n = f.matrices[k].size(0), m = f.matrices[k].size(1), r = ranks[k];
    f.ps.push_back(st.p_mem.narrow(0, pi, n * r).view({n, r}));
    f.qs.push_back(st.q_mem.narrow(0, qi, m * r).view({m, r}));
    pi += n * r;
    qi += m * r;
  }
  for (auto& q : f.qs) {
    // A warm-started Q with an all-zero column (last step's gradient was zero, e.g.
    // an unused branch) would keep P and Q zero forever; it is redrawn. Q is the
    // same on every rank after its all-reduce, so all ranks redraw alike.
    if (randomize || q.abs().amax(0).eq(0).any().item<bool>()) {
      // Drawn on the CPU from the hook's own generator: every rank draws the same
      // Q, and the training RNG (dropout) is untouched.
      q.copy_(at::randn(q.sizes(), gen_, at::TensorOptions().dtype(q.scalar_type())));
    }
    powersgd_orthogonalize(q, o_.orth_eps);
  }
  for (size_t k = 0; k < f.matrices.size(); ++k) at::mm_out(f.ps[k], f.matrices[k], f.qs[k]);
  if (!f.uncompressed.empty()) {
    std::vector<at::Tensor> flat;
    for (auto& t : f.uncompressed) flat.push_back(t.reshape({-1}));
    f.uncompressed_mem = at::cat(flat);
    f.unc_work = comm.all_reduce(f.uncompressed_mem);
  }
  if (p_size > 0) f.p_work = comm.all_reduce(st.p_mem);
  flights_.push_back(std::move(f));
}

void PowerSgdHook::advance(Flight& f, HookComm& comm) {
  State& st = state_[f.bucket->index];
  comm.wait(f.unc_work);
  comm.wait(f.p_work);
  for (auto& p : f.ps) powersgd_orthogonalize(p, o_.orth_eps);
  for (size_t k = 0; k < f.matrices.size(); ++k) at::mm_out(f.qs[k], f.matrices[k].t(), f.ps[k]);
  if (st.q_mem.numel() > 0) f.q_work = comm.all_reduce(st.q_mem);
  f.stage = 2;
}

void PowerSgdHook::finish(std::vector<GradBucket>& buckets, HookComm& comm) {
  STRATA_ASSERT(flights_.size() == buckets.size(), "powersgd: ", flights_.size(),
                " buckets launched, ", buckets.size(), " to finish");
  for (auto& f : flights_)
    if (!f.plain && f.stage == 1) advance(f, comm);
  const double world = static_cast<double>(comm.size());
  for (auto& f : flights_) {
    if (f.plain) {
      comm.wait(f.plain_work);
      continue;
    }
    State& st = state_[f.bucket->index];
    comm.wait(f.q_work);
    if (f.uncompressed_mem.defined()) {
      f.uncompressed_mem.div_(world);
      int64_t off = 0;
      for (auto& t : f.uncompressed) {
        t.copy_(f.uncompressed_mem.narrow(0, off, t.numel()).view_as(t));
        off += t.numel();
      }
    }
    st.q_mem.div_(world);
    for (size_t k = 0; k < f.matrices.size(); ++k) at::mm_out(f.matrices[k], f.ps[k], f.qs[k].t());
    if (o_.error_feedback) at::sub_out(st.error, f.input_copy, f.bucket->buffer);
    if (!o_.warm_start) st.p_mem = st.q_mem = at::Tensor();
  }
  flights_.clear();
  ++iter_;
}

}  // namespace strata
