#include <gtest/gtest.h>

#include <fstream>

#include "strata/core/config.h"
#include "strata/core/errors.h"
#include "strata/core/stats.h"
#include "test_util.h"

using namespace strata;

namespace {
std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Config, TomlAndOverridesApplyInOrder) {
  std::string path = test::temp_dir("config") + "/c.toml";
  std::ofstream(path) << "[model]\nflavour = \"gpt2-124m\"\n[training]\nlr = 3e-4\nsteps = 5\n"
                         "deterministic = false\n";
  Config c;
  load_config_file(c, path);
  EXPECT_EQ(c.model.flavour, "gpt2-124m");
  EXPECT_DOUBLE_EQ(c.training.lr, 3e-4);
  EXPECT_EQ(c.training.steps, 5);
  EXPECT_FALSE(c.training.deterministic);
  apply_override(c, "training.steps=7");
  apply_override(c, "parallel.timeout_s=2.5");
  EXPECT_EQ(c.training.steps, 7);
  EXPECT_DOUBLE_EQ(c.parallel.timeout_s, 2.5);
  // The printed TOML reads back to the same config.
  std::string path2 = test::temp_dir("config2") + "/c.toml";
  std::ofstream(path2) << config_toml(c);
  Config d;
  load_config_file(d, path2);
  EXPECT_EQ(config_toml(d), config_toml(c));
}

TEST(Config, UnknownKeysAndBadValuesAreOneLineErrors) {
  Config c;
  std::string m = message_of([&] { apply_override(c, "training.lrr=1"); });
  EXPECT_NE(m.find("unknown config key training.lrr; did you mean training.lr?"), std::string::npos)
      << m;
  m = message_of([&] { apply_override(c, "trainig.lr=1"); });
  EXPECT_NE(m.find("did you mean [training]"), std::string::npos) << m;
  m = message_of([&] { apply_override(c, "training.steps=ten"); });
  EXPECT_NE(m.find("is not an integer"), std::string::npos) << m;
  m = message_of([&] { apply_override(c, "steps"); });
  EXPECT_NE(m.find("--section.key=value"), std::string::npos) << m;
  std::string path = test::temp_dir("badtoml") + "/c.toml";
  std::ofstream(path) << "[training]\nsteps = \"5\"\n";
  m = message_of([&] { load_config_file(c, path); });
  EXPECT_NE(m.find("training.steps must be an integer"), std::string::npos) << m;
  for (const auto& line : {m}) EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(Config, ValidationNamesTheFix) {
  Config c;
  c.data.source = "kvj";
  std::string m = message_of([&] { validate_config(c); });
  EXPECT_NE(m.find("did you mean 'kjv'"), std::string::npos) << m;
  c = Config{};
  c.training.batch_size = 0;
  EXPECT_THROW(validate_config(c), Error);
  c = Config{};
  EXPECT_NO_THROW(validate_config(c));
}

TEST(Stats, MedianTakesTheMiddleAndSaysWhatEmptyIs) {
  EXPECT_EQ(median({3, 1, 2}), 2);
  EXPECT_EQ(median({4, 1, 3, 2}), 3) << "the upper middle of an even count";
  EXPECT_EQ(median({}, 0), 0);
  EXPECT_TRUE(std::isnan(median({})));
}

TEST(Stats, FastestRunIsTheSmallestMedian) {
  // A run with one fast step is not the fastest: each run counts its median.
  EXPECT_EQ(fastest_run({{5, 5, 1}, {3, 4, 3}, {6, 2, 7}}), 3);
  EXPECT_EQ(fastest_run({{}, {4, 2, 3}}), 3) << "a run without steps is skipped";
  EXPECT_TRUE(std::isnan(fastest_run({})));
  EXPECT_TRUE(std::isnan(fastest_run({{}})));
  EXPECT_EQ(fastest_run_index({{5, 5, 1}, {3, 4, 3}, {6, 2, 7}}), 1u);
  EXPECT_EQ(fastest_run_index({{}, {4, 2, 3}}), 1u);
  EXPECT_EQ(fastest_run_index({{}}), 1u) << "none: the count";
}
