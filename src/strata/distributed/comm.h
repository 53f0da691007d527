#pragma once
#include <ATen/Tensor.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace strata {

// Per-process totals of communication, summed by the trainer per step. Bytes are
// the full tensor of each op (an all-reduce's tensor, an all-gather's output, a
// reduce-scatter's input), so a reduce-scatter plus an all-gather of a tensor count
// what one all-reduce of it counts twice, and move the same bytes over a ring.
struct CommCount {
  double ms = 0;
  int64_t bytes = 0;
  int64_t count = 0;
  void add(double m, int64_t b) {
    ms += m;
    bytes += b;
    count += 1;
  }
};
struct CommTotals : CommCount {
  // axis ("dp", "tp", ...) -> op ("all_reduce", ...) -> its totals
  std::map<std::string, std::map<std::string, CommCount>> by_axis;
};
// Thread-safe accumulator; take() returns the totals since the last take().
class CommStats {
 public:
  static CommStats& get();
  void add(const std::string& axis, const std::string& op, double ms, int64_t bytes);
  CommTotals take();

 private:
  std::mutex mu_;
  CommTotals totals_;
};

// A pending collective. wait() enforces the timeout, converts a c10d failure into a
// strata::CommError naming the op, axis and rank, and records the trace.
class CommWork {
 public:
  CommWork() = default;  // already complete (a group of one)
  CommWork(c10::intrusive_ptr<c10d::Work> work, std::string op, std::string axis, int64_t rank,
           int64_t bytes, std::chrono::milliseconds timeout, int64_t seq = 0,
           std::string group = "");
  void wait();
  bool done() const { return !work_; }
  // Records the moment the backend finishes the collective (from its own thread), so
  // overlap with computation can be measured; call right after launching.
  void track_completion();
  std::chrono::steady_clock::time_point started_at() const { return start_; }
  // After wait(): when the collective completed (the wait's return when untracked).
  std::chrono::steady_clock::time_point completed_at() const;

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string op_, axis_;
  int64_t rank_ = 0, bytes_ = 0;
  std::chrono::milliseconds timeout_{0};
  int64_t seq_ = 0;    // its number among this axis's collectives (Note [heartbeat])
  std::string group_;  // the group's global ranks, "0,1,2,3", for the error line
  std::chrono::steady_clock::time_point start_, end_;
  std::shared_ptr<std::atomic<int64_t>> done_ns_;
};

// A collective failed or timed out: usually another rank died.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The collectives Strata uses, over one process group (one axis of the mesh).
// Every op is asynchronous with a wait handle; the blocking helpers wait at once.
// STRATA_COMM_DEBUG=INFO logs op, axis, bytes and milliseconds of each.
class Comm {
 public:
  Comm() = default;  // a group of one: every op is a no-op
  Comm(c10::intrusive_ptr<c10d::Backend> pg, std::string axis, int64_t rank, int64_t size,
       std::vector<int64_t> global_ranks, std::chrono::milliseconds timeout);

  int64_t rank() const { return rank_; }
  int64_t size() const { return size_; }
  const std::string& axis() const { return axis_; }
  // The c10d backend's name ("gloo", "nccl"; "self" for a group of one).
  std::string backend() const { return pg_ ? pg_->getBackendName() : "self"; }
  // Global rank of group member i.
  int64_t global_rank(int64_t i) const { return global_ranks_.empty() ? 0 : global_ranks_.at(i); }

  CommWork all_reduce(at::Tensor& t, c10d::ReduceOp op = c10d::ReduceOp::SUM);
  // out has numel(in) / size elements; in is the concatenation of size chunks.
  CommWork reduce_scatter(at::Tensor& out, at::Tensor& in, c10d::ReduceOp op = c10d::ReduceOp::SUM);
  // out has size * numel(in) elements, rank i's input at chunk i.
  CommWork all_gather(at::Tensor& out, at::Tensor& in);
  CommWork broadcast(at::Tensor& t, int64_t root);
  CommWork send(at::Tensor& t, int64_t dst, int tag = 0);
  CommWork recv(at::Tensor& t, int64_t src, int tag = 0);
  void barrier();

 private:
  CommWork wrap(c10::intrusive_ptr<c10d::Work> w, const char* op, int64_t bytes);
  c10::intrusive_ptr<c10d::Backend> pg_;
  std::string axis_ = "self";
  int64_t rank_ = 0, size_ = 1;
  std::vector<int64_t> global_ranks_;
  std::chrono::milliseconds timeout_{60000};
  int64_t seq_ = 0;    // collectives issued on this group
  std::string group_;  // global ranks of the members, "0,2"
};

}  // namespace strata
