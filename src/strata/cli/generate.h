#pragma once
#include <cstdint>
#include <string>

namespace strata {

// `strata generate RUN_DIR|CHECKPOINT --prompt TEXT`: loads a GPT checkpoint of any
// layout into one process with the run's tokenizer and samples a continuation
// (temperature, top-k; deterministic for a seed). The whole window is recomputed for
// each new token: there is no KV cache yet.
struct GenerateArgs {
  std::string source, prompt = "In the beginning";
  int64_t tokens = 64;
  double temperature = 0.8;
  int64_t top_k = 40;
  int64_t seed = 1337;
};
int run_generate(const GenerateArgs& a);

}  // namespace strata
