// The planner's layout space (Note [layout space]): every layout enumerated is one
// `strata train` accepts, and the ones it refuses are left out.
#include <gtest/gtest.h>

#include <set>

#include "strata/core/config.h"
#include "strata/plan/layouts.h"
#include "strata/plan/plan.h"

using namespace strata;

namespace {
Config debug_gpt(int64_t batch) {
  Config c;
  c.model.flavour = "debug";  // 4 blocks, 4 heads, d 96, context 128
  c.data.source = "synthetic";
  c.training.batch_size = batch;
  return c;
}
bool has(const std::vector<Layout>& ls, const std::string& s) {
  for (const auto& l : ls)
    if (l.to_string() == s) return true;
  return false;
}
}  // namespace

TEST(Layouts, EveryLayoutStartsAndTheRefusedOnesAreLeftOut) {
  const Config cfg = debug_gpt(16);
  const auto ls = enumerate_layouts(cfg, 4, {});
  std::printf("debug GPT, 4 ranks, batch 16: %zu layouts\n", ls.size());
  ASSERT_GT(ls.size(), 100u);
  std::set<std::string> seen;
  for (const Layout& l : ls) {
    const std::string s = l.to_string();
    EXPECT_TRUE(seen.insert(s).second) << "twice: " << s;
    EXPECT_EQ(l.dp * l.tp * l.pp, 4) << s;
    EXPECT_EQ(16 % (l.micro_batch * l.dp), 0) << s;
    EXPECT_TRUE(!l.offload || l.zero > 0) << s;
    EXPECT_TRUE(!l.sequence_parallel || l.tp > 1) << s;
    if (l.pp > 1) {
      EXPECT_LE(l.zero, 2) << s;
      const int64_t m = 16 / (l.micro_batch * l.dp);
      EXPECT_TRUE(l.schedule == "gpipe" || m >= l.pp) << s << ": fewer micro-batches than stages";
    }
    if (l.schedule == "zb-h1") EXPECT_TRUE(l.dp == 1 && l.tp == 1 && l.zero == 0) << s;
    if (l.pp_virtual > 1) EXPECT_TRUE(l.dp == 1 && l.zero == 0 && l.schedule == "interleaved") << s;
    // Its overrides set exactly the layout.
    Config a = cfg, b = cfg;
    l.apply(a);
    apply_config_args(b, "", l.overrides(), "plan");
    EXPECT_EQ(config_toml(a), config_toml(b)) << s;
    EXPECT_NO_THROW(plan_run(a, 4, {})) << s;
  }
  for (const char* s : {"dp=4 tp=1 pp=1 zero=0 mb=4 recompute=none",
                        "dp=1 tp=4 pp=1 sp zero=3+offload mb=16 recompute=selective",
                        "dp=1 tp=2 pp=2 interleaved v=2 zero=0 mb=4 recompute=full",
                        "dp=1 tp=1 pp=4 zb-h1 zero=0 mb=4 recompute=none",
                        "dp=2 tp=1 pp=2 gpipe zero=2 mb=8 recompute=none"})
    EXPECT_TRUE(has(ls, s)) << s;
  for (const char* s :
       {"dp=2 tp=1 pp=2 1f1b zero=3 mb=4 recompute=none",              // ZeRO-3 with pp
        "dp=2 tp=1 pp=2 zb-h1 zero=0 mb=4 recompute=none",             // zb-h1 with dp
        "dp=1 tp=1 pp=4 1f1b zero=0 mb=16 recompute=none",             // 1 micro-batch
        "dp=1 tp=1 pp=4 interleaved v=2 zero=0 mb=4 recompute=none"})  // 8 > 4 blocks
    EXPECT_FALSE(has(ls, s)) << s;
}

TEST(Layouts, ImageModelsAreDataParallelOnly) {
  Config cfg;
  cfg.model.flavour = "mlp";
  cfg.data.source = "synthetic";
  cfg.training.batch_size = 8;
  const auto ls = enumerate_layouts(cfg, 2, {});
  ASSERT_FALSE(ls.empty());
  for (const Layout& l : ls) {
    EXPECT_EQ(l.dp, 2) << l.to_string();
    EXPECT_NE(l.recompute, "selective") << l.to_string();
  }
}
