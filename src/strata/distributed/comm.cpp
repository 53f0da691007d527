#include "strata/distributed/comm.h"

#include <ATen/ATen.h>

#include "strata/core/env.h"
#include "strata/core/errors.h"
#include "strata/core/logging.h"
#include "strata/distributed/heartbeat.h"

namespace strata {

CommStats& CommStats::get() {
  static CommStats stats;
  return stats;
}

void CommStats::add(const std::string& axis, const std::string& op, double ms, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  totals_.add(ms, bytes);
  totals_.by_axis[axis][op].add(ms, bytes);
}

CommTotals CommStats::take() {
  std::lock_guard<std::mutex> lock(mu_);
  CommTotals out = totals_;
  totals_ = {};
  return out;
}

namespace {
bool comm_debug() {
  static const bool on = [] {
    auto v = get_env("STRATA_COMM_DEBUG");
    return v && (*v == "INFO" || *v == "info" || *v == "DEBUG" || *v == "1");
  }();
  return on;
}
int64_t nbytes(const at::Tensor& t) {
  return static_cast<int64_t>(t.nbytes());
}
}  // namespace

CommWork::CommWork(c10::intrusive_ptr<c10d::Work> work, std::string op, std::string axis,
                   int64_t rank, int64_t bytes, std::chrono::milliseconds timeout, int64_t seq,
                   std::string group)
    : work_(std::move(work)),
      op_(std::move(op)),
      axis_(std::move(axis)),
      rank_(rank),
      bytes_(bytes),
      timeout_(timeout),
      seq_(seq),
      group_(std::move(group)),
      start_(std::chrono::steady_clock::now()) {}

void CommWork::wait() {
  if (!work_) return;
  auto work = std::move(work_);
  auto elapsed = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
        .count();
  };
  try {
    heartbeat::Waiting waiting(op_, axis_, seq_, group_);
    work->wait(timeout_);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    msg = msg.substr(0, msg.find('\n'));
    throw CommError(c10::str(op_, " #", seq_, " on axis ", axis_, " (ranks ", group_, "; ", bytes_,
                             " bytes) failed on ", axis_, " rank ", rank_, " after ",
                             static_cast<int64_t>(elapsed()), " ms (timeout ",
                             timeout_.count() / 1000.0, " s): ", msg,
                             "; another rank probably exited or hung, see its output"));
  }
  end_ = std::chrono::steady_clock::now();
  double ms = elapsed();
  CommStats::get().add(axis_, op_, ms, bytes_);
  if (comm_debug())
    log_line(LogLevel::kInfo,
             c10::str("[comm] ", op_, " axis=", axis_, " bytes=", bytes_, " ms=", ms));
}

void CommWork::track_completion() {
  if (!work_) return;
  done_ns_ = std::make_shared<std::atomic<int64_t>>(0);
  try {
    auto fut = work_->getFuture();
    std::weak_ptr<std::atomic<int64_t>> slot = done_ns_;
    fut->addCallback([slot](c10::ivalue::Future&) {
      if (auto s = slot.lock())
        s->store(std::chrono::steady_clock::now().time_since_epoch().count());
    });
  } catch (const std::exception&) {
    done_ns_.reset();  // backend without futures: completion = return of wait()
  }
}

std::chrono::steady_clock::time_point CommWork::completed_at() const {
  if (done_ns_) {
    const int64_t ns = done_ns_->load();
    if (ns != 0)
      return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(ns));
  }
  return end_ == std::chrono::steady_clock::time_point{} ? start_ : end_;
}

Comm::Comm(c10::intrusive_ptr<c10d::Backend> pg, std::string axis, int64_t rank, int64_t size,
           std::vector<int64_t> global_ranks, std::chrono::milliseconds timeout)
    : pg_(std::move(pg)),
      axis_(std::move(axis)),
      rank_(rank),
      size_(size),
      global_ranks_(std::move(global_ranks)),
      timeout_(timeout),
      group_(c10::Join(",", global_ranks_)) {}

CommWork Comm::wrap(c10::intrusive_ptr<c10d::Work> w, const char* op, int64_t bytes) {
  return CommWork(std::move(w), op, axis_, rank_, bytes, timeout_, ++seq_, group_);
}

CommWork Comm::all_reduce(at::Tensor& t, c10d::ReduceOp op) {
  if (size_ == 1) return {};
  std::vector<at::Tensor> ts{t};
  c10d::AllreduceOptions o;
  o.reduceOp = op;
  o.timeout = timeout_;
  return wrap(pg_->allreduce(ts, o), "all_reduce", nbytes(t));
}

CommWork Comm::reduce_scatter(at::Tensor& out, at::Tensor& in, c10d::ReduceOp op) {
  STRATA_ASSERT(in.numel() == out.numel() * size_, "reduce_scatter sizes ", in.numel(), " vs ",
                out.numel(), " x ", size_);
  if (size_ == 1) {
    out.copy_(in.view_as(out));
    return {};
  }
  c10d::ReduceScatterOptions o;
  o.reduceOp = op;
  o.timeout = timeout_;
  // Note [torch 2.11 to 2.15]: the flat collectives are `_reduce_scatter_base` and
  // `_allgather_base` in every supported torch; 2.15 adds `reduce_scatter_single` /
  // `all_gather_single` and keeps these as the overridable entry points.
  return wrap(pg_->_reduce_scatter_base(out, in, o), "reduce_scatter", nbytes(in));
}

CommWork Comm::all_gather(at::Tensor& out, at::Tensor& in) {
  STRATA_ASSERT(out.numel() == in.numel() * size_, "all_gather sizes ", out.numel(), " vs ",
                in.numel(), " x ", size_);
  if (size_ == 1) {
    out.view_as(in).copy_(in);
    return {};
  }
  c10d::AllgatherOptions o;
  o.timeout = timeout_;
  return wrap(pg_->_allgather_base(out, in, o), "all_gather",
              nbytes(out));  // Note [torch 2.11 to 2.15]
}

CommWork Comm::broadcast(at::Tensor& t, int64_t root) {
  if (size_ == 1) return {};
  std::vector<at::Tensor> ts{t};
  c10d::BroadcastOptions o;
  o.rootRank = root;
  o.timeout = timeout_;
  return wrap(pg_->broadcast(ts, o), "broadcast", nbytes(t));
}

CommWork Comm::send(at::Tensor& t, int64_t dst, int tag) {
  STRATA_ASSERT(size_ > 1 && dst != rank_, "send to self");
  std::vector<at::Tensor> ts{t};
  return wrap(pg_->send(ts, static_cast<int>(dst), tag), "send", nbytes(t));
}

CommWork Comm::recv(at::Tensor& t, int64_t src, int tag) {
  STRATA_ASSERT(size_ > 1 && src != rank_, "recv from self");
  std::vector<at::Tensor> ts{t};
  return wrap(pg_->recv(ts, static_cast<int>(src), tag), "recv", nbytes(t));
}

void Comm::barrier() {
  if (size_ == 1) return;
  c10d::BarrierOptions o;
  o.timeout = timeout_;
  wrap(pg_->barrier(o), "barrier", 0).wait();
}

}  // namespace strata
