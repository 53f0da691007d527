#pragma once
#include <cstdint>

#include "strata/core/state.h"
#include "strata/train/data/sampler.h"

namespace strata {

// The data position as a checkpoint holds it (Note [component state]): global, the
// epoch and the samples of it the whole run has consumed ("sampler.state"), so a run
// resumed at another dp continues the same global sequence of batches (Note
// [sampler]: the first k samples of every replica are the first k*R of the epoch).
class SamplerState : public Stateful {
 public:
  SamplerState(DistributedSampler& sampler, int64_t replicas, bool writes)
      : sampler_(sampler), replicas_(replicas), writes_(writes) {}
  void save_state(std::vector<TensorPiece>& out) override;
  void load_state(const PieceReader& in) override;

 private:
  DistributedSampler& sampler_;
  int64_t replicas_;
  bool writes_;
};

// Each rank's CPU generator ("rng.cpu.rank<r>": dropout's stream). A rank the
// checkpoint has no stream for (it was written by fewer ranks) keeps its seeded one.
class RngState : public Stateful {
 public:
  explicit RngState(int64_t rank) : rank_(rank) {}
  void save_state(std::vector<TensorPiece>& out) override;
  void load_state(const PieceReader& in) override;
  bool restored() const { return restored_; }

 private:
  int64_t rank_;
  bool restored_ = false;
};

}  // namespace strata
