#pragma once
#include <cstdint>
#include <string>

namespace strata {

// `strata generate RUN_DIR|CHECKPOINT --prompt TEXT`: loads a GPT checkpoint of any
// layout into one process with the run's tokenizer and samples a continuation
// (temperature, top-k; deterministic for a seed). With the KV cache (Note [KV cache])
// a token costs one position's work, and when the window is full the context restarts
// from its last seq_len/2 tokens; without it every token recomputes the last seq_len.
struct GenerateArgs {
  std::string source, prompt = "In the beginning";
  int64_t tokens = 64;
  double temperature = 0.8;
  int64_t top_k = 40;
  int64_t seed = 1337;
  std::string kv_cache = "on";  // on | off
};
int run_generate(const GenerateArgs& a);

}  // namespace strata
