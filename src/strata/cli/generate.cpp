#include "strata/cli/generate.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
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
  STRATA_CHECK(a.kv_cache == "on" || a.kv_cache == "off", "--kv-cache ", a.kv_cache,
               " is not on or off");
  const bool use_cache = a.kv_cache == "on";
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
  // The last n tokens so far, as a (1, n) batch.
  auto last = [&](size_t n) {
    n = std::min(n, ids.size());
    return at::tensor(std::vector<int64_t>(ids.end() - static_cast<int64_t>(n), ids.end()),
                      at::kLong)
        .unsqueeze(0);
  };
  const auto window = static_cast<size_t>(spec.seq_len);
  KvCache cache;
  const auto t0 = std::chrono::steady_clock::now();
  at::NoGradGuard no_grad;
  for (int64_t n = 0; n < a.tokens; ++n) {
    at::Tensor logits;  // (1, T, V) of the tokens fed this step
    if (!use_cache) {
      at::Tensor x = last(window);
      Batch b{x, x, {}};
      logits = gpt.logits(gpt.run_blocks(gpt.embed(b)));
    } else if (n == 0 || cache.length == spec.seq_len) {
      // The prompt, or a fresh start from the last half window once the cache is full.
      cache.clear();
      logits = gpt.decode(last(n == 0 ? window : std::max<size_t>(1, window / 2)), cache);
    } else {
      logits = gpt.decode(last(1), cache);
    }
    logits = logits.select(1, logits.size(1) - 1).squeeze(0).to(at::kFloat);
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
  std::fprintf(stderr, "[%lld tokens in %.2f s: %.1f tokens/s, %s; step %lld of %s]\n",
               static_cast<long long>(a.tokens), secs, static_cast<double>(a.tokens) / secs,
               use_cache ? "KV cache" : "no KV cache",
               static_cast<long long>(ck.meta().value("step", int64_t{0})), dir.c_str());
  return 0;
}

}  // namespace strata
