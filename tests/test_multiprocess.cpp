// Ranks as real processes on loopback, started through `strata launch`.
#include <gtest/gtest.h>

#include <regex>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "test_util.h"

using namespace strata::test;

namespace {
std::string launch(int n, const std::string& cmd) {
  return strata_bin() + " launch --nproc-per-node " + std::to_string(n) +
         " --master-port auto -- " + cmd;
}
}  // namespace

TEST(MultiProcess, CollectivesOnTwoRanks) {
  auto r = run(launch(2, comm_worker_bin() + " collectives"), 120);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "all collectives correct"), 2) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "[rank 1] "), 1) << r.output;  // prefixed output
}

TEST(MultiProcess, CollectivesOnFourRanksWithDpTpMesh) {
  auto r = run(launch(4, comm_worker_bin() + " collectives 2 2"), 180);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count_lines_with(r.output, "all collectives correct"), 4) << r.output;
  r = run(launch(4, comm_worker_bin() + " collectives 4 1"), 180);
  EXPECT_EQ(r.status, 0) << r.output;
}

TEST(MultiProcess, PipelineExecutorRunsEverySchedulesListsAsOneProcess) {
  // Note [pipeline executor]: one step of a GPT cut into stages, real sends and
  // receives between the ranks, each part's gradients equal to the whole model's
  // (1e-5): GPipe and 1F1B at p=2 and p=4, interleaved with 2 chunks per rank.
  for (const auto& [ranks, args] :
       std::vector<std::pair<int, std::string>>{{2, "gpipe 4 1"},
                                                {2, "1f1b 4 1"},
                                                {2, "interleaved 4 2"},
                                                {4, "1f1b 6 1"},
                                                {4, "interleaved 8 2"}}) {
    auto r = run(launch(ranks, comm_worker_bin() + " pipeline " + args), 180);
    EXPECT_EQ(r.status, 0) << args << "\n" << r.output;
    EXPECT_EQ(count_lines_with(r.output, "pipeline step correct"), ranks) << args << r.output;
  }
}

TEST(MultiProcess, KilledRankStopsTheOthersThroughTheLauncher) {
  auto r = run(launch(3, comm_worker_bin() + " die"), 60);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("strata launch: rank 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("was killed by SIGKILL"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 15.0) << r.output;
}

TEST(MultiProcess, KilledRankFailsTheCollectiveWithoutALauncher) {
  // No supervisor: the survivors must see the failure through c10d (timeout 5 s).
  const std::string port = std::to_string(29400 + getpid() % 500);
  std::string env = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " WORLD_SIZE=2 ";
  std::string cmd = "sh -c '" + env + "RANK=1 " + comm_worker_bin() + " die & " + env + "RANK=0 " +
                    comm_worker_bin() + " die; echo rank0_status=$?; wait'";
  auto r = run(cmd, 60);
  EXPECT_NE(r.output.find("rank0_status=3"), std::string::npos) << r.output;
  // The op, its number on the axis, and the group's ranks (the peer it lost).
  EXPECT_TRUE(
      std::regex_search(r.output, std::regex("all_reduce #[0-9]+ on axis world \\(ranks 0,1;")))
      << r.output;
  EXPECT_NE(r.output.find("another rank probably exited"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 20.0) << r.output;
}

TEST(MultiProcess, PortInUseIsOneClearLine) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  listen(fd, 1);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  auto r = run(strata_bin() + " launch --nproc-per-node 2 --master-port " + std::to_string(port) +
                   " -- true",
               30);
  close(fd);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("error: master port " + std::to_string(port) +
                          " on 127.0.0.1 is already in use"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(count_lines_with(r.output, "error"), 1) << r.output;
}

namespace {
// A bash script that starts a local 2-rank run in `dir`, waits for its first step,
// prints "LISTEN <hex address:port>" for every listening TCP socket its processes hold
// (/proc/net/tcp{,6}), runs `then` (with $ports the listening ports in decimal), and
// waits for the run, printing "exit <status>".
std::string listeners_script(const std::string& dir, int steps, const std::string& then) {
  return train_command(dir, "--nproc 2 --training.steps=" + std::to_string(steps) +
                                " --model.seq_len=32 --checkpoint.save_final=false") +
         " >" + dir +
         "/log 2>&1 & run=$!\n"
         "for i in $(seq 300); do [ -s " +
         dir +
         "/metrics.jsonl ] && break; sleep 0.1; done\n"
         "for pid in $(pgrep -f 'run_dir=" +
         dir +
         " '); do ls -l /proc/$pid/fd 2>/dev/null; done |"
         " sed -n 's/.*socket:\\[\\([0-9]*\\)\\]/\\1/p' | sort -u > " +
         dir +
         "/inodes\n"
         "listeners=$(awk 'FNR>1 && $4==\"0A\" {print $10, $2}' /proc/net/tcp /proc/net/tcp6 |"
         " while read inode addr; do grep -qx \"$inode\" " +
         dir +
         "/inodes && echo $addr; done)\n"
         "for a in $listeners; do echo \"LISTEN $a\"; done\n"
         "ports=$(for a in $listeners; do echo $((16#${a##*:})); done)\n" +
         then + "\nwait $run; echo \"exit $?\"\n";
}

RunResult run_script(const std::string& dir, const std::string& script) {
  std::ofstream(dir + "/scan.sh") << script;
  return run("bash " + dir + "/scan.sh", 120);
}
}  // namespace

TEST(MultiProcess, NothingListensBeyondLoopbackInALocalRun) {
  // Note [store binds the master address]: while a local 2-rank run trains, every
  // listening TCP socket its processes hold (the rendezvous store, Gloo's) is bound to
  // 127.0.0.1 (hex 0100007F in /proc/net/tcp) or ::1, not to every interface.
  const std::string dir = temp_dir("listen");
  auto r = run_script(dir, listeners_script(dir, 400, "kill $run"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("LISTEN "), std::string::npos) << "no listener found:\n" << r.output;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("LISTEN ", 0) != 0) continue;
    const std::string addr = line.substr(7, line.find(':') - 7);
    EXPECT_TRUE(addr == "0100007F" || addr == "00000000000000000000000001000000") << line;
  }
}

TEST(MultiProcess, StrangersOnTheStoreAndGlooPortsNeitherCrashNorHangTheRun) {
  // Connections to every listening port of a training run, one sending 2 KiB of random
  // bytes and one connecting and staying silent until the run is over: the run
  // finishes all its steps and exits 0 (bounded by run()'s limit).
  const std::string dir = temp_dir("strangers");
  const std::string poke =
      "python3 - $ports <<'PY' &\n"
      "import os, socket, sys, time\n"
      "held = []\n"
      "for p in sys.argv[1:]:\n"
      "    g = socket.create_connection(('127.0.0.1', int(p)), timeout=2)\n"
      "    g.sendall(os.urandom(2048))\n"
      "    held += [g, socket.create_connection(('127.0.0.1', int(p)), timeout=2)]\n"
      "print('POKED', len(held) // 2, flush=True)\n"
      "time.sleep(30)\n"
      "PY\n"
      "poker=$!";
  auto r = run_script(dir, listeners_script(dir, 100, poke) + "kill $poker 2>/dev/null; true\n");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("POKED "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("POKED 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exit 0"), std::string::npos) << r.output;
  EXPECT_EQ(read_metrics(dir + "/metrics.jsonl").size(), 100u);
}

TEST(MultiProcess, LauncherReportsExitStatusAndRunsMpiStyleRanks) {
  auto r = run(launch(2, "sh -c 'exit $((RANK * 5))'"), 30);
  EXPECT_EQ(r.status, 5) << r.output;
  EXPECT_NE(r.output.find("rank 1 (pid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exited with status 5"), std::string::npos) << r.output;
  // A rank started by mpirun reads OMPI_COMM_WORLD_*; one rank of one needs no peers.
  r = run("env OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1 " + comm_worker_bin() + " collectives",
          30);
  EXPECT_EQ(r.status, 0) << r.output;
}
