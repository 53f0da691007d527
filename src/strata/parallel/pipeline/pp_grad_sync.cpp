#include "strata/parallel/pipeline/pp_grad_sync.h"

#include <ATen/ATen.h>

#include "strata/core/errors.h"

namespace strata {

PipelineGradSync::PipelineGradSync(std::unique_ptr<GradSync> inner, std::vector<NamedParam> params,
                                   Comm& pp, const std::vector<std::shared_ptr<Model>>& parts)
    : WrappedGradSync(std::move(inner)), params_(std::move(params)), pp_(pp) {
  // The first stage is chunk 0 of pp rank 0, the last the last chunk of rank p-1.
  for (const auto& part : parts) {
    const bool first = part->stage().first, last = part->stage().last;
    if (first == last) continue;  // a middle stage, or the whole model
    for (const std::string& name : part->tied_parameters()) {
      auto named = part->named_parameters();
      STRATA_ASSERT(named.contains(name), "tied parameter ", name, " missing on its stage");
      tied_.push_back(named[name]);
    }
    peer_ = first ? pp.size() - 1 : 0;
  }
}

std::string PipelineGradSync::describe() const {
  return inner_->describe() + c10::str("; gradient norm summed over pp=", pp_.size(),
                                       tied_.empty() ? ""
                                                     : "; tied embedding gradients summed "
                                                       "between the first and last stage");
}

void PipelineGradSync::finalize() {
  inner_->finalize();
  if (exchange_in_finalize_) exchange_tied();
}

std::function<void()> PipelineGradSync::take_exchange() {
  exchange_in_finalize_ = false;
  return [this] { exchange_tied(); };
}

void PipelineGradSync::exchange_tied() {
  if (tied_.empty()) return;
  // Tags above the executor's (which count micro-batches and stages).
  constexpr int kTag = 1 << 24;
  std::vector<at::Tensor> mine, theirs;
  std::vector<CommWork> works;
  for (size_t i = 0; i < tied_.size(); ++i) {
    const at::Tensor& g = tied_[i].grad();
    STRATA_ASSERT(g.defined(), "tied parameter without a gradient after backward");
    mine.push_back(g.contiguous().clone());
    theirs.push_back(at::empty_like(mine.back()));
    works.push_back(pp_.send(mine.back(), peer_, kTag + static_cast<int>(i)));
    works.push_back(pp_.recv(theirs.back(), peer_, kTag + static_cast<int>(i)));
  }
  for (CommWork& w : works) w.wait();
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < tied_.size(); ++i) tied_[i].mutable_grad().add_(theirs[i]);
}

double PipelineGradSync::grad_norm_squared() {
  // ZeRO's norm is already summed over dp; DDP's gradients are the same on every dp rank.
  return norm_squared_summed_over(pp_, params_);
}

}  // namespace strata
