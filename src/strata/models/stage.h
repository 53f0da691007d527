#pragma once
#include <cstdint>
#include <string>

namespace strata {

// Note [model parts]: a model is built as the part one rank runs: the global blocks
// [block_begin, block_end), the embedding when it is the first stage, the head and
// loss when it is the last (Megatron's pre_process / post_process), and each linear
// cut for its tensor-parallel rank. Names stay global (block7 is block7 on any
// stage), so checkpoints, hooks and the estimator speak one language.
struct StageInfo {
  int64_t block_begin = 0, block_end = -1;  // global blocks held; end -1: through the last
  bool first = true, last = true;           // holds the embedding / the head and loss

  static StageInfo whole() { return {}; }
  int64_t end(int64_t num_blocks) const { return block_end < 0 ? num_blocks : block_end; }
  bool holds(int64_t block, int64_t num_blocks) const {
    return block >= block_begin && block < end(num_blocks);
  }
  bool is_whole(int64_t num_blocks) const {
    return first && last && block_begin == 0 && end(num_blocks) == num_blocks;
  }
  std::string to_string(int64_t num_blocks) const;
};

// The tensor-parallel rank a part is cut for (Note [parallel linear]).
struct TpContext {
  int64_t rank = 0, size = 1;
};

}  // namespace strata
