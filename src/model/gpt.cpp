#include "model/gpt.h"

#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/linear.h"
#include "kernels/mlp.h"
#include "kernels/norm.h"

namespace attnlab {

namespace {
constexpr int kCeChunkRows = kernels::lm_head_default_chunk_rows;  // chosen by bench/cross_entropy_bench
}  // namespace

std::vector<double> alibi_slopes(int H) {
  auto geometric = [](int n) {
    std::vector<double> m(n);
    for (int h = 0; h < n; ++h) m[h] = std::pow(2.0, -8.0 * (h + 1) / n);
    return m;
  };
  int p2 = 1;
  while (p2 * 2 <= H) p2 *= 2;
  std::vector<double> m = geometric(p2);
  if (p2 == H) return m;
  const std::vector<double> extra = geometric(2 * p2);
  for (int i = 0; (int)m.size() < H; i += 2) m.push_back(extra[i]);
  return m;
}

template <class T>
ParamRegistry GPT<T>::layout(const Config& cfg) {
  return GPT<T>(cfg, LayoutOnly{}).reg_;
}

template <class T>
GPT<T>::GPT(const Config& cfg, LayoutOnly) : cfg_(cfg), residual_(make_residual<T>(cfg_)) {
  const ModelConfig& m = cfg_.model;
  const int C = m.d_model, L = m.n_layer, V = m.vocab_size, H = m.n_head, Dh = m.head_dim();
  const double std0 = 0.02, std_out = 0.02 / std::sqrt(2.0 * L);
  // The kinds, resolved once: hot code tests these, never the configuration's strings.
  layernorm_ = m.norm == "layernorm";
  gelu_ = m.mlp == "gelu";
  learned_positions_ = cfg_.attn.pos == "learned";
  const bool layernorm = layernorm_, gelu = gelu_;
  reg_.add("wte", {V, C}, Init::Normal, std0, true);
  if (learned_positions_) reg_.add("wpe", {m.seq_len, C}, Init::Normal, std0, true);
  auto add_norm = [&](const std::string& p) {
    reg_.add(p + ".weight", {C}, Init::One, 0, false);
    if (layernorm && m.bias) reg_.add(p + ".bias", {C}, Init::Zero, 0, false);
  };
  auto add_linear = [&](const std::string& p, int in, int out, double std) {
    reg_.add(p + ".weight", {in, out}, Init::Normal, std, true);
    if (m.bias) reg_.add(p + ".bias", {out}, Init::Zero, 0, false);
  };
  // The attention mechanisms (model/attention/): which act on each layer, and who owns its projection.
  mechanisms_ = make_attention_mechanisms<T>(cfg_);
  lattn_.resize(L);
  for (int i = 0; i < L; ++i) {
    LayerAttention& la = lattn_[i];
    la.qkv_cols = m.qkv_dim();
    for (int k = 0; k < (int)mechanisms_.size(); ++k) {
      if (!mechanisms_[k]->acts_on(i)) continue;
      la.mechanisms.push_back(k);
      if (const int cols = mechanisms_[k]->projection_columns(i)) {
        if (la.projection_owner >= 0)
          fail("attention mechanisms ", mechanisms_[la.projection_owner]->name(), " and ", mechanisms_[k]->name(),
               " both replace the qkv projection of layer ", i, "; they cannot be combined");
        la.projection_owner = k;
        la.qkv_cols = cols;
      }
    }
    max_qkv_cols_ = std::max(max_qkv_cols_, la.qkv_cols);
  }
  for (int i = 0; i < L; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    add_norm(b + "ln1");
    add_linear(b + "attn.qkv", C, lattn_[i].qkv_cols, std0);
    add_linear(b + "attn.proj", H * Dh, C, std_out);
    for (int k : lattn_[i].mechanisms) mechanisms_[k]->register_params(reg_, i, b + "attn.");
    add_norm(b + "ln2");
    if (gelu) add_linear(b + "mlp.fc", C, m.mlp_hidden, std0);
    else add_linear(b + "mlp.gate_up", C, 2 * m.mlp_hidden, std0);
    add_linear(b + "mlp.proj", m.mlp_hidden, C, std_out);
  }
  add_norm("ln_f");
  residual_->register_params(reg_);
  reg_.finalize();
}

template <class T>
GPT<T>::GPT(const Config& cfg) : GPT(cfg, LayoutOnly{}) {
  const ModelConfig& m = cfg_.model;
  const int L = m.n_layer;
  params_ = Buffer(reg_.total() * sizeof(T));
  grads_ = Buffer(reg_.total() * sizeof(T));
  layer_params_.resize(L);
  layer_grads_.resize(L);
  bind_layers(layer_params_.data(), params());
  bind_layers(layer_grads_.data(), grads());
  residual_->bind(reg_, params(), grads());
  for (auto& mech : mechanisms_) mech->bind(reg_, params(), grads());
  auto ptr = [&](T* base, const char* name) -> T* {
    const ParamSpec* s = reg_.find(name);
    return s ? base + s->offset : nullptr;
  };
  wte_ = ptr(params(), "wte"); wpe_ = ptr(params(), "wpe");
  lnf_w_ = ptr(params(), "ln_f.weight"); lnf_b_ = ptr(params(), "ln_f.bias");
  dwte_ = ptr(grads(), "wte"); dwpe_ = ptr(grads(), "wpe");
  dlnf_w_ = ptr(grads(), "ln_f.weight"); dlnf_b_ = ptr(grads(), "ln_f.bias");
  ensure_positions(m.seq_len);
  if (cfg_.train.precision == "bf16") {
    if (!std::is_same_v<T, float>) fail("train.precision = bf16 needs a float model (this one is double)");
    bf16_ = true;
    allocate_half_weights();
  }
}

template <class T>
void GPT<T>::allocate_half_weights() {
  if (half_buf_.bytes()) return;
  const ModelConfig& m = cfg_.model;
  const int L = m.n_layer;
  size_t n = (size_t)m.vocab_size * m.d_model;
  for (int l = 0; l < L; ++l)
    for (size_t k : half_sizes(l)) n += k;
  half_buf_ = Buffer(n * sizeof(bf16));
  bf16* h = half_buf_.as<bf16>();
  half_wte_ = h;
  h += (size_t)m.vocab_size * m.d_model;
  half_layers_.resize(L);
  for (int l = 0; l < L; ++l) {
    HalfWeights& hw = half_layers_[l];
    bf16** dst[4] = {&hw.qkv_w, &hw.proj_w, &hw.fc_w, &hw.mlp_proj_w};
    const std::array<size_t, 4> sizes = half_sizes(l);
    for (int k = 0; k < 4; ++k) {
      *dst[k] = h;
      h += sizes[k];
    }
  }
}

template <class T>
std::array<size_t, 4> GPT<T>::half_sizes(int l) const {
  const ModelConfig& m = cfg_.model;
  const size_t C = m.d_model, hidden = m.mlp_hidden, fc_cols = gelu_ ? hidden : 2 * hidden;
  return {C * lattn_[l].qkv_cols, (size_t)m.n_head * m.head_dim() * C, C * fc_cols, hidden * C};
}

template <class T>
void GPT<T>::round_weights_to_bf16() {
  if constexpr (!std::is_same_v<T, float>) {
    fail("bf16 weights need a float model (this one is double)");
  } else {
    allocate_half_weights();
    const ModelConfig& m = cfg_.model;
    // Round the float weights in place (the copies then hold exactly these values), then copy.
    auto round = [](float* p, size_t n) {
#pragma omp parallel for schedule(static) if (n >= 65536)
      for (size_t i = 0; i < n; ++i) p[i] = to_float(to_bf16(p[i]));
    };
    round(wte_, (size_t)m.vocab_size * m.d_model);
    for (int l = 0; l < m.n_layer; ++l) {
      const LayerParams& p = layer_params_[l];
      const std::array<size_t, 4> sizes = half_sizes(l);
      float* w[4] = {p.qkv_w, p.proj_w, p.fc_w, p.mlp_proj_w};
      for (int k = 0; k < 4; ++k) round(w[k], sizes[k]);
    }
    refresh_half_weights();
    half_decode_ = true;
  }
}

template <class T>
void GPT<T>::refresh_half_weights() {
  if constexpr (std::is_same_v<T, float>) {
    const ModelConfig& m = cfg_.model;
    const int L = m.n_layer;
    // One parallel loop over the 4L + 1 matrices (a handful of equal-sized jobs per layer).
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < 4 * L + 1; ++i) {
      if (i == 4 * L) {
        to_bf16(half_wte_, wte_, (size_t)m.vocab_size * m.d_model);
        continue;
      }
      const LayerParams& p = layer_params_[i / 4];
      const HalfWeights& hw = half_layers_[i / 4];
      bf16* dst[4] = {hw.qkv_w, hw.proj_w, hw.fc_w, hw.mlp_proj_w};
      const float* src[4] = {p.qkv_w, p.proj_w, p.fc_w, p.mlp_proj_w};
      to_bf16(dst[i % 4], src[i % 4], half_sizes(i / 4)[i % 4]);
    }
  }
}

template <class T>
void GPT<T>::linear_fwd(const Workspace& ws, T* out, const T* x, bf16* xh, const T* w, const bf16* wh, const T* b, int N,
                        int C, int OC) const {
  if constexpr (std::is_same_v<T, float>) {
    if (ws.half) {
      if (x) to_bf16_rows(xh, C, x, C, N, C);  // x == nullptr: xh was written directly
      return kernels::linear_forward(out, xh, wh, b, N, C, OC);
    }
    if (ws.half_weights && N <= kernels::detail::kFewRows) return kernels::few_rows_linear(out, x, wh, b, N, C, OC);
  }
  kernels::linear_forward(out, x, w, b, N, C, OC);
}

template <class T>
void GPT<T>::linear_bwd(const Workspace& ws, T* dx, T* dw, T* db, const T* dout, const T* x, const bf16* xh, const T* w,
                        const bf16* wh, int N, int C, int OC) const {
  if constexpr (std::is_same_v<T, float>) {
    if (ws.half) return kernels::linear_backward(dx, dw, db, dout, ws.dout_h, xh, wh, N, C, OC);
  }
  kernels::linear_backward(dx, dw, db, dout, x, w, N, C, OC);
}

template <class T>
kernels::LmHeadBf16 GPT<T>::lm_head_half(const Workspace& ws) const {
  return {half_wte_, ws.ce_x_h, ws.ce_dlogits_h};
}

template <class T>
void GPT<T>::ensure_positions(int n) {
  for (auto& mech : mechanisms_) mech->ensure_positions(n);
}

template <class T>
void GPT<T>::bind_layers(LayerParams* table, T* base) const {
  auto ptr = [&](const std::string& name) -> T* {
    const ParamSpec* s = reg_.find(name);
    return s ? base + s->offset : nullptr;
  };
  for (int i = 0; i < cfg_.model.n_layer; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    LayerParams& p = table[i];
    p.ln1_w = ptr(b + "ln1.weight"); p.ln1_b = ptr(b + "ln1.bias");
    p.qkv_w = ptr(b + "attn.qkv.weight"); p.qkv_b = ptr(b + "attn.qkv.bias");
    p.proj_w = ptr(b + "attn.proj.weight"); p.proj_b = ptr(b + "attn.proj.bias");
    p.ln2_w = ptr(b + "ln2.weight"); p.ln2_b = ptr(b + "ln2.bias");
    const bool gelu = cfg_.model.mlp == "gelu";
    p.fc_w = ptr(b + (gelu ? "mlp.fc.weight" : "mlp.gate_up.weight"));
    p.fc_b = ptr(b + (gelu ? "mlp.fc.bias" : "mlp.gate_up.bias"));
    p.mlp_proj_w = ptr(b + "mlp.proj.weight"); p.mlp_proj_b = ptr(b + "mlp.proj.bias");
  }
}

template <class T>
size_t GPT<T>::num_params() const {
  size_t n = 0;
  for (const auto& s : reg_.specs()) n += s.numel;
  return n;
}

template <class T>
typename GPT<T>::DecodeBytes GPT<T>::decode_bytes(double context) const {
  const ModelConfig& m = cfg_.model;
  size_t n = num_params(), half = 0;
  if (const ParamSpec* wpe = reg_.find("wpe")) n -= wpe->numel - (size_t)m.d_model;
  if (half_decode_) {  // the matrices read as bf16
    half = (size_t)m.vocab_size * m.d_model;
    for (int l = 0; l < m.n_layer; ++l)
      for (size_t k : half_sizes(l)) half += k;
    n -= half;
  }
  // The cache layout of plan_inference: keys and values of kv_heads·head_dim per position and layer.
  const double kv = 2.0 * m.n_layer * (double)m.kv_heads * m.head_dim() * sizeof(T);
  return {double(n) * sizeof(T) + double(half) * sizeof(bf16), kv * context};
}

template <class T>
T* GPT<T>::param(const std::string& name) const {
  const ParamSpec* s = reg_.find(name);
  if (!s) fail("model has no parameter named '", name, "'");
  return params() + s->offset;
}

template <class T>
T* GPT<T>::grad(const std::string& name) const {
  const ParamSpec* s = reg_.find(name);
  if (!s) fail("model has no parameter named '", name, "'");
  return grads() + s->offset;
}

template <class T>
void GPT<T>::init_weights(uint64_t seed) {
  Rng rng(seed);
  for (const auto& s : reg_.specs()) {
    T* p = params() + s.offset;
    for (size_t i = 0; i < s.numel; ++i) {
      switch (s.init) {
        case Init::Normal: p[i] = T(rng.normal() * s.init_value); break;
        case Init::Zero: p[i] = T(0); break;
        case Init::One: p[i] = T(1); break;
        case Init::Constant: p[i] = T(s.init_value); break;
        case Init::Values: p[i] = T(s.init_values[i]); break;
      }
    }
  }
}

template <class T>
void GPT<T>::zero_grad() {
  std::memset(grads(), 0, reg_.total() * sizeof(T));
}

template <class T>
void GPT<T>::plan_workspace(Arena& arena, Workspace& ws, int B, int seq, bool training, bool count_only) {
  const ModelConfig& m = cfg_.model;
  const size_t N = (size_t)B * seq, C = m.d_model, L = m.n_layer, H = m.n_head;
  const size_t fc_cols = m.mlp == "gelu" ? m.mlp_hidden : 2 * m.mlp_hidden;
  // Two passes: the first counts (Arena returns nullptr), the second hands out real pointers.
  const bool half = bf16_ && training;
  for (int pass = 0; pass < 2; ++pass) {
    ws.B = B; ws.seq = seq; ws.half = half;
    if (!ws.residual) ws.residual = residual_->make_state();
    residual_->plan(arena, *ws.residual, N, training);
    ws.mechanisms.resize(mechanisms_.size());
    for (size_t k = 0; k < mechanisms_.size(); ++k) {
      if (!ws.mechanisms[k]) ws.mechanisms[k] = mechanisms_[k]->make_state();
      if (ws.mechanisms[k]) mechanisms_[k]->plan(arena, *ws.mechanisms[k], N, seq, training);
    }
    ws.layers.assign(L, {});
    for (auto& l : ws.layers) {
      l.ln1 = half ? nullptr : arena.template take<T>(N * C);  // bf16: only ln1_h
      l.ln1_mean = arena.template take<T>(N);
      l.ln1_rstd = arena.template take<T>(N);
      l.qkv = arena.template take<T>(N * m.qkv_dim());
      l.att = arena.template take<T>(N * H * m.head_dim());
      l.lse = arena.template take<T>(N * H);
      l.ln2 = half ? nullptr : arena.template take<T>(N * C);  // bf16: only ln2_h
      l.ln2_mean = arena.template take<T>(N);
      l.ln2_rstd = arena.template take<T>(N);
      l.fc = arena.template take<T>(N * fc_cols);
      l.act = half ? nullptr : arena.template take<T>(N * m.mlp_hidden);  // bf16: only act_h
      if (half) {
        l.ln1_h = arena.template take<bf16>(N * C);
        l.att_h = arena.template take<bf16>(N * H * m.head_dim());
        l.ln2_h = arena.template take<bf16>(N * C);
        l.act_h = arena.template take<bf16>(N * m.mlp_hidden);
      }
    }
    ws.lnf = arena.template take<T>(N * C);
    ws.lnf_mean = arena.template take<T>(N);
    ws.lnf_rstd = arena.template take<T>(N);
    ws.ce_chunk = (int)std::min<size_t>(kCeChunkRows, N);
    ws.ce_scratch = arena.template take<T>(kernels::lm_head_scratch_size(ws.ce_chunk, m.vocab_size));
    if (training) {
      ws.dln = arena.template take<T>(N * C);
      ws.dqkv = arena.template take<T>(N * m.qkv_dim());
      ws.datt = arena.template take<T>(N * H * m.head_dim());
      ws.dfc = arena.template take<T>(N * fc_cols);
      ws.dact = arena.template take<T>(N * m.mlp_hidden);
      // Splitting the attention backward over query chunks (few (b, kv head) pairs: long contexts).
      ws.attn_scratch_size = kernels::attention_backward_scratch_size<T>(
          kernels::packed_attention_shape(B, seq, (int)H, m.kv_heads, m.head_dim()));
      ws.attn_scratch = arena.template take<T>(ws.attn_scratch_size);
    }
    if (half) {
      ws.dout_h = arena.template take<bf16>(N * std::max({(size_t)max_qkv_cols_, fc_cols, C}));
      ws.ce_x_h = arena.template take<bf16>((size_t)ws.ce_chunk * C);
      ws.ce_dlogits_h = arena.template take<bf16>((size_t)ws.ce_chunk * m.vocab_size);
    }
    if (pass == 0) {
      if (count_only) return;
      arena.commit();
    }
  }
}

template <class T>
void GPT<T>::plan(int B, int seq) {
  if (B < 1 || seq < 1) fail("micro-batch shape must be positive, got B=", B, " T=", seq);
  if (seq > cfg_.model.seq_len) {
    // Longer than training (length extrapolation, §8.6): fine for every scheme but learned positions.
    if (learned_positions_)
      fail("sequence length ", seq, " exceeds model.seq_len = ", cfg_.model.seq_len, ": learned positions are undefined there (N/A)");
  }
  ensure_positions(seq);
  ATTNLAB_CHECK(!arena_.committed() && arena_.planned() == 0, "plan() called twice");
  B_ = B;
  T_ = seq;
  plan_workspace(arena_, ws_, B, seq, true);
}

template <class T>
void GPT<T>::plan_count_only(int B, int seq) {
  if (B < 1 || seq < 1) fail("micro-batch shape must be positive, got B=", B, " T=", seq);
  ATTNLAB_CHECK(!arena_.committed() && arena_.planned() == 0, "plan_count_only() after plan()");
  plan_workspace(arena_, ws_, B, seq, true, true);
}

template <class T>
template <class Out>
void GPT<T>::norm_forward(Out* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N) const {
  if (layernorm_) kernels::layernorm_forward(out, mean, rstd, inp, w, b, N, cfg_.model.d_model);
  else kernels::rmsnorm_forward(out, rstd, inp, w, N, cfg_.model.d_model);
}

template <class T>
void GPT<T>::mlp_activation(const Workspace& ws, T* act, bf16* act_h, const T* fc, int N) const {
  const int hidden = cfg_.model.mlp_hidden;
  const bool gelu = gelu_;
  if constexpr (std::is_same_v<T, float>) {
    if (ws.half) {
      if (gelu) kernels::gelu_forward(act_h, fc, (size_t)N * hidden);
      else kernels::swiglu_forward(act_h, fc, N, hidden);
      return;
    }
  }
  if (gelu) kernels::gelu_forward(act, fc, (size_t)N * hidden);
  else kernels::swiglu_forward(act, fc, N, hidden);
}

template <class T>
void GPT<T>::norm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const T* mean, const T* rstd,
                           int N) const {
  if (layernorm_) kernels::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, cfg_.model.d_model);
  else kernels::rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, cfg_.model.d_model);
}

template <class T>
void GPT<T>::forward(Workspace& ws, const int32_t* inputs, int pos_offset, bool use_cache) {
  const ModelConfig& m = cfg_.model;
  const int B = ws.B, Tq = ws.seq, N = B * Tq, C = m.d_model, H = m.n_head, Hkv = m.kv_heads, Dh = m.head_dim();
  const int qkvC = m.qkv_dim(), hidden = m.mlp_hidden, fc_cols = gelu_ ? hidden : 2 * hidden;
  const int V = m.vocab_size;
  for (int i = 0; i < N; ++i)
    if (inputs[i] < 0 || inputs[i] >= V) fail("token id ", inputs[i], " at position ", i, " is outside the vocabulary [0, ", V, ")");
  if (learned_positions_ && pos_offset + Tq > m.seq_len)
    fail("learned positions are undefined beyond model.seq_len = ", m.seq_len, " (asked for position ", pos_offset + Tq - 1, ")");
  const Residual<T>& R = *residual_;
  ResidualState& rs = *ws.residual;
  if (ws.half) refresh_half_weights();
  kernels::embedding_forward(R.embedding(rs), inputs, wte_, wpe_, B, Tq, C, pos_offset);
  R.begin(rs, N);
  for (int l = 0; l < m.n_layer; ++l) {
    const LayerParams& p = layer_params_[l];
    const HalfWeights hw = ws.half || ws.half_weights ? half_layers_[l] : HalfWeights{};
    const LayerAttention& la = lattn_[l];
    auto& a = ws.layers[l];
    const T* x = R.read(rs, 2 * l + 1, N);
    // With bf16 products the norms and the activation write their linear layer's bf16 input directly
    // (a.ln1, a.ln2, a.act are then null: nothing else reads them).
    if (ws.half) norm_forward(a.ln1_h, a.ln1_mean, a.ln1_rstd, x, p.ln1_w, p.ln1_b, N);
    else norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln1_w, p.ln1_b, N);
    // The projection (or the compact row of the mechanism that owns it, unpacked into the packed
    // rows), then the mechanisms' transforms of q and k (model/attention/mechanism.h).
    AttentionPass<T> pass = attention_pass(ws, l, a.qkv, pos_offset);
    if (la.projection_owner >= 0) {
      const AttentionMechanism<T>& owner = *mechanisms_[la.projection_owner];
      pass.state = ws.mechanisms[la.projection_owner].get();
      linear_fwd(ws, owner.projection_output(*pass.state), a.ln1, a.ln1_h, p.qkv_w, hw.qkv_w, p.qkv_b, N, C, la.qkv_cols);
      owner.unpack_forward(pass);
    } else {
      linear_fwd(ws, a.qkv, a.ln1, a.ln1_h, p.qkv_w, hw.qkv_w, p.qkv_b, N, C, qkvC);
    }
    for (int k : la.mechanisms) {
      pass.state = ws.mechanisms[k].get();
      mechanisms_[k]->transform_forward(pass);
    }
    kernels::AttentionShape s{};
    s.B = B; s.Tq = Tq; s.H = H; s.Hkv = Hkv; s.Dh = Dh;
    s.q_stride = qkvC; s.q_batch_stride = (long)Tq * qkvC;
    s.out_stride = H * Dh;
    const T *kp, *vp;
    if (use_cache) {
      // Append this chunk's (rotated) keys and values, then attend over the whole cache.
      const int kvC = Hkv * Dh;
      T* kc = k_cache_[l];
      T* vc = v_cache_[l];
#pragma omp parallel for collapse(2) if ((size_t)B * Tq * kvC >= kernels::kParallelMinElements)
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < Tq; ++t) {
          const T* row = a.qkv + ((size_t)b * Tq + t) * qkvC;
          const size_t dst = ((size_t)b * cache_cap_ + pos_offset + t) * kvC;
          std::memcpy(kc + dst, row + H * Dh, kvC * sizeof(T));
          std::memcpy(vc + dst, row + (H + Hkv) * Dh, kvC * sizeof(T));
        }
      kp = kc; vp = vc;
      s.Tk = pos_offset + Tq; s.kv_stride = kvC; s.kv_batch_stride = (long)cache_cap_ * kvC; s.pos_offset = pos_offset;
    } else {
      kp = a.qkv + H * Dh; vp = a.qkv + (H + Hkv) * Dh;
      s.Tk = Tq; s.kv_stride = qkvC; s.kv_batch_stride = (long)Tq * qkvC; s.pos_offset = 0;
    }
    attention_kernel_terms(ws, pass, false);
    kernels::attention_forward(a.att, a.lse, a.qkv, kp, vp, pass.sink, pass.scale, s, pass.extras);
    if (observer_ && !use_cache) {  // the tracing hook (model/trace.h): views of this layer's buffers
      AttentionView<T> v;
      v.layer = l; v.B = B; v.seq = Tq; v.H = H; v.Hkv = Hkv; v.Dh = Dh;
      v.qkv = a.qkv; v.qkv_stride = qkvC; v.out = a.att; v.lse = a.lse; v.scale = pass.scale;
      v.alibi_slopes = pass.extras.alibi_slopes; v.sink = pass.sink;
      v.xsa_gamma = pass.extras.xsa_gamma; v.xsa_c = pass.extras.xsa_c;
      for (int k : la.mechanisms) {
        pass.state = ws.mechanisms[k].get();
        mechanisms_[k]->describe(v, pass);
      }
      observer_->attention(v);
    }
    linear_fwd(ws, R.branch(rs, 2 * l + 1), a.att, a.att_h, p.proj_w, hw.proj_w, p.proj_b, N, H * Dh, C);
    R.write(rs, 2 * l + 1, N);
    const T* x1 = R.read(rs, 2 * l + 2, N);
    if (ws.half) norm_forward(a.ln2_h, a.ln2_mean, a.ln2_rstd, x1, p.ln2_w, p.ln2_b, N);
    else norm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, x1, p.ln2_w, p.ln2_b, N);
    linear_fwd(ws, a.fc, a.ln2, a.ln2_h, p.fc_w, hw.fc_w, p.fc_b, N, C, fc_cols);
    mlp_activation(ws, a.act, a.act_h, a.fc, N);
    linear_fwd(ws, R.branch(rs, 2 * l + 2), a.act, a.act_h, p.mlp_proj_w, hw.mlp_proj_w, p.mlp_proj_b, N, hidden, C);
    R.write(rs, 2 * l + 2, N);
  }
  norm_forward(ws.lnf, ws.lnf_mean, ws.lnf_rstd, R.read_out(rs, N), lnf_w_, lnf_b_, N);
  if (observer_ && !use_cache)
    if (ResidualInspector<T>* ins = observer_->residual()) R.inspect(rs, N, *ins);
}

template <class T>
void GPT<T>::backward(Workspace& ws, const int32_t* inputs) {
  // On entry ws.dln holds dLoss/d(ln_f output), written by the fused LM head.
  const ModelConfig& m = cfg_.model;
  const int B = ws.B, Tq = ws.seq, N = B * Tq, C = m.d_model, H = m.n_head, Hkv = m.kv_heads, Dh = m.head_dim();
  const int qkvC = m.qkv_dim(), hidden = m.mlp_hidden, fc_cols = gelu_ ? hidden : 2 * hidden;
  const Residual<T>& R = *residual_;
  ResidualState& rs = *ws.residual;
  norm_backward(R.read_out_grad(rs, N), dlnf_w_, dlnf_b_, ws.dln, R.final_input(rs), lnf_w_, ws.lnf_mean, ws.lnf_rstd, N);
  R.read_out_backward(rs, N);
  for (int l = m.n_layer - 1; l >= 0; --l) {
    const LayerParams& p = layer_params_[l];
    const LayerParams& g = layer_grads_[l];
    const HalfWeights hw = ws.half ? half_layers_[l] : HalfWeights{};
    auto& a = ws.layers[l];
    // MLP sublayer 2l+2: o = proj(act(fc(ln2(h)))); the residual hands out do and the dh accumulator.
    linear_bwd(ws, ws.dact, g.mlp_proj_w, g.mlp_proj_b, R.branch_grad(rs, 2 * l + 2, N), a.act, a.act_h, p.mlp_proj_w,
               hw.mlp_proj_w, N, hidden, C);
    if (gelu_) kernels::gelu_backward(ws.dfc, ws.dact, a.fc, (size_t)N * hidden);
    else kernels::swiglu_backward(ws.dfc, ws.dact, a.fc, N, hidden);
    linear_bwd(ws, ws.dln, g.fc_w, g.fc_b, ws.dfc, a.ln2, a.ln2_h, p.fc_w, hw.fc_w, N, C, fc_cols);
    norm_backward(R.input_grad(rs, 2 * l + 2, N), g.ln2_w, g.ln2_b, ws.dln, R.input(rs, 2 * l + 2), p.ln2_w, a.ln2_mean,
                  a.ln2_rstd, N);
    R.read_backward(rs, 2 * l + 2, N);
    if (backward_listener_) backward_listener_->between_sublayers();
    // Attention sublayer 2l+1.
    linear_bwd(ws, ws.datt, g.proj_w, g.proj_b, R.branch_grad(rs, 2 * l + 1, N), a.att, a.att_h, p.proj_w, hw.proj_w, N,
               H * Dh, C);
    kernels::AttentionShape s{};
    s.B = B; s.Tq = Tq; s.Tk = Tq; s.H = H; s.Hkv = Hkv; s.Dh = Dh;
    s.q_stride = qkvC; s.q_batch_stride = (long)Tq * qkvC; s.kv_stride = qkvC; s.kv_batch_stride = (long)Tq * qkvC;
    s.out_stride = H * Dh; s.pos_offset = 0;
    // The kernel's backward with the mechanisms' terms and gradient slots, then their parameter
    // gradients, their transforms' backward in reverse order and the projection owner's unpack.
    const LayerAttention& la = lattn_[l];
    AttentionPass<T> pass = attention_pass(ws, l, ws.dqkv, 0);
    attention_kernel_terms(ws, pass, true);
    kernels::attention_backward(ws.dqkv, ws.dqkv + H * Dh, ws.dqkv + (H + Hkv) * Dh, pass.dsink, ws.datt, a.att, a.lse, a.qkv,
                                a.qkv + H * Dh, a.qkv + (H + Hkv) * Dh, pass.sink, pass.scale, s, pass.extras,
                                ws.attn_scratch, ws.attn_scratch_size);
    for (int k : la.mechanisms) {
      pass.state = ws.mechanisms[k].get();
      mechanisms_[k]->after_kernel_backward(pass);
    }
    for (auto k = la.mechanisms.rbegin(); k != la.mechanisms.rend(); ++k) {
      pass.state = ws.mechanisms[*k].get();
      mechanisms_[*k]->transform_backward(pass);
    }
    if (la.projection_owner >= 0) {
      const AttentionMechanism<T>& owner = *mechanisms_[la.projection_owner];
      pass.state = ws.mechanisms[la.projection_owner].get();
      owner.unpack_backward(pass);
      linear_bwd(ws, ws.dln, g.qkv_w, g.qkv_b, owner.projection_output(*pass.state), a.ln1, a.ln1_h, p.qkv_w, hw.qkv_w, N, C,
                 la.qkv_cols);
    } else {
      linear_bwd(ws, ws.dln, g.qkv_w, g.qkv_b, ws.dqkv, a.ln1, a.ln1_h, p.qkv_w, hw.qkv_w, N, C, qkvC);
    }
    norm_backward(R.input_grad(rs, 2 * l + 1, N), g.ln1_w, g.ln1_b, ws.dln, R.input(rs, 2 * l + 1), p.ln1_w, a.ln1_mean,
                  a.ln1_rstd, N);
    R.read_backward(rs, 2 * l + 1, N);
    if (backward_listener_) backward_listener_->layer_done(l);
  }
  kernels::embedding_backward(dwte_, dwpe_, R.embedding_grad(rs, N), inputs, B, Tq, C, 0);
}

template <class T>
int GPT<T>::gradient_final_layer(const ParamSpec& spec) {
  // "blocks.{l}." holds what layer l's backward alone writes: its norms, projections and the
  // attention mechanisms' tensors ("blocks.{l}.attn.", model/attention/mechanism.h).
  if (spec.name.rfind("blocks.", 0) != 0) return -1;
  size_t end = 7;
  int l = 0;
  while (end < spec.name.size() && std::isdigit((unsigned char)spec.name[end])) l = l * 10 + (spec.name[end++] - '0');
  return end > 7 && end < spec.name.size() && spec.name[end] == '.' ? l : -1;
}

template <class T>
AttentionPass<T> GPT<T>::attention_pass(Workspace& ws, int l, T* qkv, int pos_offset) const {
  const ModelConfig& m = cfg_.model;
  AttentionPass<T> pass;
  pass.layer = l; pass.B = ws.B; pass.Tq = ws.seq; pass.pos_offset = pos_offset;
  pass.H = m.n_head; pass.Hkv = m.kv_heads; pass.Dh = m.head_dim();
  pass.qkv = qkv; pass.qkv_stride = m.qkv_dim();
  return pass;
}

template <class T>
void GPT<T>::attention_kernel_terms(Workspace& ws, AttentionPass<T>& pass, bool backward) const {
  const int l = pass.layer;
  pass.scale = T(1) / std::sqrt(T(cfg_.model.head_dim()));
  for (int k : lattn_[l].mechanisms) {
    pass.state = ws.mechanisms[k].get();
    mechanisms_[k]->kernel_terms(pass);
  }
  if (backward)
    for (int k : lattn_[l].mechanisms) {
      pass.state = ws.mechanisms[k].get();
      mechanisms_[k]->kernel_gradient_slots(pass);
    }
}

template <class T>
int GPT<T>::count_valid(const int32_t* targets, size_t n) const {
  int c = 0;
  for (size_t i = 0; i < n; ++i) {
    if (targets[i] >= cfg_.model.vocab_size) fail("target token id ", targets[i], " at position ", i, " is outside the vocabulary");
    c += targets[i] >= 0;
  }
  return c;
}

template <class T>
double GPT<T>::train_micro_step(const int32_t* inputs, const int32_t* targets, T grad_scale, const T* weights) {
  ATTNLAB_CHECK(arena_.committed(), "plan() before train_micro_step()");
  const int N = B_ * T_;
  count_valid(targets, N);
  forward(ws_, inputs, 0, false);
  const kernels::LmHeadBf16 half = lm_head_half(ws_);
  const double loss = kernels::lm_head_ce_forward_backward(ws_.dln, dwte_, (T*)nullptr, ws_.lnf, wte_, targets, N, cfg_.model.d_model,
                                                           cfg_.model.vocab_size, grad_scale, ws_.ce_scratch, ws_.ce_chunk, weights,
                                                           ws_.half ? &half : nullptr);
  backward(ws_, inputs);
  return loss;
}

template <class T>
double GPT<T>::eval_loss(const int32_t* inputs, const int32_t* targets, T* losses) {
  ATTNLAB_CHECK(arena_.committed(), "plan() before eval_loss()");
  const int N = B_ * T_;
  count_valid(targets, N);
  forward(ws_, inputs, 0, false);
  const kernels::LmHeadBf16 half = lm_head_half(ws_);
  return kernels::lm_head_ce_forward(losses, ws_.lnf, wte_, targets, N, cfg_.model.d_model, cfg_.model.vocab_size, ws_.ce_scratch,
                                     ws_.ce_chunk, nullptr, ws_.half ? &half : nullptr);
}

template <class T>
void GPT<T>::logits(T* out, const int32_t* inputs) {
  ATTNLAB_CHECK(arena_.committed(), "plan() before logits()");
  forward(ws_, inputs, 0, false);
  const int N = B_ * T_, C = cfg_.model.d_model, V = cfg_.model.vocab_size;
  if (!ws_.half) return kernels::lm_head_logits(out, ws_.lnf, wte_, N, C, V);
  const kernels::LmHeadBf16 half = lm_head_half(ws_);  // as the training step computes them
  for (int r0 = 0; r0 < N; r0 += ws_.ce_chunk)
    kernels::ce_detail::chunk_logits(out + (size_t)r0 * V, ws_.lnf + (size_t)r0 * C, wte_, std::min(ws_.ce_chunk, N - r0), C,
                                     V, &half);
}

template <class T>
void GPT<T>::plan_inference(int B, int capacity, int max_chunk) {
  const ModelConfig& m = cfg_.model;
  if (B < 1 || capacity < 1 || max_chunk < 1) fail("inference shape must be positive");
  ATTNLAB_CHECK(!inf_arena_.committed(), "plan_inference() called twice");
  inf_B_ = B; cache_cap_ = capacity; cache_len_ = 0;
  // Caches and the last-row gather buffer: one allocation, made here, never in forward_cached.
  const size_t kvC = (size_t)m.kv_heads * m.head_dim(), per_layer = (size_t)B * capacity * kvC;
  cache_buf_ = Buffer((2 * m.n_layer * per_layer + (size_t)B * m.d_model) * sizeof(T));
  T* base = cache_buf_.template as<T>();
  k_cache_.assign(m.n_layer, nullptr);
  v_cache_.assign(m.n_layer, nullptr);
  for (int l = 0; l < m.n_layer; ++l) {
    k_cache_[l] = base + (2 * l) * per_layer;
    v_cache_[l] = base + (2 * l + 1) * per_layer;
  }
  inf_logits_scratch_ = base + 2 * m.n_layer * per_layer;
  plan_workspace(inf_arena_, inf_ws_, B, max_chunk, false);
  inf_max_rows_ = B * max_chunk;
  ensure_positions(capacity);
}

template <class T>
void GPT<T>::forward_cached(T* logits, const int32_t* tokens, int Tq, bool last_only) {
  ATTNLAB_CHECK(inf_arena_.committed(), "plan_inference() before forward_cached()");
  const ModelConfig& m = cfg_.model;
  if (Tq < 1 || (size_t)inf_B_ * Tq > (size_t)inf_max_rows_)
    fail("chunk of ", Tq, " tokens exceeds the planned inference chunk");
  if (cache_len_ + Tq > cache_cap_)
    fail("KV cache is full: ", cache_len_, " + ", Tq, " tokens exceed its capacity of ", cache_cap_);
  inf_ws_.B = inf_B_;
  inf_ws_.seq = Tq;
  inf_ws_.half_weights = half_decode_;
  forward(inf_ws_, tokens, cache_len_, true);
  cache_len_ += Tq;
  const int C = m.d_model, V = m.vocab_size;
  // Up to four rows with bf16 weights read the embedding's bf16 copy (the same values as wte_).
  auto head = [&](const T* x, int rows) {
    if constexpr (std::is_same_v<T, float>)
      if (half_decode_ && rows <= 4) return kernels::lm_head_logits(logits, x, half_wte_, rows, C, V);
    kernels::lm_head_logits(logits, x, wte_, rows, C, V);
  };
  if (!last_only) return head(inf_ws_.lnf, inf_B_ * Tq);
  for (int b = 0; b < inf_B_; ++b)
    std::memcpy(inf_logits_scratch_ + (size_t)b * C, inf_ws_.lnf + ((size_t)b * Tq + Tq - 1) * C, C * sizeof(T));
  head(inf_logits_scratch_, inf_B_);
}

template <class T>
double GPT<T>::forward_cached_loss(const int32_t* tokens, const int32_t* targets, int Tq, T* losses, int32_t* argmax) {
  ATTNLAB_CHECK(inf_arena_.committed(), "plan_inference() before forward_cached_loss()");
  const ModelConfig& m = cfg_.model;
  if (Tq < 1 || (size_t)inf_B_ * Tq > (size_t)inf_max_rows_)
    fail("chunk of ", Tq, " tokens exceeds the planned inference chunk");
  if (cache_len_ + Tq > cache_cap_)
    fail("KV cache is full: ", cache_len_, " + ", Tq, " tokens exceed its capacity of ", cache_cap_);
  const int N = inf_B_ * Tq;
  count_valid(targets, N);
  inf_ws_.B = inf_B_;
  inf_ws_.seq = Tq;
  inf_ws_.half_weights = half_decode_;
  forward(inf_ws_, tokens, cache_len_, true);
  cache_len_ += Tq;
  return kernels::lm_head_ce_forward(losses, inf_ws_.lnf, wte_, targets, N, m.d_model, m.vocab_size, inf_ws_.ce_scratch,
                                     inf_ws_.ce_chunk, argmax);
}

template class GPT<float>;
template class GPT<double>;

}  // namespace attnlab
