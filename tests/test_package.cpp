// Strata as a library (Note [public API], Note [installed headers]): `cmake --install`
// into a fresh prefix, then a project that sees only that prefix (tests/package: every
// installed header compiled alone, a program that builds the mesh, and examples/)
// builds, the mesh program's collectives add up, and the examples train under
// `strata launch`: the user MLP equals the `mlp` flavour through `strata train`, the
// user transformer at tp=2 and at pp=2 equals one process, and a pp=2 checkpoint of it
// resumes at one process.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "strata/core/files.h"
#include "test_util.h"

using namespace strata::test;
namespace fs = std::filesystem;

namespace {

// Largest |a[i] - b[i]| (a and b of one length).
double max_gap(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double gap = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    gap = std::max(gap, std::abs(a[i] - b[i]));
  return gap;
}

}  // namespace

TEST(Package, InstalledStrataBuildsTheExamplesWhichTrainLikeStrataItself) {
  const std::string root = temp_dir("package");
  const std::string prefix = root + "/prefix", build = root + "/build", runs = root + "/runs";
  auto r = run("cmake --install " STRATA_BUILD_DIR " --prefix " + prefix + " 2>&1", 120);
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* f : {"bin/strata", "lib/cmake/Strata/StrataConfig.cmake",
                        "lib/cmake/Strata/StrataConfigVersion.cmake", "include/strata/version.h",
                        "include/strata/api/strata.h"})
    EXPECT_TRUE(fs::exists(prefix + "/" + f)) << f;
  EXPECT_TRUE(fs::exists(prefix + "/lib/libstrata.a") || fs::exists(prefix + "/lib/libstrata.so"));

  // The installed headers: no toml++, CLI11, sentencepiece or test header, and every
  // Strata header they include installed too (internals stay private).
  const std::regex foreign(R"(#include\s*[<"](toml\+\+|CLI/|sentencepiece|gtest))");
  const std::regex own(R"(#include\s*"(strata/[^"]+)\")");
  int headers = 0;
  for (const auto& e : fs::recursive_directory_iterator(prefix + "/include")) {
    if (!e.is_regular_file()) continue;
    ++headers;
    const std::string text = strata::read_file(e.path().string());
    EXPECT_FALSE(std::regex_search(text, foreign)) << e.path();
    for (std::sregex_iterator it(text.begin(), text.end(), own), end; it != end; ++it)
      EXPECT_TRUE(fs::exists(prefix + "/include/" + (*it)[1].str()))
          << e.path() << " includes " << (*it)[1] << ", which is not installed";
  }
  EXPECT_GE(headers, 5);
  EXPECT_FALSE(fs::exists(prefix + "/include/strata/train/trainer.h")) << "an internal header";

  // A separate project against the prefix alone (and libtorch), through ccache when
  // there is one.
  const std::string ccache =
      run("sh -c 'command -v ccache'", 10).status == 0
          ? " -DCMAKE_CXX_COMPILER_LAUNCHER='cmake;-E;env;CCACHE_BASEDIR=" + root +
                ";CCACHE_NOHASHDIR=true;ccache'"
          : "";
  r = run("cmake -S " + source_dir() + "/tests/package -B " + build +
              " -G Ninja -DCMAKE_PREFIX_PATH='" + prefix +
              ";" STRATA_TORCH_PREFIX "' -DSTRATA_EXAMPLES=" + source_dir() + "/examples" + ccache +
              " 2>&1",
          120);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("headers compiled alone: " + std::to_string(headers)), std::string::npos)
      << r.output;
  r = run("cmake --build " + build + " -j2 2>&1", 600);
  ASSERT_EQ(r.status, 0) << r.output;

  // The launcher gives 4 ranks their environment and the program builds dp=2 x tp=2.
  r = run(prefix + "/bin/strata launch --nproc-per-node 4 -- " + build +
              "/mesh_check --parallel.tp=2 2>&1",
          120);
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* line : {"rank 0 of 4: dp 0 tp 0 pp 0, world sum 10, tp sum 3 (gloo)",
                           "rank 3 of 4: dp 1 tp 1 pp 0, world sum 10, tp sum 7 (gloo)"})
    EXPECT_NE(r.output.find(line), std::string::npos) << r.output;
  const std::string launch = prefix + "/bin/strata launch --nproc-per-node 2 -- ";
  const std::string mlp = build + "/examples/fashion_mlp/fashion_mlp",
                    tiny = build + "/examples/tiny_transformer/tiny_transformer";
  auto train = [&](const std::string& cmd, const std::string& name, const std::string& args) {
    const std::string dir = runs + "/" + name;
    auto t =
        run(cmd + " --logging.progress=off --logging.run_dir=" + dir + " " + args + " 2>&1", 300);
    EXPECT_EQ(t.status, 0) << name << "\n" << t.output;
    return read_losses(dir + "/metrics.jsonl");
  };

  // (1) The user MLP (DDP with ZeRO-2 and bf16, its defaults) learns at 2 ranks, and at
  // one rank equals Strata's own mlp flavour with the same settings. One thread a rank:
  // once under CI's load the two one-rank runs parted by 2.4e-4 from step 4 on, and it
  // did not happen again alone or beside CPU hogs. The cause is not known; the one
  // thing the runs took from the machine's state is how the two threads' BLAS split
  // their work (MKL may choose fewer threads), and in bf16 a single rounding that flips
  // is enough, so both runs are kept to one thread, whose order of sums cannot move.
  const std::string steps = "--training.steps=6 --training.warmup_steps=2 --training.threads=1 ";
  const auto two = train(launch + mlp, "mlp-2", steps);
  ASSERT_EQ(two.size(), 6u);
  EXPECT_LT(two.back(), 0.7 * two.front()) << "the loss falls";
  const auto one = train(mlp, "mlp-1", steps);
  const auto flavour =
      train(strata_bin() +
                " train --model.flavour=mlp --data.source=fashion-mnist "
                "--parallel.zero=2 --memory.precision=bf16 --training.batch_size=64 "
                "--training.lr=1e-3 --training.eval_interval=0",
            "mlp-flavour", steps);
  const double mlp_gap = max_gap(one, flavour);
  std::printf("user MLP vs the mlp flavour at 1 rank: max |loss difference| %.3g\n", mlp_gap);
  EXPECT_LE(mlp_gap, 1e-5);

  // (2) The user transformer (recompute full, its default) at tp=2 and pp=2 against one
  // process; the pp=2 run's step-6 checkpoint resumes at one process.
  const std::string t = "--training.steps=12 --training.micro_batch_size=4 ";
  const auto base = train(tiny, "tiny-1", t);
  ASSERT_EQ(base.size(), 12u);
  EXPECT_LT(base.back(), base.front() - 0.5) << "the loss falls";
  const double tp_gap = max_gap(train(launch + tiny, "tiny-tp2", t + "--parallel.tp=2"), base);
  const double pp_gap = max_gap(
      train(launch + tiny, "tiny-pp2", t + "--parallel.pp=2 --checkpoint.interval=6"), base);
  const auto resumed =
      train(tiny, "tiny-resume",
            t + "--checkpoint.resume=" + runs + "/tiny-pp2/checkpoints/step-00000006");
  const double resume_gap = max_gap(resumed, std::vector<double>(base.begin() + 6, base.end()));
  std::printf("user transformer vs 1 process: tp=2 %.3g, pp=2 %.3g, pp=2 step 6 resumed %.3g\n",
              tp_gap, pp_gap, resume_gap);
  EXPECT_LE(tp_gap, 1e-5);
  EXPECT_LE(pp_gap, 1e-5);
  EXPECT_LE(resume_gap, 1e-5);
}
