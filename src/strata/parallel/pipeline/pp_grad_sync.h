#pragma once
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
class PipelineGradSync : public WrappedGradSync {
 public:
  PipelineGradSync(std::unique_ptr<GradSync> inner, std::vector<NamedParam> params, Comm& pp,
                   const std::vector<std::shared_ptr<Model>>& parts);
  std::string describe() const override;
  void finalize() override;
  double grad_norm_squared() override;

 private:
  std::vector<NamedParam> params_;
  Comm& pp_;
  std::vector<at::Tensor> tied_;  // this end's tied tensors (empty on middle stages)
  int64_t peer_ = -1;             // the other end's pp rank
};

}  // namespace strata
