#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "strata/core/errors.h"
#include "strata/models/build.h"
#include "strata/models/dropout.h"
#include "strata/models/gpt.h"
#include "strata/plan/estimator.h"

using namespace strata;

namespace {
// Published counts are of the unpadded vocabulary (model.vocab_multiple=1).
int64_t count(const std::string& flavour, DataShape shape = {}, int64_t vocab_multiple = 1) {
  ModelConfig mc;
  mc.flavour = flavour;
  mc.vocab_multiple = vocab_multiple;
  return build_model(resolve_model_spec(mc, shape))->num_parameters();
}
}  // namespace

TEST(Models, PublishedParameterCounts) {
  EXPECT_EQ(count("gpt2-124m"), 124439808);  // GPT-2 small, tied embedding
  EXPECT_EQ(count("resnet-50"), 25557032);   // torchvision resnet50
  EXPECT_EQ(count("resnet-18"), 11689512);   // torchvision resnet18
  const int64_t bert = count("bert-base");
  // ~110M (Devlin et al.). Exactly: Hugging Face BertForPreTraining's 110,106,428 less
  // the next-sentence classifier (768 x 2 + 2 = 1,538), which masked-LM training omits.
  EXPECT_EQ(bert, 110106428 - 1538);
  // Padded to a multiple of 128 (the default, Note [vocab padding]): GPT-2's 50257
  // rows become 50304 (Megatron's count), BERT's 30522 become 30592 (rows and bias).
  EXPECT_EQ(count("gpt2-124m", {}, 128), 124439808 + 47 * 768);
  EXPECT_EQ(count("bert-base", {}, 128), bert + 70 * 769);
}

TEST(Models, DebugGptIsSmallAndRuns) {
  ModelConfig mc;
  ModelSpec spec = resolve_model_spec(mc, {});
  auto m = build_model(spec);
  EXPECT_LT(m->num_parameters(), 1500000);
  EXPECT_EQ(m->num_blocks(), 4);
  Batch b{at::randint(spec.vocab_size, {2, 16}), at::randint(spec.vocab_size, {2, 16}), {}};
  at::Tensor loss = m->forward_loss(b);
  // An untrained model predicts about uniformly: loss near ln(V).
  EXPECT_NEAR(loss.item<double>(), std::log(static_cast<double>(spec.vocab_size)), 0.5);
  loss.backward();
  for (auto& p : m->parameters()) EXPECT_TRUE(p.grad().defined());
}

TEST(Models, CausalGptIgnoresTheFuture) {
  ModelConfig mc;
  ModelSpec spec = resolve_model_spec(mc, {});
  auto m = std::dynamic_pointer_cast<Gpt>(build_model(spec));
  ASSERT_TRUE(m);
  m->eval();
  at::Tensor x = at::randint(spec.vocab_size, {1, 12});
  at::Tensor y = x.clone();
  y.index_put_({0, 11}, (x.index({0, 11}) + 1) % spec.vocab_size);
  Batch a{x, x, {}}, b{y, y, {}};
  at::NoGradGuard ng;
  auto run = [&](const Batch& bb) {
    at::Tensor h = m->embed(bb);
    for (int64_t i = 0; i < m->num_blocks(); ++i) h = m->block(i).forward(h);
    return m->logits(h);
  };
  at::Tensor ra = run(a), rb = run(b);
  EXPECT_TRUE(at::allclose(ra.narrow(1, 0, 11), rb.narrow(1, 0, 11), 1e-5, 1e-6));
  EXPECT_FALSE(at::allclose(ra.narrow(1, 11, 1), rb.narrow(1, 11, 1)));
}

TEST(Models, ImageModelsOnFashionShapes) {
  ModelConfig mc;
  mc.flavour = "resnet-18";
  DataShape fashion{0, 28, 1, 10};
  auto m = build_model(resolve_model_spec(mc, fashion));
  Batch b{at::randn({2, 1, 28, 28}), at::randint(10, {2}), {}};
  EXPECT_NEAR(m->forward_loss(b).item<double>(), std::log(10.0), 1.5);
  mc.flavour = "mlp";
  auto mlp = build_model(resolve_model_spec(mc, fashion));
  EXPECT_TRUE(std::isfinite(mlp->forward_loss(b).item<double>()));
  EXPECT_GT(m->flops_per_sample(), 0);
}

TEST(Models, UnknownFlavourSuggestsTheName) {
  ModelConfig mc;
  mc.flavour = "gpt2-124";
  try {
    resolve_model_spec(mc, {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'gpt2-124m'"), std::string::npos)
        << e.what();
  }
}

TEST(Dropout, CounterBasedMaskHasRateScaleAndReplay) {
  // Note [counter-based dropout]: drop rate p, kept values scaled by 1/(1-p), the
  // same mask for the same seed (and so for the same generator state), in backward too.
  at::Tensor x = at::ones({1 << 20});
  at::Tensor y = dropout_with_seed(x, 0.1, 42);
  const double dropped = (y == 0).to(at::kDouble).mean().item<double>();
  EXPECT_NEAR(dropped, 0.1, 0.002);  // 1M draws: sd 0.0003
  EXPECT_TRUE(at::allclose(y.masked_select(y != 0), at::full({1}, 1 / 0.9)));
  EXPECT_TRUE(at::equal(y, dropout_with_seed(x, 0.1, 42)));
  EXPECT_FALSE(at::equal(y, dropout_with_seed(x, 0.1, 43)));
  // Neighbouring elements are independent: P(both dropped) ~ p^2.
  at::Tensor d = (y == 0).to(at::kDouble);
  EXPECT_NEAR((d.narrow(0, 0, (1 << 20) - 1) * d.narrow(0, 1, (1 << 20) - 1)).mean().item<double>(),
              0.01, 0.001);
  at::manual_seed(5);
  at::Tensor w = at::randn({64, 64}).requires_grad_(true);
  at::Tensor a = counter_dropout(w, 0.3, true);
  a.backward(at::ones_like(a));
  EXPECT_TRUE(at::equal(w.grad(), (a != 0).to(at::kFloat) / 0.7));
  at::manual_seed(5);
  at::randn({64, 64});
  EXPECT_TRUE(at::equal(counter_dropout(w, 0.3, true), a));  // same generator state, same mask
  EXPECT_TRUE(at::equal(counter_dropout(w, 0.3, false), w));
  at::Tensor h = dropout_with_seed(at::ones({1000}, at::kBFloat16), 0.5, 1);
  EXPECT_EQ(h.scalar_type(), at::kBFloat16);
  EXPECT_NEAR((h == 0).to(at::kDouble).mean().item<double>(), 0.5, 0.06);
}

namespace {
// Builds a part from the same seed, as every rank does.
std::shared_ptr<Model> part(const ModelSpec& spec, StageInfo stage, TpContext tp = {}) {
  at::manual_seed(7);
  return build_model(spec, stage, tp);
}

ModelSpec small_spec(const std::string& flavour, bool tied = true) {
  ModelConfig mc;
  mc.flavour = flavour;
  mc.n_layer = 3;
  mc.d_model = 32;
  mc.n_head = 4;
  mc.seq_len = 16;
  mc.vocab_size = 96;
  mc.tied_embedding = tied;
  return resolve_model_spec(mc, {});
}
}  // namespace

TEST(ModelParts, StagesHoldTheWholeModelsWeightsAndChainToItsLoss) {
  // Note [model parts] and [layer init]: a stage built alone draws exactly the weights
  // the whole model has under the same names, and stage 0's output fed to stage 1
  // gives the whole model's loss. GPT tied and untied, and BERT (tied MLM decoder).
  for (const auto& [flavour, tied] : std::vector<std::pair<std::string, bool>>{
           {"debug", true}, {"debug", false}, {"bert-base", true}}) {
    const ModelSpec spec = small_spec(flavour, tied);
    auto whole = part(spec, StageInfo::whole());
    auto s0 = part(spec, {0, 2, true, false});
    auto s1 = part(spec, {2, -1, false, true});
    EXPECT_EQ(s0->num_blocks(), 2);
    EXPECT_EQ(s1->num_blocks(), 1);
    EXPECT_EQ(s1->global_block(0), 2);
    auto whole_params = whole->named_parameters();
    int64_t n = 0;
    for (auto* p : {&s0, &s1})
      for (auto& item : (*p)->named_parameters()) {
        ASSERT_TRUE(whole_params.contains(item.key())) << flavour << " " << item.key();
        EXPECT_TRUE(at::equal(item.value(), whole_params[item.key()])) << item.key();
        ++n;
      }
    // Every tensor is somewhere; the tied embedding is on both ends.
    const auto copies = s1->tied_copies();
    EXPECT_EQ(n, static_cast<int64_t>(whole_params.size() + copies.size())) << flavour;
    if (tied) {
      ASSERT_EQ(copies.size(), 1u);
      EXPECT_TRUE(s0->named_parameters().contains(copies[0]));
    } else {
      EXPECT_TRUE(copies.empty());
      EXPECT_FALSE(s0->named_parameters().contains("lm_head.weight"));
    }
    EXPECT_FALSE(s1->named_parameters().contains("block0.ln1.weight"));
    Batch b{at::randint(spec.vocab_size, {2, 16}), at::randint(spec.vocab_size, {2, 16}), {}};
    at::NoGradGuard no_grad;
    const at::Tensor want = whole->forward_loss(b);
    const at::Tensor got = s1->forward_part(s0->forward_part({}, b), b);
    EXPECT_TRUE(at::equal(got, want))
        << flavour << ": " << got.item<double>() << " vs " << want.item<double>();
  }
}

TEST(ModelParts, TensorParallelLinearsKeepTheirSliceOfTheFullWeight) {
  // Each linear is drawn at its full shape and sliced (Note [parallel linear]): column
  // layers keep their output rows (qkv: their heads' rows of q, k and v), row layers
  // their input columns and the whole bias, the token embedding its vocabulary rows;
  // everything else equals the whole model's.
  const ModelSpec spec = small_spec("debug");
  const int64_t C = spec.d_model;
  auto whole = part(spec, StageInfo::whole());
  auto w = whole->named_parameters();
  for (int64_t r = 0; r < 2; ++r) {
    auto m = part(spec, StageInfo::whole(), {r, 2});
    auto p = m->named_parameters();
    ASSERT_EQ(p.size(), w.size());
    const std::string b = "block1.";
    const at::Tensor qkv = w[b + "attn.qkv.weight"];
    std::vector<at::Tensor> rows;
    for (int64_t g = 0; g < 3; ++g) rows.push_back(qkv.narrow(0, g * C + r * C / 2, C / 2));
    EXPECT_TRUE(at::equal(p[b + "attn.qkv.weight"], at::cat(rows)));
    EXPECT_TRUE(at::equal(p[b + "attn.proj.weight"],
                          w[b + "attn.proj.weight"].narrow(1, r * C / 2, C / 2)));
    EXPECT_TRUE(at::equal(p[b + "attn.proj.bias"], w[b + "attn.proj.bias"]));
    EXPECT_TRUE(
        at::equal(p[b + "mlp.fc.weight"], w[b + "mlp.fc.weight"].narrow(0, r * 2 * C, 2 * C)));
    EXPECT_TRUE(
        at::equal(p[b + "mlp.proj.weight"], w[b + "mlp.proj.weight"].narrow(1, r * 2 * C, 2 * C)));
    const int64_t V = spec.padded_vocab(2);  // vocab-parallel: this rank's rows (96 -> 128)
    EXPECT_TRUE(at::equal(p["wte.weight"], w["wte.weight"].narrow(0, r * V / 2, V / 2)));
    EXPECT_TRUE(at::equal(p["wpe.weight"], w["wpe.weight"]));
    EXPECT_TRUE(at::equal(p["block2.ln2.weight"], w["block2.ln2.weight"]));
  }
  // A head count tp does not divide is one clear error.
  EXPECT_THROW(part(spec, StageInfo::whole(), {0, 3}), Error);
}

TEST(ModelParts, TensorParallelRankHoldsItsShareOfTheSlicesAndEveryWholeTensor) {
  // Per-rank parameters = sharded / tp + replicated, for the built parts of every tp
  // rank: each tensor is either a 1/tp slice of the whole model's (the vocabulary
  // padded alike: 96 -> 128 rows for tp 1, 2 and 4) or whole on every rank, and the
  // estimator's per-rank count (count_parameters(spec, tp)) is exactly that.
  for (const auto& [flavour, tied] : std::vector<std::pair<std::string, bool>>{
           {"debug", true}, {"debug", false}, {"bert-base", true}}) {
    const ModelSpec spec = small_spec(flavour, tied);
    auto whole = part(spec, StageInfo::whole());
    auto w = whole->named_parameters();
    for (int64_t tp : {2, 4}) {
      const ParameterCount pc = count_parameters(spec, tp);
      for (int64_t r = 0; r < tp; ++r) {
        auto m = part(spec, StageInfo::whole(), {r, tp});
        auto p = m->named_parameters();
        ASSERT_EQ(p.size(), w.size());
        int64_t sharded = 0, replicated = 0, frozen = 0;
        for (const auto& item : w) {
          const int64_t n = p[item.key()].numel(), full = item.value().numel();
          ASSERT_TRUE(n == full || n * tp == full)
              << flavour << " tp=" << tp << " " << item.key() << ": " << n << " of " << full;
          (n == full ? replicated : sharded) += full;
          if (!p[item.key()].requires_grad()) frozen += n;
        }
        EXPECT_GT(sharded, 10 * replicated) << flavour;
        EXPECT_EQ(m->num_parameters(), sharded / tp + replicated) << flavour << " tp=" << tp;
        EXPECT_EQ(pc.total, sharded / tp + replicated) << flavour << " tp=" << tp;
        EXPECT_EQ(pc.total - pc.trainable, frozen) << flavour << " tp=" << tp;
      }
      EXPECT_EQ(count_parameters(spec, 1).total, whole->num_parameters()) << flavour;
    }
  }
}

TEST(ModelParts, PaddedVocabularyChangesNoLossOrGradient) {
  // Note [vocab padding]: 96 ids padded to 128 rows. The real rows are the unpadded
  // model's, the padded ones zero, and their logits are masked: the loss and every
  // gradient of a real row equal the unpadded model's; padded rows get none.
  for (const std::string flavour : {"debug", "bert-base"}) {
    ModelSpec plain = small_spec(flavour), padded = plain;
    plain.vocab_multiple = 1;
    padded.vocab_multiple = 128;
    ASSERT_EQ(padded.padded_vocab(), 128);
    auto a = part(plain, StageInfo::whole());
    auto b = part(padded, StageInfo::whole());
    const std::string emb = flavour == "debug" ? "wte.weight" : "word.weight";
    auto pa = a->named_parameters(), pb = b->named_parameters();
    EXPECT_TRUE(at::equal(pb[emb].narrow(0, 0, 96), pa[emb])) << flavour;
    EXPECT_EQ(pb[emb].narrow(0, 96, 32).abs().max().item<float>(), 0.0f) << flavour;
    torch::manual_seed(3);
    Batch batch{at::randint(96, {2, 16}), at::randint(96, {2, 16}), {}};
    const at::Tensor la = a->forward_loss(batch), lb = b->forward_loss(batch);
    EXPECT_NEAR(lb.item<double>(), la.item<double>(), 1e-6) << flavour;
    la.backward();
    lb.backward();
    EXPECT_TRUE(at::allclose(pb[emb].grad().narrow(0, 0, 96), pa[emb].grad(), 1e-5, 1e-7));
    EXPECT_EQ(pb[emb].grad().narrow(0, 96, 32).abs().max().item<float>(), 0.0f) << flavour;
  }
}

TEST(ModelParts, DropoutOfAHeadSliceIsTheSliceOfTheWholeMask) {
  // Note [counter-based dropout]: a tp rank's heads get exactly their slice of the mask
  // one process draws for all heads.
  const at::Tensor x = at::ones({2, 4, 3, 5});
  const at::Tensor whole = dropout_with_seed(x, 0.3, 42);
  for (int64_t r = 0; r < 2; ++r) {
    const at::Tensor mine =
        dropout_with_seed(x.narrow(1, 2 * r, 2).contiguous(), 0.3, 42, DropoutSlice{1, 4, 2 * r});
    EXPECT_TRUE(at::equal(mine, whole.narrow(1, 2 * r, 2))) << "rank " << r;
  }
  // Not merely the same mask everywhere: the two halves differ.
  EXPECT_FALSE(at::equal(whole.narrow(1, 0, 2), whole.narrow(1, 2, 2)));
}
