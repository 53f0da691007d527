// Token files at scale (Note [token files], Note [large datasets]): nanoGPT's raw uint16
// files and llm.c's shards train, memory-mapped; the sampler's position resumes; bad
// files are one line naming the file and offset; and a file larger than this machine's
// memory leaves resident memory where a small one does.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include "strata/train/data/sampler.h"
#include "test_util.h"

using namespace strata;
using namespace strata::test;

namespace {

// A learnable stream of ids below 1000.
std::vector<uint16_t> stream(int64_t n) {
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    t[static_cast<size_t>(i)] = static_cast<uint16_t>((i * 7 + i / 5) % 1000);
  return t;
}

void write_raw(const std::string& path, const std::vector<uint16_t>& t) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(t.data()), static_cast<std::streamsize>(2 * t.size()));
}

// llm.c's shard: 256 int32 (magic, version, count, zeros), then the tokens.
void write_llmc(const std::string& path, const std::vector<uint16_t>& t, int32_t magic = 20240520,
                int32_t count_delta = 0) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = 1;
  header[2] = static_cast<int32_t>(t.size()) + count_delta;
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header.data()), 1024);
  f.write(reinterpret_cast<const char*>(t.data()), static_cast<std::streamsize>(2 * t.size()));
}

const std::string kRun =
    "--data.source=tokens --model.vocab_size=1000 --model.seq_len=64 --training.batch_size=8 "
    "--model.dropout=0 --training.eval_interval=6 ";

}  // namespace

TEST(TokenFiles, RawFilesAndLlmcShardsTrainAndResumeAtTheirPosition) {
  const std::string dir = temp_dir("tokens-data");
  const auto t = stream(200000);
  write_raw(dir + "/raw.bin", t);
  write_llmc(dir + "/shard_000.bin", {t.begin(), t.begin() + 100000});
  write_llmc(dir + "/shard_001.bin", {t.begin() + 100000, t.end()});
  for (const auto& [name, path] : std::vector<std::pair<std::string, std::string>>{
           {"raw", dir + "/raw.bin"}, {"llmc", dir + "/shard_*.bin"}}) {
    const std::string args =
        kRun + "--training.steps=12 --checkpoint.interval=6 --data.path='" + path + "'";
    const std::string run_dir = temp_dir("tokens-" + name);
    auto r = run(train_command(run_dir, args), 240);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(
        r.output.find(name == "raw" ? "(1 file(s), 200000 tokens, 3124 windows, memory-mapped)"
                                    : "(2 file(s), 200000 tokens, 3124 windows, memory-mapped)"),
        std::string::npos)
        << r.output;
    const auto losses = read_losses(run_dir + "/metrics.jsonl");
    ASSERT_EQ(losses.size(), 12u);
    EXPECT_LT(losses.back(), losses.front() - 0.2) << name << ": the loss falls";
    // The data position is in the checkpoint: steps 7-12 again, bit for bit.
    const std::string res =
        train_ok("tokens-" + name + "-resume",
                 args + " --checkpoint.resume=" + run_dir + "/checkpoints/step-00000006");
    const auto again = read_losses(res + "/metrics.jsonl");
    ASSERT_EQ(again.size(), 6u);
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(again[i], losses[6 + i]) << name << " step " << 7 + i;
  }
  // A held-out file for evaluation.
  write_raw(dir + "/val.bin", stream(20000));
  const std::string ev =
      train_ok("tokens-eval", kRun + "--training.steps=6 --data.path=" + dir +
                                  "/raw.bin --data.eval_path=" + dir + "/val.bin");
  EXPECT_TRUE(read_metrics(ev + "/metrics.jsonl").back().contains("eval_loss"));
}

TEST(TokenFiles, BadFilesAreOneLineNamingTheFileAndOffset) {
  const std::string dir = temp_dir("tokens-bad");
  const auto t = stream(10000);
  write_llmc(dir + "/magic.bin", t, 12345);
  write_llmc(dir + "/count.bin", t, 20240520, 7);
  write_raw(dir + "/ok.bin", t);
  {
    std::ofstream f(dir + "/odd.bin", std::ios::binary);
    f.write("abc", 3);
  }
  const std::string base = kRun + "--training.steps=1 ";
  auto bad = [&](const std::string& args, const std::string& message) {
    expect_one_error_line(train_command(dir + "/run", base + args), message, 120);
  };
  bad("--data.token_format=llmc --data.path=" + dir + "/magic.bin",
      dir + "/magic.bin: wrong magic 12345 at offset 0 (llm.c shards start with 20240520)");
  bad("--data.path=" + dir + "/count.bin",
      dir +
          "/count.bin: the header (offset 8) says 10007 tokens, 21038 bytes with the header, "
          "but the file has 21024");
  bad("--data.path=" + dir + "/odd.bin", dir + "/odd.bin: 3 bytes, not a whole number of uint16");
  bad("--data.path=" + dir + "/none_*.bin", "matches no file");
  // Ids up to 999 against a vocabulary of 500: named where the first one sits.
  bad("--model.vocab_size=500 --data.path=" + dir + "/ok.bin", dir + "/ok.bin: token ");
  bad("--model.vocab_size=500 --data.path=" + dir + "/ok.bin",
      "is not below the model's vocabulary 500");
  bad("--model.flavour=bert-debug --data.path=" + dir + "/ok.bin", "feeds causal language models");
}

TEST(TokenFiles, AFileLargerThanMemoryLeavesResidentMemoryAsASmallOneDoes) {
  // 32 GiB (sparse: no disk used), more than this machine's memory, against 400 KB: the
  // same few windows are touched, and no index array grows with the 268M windows.
  const std::string dir = temp_dir("tokens-big");
  write_raw(dir + "/small.bin", stream(200000));
  { std::ofstream f(dir + "/big.bin", std::ios::binary); }
  std::filesystem::resize_file(dir + "/big.bin", int64_t{32} << 30);
  auto peak = [&](const std::string& file) {
    const std::string run_dir =
        train_ok("tokens-rss-" + file, kRun + "--training.steps=3 --data.path=" + dir + "/" + file);
    int64_t p = 0;
    for (const auto& rec : read_metrics(run_dir + "/metrics.jsonl"))
      p = std::max(p, rec["rss"]["peak"].get<int64_t>());
    return p;
  };
  const int64_t big = peak("big.bin"), small = peak("small.bin");
  std::filesystem::remove(dir + "/big.bin");
  std::printf("peak RSS: 32 GiB file %.1f MiB, 400 KB file %.1f MiB\n", big / 1048576.0,
              small / 1048576.0);
  EXPECT_LT(big - small, int64_t{16} << 20);
}

TEST(Sampler, LargeDatasetsArePermutedWithoutAnIndexArray) {
  // Above the limit the Feistel bijection deals each replica a disjoint share; together
  // they are every index once, in an order that differs by seed and epoch.
  const int64_t n = DistributedSampler::kMaterializeLimit + 12345;
  std::vector<char> seen(static_cast<size_t>(n), 0);
  for (int64_t r = 0; r < 3; ++r) {
    DistributedSampler s(n, 3, r, 7);
    for (int64_t k = 0; k < s.per_replica(); ++k) {
      const int64_t i = s.index_at(0, k);
      ASSERT_TRUE(i >= 0 && i < n);
      ASSERT_EQ(seen[static_cast<size_t>(i)]++, 0) << "index " << i << " twice";
    }
  }
  int64_t dealt = 0;
  for (char c : seen) dealt += c;
  EXPECT_EQ(dealt, n / 3 * 3);
  DistributedSampler a(n, 1, 0, 7), b(n, 1, 0, 8);
  int64_t same_epoch = 0, same_seed = 0;
  for (int64_t k = 0; k < 1000; ++k) {
    same_epoch += a.index_at(0, k) == a.index_at(1, k);
    same_seed += a.index_at(0, k) == b.index_at(0, k);
  }
  EXPECT_LT(same_epoch, 5);
  EXPECT_LT(same_seed, 5);
  // next() walks the same order and carries its position.
  auto first = a.next(10);
  for (int64_t k = 0; k < 10; ++k) EXPECT_EQ(first[static_cast<size_t>(k)], a.index_at(0, k));
}
