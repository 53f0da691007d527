// Bad input, class by class: each gets one "error:" line that names the problem and
// the fix, and exit status 2 (README "Command line").
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "strata/train/checkpoint.h"
#include "strata/train/data/text.h"
#include "test_util.h"

using namespace strata::test;
namespace fs = std::filesystem;

namespace {
void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}
std::string quick(const std::string& dir, const std::string& args) {
  return train_command(dir, "--training.steps=2 --training.batch_size=2 " + args);
}
}  // namespace

TEST(BadInput, ParserErrorsUseStrataConvention) {
  // CLI11's own wording, exit codes (105, 106, 114) and range numbers never show.
  const std::string s = strata_bin();
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"", "error: no command given; choose one of train, launch, estimate, report, schedule, export, import, generate, calibrate, plan, version"},
      {"trian", "error: 'trian' is not a strata command; did you mean 'train'?"},
      {"estimat -c x.toml", "did you mean 'estimate'?"},
      {"--bogus train", "error: '--bogus' comes before a command"},
      {"train --nproc 0", "error: --nproc=0 must be at least 1 (processes), e.g. --nproc 2"},
      {"train --nproc -3", "error: --nproc=-3 must be at least 1"},
      {"train --nproc", "error: --nproc needs a value, e.g. --nproc 2"},
      {"train --nproc abc", "error: --nproc=abc is not a number"},
      {"estimate --nproc 0", "error: --nproc=0 must be at least 1"},
      {"estimate --device-memory", "error: --device-memory needs a value"},
      {"launch -- true", "error: --nproc-per-node is required"},
      {"launch --nproc-per-node 0 -- true", "error: --nproc-per-node=0 must be at least 1"},
      {"launch --nproc-per-node 1 --nnodes 2 --node-rank 2 -- true",
       "error: --node-rank=2 must be in [0, --nnodes=2)"},
      {"report", "error: strata report needs RUN_DIR"},
      {"report a b", "error: unexpected argument(s)"},
  };
  for (const auto& c : cases) {
    expect_one_error_line(s + " " + c.args, c.message);
    auto r = run(s + " " + c.args);
    EXPECT_EQ(r.output.find("1797693"), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_EQ(r.output.find("Run with --help"), std::string::npos) << c.args << "\n" << r.output;
  }
  // Help is not an error.
  EXPECT_EQ(run(s + " --help").status, 0);
  EXPECT_EQ(run(s + " train --help").status, 0);
}

TEST(BadInput, NegativeShapeKeysAreRefused) {
  const std::string dir = temp_dir("bad-shape");
  for (const std::string key :
       {"vocab_size", "seq_len", "n_layer", "n_head", "d_model", "num_classes", "hidden"}) {
    const std::string arg = "--model." + key + "=-4";
    const std::string message = "error: model." + key +
                                "=-4 is negative; give a positive value, or 0 for the "
                                "flavour's default";
    expect_one_error_line(quick(dir, arg), message);
    expect_one_error_line(strata_bin() + " estimate " + arg, message);
  }
  expect_one_error_line(quick(dir, "--training.eval_interval=-1"), "training.eval_interval=-1");
  expect_one_error_line(quick(dir, "--training.eval_batches=-1"), "training.eval_batches=-1");
  expect_one_error_line(quick(dir, "--logging.peak_tflops=-1"), "logging.peak_tflops=-1");
}

TEST(BadInput, FirstInvalidUtf8) {
  using strata::first_invalid_utf8;
  EXPECT_EQ(first_invalid_utf8(""), -1);
  EXPECT_EQ(first_invalid_utf8("In the beginning"), -1);
  EXPECT_EQ(first_invalid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"), -1);  // é € 😀
  EXPECT_EQ(first_invalid_utf8("caf\xE9!"), 3);                                    // Latin-1 é
  EXPECT_EQ(first_invalid_utf8(std::string("ab\0c", 4)), 2);                       // NUL
  EXPECT_EQ(first_invalid_utf8("x\xC0\xAF"), 1);                                   // overlong '/'
  EXPECT_EQ(first_invalid_utf8("x\xED\xA0\x80"), 1);                               // a surrogate
  EXPECT_EQ(first_invalid_utf8("x\xF4\x90\x80\x80"), 1);                           // past U+10FFFF
  EXPECT_EQ(first_invalid_utf8("ok\xE2\x82"), 2);                                  // cut short
  EXPECT_EQ(first_invalid_utf8("\x80"), 0);  // a lone continuation
}

TEST(BadInput, TextCorpusIsCheckedBeforeTheTokenizer) {
  const std::string dir = temp_dir("bad-text");
  const std::string cache = " --data.cache_dir=" + dir + "/cache";
  auto text = [&](const std::string& file) {
    return quick(dir, "--data.source=text --data.path=" + file + cache);
  };
  write(dir + "/empty.txt", "");
  expect_one_error_line(text(dir + "/empty.txt"), "is empty; give a UTF-8 text file");
  write(dir + "/blank.txt", "  \n\n\t\n");
  expect_one_error_line(text(dir + "/blank.txt"), "holds only whitespace");
  // A binary file: a small vocabulary would otherwise train on it.
  std::string binary =
      "\x7F"
      "ELF\x02\x01\x01";
  binary += std::string(8, '\0') + "\x03\x00\x3E\x00";
  write(dir + "/a.out", binary);
  expect_one_error_line(text(dir + "/a.out") + " --data.tokenizer_vocab=64",
                        "is not UTF-8 text: a NUL byte at offset 7");
  write(dir + "/latin1.txt", std::string(100, 'a') + "\nna\xEFve caf\xE9\n");
  expect_one_error_line(text(dir + "/latin1.txt"),
                        "is not UTF-8 text: byte 0xEF at offset 103 starts no valid character; "
                        "convert it (iconv -f LATIN1 -t UTF-8 FILE)");
  // Valid text too small for the vocabulary: the tokenizer library's reason, without
  // its source file and line, and the right fix.
  write(dir + "/tiny.txt", "in the beginning\nwas the word\n");
  const std::string tiny = text(dir + "/tiny.txt");
  expect_one_error_line(tiny, "lower data.tokenizer_vocab or give a larger corpus");
  auto r = run(tiny);
  EXPECT_EQ(r.output.find(".cc("), std::string::npos) << r.output;
}

TEST(BadInput, DamagedCheckpointIsNamed) {
  const std::string dir = temp_dir("bad-ckpt");
  const std::string common = "--data.source=synthetic --training.steps=2 --training.batch_size=2 ";
  auto r = run(train_command(dir, common + "--checkpoint.interval=1"));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string ck = dir + "/checkpoints/step-00000001";
  auto resume = [&](const std::string& from) {
    return train_command(dir + "/r", common + "--checkpoint.resume=" + from);
  };
  // A truncated index.
  std::string index;
  {
    std::ifstream in(ck + "/shard-0.json");
    index.assign(std::istreambuf_iterator<char>(in), {});
  }
  write(ck + "/shard-0.json", index.substr(0, index.size() / 2));
  expect_one_error_line(resume(ck),
                        "error: checkpoint " + ck + " is corrupt: shard-0.json cannot be read (");
  // An index of the wrong shape (valid JSON, fields missing).
  write(ck + "/shard-0.json", "[{\"name\": \"model.wte.weight\"}]");
  expect_one_error_line(resume(ck), "is corrupt: shard-0.json cannot be read");
  // A damaged meta.json.
  const std::string ck2 = dir + "/checkpoints/step-00000002";
  write(ck2 + "/meta.json", "{\"step\": ");
  expect_one_error_line(resume(ck2), "is corrupt: meta.json cannot be read");
  expect_one_error_line(resume(dir + "/checkpoints/step-00000009"),
                        "is not a finished checkpoint (no meta.json)");
}

namespace {
// Starts cmd in the background; returns its pid (the shell's exec'd command).
pid_t start(const std::string& cmd, const std::string& log) {
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd + " >" + log + " 2>&1").c_str(), nullptr);
    _exit(127);
  }
  return pid;
}
int wait_status(pid_t pid, double limit_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  int st = 0;
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
// Waits until metrics.jsonl has at least n records.
bool wait_for_steps(const std::string& metrics, size_t n, double limit_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  while (std::chrono::steady_clock::now() < until) {
    if (fs::exists(metrics) && read_metrics(metrics).size() >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}
}  // namespace

TEST(BadInput, SigtermStopsAtAStepWithACheckpointAndNoTmp) {
  // Two ranks under the launcher: SIGTERM to the launcher is forwarded; both ranks
  // agree on the step, finish it, write a checkpoint, and exit 128 + 15.
  const std::string dir = temp_dir("sigterm");
  fs::create_directories(dir + "/checkpoints/step-00000007.tmp");  // a SIGKILLed run's leftover
  const pid_t pid = start(train_command(dir,
                                        "--nproc 2 --data.source=synthetic "
                                        "--training.steps=100000 --training.batch_size=4 "
                                        "--checkpoint.interval=0"),
                          dir + "/log.txt");
  ASSERT_TRUE(wait_for_steps(dir + "/metrics.jsonl", 2, 120));
  kill(pid, SIGTERM);
  const int status = wait_status(pid, 60);
  std::ifstream in(dir + "/log.txt");
  const std::string log((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(status, 128 + SIGTERM) << log;
  EXPECT_NE(log.find("on SIGTERM (checkpoint written)"), std::string::npos) << log;
  std::vector<std::string> finished, unfinished;
  for (const auto& e : fs::directory_iterator(dir + "/checkpoints")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0) continue;
    (e.path().extension() == ".tmp" ? unfinished : finished).push_back(name);
  }
  EXPECT_TRUE(unfinished.empty()) << unfinished.front();
  ASSERT_EQ(finished.size(), 1u);
  const auto steps = read_metrics(dir + "/metrics.jsonl").size();
  EXPECT_EQ(finished[0], strata::checkpoint_dir_name(static_cast<int64_t>(steps)));
  const std::string ck = dir + "/checkpoints/" + finished[0];
  EXPECT_TRUE(fs::exists(ck + "/shard-0.bin") && fs::exists(ck + "/shard-1.bin"));
  // It resumes from there.
  auto r = run(
      train_command(dir, c10::str("--nproc 2 --data.source=synthetic --training.steps=", steps + 1,
                                  " --training.batch_size=4 "
                                  "--checkpoint.resume=latest")));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
}
