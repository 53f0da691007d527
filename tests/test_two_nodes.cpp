// Two nodes for real: two network namespaces joined by a veth pair, one `strata launch
// --nnodes 2 --node-rank R` in each, 2 ranks per node. The run matches 4 local ranks;
// with the link taken down mid-run every rank on both nodes stops within the timeout,
// naming the collective and the ranks it lost, nothing is left running, and with
// --max-restarts 1 the run resumes once the link is back and finishes. Skipped where
// network namespaces cannot be made (not root, no CAP_NET_ADMIN).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "strata/core/files.h"
#include "test_util.h"

using namespace strata;
using namespace strata::test;
namespace fs = std::filesystem;

namespace {

const std::string kCommon =
    "--training.steps=40 --training.batch_size=8 --model.dropout=0 --model.seq_len=64 "
    "--logging.progress=off --training.eval_interval=0 --checkpoint.interval=5 ";

// Two namespaces, node0 (10.231.0.1) and node1 (10.231.0.2), one veth pair between them;
// removed in the destructor whatever happened.
class TwoNamespaces {
 public:
  TwoNamespaces() {
    const std::string id = std::to_string(getpid());
    ns_ = {"strata-n0-" + id, "strata-n1-" + id};
    veth_ = {"stv0-" + id, "stv1-" + id};
    const std::vector<std::string> steps = {
        "ip netns add " + ns_[0],
        "ip netns add " + ns_[1],
        "ip link add " + veth_[0] + " type veth peer name " + veth_[1],
        "ip link set " + veth_[0] + " netns " + ns_[0],
        "ip link set " + veth_[1] + " netns " + ns_[1],
        in(0, "ip addr add 10.231.0.1/24 dev " + veth_[0]),
        in(1, "ip addr add 10.231.0.2/24 dev " + veth_[1]),
        in(0, "ip link set lo up"),
        in(1, "ip link set lo up"),
        in(0, "ip link set " + veth_[0] + " up"),
        in(1, "ip link set " + veth_[1] + " up"),
    };
    for (const auto& s : steps) {
      auto r = run(s + " 2>&1", 20);
      if (r.status != 0) {
        error_ = s + ": " + r.output;
        return;
      }
    }
  }
  ~TwoNamespaces() {
    // Whatever is left in them first, then the namespaces (the veth pair goes with them).
    for (const auto& ns : ns_) {
      run("ip netns pids " + ns + " 2>/dev/null | xargs -r kill -9", 10);
      run("ip netns del " + ns + " 2>/dev/null", 10);
    }
    run("ip link del " + veth_[0] + " 2>/dev/null", 10);
  }
  const std::string& error() const { return error_; }
  std::string in(int node, const std::string& cmd) const {
    return "ip netns exec " + ns_[static_cast<size_t>(node)] + " " + cmd;
  }
  void link(bool up) const {
    auto r = run(in(0, "ip link set " + veth_[0] + (up ? " up" : " down")), 10);
    EXPECT_EQ(r.status, 0) << r.output;
  }

 private:
  std::array<std::string, 2> ns_, veth_;
  std::string error_;
};

// Starts node `node`'s launcher in the background; its output goes to dir/node<N>.log
// and its exit status to dir/node<N>.rc.
void start_node(const TwoNamespaces& net, int node, const std::string& dir,
                const std::string& launch_args, const std::string& train_args) {
  const std::string base = dir + "/node" + std::to_string(node);
  const std::string launch =
      strata_bin() + " launch --nnodes 2 --node-rank " + std::to_string(node) +
      " --nproc-per-node 2 --master-addr 10.231.0.1 --master-port 29731 " + launch_args + " -- " +
      strata_bin() + " train --logging.run_dir=" + dir + " " + kCommon + train_args;
  const std::string cmd = "(" + net.in(node, launch) + " > " + base + ".log 2>&1; echo $? > " +
                          base + ".rc.tmp; mv " + base + ".rc.tmp " + base + ".rc) &";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
}

// Waits until `pred` holds (polling every 50 ms) or `limit_s` passes.
template <class Pred>
bool wait_for(Pred pred, double limit_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Both nodes' exit statuses, once both have ended (-1: still running at the limit).
std::array<int, 2> wait_nodes(const std::string& dir, double limit_s) {
  std::array<int, 2> rc{-1, -1};
  wait_for([&] { return fs::exists(dir + "/node0.rc") && fs::exists(dir + "/node1.rc"); }, limit_s);
  for (int n = 0; n < 2; ++n) {
    const std::string p = dir + "/node" + std::to_string(n) + ".rc";
    if (fs::exists(p)) rc[static_cast<size_t>(n)] = std::stoi(slurp(p));
  }
  return rc;
}

std::string both_logs(const std::string& dir) {
  return "node 0:\n" + slurp(dir + "/node0.log") + "\nnode 1:\n" + slurp(dir + "/node1.log");
}

const std::vector<double>& four_local_ranks() {
  static const std::vector<double> ref =
      read_losses(train_ok("2n-ref", "--nproc 4 " + kCommon) + "/metrics.jsonl");
  return ref;
}

}  // namespace

TEST(TwoNodes, RunOverAVethPairMatchesFourLocalRanksAndSurvivesTheLinkGoingDown) {
  TwoNamespaces net;
  if (!net.error().empty())
    GTEST_SKIP() << "network namespaces cannot be created here (needs root with "
                    "CAP_NET_ADMIN and iproute2): "
                 << net.error();
  const auto& ref = four_local_ranks();
  ASSERT_EQ(ref.size(), 40u);

  // 1. A clean run: the losses of 4 local ranks, bit for bit (the same ring, other sockets).
  const std::string dir = temp_dir("2n-clean");
  start_node(net, 0, dir, "", "");
  start_node(net, 1, dir, "", "");
  auto rc = wait_nodes(dir, 240);
  ASSERT_EQ(rc[0], 0) << both_logs(dir);
  ASSERT_EQ(rc[1], 0) << both_logs(dir);
  const auto got = read_losses(dir + "/metrics.jsonl");
  ASSERT_EQ(got.size(), 40u);
  for (size_t i = 0; i < 40; ++i) EXPECT_EQ(got[i], ref[i]) << "step " << i + 1;

  // 2. The link goes down after step 8: both nodes stop every rank within the timeout
  // (5 s), each naming the collective and the ranks on the other node; with one
  // restart allowed they wait for the link, resume from the checkpoint and finish.
  const std::string dir2 = temp_dir("2n-link");
  for (int n = 0; n < 2; ++n)
    start_node(net, n, dir2, "--max-restarts 1", "--parallel.timeout_s=5");
  ASSERT_TRUE(wait_for([&] { return read_metrics(dir2 + "/metrics.jsonl").size() >= 8; }, 120))
      << both_logs(dir2);
  net.link(false);
  const auto down = std::chrono::steady_clock::now();
  std::array<double, 2> stopped_s{-1, -1};
  const bool both = wait_for(
      [&] {
        for (int n = 0; n < 2; ++n)
          if (stopped_s[static_cast<size_t>(n)] < 0 &&
              slurp(dir2 + "/node" + std::to_string(n) + ".log").find("strata launch: restart 1") !=
                  std::string::npos)
            stopped_s[static_cast<size_t>(n)] =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - down).count();
        return stopped_s[0] >= 0 && stopped_s[1] >= 0;
      },
      30);
  net.link(true);
  ASSERT_TRUE(both) << both_logs(dir2);
  rc = wait_nodes(dir2, 240);
  const std::string logs = both_logs(dir2);
  ASSERT_EQ(rc[0], 0) << logs;
  ASSERT_EQ(rc[1], 0) << logs;
  for (int n = 0; n < 2; ++n) {
    // Within the 5 s timeout (plus the launcher's 0.1 s poll and this test's).
    EXPECT_LE(stopped_s[static_cast<size_t>(n)], 5.5) << "node " << n << "\n" << logs;
    const std::string log = slurp(dir2 + "/node" + std::to_string(n) + ".log");
    const std::string away = n == 0 ? "rank(s) 2,3 on another node" : "rank(s) 0,1 on another node";
    EXPECT_EQ(count_lines_with(log, away), 2) << log;  // the stop, and the restart's cause
    EXPECT_EQ(count_lines_with(log, "restart 1 of 1 after: every rank on this node has waited"), 1)
        << log;
  }
  // Each node's launcher says where its ranks resumed: the same checkpoint.
  std::smatch m;
  const std::string log0 = slurp(dir2 + "/node0.log");
  ASSERT_TRUE(std::regex_search(log0, m, std::regex("restart 1: training resumed at step (\\d+)")))
      << logs;
  EXPECT_EQ(count_lines_with(logs, "restart 1: training resumed at step " + m[1].str()), 2) << logs;
  // Every step once, and the steps after the resume continue the 4-rank run bit for
  // bit (the checkpoint keeps DDP's bucket order: Note [bucket order in checkpoints]).
  const auto got2 = read_losses(dir2 + "/metrics.jsonl");
  ASSERT_EQ(got2.size(), 40u) << logs;
  for (size_t i = 0; i < 40; ++i) EXPECT_EQ(got2[i], ref[i]) << "step " << i + 1;
  EXPECT_EQ(run("pgrep -f '[l]ogging.run_dir=" + dir2 + "'", 10).output, "")
      << "a rank was left running";
}
