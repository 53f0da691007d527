#pragma once
#include <string>

#include "strata/core/state.h"

namespace strata {

// Note [init_from]: `checkpoint.init_from` starts a run from another run's (or an
// imported model's) weights with a fresh optimizer at step 0. The components load as in
// a resume, through this reader: model weights and buffers come from the source; every
// optimizer piece ("optim.<name>.exp_avg", ".exp_avg_sq", ".step") reads as zeros, the
// state AdamW starts from. So any layout (ZeRO shards, tp slices, stages) initialises
// from any source, with the loading code resume already proves.
class FreshOptimizerReader : public PieceReader {
 public:
  explicit FreshOptimizerReader(const PieceReader& weights) : in_(weights) {}
  bool has(const std::string& name) const override;
  std::vector<int64_t> global_shape(const std::string& name) const override;
  void read(const std::string& name, at::Tensor out,
            const std::vector<int64_t>& offsets = {}) const override;
  void read_flat(const std::string& name, at::Tensor out, int64_t offset) const override;
  void read_box_flat(const std::string& name, at::Tensor out, const std::vector<int64_t>& offsets,
                     const std::vector<int64_t>& box_shape, int64_t offset) const override;

 private:
  const PieceReader& in_;
};

}  // namespace strata
