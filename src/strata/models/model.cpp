#include "strata/models/model.h"

#include "strata/core/errors.h"

namespace strata {

int64_t Model::num_parameters() {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

at::Tensor Model::forward_part(const at::Tensor& x, const Batch& b) {
  at::Tensor h = run_blocks(stage_.first ? embed(b) : x);
  return stage_.last ? head_loss(h, b) : h;
}

void Model::set_segments(std::vector<BlockSegment> segments, SegmentRunner runner) {
  for (const auto& s : segments)
    STRATA_ASSERT(s.begin >= 0 && s.begin < s.end && s.end <= num_blocks());
  segments_ = std::move(segments);
  runner_ = std::move(runner);
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
  for (const BlockSegment& s : segments_) {
    auto run = [this, s](at::Tensor h) {
      for (int64_t i = s.begin; i < s.end; ++i) h = run_block(i, std::move(h));
      return h;
    };
    if (!s.recompute || !runner_) {
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
    x = runner_([run](const std::vector<at::Tensor>& in) { return run(in[0]); }, {x}, params,
                buffers);
  }
  return x;
}

}  // namespace strata
