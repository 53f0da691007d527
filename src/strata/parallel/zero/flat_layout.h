#pragma once
#include <ATen/Tensor.h>

#include <cstdint>
#include <vector>

namespace strata {

// Note [flat shards]
// ZeRO keeps each group of parameters (one model block, one dtype) as one flat
// buffer: the parameters one after another, each starting at a multiple of
// kFlatAlign elements (aligned vector loads on every dtype), the total padded to a
// multiple of the dp size so every rank owns an equal shard
// [rank * shard, (rank + 1) * shard). Padding is zero and stays zero (its gradient
// is zero). A parameter may straddle shards: each rank's optimizer sees the pieces
// of parameters that fall in its shard (shard_slices).
constexpr int64_t kFlatAlign = 16;

struct FlatLayout {
  std::vector<int64_t> offsets;  // per parameter, in elements
  std::vector<int64_t> numels;
  int64_t padded = 0;  // buffer length: a multiple of the group size
  int64_t shard = 0;   // padded / group size
};
// Pure: the layout of parameters with these element counts over `world` ranks.
FlatLayout flat_layout(const std::vector<int64_t>& numels, int64_t world);

// The part of parameter `param` (elements [param_offset, param_offset + length) of
// its flattened self) that lies in a rank's shard, at shard_offset in it.
struct ShardSlice {
  int64_t param = 0;
  int64_t param_offset = 0;
  int64_t shard_offset = 0;
  int64_t length = 0;
};
// Pure: the slices of rank's shard, in order; padding belongs to no slice.
std::vector<ShardSlice> shard_slices(const FlatLayout& layout, int64_t rank);

// Note [parameter storage]
// ZeRO moves a parameter's bytes without touching the tensor autograd knows: the
// parameter's StorageImpl is pointed at a region of a flat buffer (bind_storage),
// or emptied (release_storage). Views of the parameter that the graph saved share
// the StorageImpl, so they see the new bytes too, and a released parameter frees
// its memory even while such views are alive (the flat buffer is freed when the
// last parameter bound to it lets go). The parameter keeps its shape, so autograd's
// shape checks and the model's own code are unaffected; its values may only be read
// while it is bound.
void bind_storage(const at::Tensor& param, const at::Tensor& flat, int64_t offset);
void release_storage(const at::Tensor& param);
bool storage_bound(const at::Tensor& param);

}  // namespace strata
