#pragma once
#include <ATen/Tensor.h>

#include "strata/memory/category.h"

namespace strata {

// Note [tracking allocator]
// Installed once at start-up as libtorch's CPU allocator. Each block carries a
// 64-byte header in front of the data (size, category), so freeing needs no map
// lookup and a tensor's bytes can be moved to another category later (retag):
// memory is tagged where it is made, by the innermost MemoryScope of the
// allocating thread. An intra-op worker without a scope uses the scope of the
// thread that installed the allocator; a communication backend's thread charges
// communication buffers (Note [unscoped threads]).
void install_tracking_allocator();
bool tracking_allocator_installed();

class MemoryScope {
 public:
  explicit MemoryScope(Category c);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

 private:
  int prev_;
  bool main_;
};
Category current_category();

struct MemoryStats {
  CategoryBytes current{};
  CategoryBytes peak{};  // each category's own peak
  int64_t total = 0;     // current, all categories
  int64_t total_peak = 0;
  CategoryBytes at_total_peak{};  // the breakdown at the moment of the total peak
};
MemoryStats memory_stats();
// Starts a new peak window: peaks := current.
void reset_memory_peaks();

// Moves the bytes of t's storage to category c (no-op for storage not from the tracker).
void retag(const at::Tensor& t, Category c);
// The category t's storage is charged to, or kOther when it is not tracked.
Category category_of(const at::Tensor& t);

}  // namespace strata
