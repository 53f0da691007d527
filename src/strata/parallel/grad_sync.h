#pragma once
#include <ATen/Tensor.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "strata/core/state.h"
#include "strata/optim/adamw.h"

namespace strata {

class Comm;

// Note [GradSync]: how a rank's gradients become the data-parallel average, as one
// interface that DDP, each ZeRO stage and the local no-op implement. The trainer and
// the schedules see data parallelism only through it (as Megatron's schedules see it
// only through no_sync and finalize functions):
//   for each micro-batch: set_sync(last), loss = forward(f), backward
//   finalize(); grad_norm_squared(); optimizer step; zero_grad()
class GradSync : public Stateful {
 public:
  // One line for the startup table.
  virtual std::string describe() const = 0;
  // Runs one micro-batch's forward f (which returns what will be back-propagated)
  // with the hooks the strategy needs around it (DDP's buffer broadcast and unused
  // parameter search, ZeRO-3's gathers).
  virtual at::Tensor forward(const std::function<at::Tensor()>& f) { return f(); }
  // false: the next backward only accumulates locally (DDP's no_sync, ZeRO-1's
  // deferred reduction); true: it reduces. Set before every micro-batch.
  virtual void set_sync(bool sync) = 0;
  // After the last micro-batch's backward: every reduction has landed (DDP and ZeRO
  // finish theirs in backward's final callback already, so this checks that).
  virtual void finalize() {}
  // Squared global norm of the averaged gradients (all-reduced where sharded).
  virtual double grad_norm_squared() = 0;
  // After the optimizer step.
  virtual void zero_grad() = 0;
  // This step's figures for the metrics line, as {"key": {...}} (null: none); resets.
  virtual nlohmann::json stats() { return nullptr; }
  // For tests (Note [injected overflow]): an inf in this rank's first gradient element.
  virtual void inject_inf() = 0;
  // No state of their own today (PowerSGD's error feedback restarts at zero).
  void save_state(std::vector<TensorPiece>&) override {}
  void load_state(const PieceReader&) override {}
};

// A GradSync that adds to another (model parallelism around data parallelism): every
// call goes to the inner one; subclasses override what they add.
class WrappedGradSync : public GradSync {
 public:
  explicit WrappedGradSync(std::unique_ptr<GradSync> inner) : inner_(std::move(inner)) {}
  std::string describe() const override { return inner_->describe(); }
  at::Tensor forward(const std::function<at::Tensor()>& f) override { return inner_->forward(f); }
  void set_sync(bool sync) override { inner_->set_sync(sync); }
  void finalize() override { inner_->finalize(); }
  double grad_norm_squared() override { return inner_->grad_norm_squared(); }
  void zero_grad() override { inner_->zero_grad(); }
  nlohmann::json stats() override { return inner_->stats(); }
  void inject_inf() override { inner_->inject_inf(); }
  void save_state(std::vector<TensorPiece>& out) override { inner_->save_state(out); }
  void load_state(const PieceReader& in) override { inner_->load_state(in); }

 protected:
  // The squared gradient norm summed over `axis`: this rank's part is params' (each
  // weighed by its norm_weight), or with no params the inner sync's own (ZeRO weighs
  // its shards and sums them over dp).
  double norm_squared_summed_over(Comm& axis, const std::vector<NamedParam>& params);

  std::unique_ptr<GradSync> inner_;
};

// dp = 1 without ZeRO: gradients live in .grad buffers allocated once (Note [gradient
// buffers]) and are zeroed in place.
class LocalGradSync : public GradSync {
 public:
  explicit LocalGradSync(std::vector<NamedParam> params);
  std::string describe() const override { return "local (dp=1): gradients stay on the rank"; }
  void set_sync(bool) override {}
  double grad_norm_squared() override;
  void zero_grad() override;
  void inject_inf() override;

 private:
  std::vector<NamedParam> params_;
};

}  // namespace strata
