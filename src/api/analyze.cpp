// attnlab::api::analyze (include/attnlab/analyze.h): the diagnostics of experiment/analyze.h on
// windows of a shard, the document written as analysis.json and summarised.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "api/internal.h"
#include "attnlab/analyze.h"
#include "core/denormals.h"
#include "core/error.h"
#include "core/json.h"
#include "core/memory.h"
#include "data/shard.h"
#include "experiment/analyze.h"

namespace attnlab::api {
namespace {

namespace fs = std::filesystem;

double number(const nlohmann::json& j) { return j.is_number() ? j.get<double>() : NAN; }

}  // namespace

AnalyzeParams default_analyze_params() { return AnalyzeParams{}; }

AnalyzeResult analyze(const std::string& checkpoint, const std::string& data, const std::string& out_dir,
                      const AnalyzeParams& params) {
  std::unique_ptr<GPT<float>> model = load_model(checkpoint);
  const attnlab::Config& cfg = model->config();
  Shard shard = Shard::open(data);
  shard.validate_vocab(cfg.model.vocab_size);
  const int T = cfg.model.seq_len;
  if (params.sequences < 1) fail("--sequences must be at least 1");
  if (shard.size() < (size_t)T + 1) fail("data ", data, " has ", shard.size(), " tokens, fewer than model.seq_len + 1 = ", T + 1);
  // The windows are drawn up front (twice for §8.5's corrupting ones): refuse a count whose
  // windows alone cannot fit, naming the option, instead of std::bad_alloc.
  const int draws = residual_patchable_streams(cfg) > 0 ? 2 : 1;
  check_fits_in_memory("--sequences " + std::to_string(params.sequences),
                       double(params.sequences) * (T + 1) * sizeof(int32_t) * draws,
                       std::to_string(params.sequences) + " windows of " + std::to_string(T + 1) + " tokens" +
                           (draws == 2 ? ", twice" : ""),
                       "use fewer sequences");
  // §8: validation windows of the training length with a fixed seed; §8.5's corrupting windows by a
  // second seeded draw (the pairing is by index).
  const auto seqs = draw_windows(shard.tokens(), shard.size(), params.sequences, T + 1, params.seed);
  const auto corrupt = residual_patchable_streams(cfg) > 0
                           ? draw_windows(shard.tokens(), shard.size(), params.sequences, T + 1, params.seed + 1)
                           : std::vector<int32_t>{};
  AnalyzeOptions opt;
  opt.batch = params.batch_size;
  opt.cka_tokens = params.cka_tokens;
  opt.bootstrap = params.bootstrap;
  opt.seed = params.seed;
  opt.rescue_by_depth = params.rescue_by_depth;
  opt.progress = progress_fn(params.on_progress);
  if (params.on_start) params.on_start(T);
  nlohmann::json j;
  {
    ScopedFlushDenormals flush;
    j = interruptible([&] { return attnlab::analyze(*model, seqs, corrupt, params.sequences, T, opt); });
  }
  j["checkpoint"] = checkpoint;
  j["data"] = data;

  fs::create_directories(out_dir);
  const std::string path = (fs::path(out_dir) / "analysis.json").string(), tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) fail("cannot write ", tmp);
    f << j.dump(1) << "\n";
    if (!f.good()) fail("cannot write ", tmp);
  }
  fs::rename(tmp, path);

  AnalyzeResult r;
  r.path = path;
  r.seq_len = T;
  r.loss = number(j["loss"]);
  for (const auto& l : j["attention"]["layers"]) {
    AnalyzeLayer layer;
    layer.layer = l["layer"].get<int>();
    layer.cos_yv_mean = number(l["cos_yv"]["mean"]);
    layer.cos_yv_min = number(l["cos_yv"]["min"]);
    layer.cos_yv_max = number(l["cos_yv"]["max"]);
    layer.self_mean = number(l["self"]["mean"]);
    layer.vsim_mean = number(l["vsim"]["mean"]);
    layer.has_cos_zv = !l["cos_zv"].is_null();
    if (layer.has_cos_zv) layer.cos_zv_mean = number(l["cos_zv"]["mean"]);
    r.layers.push_back(layer);
  }
  if (!j["rescue"].is_null()) {
    r.has_rescue = true;
    for (const auto& g : j["rescue"]["RG_when_patched"]) r.rescue_when_patched.push_back({number(g["value"]), number(g["se"])});
  }
  return r;
}

}  // namespace attnlab::api
