// attnlab model and training configuration: docs/mechanisms.md §7.2 key names, strict validation.
// A config file is a TOML subset: `key = value` lines with dotted keys, `[table]` headers that
// prefix the keys below them, `#` comments; values are integers, floats, true/false, "strings"
// (bare words are accepted as strings too) and [lists] of integers. `--set key=value` overrides
// follow the same syntax. Unknown keys, keys of inactive mechanisms and invalid combinations are
// errors that name the key (and the file and line when it came from a file).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace attnlab {

struct ModelConfig {
  int n_layer = 4, d_model = 256, n_head = 4, kv_heads = 4;
  std::string norm = "layernorm";  // layernorm | rmsnorm
  std::string mlp = "gelu";        // gelu | swiglu
  int mlp_hidden = 0;              // resolved: 4d (gelu) or 64*ceil(8d/192) (swiglu) unless set
  bool bias = true;
  int seq_len = 256;
  int vocab_size = 8192;
  int head_dim() const { return d_model / n_head; }
  int qkv_dim() const { return (n_head + 2 * kv_heads) * head_dim(); }
};

// GOAT trainable attention priors (docs/mechanisms.md §3.9).
struct GoatConfig {
  int pos_rank = 4;               // R: relative Fourier frequencies
  int abs_rank = 4;               // M: absolute features of the key-only sink MLP
  double pos_base = 10000.0, abs_base = 10000.0;
  bool key_bias = true;           // the key-only lane (sink MLP, BOS bump, recency slope)
  int train_len = 0;              // τ; resolved to model.seq_len when not set
  std::string init = "seeded";    // seeded | uniform (§3.6)
  double init_std = 1e-3;
  std::vector<int> layers;        // empty = all layers
  std::string other_pos = "rope"; // none | rope | alibi: the scheme of the non-GOAT layers
  int prior_lanes() const { return 2 * pos_rank + (key_bias ? 1 : 0); }
};

struct AttentionConfig {
  std::string pos = "rope";  // none | learned | rope | alibi | goat
  double rope_base = 10000.0;
  std::string sink = "none";  // none | learned
  double sink_init = 0.0;
  std::string xsa = "off";    // off | on | gated (§2)
  std::vector<int> xsa_layers;  // empty = all layers
  GoatConfig goat;
  // The keys that attention-mechanism modules declare (src/model/attention/, docs/extending.md),
  // by name, as resolved text ("on", "3", "1e-06"); a key not set here has its declared default
  // (mechanism_option in model/attention/mechanism.h reads them).
  std::map<std::string, std::string> options;
  bool xsa_at(int layer) const;   // XSA acts on this layer
  bool goat_at(int layer) const;  // GOAT priors on this layer (attn.pos = goat and in attn.goat.layers)
  // The positional scheme of a layer: "goat" on GOAT layers, attn.goat.other_pos on the others when
  // attn.pos = goat, attn.pos otherwise.
  std::string pos_at(int layer) const;
};

// The residual connection around every sublayer (docs/mechanisms.md §4, §5, §6; keys §7.2).
struct ResidualConfig {
  std::string kind = "standard";  // standard | attnres | hyper | mhc | dar
  int block_size = 0;             // sublayers per depth block; resolved: 1 for attnres, 2 for dar
  int streams = 4;                // n parallel streams (hyper, mhc), >= 2
  double hc_scale_init = 0.01;    // HC: s_alpha and s_beta at init (§5.2)
  int mhc_sinkhorn_iters = 20;    // mHC: Sinkhorn-Knopp iterations (§5.3)
  double mhc_alpha_init = 0.01;   // mHC: alpha_pre, alpha_post, alpha_res at init
  std::string mhc_phi_init = "zero";  // mHC: zero | normal (N(0, 0.02^2))
  double mhc_home_weight = 0.9;   // mHC: Hpre on the home stream at init (the rest share 1 - it)
  double mhc_res_diag = 0.9;      // mHC: diagonal of Hres at init (off-diagonal share 1 - it)
  bool streams_kind() const { return kind == "hyper" || kind == "mhc"; }
  bool blocks_kind() const { return kind == "attnres" || kind == "dar"; }
};

// DAR, Dual Attention Residuals (docs/mechanisms.md §6.6; keys §7.2): active when residual.kind = dar.
struct DarConfig {
  std::string routing = "reciprocal";  // reciprocal | self_kv | cross_v | fixed_kv (§6.2 routing table)
  bool sep_v = false;                  // per-target value maps W^j_V
  bool include_partial = true;         // the partial block state is a depth candidate
  std::string init = "parity";         // parity | uniform (§6.3 symmetry breaking)
  double tau_init = -6.0;              // transport logit τ at init
  double other_b_init = -2.0;          // gate logit b on the non-home stream (parity init)
};

struct TrainConfig {
  int batch_size = 16;        // sequences per micro-batch (B)
  int grad_accum = 1;         // micro-batches per optimizer step
  int steps = 1000;           // optimizer steps
  double lr = 3e-3;
  double min_lr_ratio = 0.1;  // final lr = lr * min_lr_ratio
  int warmup = 100;
  std::string schedule = "cosine";  // cosine | wsd | constant
  // fp32 | bf16: bf16 runs the linear layers' and the LM head's products on bf16 copies of their
  // operands (float results, float master weights, optimizer state, norms, attention and loss).
  std::string precision = "fp32";
  double wsd_decay_frac = 0.2;      // WSD: fraction of steps spent in the final linear decay
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double grad_clip = 1.0;     // global-norm clip; 0 disables
  uint64_t seed = 1337;
  int eval_every = 100, eval_batches = 20;
  int ckpt_every = 0;         // 0: only the final checkpoint
  int log_every = 10;
  double time_limit = 0;      // seconds; 0 = none. Training stops cleanly (with a checkpoint) when reached.
  int max_bad_steps = 3;      // a step with a non-finite loss or gradient is skipped; this many in a row stop the run
  std::string out_dir = "runs/default";
  // Data-parallel training (`mpirun -np N attnlab train`, docs/distributed.md); no effect on one process.
  int zero = 0;               // 1: ZeRO-1, AdamW's moments sharded across the ranks
  double dp_bucket_mb = 1.0;  // gradient bucket size; 0: one bucket, reduced after the backward (no overlap)
  double dp_timeout = 300;    // seconds a rank waits for the others before it stops the job
};

struct DataConfig {
  std::string dir = "data/heldout";  // holds train.bin, val.bin, tokenizer.model (attnlab prepare)
  std::string train, val, tokenizer; // resolved paths (default: inside dir)
};

struct Config {
  ModelConfig model;
  AttentionConfig attn;
  ResidualConfig residual;
  DarConfig dar;
  TrainConfig train;
  DataConfig data;

  // Resolved configuration as a flat JSON object of dotted keys with typed values
  // (stored in every checkpoint; read back by from_json and by the PyTorch reference).
  nlohmann::json to_json() const;
  static Config from_json(const nlohmann::json& j, const std::string& origin);
  std::string to_text() const;  // the banner printed at start: one `key = value` per line
};

// Raw key/value assignments in the order given, each with where it came from (for messages).
struct Assignment { std::string key, value, origin; };

// Parses a config file into assignments; errors name the file and line.
std::vector<Assignment> parse_config_file(const std::string& path);
// Parses "key=value" (a --set override).
Assignment parse_override(const std::string& text);
// Applies assignments over the defaults, then validates. Errors name the key and its origin.
Config resolve_config(const std::vector<Assignment>& assignments);
// Built-in presets (configs/*.toml are the same text): "tiny", "small", "bench".
const char* preset_config_text(const std::string& name);
// keys_once: a key given twice is an error (grid files); otherwise the later assignment wins, as
// when a text is appended to another to override it.
std::vector<Assignment> parse_config_text(const std::string& text, const std::string& origin, bool keys_once = false);

}  // namespace attnlab
