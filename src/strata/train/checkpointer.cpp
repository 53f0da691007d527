#include "strata/train/checkpointer.h"

#include <ATen/ATen.h>

#include <filesystem>

#include "strata/core/errors.h"
#include "strata/core/logging.h"
#include "strata/distributed/heartbeat.h"
#include "strata/memory/tracking_allocator.h"
#include "strata/train/checkpoint.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// A host copy the step can no longer change (pinned memory from a device).
at::Tensor host_copy(const at::Tensor& t) {
  const at::Tensor d = t.detach();
  if (d.device().is_cpu()) return d.clone(at::MemoryFormat::Contiguous);
  at::Tensor out = at::empty(d.sizes(), d.options().device(at::kCPU).pinned_memory(true));
  out.copy_(d);
  return out;
}

}  // namespace

Checkpointer::Checkpointer(Options o, Comm& world, c10::intrusive_ptr<c10d::Store> store)
    : o_(std::move(o)), world_(world), store_(std::move(store)) {}

Checkpointer::~Checkpointer() {
  try {
    wait();
  } catch (const std::exception& e) {
    log_line(LogLevel::kWarn, e.what());
  }
}

std::string Checkpointer::tmp_dir(int64_t step) const {
  return o_.root + "/" + checkpoint_dir_name(step) + ".tmp";
}

void Checkpointer::write(int64_t step, const std::vector<TensorPiece>& pieces) {
  const bool fault =
      o_.fault && o_.fault->kind == FaultKind::kKillInWrite && o_.fault->step == step;
  write_shard(tmp_dir(step), o_.rank, pieces, [&](size_t i) {
    heartbeat::tick();
    if (fault && i == pieces.size() / 2) trigger_fault(*o_.fault);
  });
}

nlohmann::json Checkpointer::save(int64_t step, const std::vector<Stateful*>& components,
                                  const nlohmann::json& meta) {
  const auto t0 = Clock::now();
  const int64_t base = memory_stats().total;
  reset_memory_peaks();
  if (!o_.async) {
    // Every rank writes its own pieces; nobody gathers (Note [component state]).
    std::vector<TensorPiece> pieces;
    for (Stateful* c : components) c->save_state(pieces);
    if (o_.rank == 0) std::filesystem::create_directories(tmp_dir(step));
    world_.barrier();
    write(step, pieces);
    pieces.clear();
    world_.barrier();
    if (o_.rank == 0) finalize_checkpoint(o_.root, step, meta, o_.keep);
    world_.barrier();
    return {{"ms", ms_since(t0)}, {"mem_before", base}, {"mem_peak", memory_stats().total_peak}};
  }
  wait();  // the previous save: at most one in flight
  const double wait_ms = ms_since(t0);
  const auto t1 = Clock::now();
  std::vector<TensorPiece> pieces;
  int64_t bytes = 0;
  {
    MemoryScope scope(Category::kOther);
    for (Stateful* c : components) c->save_state(pieces);
    for (TensorPiece& p : pieces) {
      p.tensor = host_copy(p.tensor);
      bytes += static_cast<int64_t>(p.tensor.nbytes());
    }
  }
  const double copy_ms = ms_since(t1);
  const auto started = Clock::now();
  writer_ = std::thread([this, step, meta, bytes, started, pieces = std::move(pieces)]() mutable {
    try {
      const std::string key = "strata/checkpoint/" + std::to_string(step);
      write(step, pieces);  // write_shard makes the folder
      pieces.clear();
      store_->add(key, 1);
      if (o_.rank == 0) {
        // Every rank's shard is on disk before the folder gets its real name.
        const auto deadline = Clock::now() + o_.timeout;
        while (store_->add(key, 0) < o_.world_size) {
          STRATA_CHECK(Clock::now() < deadline, "checkpoint of step ", step, ": only ",
                       store_->add(key, 0), " of ", o_.world_size, " ranks wrote their shard in ",
                       o_.timeout.count() / 1000.0, " s; see the other ranks' output");
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        finalize_checkpoint(o_.root, step, meta, o_.keep);
      }
      std::lock_guard<std::mutex> lock(mu_);
      written_ = nlohmann::json{{"step", step}, {"write_ms", ms_since(started)}, {"bytes", bytes}};
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = c10::str("background checkpoint of step ", step, " failed: ", e.what());
    }
  });
  return {{"ms", ms_since(t0)}, {"async", true},      {"wait_ms", wait_ms},
          {"copy_ms", copy_ms}, {"mem_before", base}, {"mem_peak", memory_stats().total_peak}};
}

std::optional<nlohmann::json> Checkpointer::take_written() {
  std::lock_guard<std::mutex> lock(mu_);
  auto out = std::move(written_);
  written_.reset();
  return out;
}

void Checkpointer::wait() {
  if (writer_.joinable()) writer_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_.empty()) {
    const std::string e = std::move(error_);
    error_.clear();
    STRATA_FAIL(e);
  }
}

}  // namespace strata
