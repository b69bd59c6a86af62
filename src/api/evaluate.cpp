// attnlab::api evaluation (include/attnlab/evaluate.h): the shard evaluation of the training loop
// (train/trainer.h), the length sweep (experiment/long_context.h), the .npy writer and the gradient
// dump of the PyTorch reference test, each behind one function.
#include <cmath>

#include "api/internal.h"
#include "attnlab/data.h"
#include "attnlab/evaluate.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "core/denormals.h"
#include "core/error.h"
#include "data/files.h"
#include "data/shard.h"
#include "experiment/long_context.h"
#include "experiment/npy.h"

namespace attnlab::api {

EvalParams default_eval_params() { return EvalParams{}; }
LengthSweepParams default_length_sweep_params() { return LengthSweepParams{}; }

EvalResult evaluate(const std::string& checkpoint, const std::string& data, const EvalParams& params) {
  if (params.seq_len < 0) fail("--seq-len ", params.seq_len, ": must be positive (or 0 for model.seq_len)");
  if (params.batches < 0) fail("--batches ", params.batches, ": must be positive (or 0 for the whole shard)");
  if (params.batch_size < 1) fail("--batch-size ", params.batch_size, ": must be positive");
  // The cheap checks first: the shard and the checkpoint's configuration, before any memory is planned.
  Shard shard = Shard::open(data);
  const attnlab::Config cfg = read_checkpoint_config(checkpoint);
  const int T = params.seq_len > 0 ? params.seq_len : cfg.model.seq_len;
  if (shard.size() < (size_t)T + 1)
    fail("data ", data, " has ", shard.size(), " tokens, fewer than --seq-len + 1 = ", T + 1, "; use a shorter --seq-len");
  shard.validate_vocab(cfg.model.vocab_size);
  if (T > cfg.model.seq_len && cfg.attn.pos == "learned")
    fail("--seq-len ", T, " exceeds model.seq_len = ", cfg.model.seq_len, " of ", checkpoint,
         ": learned positions are undefined beyond it");
  auto model = load_model(checkpoint, params.weights);
  ScopedFlushDenormals flush;
  model->plan(params.batch_size, T);
  const attnlab::EvalResult r = attnlab::evaluate(*model, shard, params.batches);
  EvalResult out;
  out.seq_len = T;
  out.tokens = r.count;
  out.loss = r.mean();
  out.perplexity = std::exp(r.mean());
  return out;
}

LengthSweep evaluate_lengths(const std::string& checkpoint, const std::string& data, const LengthSweepParams& params) {
  const attnlab::Config cfg = read_checkpoint_config(checkpoint);
  LengthEvalOptions o;
  o.lengths = parse_lengths(params.lengths, cfg.model.seq_len);
  check_inference_memory("--lengths " + params.lengths, cfg, o.lengths, params.batch_size);
  o.token_budget = params.tokens;
  o.batch_size = params.batch_size;
  o.chunk = params.chunk;
  o.bucket = params.bucket;
  o.bos_id = params.bos;
  o.bf16_weights = params.weights == Weights::bf16;
  o.progress = progress_fn(params.on_progress);
  Shard shard = Shard::open(data);
  LengthEvalReport rep;
  {
    ScopedFlushDenormals flush;
    rep = interruptible([&] { return attnlab::evaluate_lengths(checkpoint, shard, o); });
  }
  LengthSweep sweep;
  sweep.train_len = rep.train_len;
  for (const LengthResult& r : rep.results) {
    LengthSweepRow row;
    row.length = r.length;
    row.applicable = r.applicable;
    row.blocks = r.blocks;
    row.tokens = r.tokens;
    row.loss = r.loss();
    row.tokens_beyond_train = r.beyond_tokens;
    row.loss_beyond_train = r.beyond_loss();
    row.bucket_tokens = r.bucket_tokens;
    for (size_t i = 0; i < r.bucket_sum.size(); ++i)
      row.bucket_loss.push_back(r.bucket_tokens[i] ? r.bucket_sum[i] / double(r.bucket_tokens[i]) : 0.0);
    row.planned_bytes = r.planned_bytes;
    row.seconds = r.seconds;
    sweep.rows.push_back(std::move(row));
  }
  sweep.table = length_report_table(rep);
  sweep.json = length_report_json(rep).dump(2);
  return sweep;
}

void write_json_report(const std::string& path, const std::string& json) {
  data_files::write_file_atomically(path, {json, "\n"}, "JSON report");
}

void write_logits_npy(const std::string& path, const std::vector<float>& logits, int B, int T, int V) {
  if (B < 1 || T < 1 || V < 1 || logits.size() != (size_t)B * T * V)
    fail("write_logits_npy ", path, ": ", logits.size(), " logits are not B·T·V = ", B, "·", T, "·", V);
  write_npy_f32(path, logits.data(), {B, T, V});
}

double write_gradients(const std::string& checkpoint, const std::string& token_file, const std::string& out) {
  auto model = load_model(checkpoint);
  const auto seqs = read_token_file(token_file);
  const int B = (int)seqs.size(), T = (int)seqs[0].size() - 1, V = model->config().model.vocab_size;
  if (T < 1) fail("token file ", token_file, ": sequences need at least 2 ids (inputs and targets)");
  std::vector<int32_t> in, tgt;
  for (const auto& s : seqs) {
    in.insert(in.end(), s.begin(), s.end() - 1);
    tgt.insert(tgt.end(), s.begin() + 1, s.end());
  }
  ScopedFlushDenormals flush;
  model->plan(B, T);
  model->zero_grad();
  const double loss = model->train_micro_step(in.data(), tgt.data(), 1.0f / float(B * T)) / double(B * T);
  std::vector<float> logits((size_t)B * T * V);
  model->logits(logits.data(), in.data());
  const float loss_f = (float)loss;
  std::vector<TensorRef> ts;
  ts.push_back({"loss", {1}, &loss_f, "F32"});
  ts.push_back({"logits", {B, T, V}, logits.data(), "F32"});
  for (const auto& s : model->registry().specs()) ts.push_back({"grad." + s.name, s.shape, model->grads() + s.offset, "F32"});
  write_safetensors(out, ts, {{"config", model->config().to_json().dump()}});
  return loss;
}

}  // namespace attnlab::api
