#include "strata/train/run_state.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "strata/core/errors.h"

namespace strata {

void SamplerState::save_state(std::vector<TensorPiece>& out) {
  if (!writes_) return;
  const auto s = sampler_.state();
  out.push_back({"sampler.state", at::tensor({s.epoch, s.offset * replicas_}, at::kLong), {}, {}});
}

void SamplerState::load_state(const PieceReader& in) {
  at::Tensor t = at::zeros({2}, at::kLong);
  in.read("sampler.state", t);
  const int64_t epoch = t[0].item<int64_t>(), samples = t[1].item<int64_t>();
  STRATA_CHECK(samples % replicas_ == 0, "the checkpoint stopped ", samples,
               " samples into an epoch, which dp=", replicas_,
               " ranks cannot split evenly; resume with a dp dividing ", samples);
  sampler_.set_state({epoch, samples / replicas_});
}

void RngState::save_state(std::vector<TensorPiece>& out) {
  at::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
  out.push_back({"rng.cpu.rank" + std::to_string(rank_), rng, {}, {}});
}

void RngState::load_state(const PieceReader& in) {
  const std::string name = "rng.cpu.rank" + std::to_string(rank_);
  if (!in.has(name)) return;
  at::Tensor rng = at::empty(in.global_shape(name), at::kByte);
  in.read(name, rng);
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  gen.set_state(rng);
  restored_ = true;
}

}  // namespace strata
