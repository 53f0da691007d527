// Weights out to Hugging Face (Note [safetensors], Note [Hugging Face names]): the
// safetensors reader and writer against damaged files, the GPT-2 name map against the
// model's own parameters, and `strata export` checked with `transformers` itself: the
// logits of GPT2LMHeadModel loaded from the export equal Strata's on the same tokens.
#include <gtest/gtest.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "strata/core/errors.h"
#include "strata/core/files.h"
#include "strata/core/safetensors.h"
#include "strata/interop/hf.h"
#include "strata/models/build.h"
#include "strata/models/gpt.h"
#include "strata/train/checkpoint.h"
#include "test_util.h"

using namespace strata;
using namespace strata::test;

namespace {

// The error a reader of path raises ("" when it opens).
std::string open_error(const std::string& path) {
  try {
    SafeTensorsReader r(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A file with a hand-written header and `data` bytes after it.
std::string with_header(const std::string& header, size_t data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + std::string(data, '\x01');
}

// Strata's logits (the model in eval mode) against those of the transformers model
// loaded from hf_dir (GPT2LMHeadModel or BertForMaskedLM), on n random tokens: the
// largest |difference|, the largest |logit| and what the script printed. work: a folder
// for the tokens and the other side's logits.
struct LogitGap {
  double diff = 1e9, scale = 0;
  std::string script;
};
LogitGap logits_against_transformers(Model& model, const ModelSpec& spec, const std::string& hf_dir,
                                     const std::string& work, int64_t n) {
  model.eval();
  at::Tensor ids = at::randint(spec.vocab_size, {1, n}, at::kLong);
  at::Tensor mine;
  {
    at::NoGradGuard g;
    Batch b{ids, ids, {}};
    at::Tensor x = model.run_blocks(model.embed(b));
    mine = spec.family == Family::kGpt ? dynamic_cast<Gpt&>(model).logits(x)
                                       : dynamic_cast<Bert&>(model).logits(x);
    mine = mine.narrow(-1, 0, spec.vocab_size).contiguous();
  }
  const std::string tokens = work + "/tokens.bin", theirs_path = work + "/hf_logits.bin";
  std::ofstream(tokens, std::ios::binary)
      .write(static_cast<const char*>(ids.data_ptr()), static_cast<std::streamsize>(ids.nbytes()));
  LogitGap gap;
  auto py = run(std::string(STRATA_PYTHON) + " " + source_dir() + "/tests/interop/hf_logits.py " +
                    hf_dir + " " + tokens + " " + theirs_path,
                180);
  gap.script = py.output;
  EXPECT_EQ(py.status, 0) << py.output;
  if (py.status != 0) return gap;
  at::Tensor theirs = at::empty_like(mine);
  std::ifstream(theirs_path, std::ios::binary)
      .read(static_cast<char*>(theirs.data_ptr()), static_cast<std::streamsize>(theirs.nbytes()));
  gap.diff = (mine - theirs).abs().max().item<double>();
  gap.scale = mine.abs().max().item<double>();
  return gap;
}

}  // namespace

TEST(SafeTensors, RoundTripAndEveryKindOfDamageIsOneClearError) {
  const std::string dir = temp_dir("safetensors");
  const std::string good = dir + "/good.safetensors";
  at::Tensor a = at::arange(6, at::kFloat).view({2, 3});
  at::Tensor b = at::tensor({1, 2, 3}, at::kLong);
  at::Tensor c = at::randn({4}).to(at::kBFloat16);
  {
    SafeTensorsWriter w(
        good, {{"a", at::kFloat, {2, 3}}, {"b", at::kLong, {3}}, {"c", at::kBFloat16, {4}}},
        {{"format", "pt"}});
    w.write_next(a);
    w.write_next(b);
    w.write_next(c);
    w.commit();
  }
  SafeTensorsReader r(good);
  EXPECT_TRUE(at::equal(r.read("a"), a));
  EXPECT_TRUE(at::equal(r.read("b"), b));
  EXPECT_TRUE(at::equal(r.read("c"), c));
  EXPECT_EQ(r.metadata().at("format"), "pt");
  EXPECT_EQ(r.names(), (std::vector<std::string>{"a", "b", "c"}));

  struct Bad {
    std::string name, bytes, message;
  };
  const std::string t = R"("t":{"dtype":"F32","shape":[2,2],"data_offsets":)";
  const std::vector<Bad> bad = {
      {"short", "abc", "fewer than the 8-byte header length"},
      {"long-header", with_header("{}", 0).replace(0, 1, "\xff"), "its header says 255 bytes"},
      {"not-json", with_header("{nope", 0), "header is not a JSON object"},
      {"past-end", with_header("{" + t + "[0,16]}}", 8), "spans bytes [0, 16) but the data"},
      {"wrong-size", with_header("{" + t + "[0,12]}}", 16),
       "has 12 bytes but its F32 shape needs 16"},
      {"dtype", with_header(R"({"t":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}})", 1),
       "unknown dtype F8"},
      {"negative", with_header(R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
       "negative or non-integer dimension"},
      {"huge",
       with_header(R"({"t":{"dtype":"F32","shape":[1000000000000],"data_offsets":[0,4]}})", 4),
       "larger than the file's"},
      {"overlap",
       with_header(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("u":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                   12),
       "two tensors overlap"},
      {"missing-field", with_header(R"({"t":{"dtype":"F32","shape":[1]}})", 4), "lacks dtype"},
  };
  for (const Bad& x : bad) {
    const std::string p = dir + "/" + x.name + ".safetensors";
    write_bytes(p, x.bytes);
    const std::string e = open_error(p);
    EXPECT_NE(e.find("is not a valid safetensors file"), std::string::npos) << x.name << ": " << e;
    EXPECT_NE(e.find(x.message), std::string::npos) << x.name << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << x.name << ": one line";
  }
  // A truncated copy of the good file: the last tensor runs past the end.
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  write_bytes(dir + "/cut.safetensors", bytes.substr(0, bytes.size() - 3));
  EXPECT_NE(open_error(dir + "/cut.safetensors").find("tensor 'c' spans bytes"), std::string::npos);
}

TEST(HfExport, NamesCoverTheModelsParametersOnceAtTheirShapes) {
  // GPT tied and untied, and BERT (whose q, k and v are three parts of one tensor).
  for (const auto& [family, tied] : std::vector<std::pair<Family, bool>>{
           {Family::kGpt, true}, {Family::kGpt, false}, {Family::kBert, true}}) {
    ModelSpec s;
    s.family = family;
    s.n_layer = 2, s.n_head = 2, s.d_model = 16, s.seq_len = 8, s.vocab_size = 50;
    s.type_vocab = family == Family::kBert ? 2 : 0;
    s.vocab_multiple = 64;
    s.tied_embedding = tied;
    const std::string what = family == Family::kGpt ? "gpt" : "bert";
    auto model = build_model(s);
    std::map<std::string, int> seen;
    std::map<std::string, std::vector<int64_t>> shape;
    for (const auto& t : hf_tensors(s)) {
      seen[t.strata_name] += t.part == 0;
      shape[t.strata_name] = t.shape;
      EXPECT_EQ(t.shape[0] % t.parts, 0) << t.hf_name;
    }
    std::vector<std::string> params;
    for (const auto& p : model->named_parameters()) params.push_back(p.key());
    EXPECT_EQ(seen.size(), params.size()) << what << " tied " << tied;
    for (const auto& p : model->named_parameters()) {
      EXPECT_EQ(seen[p.key()], 1) << p.key() << " (" << what << " tied " << tied << ")";
      EXPECT_EQ(shape[p.key()], p.value().sizes().vec()) << p.key() << " (" << what << ")";
    }
  }
}

TEST(HfExport, TransformersLoadsTheExportAndGivesStratasLogits) {
  // A debug GPT trained 3 steps (vocabulary 8192 padded to 9000 rows, so the export
  // must drop rows), exported, then GPT2LMHeadModel from the folder: its logits on the
  // same 24 tokens equal Strata's within 1e-5 of the largest logit.
  for (const std::string tied : {"true", "false"}) {
    const std::string dir = train_ok("hf-export-" + tied,
                                     "--training.steps=3 --model.n_layer=2 --model.seq_len=32 "
                                     "--model.vocab_multiple=1000 --model.dropout=0 "
                                     "--model.tied_embedding=" +
                                         tied);
    const std::string out = dir + "/hf";
    auto r = run(strata_bin() + " export " + dir + " -o " + out, 120);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("as GPT2LMHeadModel"), std::string::npos) << r.output;
    CheckpointReader ck(dir + "/checkpoints/step-00000003");
    const ModelSpec spec = spec_from_json(ck.meta()["model"]);
    ASSERT_EQ(spec.padded_vocab(), 9000);
    auto model = build_model_from(spec, ck);
    const LogitGap gap = logits_against_transformers(*model, spec, out, dir, 24);
    EXPECT_NE(gap.script.find("GPT2LMHeadModel (1, 24, 8192)"), std::string::npos) << gap.script;
    const double diff = gap.diff, scale = gap.scale;
    std::printf("tied %s: max |logit difference| %.3g (largest logit %.3g)\n", tied.c_str(), diff,
                scale);
    EXPECT_LT(diff, 1e-5 * scale) << "tied " << tied;
  }
}

TEST(HfExport, BadInputIsOneClearLine) {
  const std::string dir = temp_dir("hf-export-bad");
  expect_one_error_line(strata_bin() + " export " + dir + "/nothing -o " + dir + "/out",
                        "holds no checkpoint (no meta.json, no latest)");
  expect_one_error_line(strata_bin() + " export " + dir + " -o " + dir + "/out --dtype fp8",
                        "--dtype fp8 is not one of fp32, bf16, fp16");
  const std::string mlp =
      train_ok("hf-export-mlp", "--model.flavour=mlp --data.source=synthetic --training.steps=1");
  expect_one_error_line(strata_bin() + " export " + mlp + " -o " + dir + "/out",
                        "model; --format hf exports GPT and BERT flavours");
}

TEST(HfImport, Gpt2FromTransformersGivesItsLogitsAndTrainsFromItUnderAnyLayout) {
  // A random GPT2LMHeadModel saved by transformers (vocabulary 1000, padded by Strata to
  // 1024): `strata import` gives a checkpoint whose model has its logits (within 1e-5
  // of the largest), and checkpoint.init_from starts training from it at tp=2 and at
  // dp=2 ZeRO-3 (lr 1e-30: the step-1 weights are the imported ones, bit for bit), whose
  // exports equal the one-process export byte for byte.
  for (const std::string tied : {"true", "false"}) {
    const std::string dir = temp_dir("hf-import-" + tied);
    const std::string hf = dir + "/hf", ck = dir + "/ck";
    auto r = run(std::string(STRATA_PYTHON) + " " + source_dir() +
                     "/tests/interop/hf_make_gpt2.py " + hf + " " + tied,
                 180);
    ASSERT_EQ(r.status, 0) << r.output;
    r = run(strata_bin() + " import " + hf + " -o " + ck, 60);
    ASSERT_EQ(r.status, 0) << r.output;
    CheckpointReader imported(ck + "/step-00000000");
    const ModelSpec spec = spec_from_json(imported.meta()["model"]);
    EXPECT_EQ(spec.padded_vocab(), 1024);
    auto model = build_model_from(spec, imported);
    const LogitGap gap = logits_against_transformers(*model, spec, hf, dir, 20);
    const double diff = gap.diff, scale = gap.scale;
    std::printf("import, tied %s: max |logit difference| %.3g (largest logit %.3g)\n", tied.c_str(),
                diff, scale);
    EXPECT_LT(diff, 1e-5 * scale) << "tied " << tied;

    // Training from the Hugging Face folder itself, and from the imported checkpoint.
    for (const auto& [name, source, layout] :
         std::vector<std::tuple<std::string, std::string, std::string>>{
             {"tp2", hf, "--nproc 2 --parallel.tp=2"},
             {"zero3", ck, "--nproc 2 --parallel.zero=3"}}) {
      const std::string run_dir =
          train_ok("hf-init-" + tied + "-" + name,
                   layout +
                       " --data.source=synthetic --training.steps=1 --training.batch_size=4 "
                       "--training.lr=1e-30 --training.min_lr=1e-30 --model.dropout=0 "
                       "--checkpoint.init_from=" +
                       source);
      CheckpointReader trained(run_dir + "/checkpoints/step-00000001");
      for (auto& p : model->named_parameters()) {
        at::Tensor got = at::empty_like(p.value());
        trained.read("model." + p.key(), got);
        EXPECT_TRUE(at::equal(got, p.value())) << name << " tied " << tied << ": " << p.key();
      }
      // Exported from its shards (tp slices, ZeRO-3 flat ranges), the same file as the
      // one-process checkpoint's export, byte for byte.
      for (const auto& [src, out] :
           {std::pair{ck, dir + "/export-one"}, std::pair{run_dir, run_dir + "/export"}}) {
        auto e = run(strata_bin() + " export " + src + " -o " + out, 60);
        ASSERT_EQ(e.status, 0) << e.output;
      }
      EXPECT_EQ(read_file(run_dir + "/export/model.safetensors"),
                read_file(dir + "/export-one/model.safetensors"))
          << name << " tied " << tied;
    }
  }
}

TEST(HfBert, ExportLoadsAsBertForMaskedLMAndImportGivesTransformersLogits) {
  // Out: a bert-debug trained 3 steps (vocabulary 8192 padded to 9000 rows), exported,
  // loaded as BertForMaskedLM: its logits on 24 tokens equal Strata's within 1e-5 of
  // the largest. In: a random BertForMaskedLM saved by transformers (exact GELU,
  // layer-norm eps 1e-12, no pooler) imported: the same, and init_from the folder at
  // tp=2 starts from its weights bit for bit and exports the one-process file.
  const std::string dir = train_ok("hf-bert-export",
                                   "--model.flavour=bert-debug --training.steps=3 "
                                   "--model.n_layer=2 --model.seq_len=32 "
                                   "--model.vocab_multiple=1000 --model.dropout=0");
  auto r = run(strata_bin() + " export " + dir + " -o " + dir + "/hf", 120);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("as BertForMaskedLM"), std::string::npos) << r.output;
  {
    CheckpointReader ck(dir + "/checkpoints/step-00000003");
    const ModelSpec spec = spec_from_json(ck.meta()["model"]);
    auto model = build_model_from(spec, ck);
    const LogitGap gap = logits_against_transformers(*model, spec, dir + "/hf", dir, 24);
    EXPECT_NE(gap.script.find("BertForMaskedLM (1, 24, 8192)"), std::string::npos) << gap.script;
    std::printf("bert export: max |logit difference| %.3g (largest logit %.3g)\n", gap.diff,
                gap.scale);
    EXPECT_LT(gap.diff, 1e-5 * gap.scale);
  }

  const std::string in = temp_dir("hf-bert-import");
  const std::string hf = in + "/hf", ck = in + "/ck";
  r = run(std::string(STRATA_PYTHON) + " " + source_dir() + "/tests/interop/hf_make_bert.py " + hf,
          180);
  ASSERT_EQ(r.status, 0) << r.output;
  r = run(strata_bin() + " import " + hf + " -o " + ck, 60);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("(BERT: 2 layers, d_model 64, vocabulary 1000)"), std::string::npos)
      << r.output;
  CheckpointReader imported(ck + "/step-00000000");
  const ModelSpec spec = spec_from_json(imported.meta()["model"]);
  ASSERT_EQ(spec.family, Family::kBert);
  EXPECT_EQ(spec.padded_vocab(), 1024);
  auto model = build_model_from(spec, imported);
  const LogitGap gap = logits_against_transformers(*model, spec, hf, in, 20);
  std::printf("bert import: max |logit difference| %.3g (largest logit %.3g)\n", gap.diff,
              gap.scale);
  EXPECT_LT(gap.diff, 1e-5 * gap.scale);

  const std::string run_dir =
      train_ok("hf-bert-init-tp2",
               "--nproc 2 --parallel.tp=2 --data.source=synthetic --training.steps=1 "
               "--training.batch_size=4 --training.lr=1e-30 --training.min_lr=1e-30 "
               "--model.dropout=0 --checkpoint.init_from=" +
                   hf);
  CheckpointReader trained(run_dir + "/checkpoints/step-00000001");
  for (auto& p : model->named_parameters()) {
    at::Tensor got = at::empty_like(p.value());
    trained.read("model." + p.key(), got);
    EXPECT_TRUE(at::equal(got, p.value())) << p.key();
  }
  for (const auto& [src, out] :
       {std::pair{ck, in + "/export-one"}, std::pair{run_dir, run_dir + "/export"}}) {
    auto e = run(strata_bin() + " export " + src + " -o " + out, 60);
    ASSERT_EQ(e.status, 0) << e.output;
  }
  EXPECT_EQ(read_file(run_dir + "/export/model.safetensors"),
            read_file(in + "/export-one/model.safetensors"));
}

TEST(HfImport, FoldersStrataCannotRepresentAreOneClearLine) {
  // A config that disagrees with its weights, and BERT settings Strata's BERT lacks.
  const std::string dir = temp_dir("hf-import-bad");
  const std::string hf = dir + "/hf";
  auto r =
      run(std::string(STRATA_PYTHON) + " " + source_dir() + "/tests/interop/hf_make_bert.py " + hf,
          180);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string good = read_file(hf + "/config.json");
  auto with = [&](const std::string& from, const std::string& to) {
    std::string c = good;
    const auto at = c.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) c.replace(at, from.size(), to);
    write_file_atomic(hf + "/config.json", c);
  };
  const std::vector<std::tuple<std::string, std::string, std::string>> bad = {
      {"\"vocab_size\": 1000", "\"vocab_size\": 1200",
       "holds bert.embeddings.word_embeddings.weight of shape [1000, 64] but its config.json "
       "makes it [1200, 64]"},
      {"\"hidden_act\": \"gelu\"", "\"hidden_act\": \"relu\"", "uses hidden_act 'relu'"},
      {"\"layer_norm_eps\": 1e-12", "\"layer_norm_eps\": 1e-05", "has layer_norm_eps 1e-05"},
      {"\"model_type\": \"bert\"", "\"model_type\": \"llama\"", "has model_type 'llama'"},
  };
  for (const auto& [from, to, message] : bad) {
    with(from, to);
    expect_one_error_line(strata_bin() + " import " + hf + " -o " + dir + "/ck", message);
  }
}
