#include "strata/parallel/pipeline/schedule.h"

#include <map>
#include <utility>

namespace strata {

std::string Action::to_string() const {
  return std::to_string(chunk) + (type == ActionType::kForward ? "F" : "B") + std::to_string(micro);
}

std::vector<StageActions> single_stage_schedule(int64_t micro_batches) {
  StageActions a;
  for (int64_t m = 0; m < micro_batches; ++m) {
    a.push_back({ActionType::kForward, m, 0});
    a.push_back({ActionType::kBackward, m, 0});
  }
  return {a};
}

ScheduleCheck check_schedule(const std::vector<StageActions>& schedule, int64_t micro_batches,
                             int64_t chunks) {
  ScheduleCheck out;
  for (size_t s = 0; s < schedule.size(); ++s) {
    std::map<std::pair<int64_t, int64_t>, int> state;  // (chunk, micro) -> 0 none, 1 F, 2 B
    int64_t in_flight = 0;
    const std::string where = "stage " + std::to_string(s) + ": ";
    for (const Action& a : schedule[s]) {
      if (a.micro < 0 || a.micro >= micro_batches || a.chunk < 0 || a.chunk >= chunks) {
        out.error = where + a.to_string() + " names no micro-batch or chunk of this run";
        return out;
      }
      int& st = state[{a.chunk, a.micro}];
      if (a.type == ActionType::kForward) {
        if (st != 0) {
          out.error = where + a.to_string() + " runs a second forward";
          return out;
        }
        st = 1;
        out.max_in_flight = std::max(out.max_in_flight, ++in_flight);
      } else {
        if (st != 1) {
          out.error = where + a.to_string() +
                      (st == 0 ? " comes before its forward" : " runs a second backward");
          return out;
        }
        st = 2;
        --in_flight;
      }
    }
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t m = 0; m < micro_batches; ++m)
        if (state[{c, m}] != 2) {
          out.error = where + Action{ActionType::kBackward, m, c}.to_string() + " never runs";
          return out;
        }
  }
  return out;
}

}  // namespace strata
