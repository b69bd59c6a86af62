// attnlab from an application: train a tiny model on tokens held in memory, save it, load it back,
// check the reloaded model gives the same logits, generate, prepare a corpus from text files and run
// a two-variant comparison grid on it. Every check prints what it checks; any failure exits with
// status 1.
//
//   train_and_compare OUT_DIR TEXT_FILE...
// OUT_DIR: scratch for the corpus and the runs (created; its contents are replaced).
// TEXT_FILE: UTF-8 text for the comparison's corpus (a few tens of KB suffice: tests/data/*.txt).
#include <attnlab/attnlab.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace api = attnlab::api;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("[%s] %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++failures;
}

// A repeating pattern of period 11 over a vocabulary of 64 (each id determines the next): a model
// learns it in a few dozen steps.
std::vector<int32_t> pattern(size_t n) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = int32_t((i * 5) % 11);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s OUT_DIR TEXT_FILE...\n", argv[0]);
    return 2;
  }
  const std::filesystem::path out = argv[1];
  const std::vector<std::string> texts(argv + 2, argv + argc);
  try {
    std::printf("attnlab %s (headers %s)\n", api::library_version(), ATTNLAB_VERSION_STRING);
    std::filesystem::remove_all(out);

    // 1. Train from memory.
    const api::Config cfg = api::Config::preset("tiny")
                                .set("model.vocab_size", 64)
                                .set("model.seq_len", 16)
                                .set("attn.xsa", "on")
                                .set("train.steps", 40)
                                .set("train.warmup", 4)
                                .set("train.lr", 3e-3)
                                .set("train.eval_every", 20)
                                .set("train.out_dir", "\"" + (out / "train").string() + "\"");
    std::printf("configuration: %s layers, d_model %s, attn.xsa %s\n", cfg.get("model.n_layer").c_str(),
                cfg.get("model.d_model").c_str(), cfg.get("attn.xsa").c_str());
    auto source = api::tokens_data_source(pattern(5000));
    auto validation = api::tokens_data_source(pattern(1000));
    api::TrainParams params = api::default_train_params();
    params.validation = validation.get();
    std::vector<double> losses;
    params.on_step = [&](int64_t step, double loss, double) {
      losses.push_back(loss);
      if (step % 10 == 0) std::printf("  step %2lld  loss %.4f\n", (long long)step, loss);
    };
    params.on_eval = [](int64_t step, double val_loss) { std::printf("  step %2lld  val loss %.4f\n", (long long)step, val_loss); };
    const api::TrainResult r = api::train(cfg, *source, params);
    check(losses.size() == 40, "on_step was called once per step (" + std::to_string(losses.size()) + " calls)");
    check(!losses.empty() && losses.back() < 0.5 * losses.front(),
          "the training loss fell by more than half (" + std::to_string(losses.front()) + " -> " +
              std::to_string(losses.empty() ? 0 : losses.back()) + ")");

    // 2. Save, reload, same logits.
    api::Model model = api::Model::load(r.checkpoint);
    const std::string saved = (out / "model.safetensors").string();
    model.save(saved);
    api::Model reloaded = api::Model::load(saved);
    const std::vector<int32_t> tokens = pattern(32);
    const std::vector<float> a = model.forward(tokens, 2, 16), b = reloaded.forward(tokens, 2, 16);
    check(a.size() == 2u * 16 * 64, "forward gives (B, T, V) = (2, 16, 64) logits");
    check(a == b, "the reloaded model's logits equal the saved model's, bit for bit");
    check(reloaded.config() == cfg, "the reloaded model's configuration equals the one trained");

    // 3. Generate: greedy continues the pattern.
    api::SamplingParams sp = api::default_sampling_params();
    sp.temperature = 0;
    const std::vector<int32_t> prompt = pattern(8);
    const std::vector<int32_t> generated = reloaded.generate(prompt, 8, sp);
    const std::vector<int32_t> expected = pattern(16);
    std::string ids;
    for (int32_t id : generated) ids += std::to_string(id) + " ";
    std::printf("generated: %s\n", ids.c_str());
    int right = 0;
    for (size_t i = prompt.size(); i < generated.size(); ++i) right += generated[i] == expected[i];
    check(right >= 6, "greedy generation continues the pattern (" + std::to_string(right) + " of 8 ids right)");

    // 4. A corpus from the text files, and a two-variant comparison grid on it.
    api::PrepareParams prep = api::default_prepare_params();
    prep.inputs = texts;
    prep.out_dir = (out / "data").string();
    prep.vocab_size = 400;
    api::prepare_data(prep);
    const std::string data_dir = prep.out_dir;
    check(std::filesystem::exists(out / "data" / "train.bin") && std::filesystem::exists(out / "data" / "tokenizer.model"),
          "prepare_data wrote a tokenizer and token shards (vocabulary 400)");
    const api::Tokenizer tok = api::Tokenizer::load((out / "data" / "tokenizer.model").string());
    const std::string sentence = "In the beginning God created the heaven and the earth.";
    const std::vector<int32_t> sentence_ids = tok.encode(sentence);
    check(tok.vocab_size() == 400 && !sentence_ids.empty() && tok.decode(sentence_ids) == sentence,
          "its tokenizer encodes a sentence into " + std::to_string(sentence_ids.size()) + " ids and decodes it back");
    const std::string grid = "name = \"example\"\npreset = \"tiny\"\n"
                             "set = [\"data.dir=" + data_dir + "\", \"model.vocab_size=400\", \"train.eval_every=4\"]\n"
                             "steps = 8\nseeds = [1, 2]\nbaseline = \"rope\"\n"
                             "[variants.rope]\nset = [\"attn.pos=rope\"]\n"
                             "[variants.xsa]\nset = [\"attn.pos=rope\", \"attn.xsa=on\"]\n";
    api::CompareParams cp = api::default_compare_params();
    cp.out_dir = (out / "compare").string();
    cp.report = false;
    const api::CompareResult c = api::compare_grid_text(grid, cp, "the example's grid");
    check(c.complete, "the grid finished (" + c.results_json + ")");
    check(c.variants.size() == 2 && c.variants[0].variant == "rope" && c.variants[1].variant == "xsa",
          "the summary has the two variants in grid order");
    for (const auto& v : c.variants)
      std::printf("  %-5s n=%d val loss %.4f ± %.4f  diff %+.4f  p %.3f%s\n", v.variant.c_str(), v.n, v.val_loss_mean,
                  v.val_loss_sd, v.diff, v.p_value, v.baseline ? "  (baseline)" : "");
    check(c.variants.size() == 2 && c.variants[1].n == 2 && std::isfinite(c.variants[1].val_loss_mean) &&
              std::isnan(c.variants[0].diff) && std::isfinite(c.variants[1].diff),
          "two seeds per variant, a finite loss, a difference against the baseline");

    // 5. Errors are attnlab::Error and name the key.
    try {
      api::Config::preset("tiny").set("attn.xsaa", "on").resolve();
      check(false, "an unknown key is an error");
    } catch (const attnlab::Error& e) {
      check(std::string(e.what()).find("attn.xsaa") != std::string::npos, std::string("an unknown key is an error naming it: ") + e.what());
    }
  } catch (const attnlab::Error& e) {
    std::fprintf(stderr, "attnlab error: %s\n", e.what());
    return 1;
  }
  std::printf("%s\n", failures ? "example: FAILED" : "example: all checks passed");
  return failures ? 1 : 0;
}
