#include "strata/parallel/pipeline/profile.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "strata/core/errors.h"
#include "strata/models/build.h"

namespace strata {

namespace {
// Median seconds of one forward and backward of `part` on a random micro-batch.
double time_part(const ModelSpec& spec, StageInfo stage, int64_t micro, at::Device device,
                 int repeats) {
  std::shared_ptr<Model> part = build_model(spec, stage);
  part->to(device);
  const auto ints = at::TensorOptions().dtype(at::kLong).device(device);
  Batch b;
  b.input = at::randint(spec.vocab_size, {micro, spec.seq_len}, ints);
  b.target = at::randint(spec.vocab_size, {micro, spec.seq_len}, ints);
  if (spec.family == Family::kBert) b.token_type = at::zeros({micro, spec.seq_len}, ints);
  std::vector<double> times;
  for (int i = 0; i <= repeats; ++i) {
    at::Tensor x;
    if (!stage.first)
      x = at::randn({micro, spec.seq_len, spec.d_model}, at::TensorOptions().device(device))
              .requires_grad_(true);
    const auto t0 = std::chrono::steady_clock::now();
    at::Tensor out = part->forward_part(x, b);
    if (stage.last)
      out.backward();
    else
      out.backward(at::ones_like(out));
    if (device.is_cuda()) at::zeros({1}, at::TensorOptions().device(device)).item<float>();
    if (i > 0)  // the first pass warms up allocators and kernels
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}
}  // namespace

StageCosts profile_stage_costs(const ModelSpec& spec, int64_t micro_batch, at::Device device,
                               int repeats) {
  STRATA_CHECK(spec.family == Family::kGpt || spec.family == Family::kBert, spec.flavour,
               " has no transformer blocks to balance over pipeline stages; use parallel.pp=1");
  STRATA_CHECK(repeats >= 1, "profile repeats must be at least 1");
  ModelSpec two = spec;
  two.n_layer = 2;
  ModelSpec one = spec;
  one.n_layer = 1;
  const double first1 = time_part(one, {0, 1, true, false}, micro_batch, device, repeats);
  const double first2 = time_part(two, {0, 2, true, false}, micro_batch, device, repeats);
  const double last1 = time_part(one, {0, 1, false, true}, micro_batch, device, repeats);
  // Timing noise can make a difference negative: a block costs something, ends >= 0.
  const double block = std::max(first2 - first1, 1e-9);
  StageCosts c;
  c.block.assign(static_cast<size_t>(spec.n_layer), block);
  c.first = std::max(first1 - block, 0.0);
  c.last = std::max(last1 - block, 0.0);
  return c;
}

}  // namespace strata
