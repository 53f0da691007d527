#include "strata/parallel/zero/flat_layout.h"

#include <c10/core/StorageImpl.h>

#include "strata/core/errors.h"

namespace strata {

FlatLayout flat_layout(const std::vector<int64_t>& numels, int64_t world) {
  STRATA_ASSERT(world >= 1, "flat_layout: world ", world);
  FlatLayout l;
  l.numels = numels;
  int64_t off = 0;
  for (int64_t n : numels) {
    l.offsets.push_back(off);
    off += (n + kFlatAlign - 1) / kFlatAlign * kFlatAlign;
  }
  const int64_t unit = world * kFlatAlign;  // shards stay aligned too
  l.padded = std::max<int64_t>(unit, (off + unit - 1) / unit * unit);
  l.shard = l.padded / world;
  return l;
}

std::vector<ShardSlice> shard_slices(const FlatLayout& layout, int64_t rank) {
  std::vector<ShardSlice> out;
  const int64_t lo = rank * layout.shard, hi = lo + layout.shard;
  for (size_t i = 0; i < layout.offsets.size(); ++i) {
    const int64_t b = std::max(lo, layout.offsets[i]);
    const int64_t e = std::min(hi, layout.offsets[i] + layout.numels[i]);
    if (b >= e) continue;
    out.push_back({static_cast<int64_t>(i), b - layout.offsets[i], b - lo, e - b});
  }
  return out;
}

void bind_storage(const at::Tensor& param, const at::Tensor& flat, int64_t offset) {
  STRATA_ASSERT(param.is_contiguous() && param.storage_offset() == 0 &&
                    param.scalar_type() == flat.scalar_type() &&
                    offset + param.numel() <= flat.numel(),
                "bind_storage: parameter and flat buffer do not fit");
  c10::StorageImpl* s = param.storage().unsafeGetStorageImpl();
  const auto bytes = static_cast<size_t>(param.numel()) * param.element_size();
  void* ptr =
      static_cast<char*>(flat.data_ptr()) + offset * static_cast<int64_t>(flat.element_size());
  // The context owns a reference to the flat buffer: it lives while any parameter
  // points into it.
  auto* keep = new at::Tensor(flat);
  s->set_data_ptr_noswap(at::DataPtr(
      ptr, keep, [](void* ctx) { delete static_cast<at::Tensor*>(ctx); }, flat.device()));
  s->set_nbytes(bytes);
}

void release_storage(const at::Tensor& param) {
  c10::StorageImpl* s = param.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, param.device()));
  s->set_nbytes(0);
}

bool storage_bound(const at::Tensor& param) {
  return param.storage().unsafeGetStorageImpl()->data_ptr().get() != nullptr;
}

}  // namespace strata
