#include "strata/models/stage.h"

namespace strata {

std::string StageInfo::to_string(int64_t num_blocks) const {
  std::string s =
      "blocks [" + std::to_string(block_begin) + ", " + std::to_string(end(num_blocks)) + ")";
  if (first) s += ", embedding";
  if (last) s += ", head";
  return s;
}

}  // namespace strata
