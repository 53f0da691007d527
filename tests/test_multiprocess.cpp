// Ranks as real processes on loopback, started through `strata launch`.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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
  EXPECT_NE(r.output.find("all_reduce on axis world"), std::string::npos) << r.output;
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
