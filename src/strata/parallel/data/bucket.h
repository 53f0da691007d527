#pragma once
#include <cstdint>
#include <vector>

namespace strata {

// Note [bucket assignment]: gradients are grouped into buckets in the order they
// become ready in backward (the reverse of the forward's use order), so a bucket's
// all-reduce can start while the gradients of earlier layers are still being
// computed. The first bucket closes at a small size (1 MiB by default, as in
// PyTorch) so communication starts early; later ones at the cap (25 MiB). A bucket
// holds one dtype only (one flat buffer); each dtype fills its own buckets. A
// bucket closes as soon as its size reaches the limit, so one large tensor makes a
// bucket of its own. Buckets come out ordered by the position of their first
// tensor in `order`: the order in which they will be launched.
//
// order: parameter indices in expected ready order; bytes[i], dtype_key[i]: the
// gradient size and dtype of parameter i. Returns parameter indices per bucket.
std::vector<std::vector<int64_t>> assign_buckets(const std::vector<int64_t>& order,
                                                 const std::vector<int64_t>& bytes,
                                                 const std::vector<int>& dtype_key,
                                                 int64_t first_cap_bytes, int64_t cap_bytes);

}  // namespace strata
