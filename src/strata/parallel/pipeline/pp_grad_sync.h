#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "strata/distributed/comm.h"
#include "strata/models/model.h"
#include "strata/parallel/grad_sync.h"

namespace strata {

// Data parallelism of a pipeline stage: everything is the inner GradSync's (DDP or
// local over the dp axis, possibly wrapped for tp), except that
//  - finalize() then sums the gradients of a tied embedding between the first stage
//    (which embeds with it) and the last (whose head uses its copy): both ends send
//    theirs and add the other's, so the two copies take the same optimizer step and
//    stay equal, as the one tensor of one process;
//  - the gradient norm sums every stage's over the pp group, the copy weighing 0
//    (NamedParam::norm_weight) so the shared tensor counts once.
// Under ZeRO (params empty: it weighs its own shards) the exchange must come before
// the dp reduction instead: the inner GradSync runs it (exchange_tied()) in its
// finalize (Note [pipeline tied gradients under ZeRO]).
class PipelineGradSync : public WrappedGradSync {
 public:
  PipelineGradSync(std::unique_ptr<GradSync> inner, std::vector<NamedParam> params, Comm& pp,
                   const std::vector<std::shared_ptr<Model>>& parts);
  std::string describe() const override;
  void finalize() override;
  double grad_norm_squared() override;
  // Sums this end's tied gradients with the other end's (a no-op on middle stages).
  // Once called from outside, finalize() no longer does it itself.
  std::function<void()> take_exchange();

 private:
  std::vector<NamedParam> params_;
  Comm& pp_;
  std::vector<at::Tensor> tied_;  // this end's tied tensors (empty on middle stages)
  int64_t peer_ = -1;             // the other end's pp rank
  bool exchange_in_finalize_ = true;
  void exchange_tied();
};

}  // namespace strata
