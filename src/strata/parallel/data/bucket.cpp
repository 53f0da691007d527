#include "strata/parallel/data/bucket.h"

#include <algorithm>
#include <map>

#include "strata/core/errors.h"

namespace strata {

std::vector<std::vector<int64_t>> assign_buckets(const std::vector<int64_t>& order,
                                                 const std::vector<int64_t>& bytes,
                                                 const std::vector<int>& dtype_key,
                                                 int64_t first_cap_bytes, int64_t cap_bytes) {
  STRATA_ASSERT(first_cap_bytes > 0 && cap_bytes > 0, "bucket caps must be positive");
  STRATA_ASSERT(bytes.size() == dtype_key.size(), "bytes and dtype_key differ in length");
  struct Open {
    std::vector<int64_t> members;
    int64_t size = 0;
    bool first = true;  // the next bucket of this dtype is its first
  };
  std::map<int, Open> open;
  std::vector<std::vector<int64_t>> out;
  for (int64_t i : order) {
    STRATA_ASSERT(i >= 0 && static_cast<size_t>(i) < bytes.size(), "bad parameter index ", i);
    Open& o = open[dtype_key[static_cast<size_t>(i)]];
    o.members.push_back(i);
    o.size += bytes[static_cast<size_t>(i)];
    if (o.size >= (o.first ? first_cap_bytes : cap_bytes)) {
      out.push_back(std::move(o.members));
      o.members.clear();
      o.size = 0;
      o.first = false;
    }
  }
  for (auto& [key, o] : open)
    if (!o.members.empty()) out.push_back(std::move(o.members));
  // Launch order: by where each bucket's first tensor sits in `order`.
  std::vector<int64_t> pos(bytes.size(), 0);
  for (size_t k = 0; k < order.size(); ++k)
    pos[static_cast<size_t>(order[k])] = static_cast<int64_t>(k);
  std::stable_sort(out.begin(), out.end(), [&](const auto& a, const auto& b) {
    return pos[static_cast<size_t>(a.front())] < pos[static_cast<size_t>(b.front())];
  });
  return out;
}

}  // namespace strata
