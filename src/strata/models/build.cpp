#include "strata/models/build.h"

#include "strata/core/errors.h"
#include "strata/models/gpt.h"
#include "strata/models/resnet.h"

namespace strata {

std::shared_ptr<Model> build_model(const ModelSpec& spec, StageInfo stage, TpContext tp) {
  if (!is_language_model(spec.family))
    STRATA_CHECK(stage.is_whole(spec.n_layer) && tp.size == 1, spec.flavour,
                 " is built whole: pipeline stages and tensor-parallel slices are cut for ",
                 "the transformer models (gpt, bert); use parallel.tp=1 parallel.pp=1");
  switch (spec.family) {
    case Family::kGpt:
      return std::make_shared<Gpt>(spec, stage, tp);
    case Family::kBert:
      return std::make_shared<Bert>(spec, stage, tp);
    case Family::kResNet:
      return std::make_shared<ResNet>(spec);
    case Family::kMlp:
      return std::make_shared<Mlp>(spec);
  }
  return nullptr;
}

}  // namespace strata
