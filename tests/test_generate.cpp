// strata generate: a trained GPT's checkpoint, the run's tokenizer, seeded sampling.
#include <gtest/gtest.h>

#include <sstream>

#include "test_util.h"

using namespace strata::test;

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
  EXPECT_EQ(gen("--temperature 0 --seed 1"), gen("--temperature 0 --seed 2")) << "greedy";
  // Bad input: one line each.
  expect_one_error_line(strata_bin() + " generate " + dir + " --tokens 0",
                        "--tokens 0 must be at least 1");
  const std::string synth =
      train_ok("generate-synthetic", "--training.steps=1 --data.source=synthetic");
  expect_one_error_line(strata_bin() + " generate " + synth,
                        "data.source=synthetic, which has no tokenizer");
}
