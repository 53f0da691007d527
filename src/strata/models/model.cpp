#include "strata/models/model.h"

namespace strata {

int64_t Model::num_parameters() {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace strata
