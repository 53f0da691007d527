#include "strata/parallel/data/comm_hook.h"

#include <ATen/ATen.h>

#include "strata/core/errors.h"
#include "strata/memory/tracking_allocator.h"

namespace strata {

CommWork HookComm::all_reduce(at::Tensor& t) {
  bytes_sent += static_cast<int64_t>(t.nbytes());
  CommWork w = comm_.all_reduce(t);
  w.track_completion();
  return w;
}

void HookComm::wait(CommWork& w) {
  if (w.done()) return;
  w.wait();
  intervals.emplace_back(w.started_at(), w.completed_at());
}

void AllReduceHook::launch(GradBucket& b, HookComm& comm) {
  // Dividing first (as PyTorch's default hook) keeps the division on the backward
  // thread, where it overlaps communication, instead of after the last wait.
  b.buffer.div_(static_cast<double>(comm.size()));
  works_.push_back(comm.all_reduce(b.buffer));
}

void AllReduceHook::finish(std::vector<GradBucket>& buckets, HookComm& comm) {
  for (auto& w : works_) comm.wait(w);
  works_.clear();
}

std::string CastHook::name() const {
  return dtype_ == at::kHalf ? "fp16" : "bf16";
}

void CastHook::launch(GradBucket& b, HookComm& comm) {
  MemoryScope scope(Category::kCommBuffers);
  at::Tensor half = b.buffer.to(dtype_).div_(static_cast<double>(comm.size()));
  CommWork w = comm.all_reduce(half);
  pending_.emplace_back(std::move(half), std::move(w));
}

void CastHook::finish(std::vector<GradBucket>& buckets, HookComm& comm) {
  STRATA_ASSERT(pending_.size() == buckets.size(), "cast hook: ", pending_.size(),
                " buckets launched, ", buckets.size(), " to finish");
  for (size_t i = 0; i < buckets.size(); ++i) {
    comm.wait(pending_[i].second);
    buckets[i].buffer.copy_(pending_[i].first);
  }
  pending_.clear();
}

}  // namespace strata
