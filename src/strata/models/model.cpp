#include "strata/models/model.h"

#include "strata/core/errors.h"

namespace strata {

int64_t Model::num_parameters() {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

void Model::set_recompute(RecomputeMode mode, int64_t k) {
  std::vector<Segment> segments = recompute_segments(mode, num_blocks(), k);
  const bool selective = mode == RecomputeMode::kSelective;
  for (auto& blk : blocks_) {
    const bool ok = blk->set_selective_recompute(selective);
    STRATA_CHECK(ok || !selective, "memory.recompute=selective recomputes attention cores, and ",
                 "this model's blocks have none; use full, every-k or sqrt");
  }
  segments_ = std::move(segments);
}

void Model::add_block_hooks(BlockHooks* hooks) {
  hooks_.push_back(hooks);
}

void Model::remove_block_hooks(BlockHooks* hooks) {
  std::erase(hooks_, hooks);
}

at::Tensor Model::run_block(int64_t i, at::Tensor x) {
  for (BlockHooks* h : hooks_) h->pre_forward(i);
  x = blocks_[static_cast<size_t>(i)]->forward(x);
  for (auto it = hooks_.rbegin(); it != hooks_.rend(); ++it)
    x = (*it)->post_forward(i, std::move(x));
  return x;
}

at::Tensor Model::run_blocks(at::Tensor x) {
  if (segments_.empty()) {
    for (int64_t i = 0; i < num_blocks(); ++i) x = run_block(i, std::move(x));
    return x;
  }
  for (const Segment& s : segments_) {
    auto run = [this, s](at::Tensor h) {
      for (int64_t i = s.begin; i < s.end; ++i) h = run_block(i, std::move(h));
      return h;
    };
    if (!s.recompute) {
      x = run(x);
      continue;
    }
    std::vector<at::Tensor> params, buffers;
    for (int64_t i = s.begin; i < s.end; ++i) {
      auto& blk = *blocks_[static_cast<size_t>(i)];
      for (auto& p : blk.parameters())
        if (p.requires_grad()) params.push_back(p);
      for (auto& b : blk.buffers()) buffers.push_back(b);
    }
    x = recompute_checkpoint([run](const std::vector<at::Tensor>& in) { return run(in[0]); }, {x},
                             params, buffers);
  }
  return x;
}

}  // namespace strata
