#include "strata/cli/generate.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "strata/core/config.h"
#include "strata/core/errors.h"
#include "strata/core/files.h"
#include "strata/models/build.h"
#include "strata/models/gpt.h"
#include "strata/train/checkpoint.h"
#include "strata/train/data/source.h"
#include "strata/train/data/tokenizer.h"

namespace fs = std::filesystem;

namespace strata {

int run_generate(const GenerateArgs& a) {
  STRATA_CHECK(a.tokens >= 1, "--tokens ", a.tokens, " must be at least 1");
  STRATA_CHECK(a.temperature >= 0, "--temperature ", a.temperature,
               " must be >= 0 (0: always the most likely token)");
  STRATA_CHECK(a.top_k >= 0, "--top-k ", a.top_k, " must be >= 0 (0: the whole vocabulary)");
  const std::string dir = locate_checkpoint(a.source);
  CheckpointReader ck(dir);
  const ModelSpec spec =
      checkpoint_model_spec(ck, {Family::kGpt}, "strata generate samples from GPT flavours");
  STRATA_CHECK(ck.meta().contains("config"), "checkpoint ", dir,
               " does not record its config, which names the tokenizer; resume it and save once "
               "with this Strata");
  // The run's tokenizer: its config names the corpus, whose tokenizer is cached.
  Config cfg;
  const std::string toml =
      fs::temp_directory_path() / ("strata-generate-" + std::to_string(getpid()) + ".toml");
  write_file_atomic(toml, ck.meta()["config"].get<std::string>());
  load_config_file(cfg, toml);
  fs::remove(toml);
  STRATA_CHECK(cfg.data.source == "kjv" || cfg.data.source == "text", "checkpoint ", dir,
               " was trained on data.source=", cfg.data.source,
               ", which has no tokenizer to turn text into tokens; generate needs kjv or text");
  const DataSource data = open_data_source(cfg);
  const Tokenizer tok(data.tokenizer_path);

  auto model = build_model_from(spec, ck);
  model->eval();
  auto& gpt = dynamic_cast<Gpt&>(*model);

  std::vector<int> ids = tok.encode(a.prompt);
  STRATA_CHECK(!ids.empty(), "--prompt is empty after tokenizing; give some text");
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(a.seed));
  const auto t0 = std::chrono::steady_clock::now();
  at::NoGradGuard no_grad;
  for (int64_t n = 0; n < a.tokens; ++n) {
    // The last seq_len tokens: the model's context.
    const auto from =
        ids.size() > static_cast<size_t>(spec.seq_len) ? ids.size() - spec.seq_len : 0;
    std::vector<int64_t> window(ids.begin() + static_cast<int64_t>(from), ids.end());
    at::Tensor x = at::tensor(window, at::kLong).unsqueeze(0);
    Batch b{x, x, {}};
    at::Tensor logits =
        gpt.logits(gpt.run_blocks(gpt.embed(b))).select(1, x.size(1) - 1).squeeze(0).to(at::kFloat);
    logits = logits.narrow(0, 0, spec.vocab_size);  // not the padded rows
    int64_t next = 0;
    if (a.temperature == 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      logits = logits / a.temperature;
      if (a.top_k > 0 && a.top_k < logits.size(0)) {
        const at::Tensor kth = std::get<0>(logits.topk(a.top_k)).select(0, a.top_k - 1);
        logits = logits.masked_fill(logits < kth, -INFINITY);
      }
      next = at::multinomial(at::softmax(logits, 0), 1, false, gen).item<int64_t>();
    }
    ids.push_back(static_cast<int>(next));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Decoded whole, so the word boundary between prompt and continuation is kept.
  std::printf("%s\n", tok.decode(ids).c_str());
  std::fprintf(stderr, "[%lld tokens in %.2f s: %.1f tokens/s, no KV cache; step %lld of %s]\n",
               static_cast<long long>(a.tokens), secs, static_cast<double>(a.tokens) / secs,
               static_cast<long long>(ck.meta().value("step", int64_t{0})), dir.c_str());
  return 0;
}

}  // namespace strata
