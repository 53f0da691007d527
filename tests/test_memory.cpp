#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "strata/memory/tracking_allocator.h"

using namespace strata;

TEST(TrackingAllocator, CountsPerCategoryCurrentAndPeak) {
  install_tracking_allocator();
  const MemoryStats before = memory_stats();
  const auto idx = [](Category c) { return static_cast<size_t>(c); };
  {
    at::Tensor p, a;
    {
      MemoryScope s(Category::kParameters);
      p = at::empty({1000}, at::kFloat);  // 4000 bytes
    }
    {
      MemoryScope s(Category::kActivations);
      a = at::empty({250, 4}, at::kDouble);  // 8000 bytes
      EXPECT_EQ(current_category(), Category::kActivations);
    }
    EXPECT_EQ(category_of(p), Category::kParameters);
    EXPECT_EQ(category_of(a), Category::kActivations);
    MemoryStats mid = memory_stats();
    EXPECT_EQ(mid.current[idx(Category::kParameters)] - before.current[idx(Category::kParameters)],
              4000);
    EXPECT_EQ(
        mid.current[idx(Category::kActivations)] - before.current[idx(Category::kActivations)],
        8000);
    // Retag moves bytes between categories.
    retag(a, Category::kGradients);
    MemoryStats moved = memory_stats();
    EXPECT_EQ(moved.current[idx(Category::kActivations)],
              before.current[idx(Category::kActivations)]);
    EXPECT_EQ(moved.current[idx(Category::kGradients)] - before.current[idx(Category::kGradients)],
              8000);
    EXPECT_EQ(category_of(a), Category::kGradients);
  }
  MemoryStats after = memory_stats();
  EXPECT_EQ(after.total, before.total);
  for (size_t c = 0; c < kNumCategories; ++c) EXPECT_EQ(after.current[c], before.current[c]);
}

TEST(TrackingAllocator, PeakWindowAndTotalPeakBreakdown) {
  install_tracking_allocator();
  reset_memory_peaks();
  const MemoryStats base = memory_stats();
  {
    MemoryScope s(Category::kOptimizer);
    at::Tensor big = at::empty({1 << 20}, at::kFloat);  // 4 MiB, freed at once
  }
  MemoryStats st = memory_stats();
  const auto o = static_cast<size_t>(Category::kOptimizer);
  EXPECT_EQ(st.peak[o] - base.current[o], 4 << 20);
  EXPECT_EQ(st.total_peak - base.total, 4 << 20);
  EXPECT_EQ(st.at_total_peak[o] - base.current[o], 4 << 20);
  EXPECT_EQ(st.current[o], base.current[o]);
  reset_memory_peaks();
  EXPECT_EQ(memory_stats().peak[o], base.current[o]);
}

TEST(TrackingAllocator, ScopeCoversIntraOpWorkerThreads) {
  install_tracking_allocator();
  // An op big enough to run in parallel allocates its output on the calling
  // thread; whatever the workers allocate falls back to the main thread's scope.
  MemoryScope s(Category::kActivations);
  at::Tensor x = at::randn({512, 512});
  at::Tensor y = at::mm(x, x);
  EXPECT_EQ(category_of(y), Category::kActivations);
}
