#pragma once
#include <array>
#include <cstdint>

namespace strata {

// What a byte of memory is for. Every allocation is charged to exactly one.
enum class Category : uint8_t {
  kParameters = 0,
  kGradients,
  kOptimizer,
  kActivations,
  kCommBuffers,
  kOther,
  kCount
};
constexpr size_t kNumCategories = static_cast<size_t>(Category::kCount);
const char* category_name(Category c);
using CategoryBytes = std::array<int64_t, kNumCategories>;

}  // namespace strata
