// Pipeline schedules as data (parallel/pipeline/schedule): the degenerate one-stage
// schedule and the invariants check_schedule enforces on any schedule.
#include <gtest/gtest.h>

#include "strata/parallel/pipeline/schedule.h"

using namespace strata;

TEST(Schedule, SingleStageAlternatesForwardAndBackward) {
  const auto s = single_stage_schedule(3);
  ASSERT_EQ(s.size(), 1u);
  std::string text;
  for (const auto& a : s[0]) text += a.to_string() + " ";
  EXPECT_EQ(text, "0F0 0B0 0F1 0B1 0F2 0B2 ");
  const ScheduleCheck c = check_schedule(s, 3);
  EXPECT_EQ(c.error, "");
  EXPECT_EQ(c.max_in_flight, 1);  // one micro-batch's activations at a time
}

TEST(Schedule, CheckFindsBrokenSchedules) {
  using A = Action;
  const auto F = ActionType::kForward, B = ActionType::kBackward;
  EXPECT_NE(check_schedule({{A{B, 0}, A{F, 0}}}, 1).error.find("0B0 comes before its forward"),
            std::string::npos);
  EXPECT_NE(check_schedule({{A{F, 0}, A{F, 0}}}, 1).error.find("second forward"),
            std::string::npos);
  EXPECT_NE(check_schedule({{A{F, 0}, A{B, 0}}}, 2).error.find("0B1 never runs"),
            std::string::npos);
  EXPECT_NE(check_schedule({{A{F, 2}}}, 2).error.find("names no micro-batch"), std::string::npos);
  // GPipe-style: all forwards, then all backwards: valid, everything in flight.
  const ScheduleCheck g =
      check_schedule({{A{F, 0}, A{F, 1}, A{F, 2}, A{B, 2}, A{B, 1}, A{B, 0}}}, 3);
  EXPECT_EQ(g.error, "");
  EXPECT_EQ(g.max_in_flight, 3);
}
