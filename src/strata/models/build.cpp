#include "strata/models/build.h"

#include "strata/models/gpt.h"
#include "strata/models/resnet.h"

namespace strata {

std::shared_ptr<Model> build_model(const ModelSpec& spec) {
  switch (spec.family) {
    case Family::kGpt:
      return std::make_shared<Gpt>(spec);
    case Family::kBert:
      return std::make_shared<Bert>(spec);
    case Family::kResNet:
      return std::make_shared<ResNet>(spec);
    case Family::kMlp:
      return std::make_shared<Mlp>(spec);
  }
  return nullptr;
}

}  // namespace strata
