#pragma once
#include <ATen/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/optim/adamw.h"

namespace strata {

// One rank's piece of one parameter: elements [offset, offset + length) of the
// flattened parameter, as 1-D views into this rank's flat shards (Note [flat shards]).
struct ShardPiece {
  std::string name;  // the parameter's name
  int64_t offset = 0, length = 0;
  int64_t shard_offset = 0;  // where the piece starts in this rank's shard of its group
  bool decay = false;        // weight decay applies (the parameter has dim >= 2)
  double norm_weight = 1;    // in the global gradient norm (NamedParam::norm_weight)
  at::Tensor value;          // the parameter piece; undefined when offload holds the only copy
  at::Tensor grad;           // the (averaged) gradient piece
};

// AdamW over this rank's pieces. Without offload it steps the pieces in place (fp32
// masters for half pieces when master_weights). With offload every piece has an
// fp32 copy in host memory (pinned on CUDA) with its own host gradient buffer: the
// gradient is copied down, AdamW steps on the host, and the result is copied back
// up (ZeRO-Offload). The caller tags allocations (optimizer state).
class ShardedOptimizer {
 public:
  ShardedOptimizer(std::vector<ShardPiece> pieces, AdamWOptions opts, bool master_weights,
                   bool offload);
  // Local squared norm of the pieces' gradients (fp32-accumulated).
  double grad_norm_squared() const;
  // Steps pieces [begin, end) (all by default).
  void step(double lr, double grad_scale, size_t begin = 0, size_t end = SIZE_MAX);
  size_t size() const { return pieces_.size(); }
  const ShardPiece& piece(size_t i) const { return pieces_[i]; }
  // The fp32 value of piece i the optimizer steps (master, host copy, or the piece).
  at::Tensor master(size_t i);
  AdamW::State& state(size_t i) { return adam_->state()[i]; }
  // Sets piece i's value (fp32) everywhere it is kept: master or host copy, and the
  // device piece.
  void set_value(size_t i, const at::Tensor& v);
  bool offload() const { return offload_; }
  // Offload at stage 3: the host copies become the only copy of the pieces.
  void drop_device_values();

 private:
  std::vector<ShardPiece> pieces_;
  bool offload_ = false;
  std::vector<at::Tensor> host_values_, host_grads_;  // offload
  std::unique_ptr<AdamW> adam_;
};

}  // namespace strata
