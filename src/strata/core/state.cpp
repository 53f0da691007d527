#include "strata/core/state.h"

#include <c10/util/ArrayRef.h>
#include <c10/util/StringUtil.h>

#include "strata/core/errors.h"

namespace strata {

void PieceReader::expect_shape(const std::string& name, const std::vector<int64_t>& shape) const {
  const std::vector<int64_t> stored = global_shape(name);
  STRATA_CHECK(stored == shape, "checkpoint tensor '", name, "' has shape ",
               c10::IntArrayRef(stored), " but this model's is ", c10::IntArrayRef(shape),
               "; it was written for another model (resume with the model it was trained with)");
}

}  // namespace strata
