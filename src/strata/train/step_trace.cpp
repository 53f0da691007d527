#include "strata/train/step_trace.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "strata/core/errors.h"

namespace strata {

namespace {
constexpr int64_t kFields = 5;  // type, micro, chunk, start, end
}  // namespace

StepTimeline gather_step_timeline(Comm& pp, const std::vector<TimedAction>& mine, double span_s) {
  std::vector<TimedAction> compute;
  for (const TimedAction& t : mine)
    if (t.action.is_compute()) compute.push_back(t);
  StepTimeline out;
  if (pp.size() == 1) {
    out.ranks = {compute};
    out.span = {span_s};
    return out;
  }
  // Row 0 carries the span; every rank has the same number of compute actions.
  const auto n = static_cast<int64_t>(compute.size());
  at::Tensor local = at::zeros({n + 1, kFields}, at::kDouble);
  auto a = local.accessor<double, 2>();
  a[0][0] = span_s;
  for (int64_t i = 0; i < n; ++i) {
    const TimedAction& t = compute[static_cast<size_t>(i)];
    a[i + 1][0] = static_cast<double>(t.action.type);
    a[i + 1][1] = static_cast<double>(t.action.micro);
    a[i + 1][2] = static_cast<double>(t.action.chunk);
    a[i + 1][3] = t.start;
    a[i + 1][4] = t.end;
  }
  at::Tensor all = at::empty({pp.size() * (n + 1), kFields}, at::kDouble);
  pp.all_gather(all, local).wait();
  auto g = all.accessor<double, 2>();
  for (int64_t r = 0; r < pp.size(); ++r) {
    const int64_t base = r * (n + 1);
    out.span.push_back(g[base][0]);
    std::vector<TimedAction> actions;
    for (int64_t i = 1; i <= n; ++i) {
      Action act{static_cast<ActionType>(static_cast<int>(g[base + i][0])),
                 static_cast<int64_t>(g[base + i][1]), static_cast<int64_t>(g[base + i][2])};
      actions.push_back({act, g[base + i][3], g[base + i][4]});
    }
    out.ranks.push_back(std::move(actions));
  }
  return out;
}

nlohmann::json step_timeline_json(const StepTimeline& t,
                                  const std::vector<StageActions>& schedule) {
  std::vector<double> busy_ms, span_ms;
  double busy = 0, longest = 0;
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    double b = 0;
    for (const TimedAction& a : t.ranks[r]) b += a.end - a.start;
    busy += b;
    longest = std::max(longest, t.span[r]);
    busy_ms.push_back(b * 1e3);
    span_ms.push_back(t.span[r] * 1e3);
  }
  const double total = longest * static_cast<double>(t.ranks.size());
  const Simulation predicted = simulate_schedule(schedule, measured_costs(t.ranks));
  return {{"bubble", total > 0 ? 1 - busy / total : 0.0},
          {"busy_ms", busy_ms},
          {"span_ms", span_ms},
          {"predicted_ms", predicted.error.empty() ? predicted.step_time * 1e3 : NAN}};
}

}  // namespace strata
