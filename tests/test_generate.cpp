// strata generate: a trained GPT's checkpoint, the run's tokenizer, seeded sampling,
// and the KV cache against the full forward.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <sstream>

#include "strata/core/errors.h"
#include "strata/models/build.h"
#include "strata/models/gpt.h"
#include "test_util.h"

using namespace strata;
using namespace strata::test;

TEST(Generate, KvCacheGivesTheFullForwardsLogits) {
  // A 2-block GPT (seq_len 24, batch 2) decodes 20 tokens through the cache as a prompt
  // of 7, five single tokens, a chunk of 4 (new positions see the cache and each other
  // causally) and four more singles: the logits of every position equal those of one
  // full forward within 1e-5 of the largest.
  ModelSpec s;
  s.family = Family::kGpt;
  s.n_layer = 2, s.n_head = 4, s.d_model = 32, s.seq_len = 24, s.vocab_size = 100;
  s.vocab_multiple = 1;
  auto model = build_model(s);
  model->eval();
  auto& gpt = dynamic_cast<Gpt&>(*model);
  at::NoGradGuard g;
  const at::Tensor ids = at::randint(s.vocab_size, {2, 20}, at::kLong);
  Batch b{ids, ids, {}};
  const at::Tensor full = gpt.logits(gpt.run_blocks(gpt.embed(b)));
  KvCache cache;
  std::vector<at::Tensor> parts;
  int64_t at_pos = 0;
  for (int64_t n : {7, 1, 1, 1, 1, 1, 4, 1, 1, 1, 1}) {
    parts.push_back(gpt.decode(ids.narrow(1, at_pos, n), cache));
    at_pos += n;
  }
  ASSERT_EQ(at_pos, 20);
  EXPECT_EQ(cache.length, 20);
  const at::Tensor cached = at::cat(parts, 1);
  const double diff = (cached - full).abs().max().item<double>();
  const double scale = full.abs().max().item<double>();
  std::printf("KV cache: max |logit difference| %.3g (largest logit %.3g)\n", diff, scale);
  EXPECT_LT(diff, 1e-5 * scale);
  // Past the learned positions: one clear error, the cache left as it was.
  try {
    gpt.decode(ids.narrow(1, 0, 5), cache);
    ADD_FAILURE() << "decoding past seq_len was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds model.seq_len=24"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(cache.length, 20);
}

TEST(Generate, SamplesDeterministicallyForASeedFromAnyCheckpoint) {
  // The debug GPT after 60 steps on the KJV, its checkpoint written at dp=2.
  const std::string dir = train_ok(
      "generate", "--nproc 2 --training.steps=60 --model.seq_len=64 --training.batch_size=8");
  auto gen = [&](const std::string& args) {
    auto r = run(strata_bin() + " generate " + dir + " --prompt 'In the beginning' --tokens 24 " +
                     args + " 2>/dev/null",
                 60);
    EXPECT_EQ(r.status, 0) << r.output;
    // The text, without the speed line on stderr ("[24 tokens in ...]").
    std::string text;
    std::istringstream in(r.output);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("[", 0) != 0) text += line + "\n";
    return text;
  };
  const std::string a = gen("--seed 5"), b = gen("--seed 5"), c = gen("--seed 6");
  EXPECT_EQ(a, b) << "one seed, one text";
  EXPECT_NE(a, c) << "another seed, another text";
  EXPECT_EQ(a.rfind("In the beginning", 0), 0u) << a;
  EXPECT_GT(a.size(), std::string("In the beginning").size() + 24) << a;
  const std::string greedy = gen("--temperature 0 --seed 1");
  EXPECT_EQ(greedy, gen("--temperature 0 --seed 2")) << "greedy";
  // Within the window the cache changes the work, not the text.
  EXPECT_EQ(greedy, gen("--temperature 0 --kv-cache off")) << "KV cache";
  EXPECT_EQ(a, gen("--seed 5 --kv-cache off")) << "KV cache";
  // Bad input: one line each.
  expect_one_error_line(strata_bin() + " generate " + dir + " --tokens 0",
                        "--tokens 0 must be at least 1");
  expect_one_error_line(strata_bin() + " generate " + dir + " --kv-cache maybe",
                        "--kv-cache maybe is not on or off");
  const std::string synth =
      train_ok("generate-synthetic", "--training.steps=1 --data.source=synthetic");
  expect_one_error_line(strata_bin() + " generate " + synth,
                        "data.source=synthetic, which has no tokenizer");
}
