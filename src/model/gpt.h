// The pre-norm decoder-only GPT of docs/mechanisms.md §1, with hand-written forward and backward.
// Templated on the scalar type: float for training, double for whole-model finite-difference tests.
// Memory: parameters, gradients and Adam moments are one buffer each (ParamRegistry); activations
// for a (B, T) micro-batch are planned once in an Arena (plan()); nothing is allocated per step.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/bf16.h"
#include "kernels/attention/shape.h"
#include "kernels/cross_entropy.h"
#include "model/attention/mechanism.h"
#include "model/config.h"
#include "model/params.h"
#include "model/residual/residual.h"
#include "model/trace.h"

namespace attnlab {

// Told during a training backward when gradients become final, so that data-parallel training
// (train/data_parallel.h) can start reducing them while the backward goes on.
class BackwardListener {
 public:
  virtual ~BackwardListener() = default;
  // The backward of layer l is done (l = L-1 down to 0): the gradients of its tensors (those of
  // gradient_final_layer() = l) are final.
  virtual void layer_done(int l) = 0;
  // Between a layer's two sublayers: nothing new is final; a chance to progress communication.
  virtual void between_sublayers() = 0;
};

template <class T>
class GPT {
 public:
  explicit GPT(const Config& cfg);
  // The parameter layout (names, shapes, offsets) a model of this configuration has, without
  // allocating anything: for checking a checkpoint's tensors before a model is built from its
  // stored configuration (which may ask for terabytes).
  static ParamRegistry layout(const Config& cfg);

  const Config& config() const { return cfg_; }
  const ParamRegistry& registry() const { return reg_; }
  size_t num_params() const;  // sum of numel (without alignment padding)
  T* params() const { return params_.template as<T>(); }
  T* grads() const { return grads_.template as<T>(); }
  T* param(const std::string& name) const;  // pointer into params(); error if absent
  T* grad(const std::string& name) const;

  // GPT-2 init (§1.4) from a seed: N(0, 0.02²), residual outputs N(0, (0.02/sqrt(2L))²), biases 0, gains 1.
  void init_weights(uint64_t seed);
  void zero_grad();

  // The layer after whose backward the gradient of registry tensor `spec` is final: l for the
  // tensors of block l ("blocks.{l}."), -1 for the rest (embeddings, final norm, the residual
  // kind's tensors), which only the end of the backward completes.
  static int gradient_final_layer(const ParamSpec& spec);
  // While set, train_micro_step's backward reports to `listener` (null: off, the default).
  void set_backward_listener(BackwardListener* listener) { backward_listener_ = listener; }

  // Plans activation memory for micro-batches of (B, T) (T <= model.seq_len). Called once.
  void plan(int B, int seq);
  // Counts what plan(B, seq) would allocate (activation_bytes(), residual_activation_bytes())
  // without allocating it: `attnlab info`. The model cannot run afterwards.
  void plan_count_only(int B, int seq);
  int planned_B() const { return B_; }
  int planned_T() const { return T_; }
  size_t activation_bytes() const { return arena_.planned(); }
  // The residual kind's share of activation_bytes() (its states, histories and their gradients).
  size_t residual_activation_bytes() const { return ws_.residual ? ws_.residual->bytes : 0; }
  const Residual<T>& residual() const { return *residual_; }
  // Norm_f's input from the last forward over the planned (B, T) (B·T, d): tests and diagnostics.
  const T* final_residual() const { return residual_->final_input(*ws_.residual); }

  // One micro-batch: forward, fused LM-head cross-entropy forward+backward, backward. Gradients
  // accumulate (+=) scaled by grad_scale (pass 1/(valid targets × grad_accum) for a mean).
  // inputs/targets are (B, T) int32; a negative target is ignored. Returns the SUM of the losses.
  // weights (B, T), optional: per-token loss weights (synthetic tasks weight the answer, src/experiment/tasks.h);
  // the gradient of row i is then scaled by grad_scale·weights[i] and the return value is Σ weights·loss.
  double train_micro_step(const int32_t* inputs, const int32_t* targets, T grad_scale, const T* weights = nullptr);
  // Forward only; returns the sum of losses over valid targets (per-token losses into `losses` if given).
  double eval_loss(const int32_t* inputs, const int32_t* targets, T* losses = nullptr);
  // Forward only, full logits (B, T, V) for the planned shape (used by `attnlab grads` and tests).
  void logits(T* out, const int32_t* inputs);
  int count_valid(const int32_t* targets, size_t n) const;

  // ---- Diagnostics (docs/analysis.md) ----
  // The tracing hook: while set, every uncached forward shows each layer's attention and, after the
  // read-out, the residual kind's states to `obs` (model/trace.h). Null (the default) turns it off.
  void set_observer(ForwardObserver<T>* obs) { observer_ = obs; }
  // §8.5: replace read q's stream-j retrieval by src (planned rows × d) in the training workspace's
  // forwards (DAR only; null clears). See Residual::set_read_patch.
  void set_read_patch(int q, int j, const T* src) { residual_->set_read_patch(*ws_.residual, q, j, src); }

  // ---- Inference with a KV cache (sampling, `attnlab forward`) ----
  // Prepares a cache for batch B and up to `capacity` positions, processing chunks of at most
  // max_chunk tokens. Positions are absolute (offset = tokens already cached; §1.1).
  void plan_inference(int B, int capacity, int max_chunk);
  void reset_cache() { cache_len_ = 0; }
  int cache_len() const { return cache_len_; }
  // Appends Tq tokens per batch row (B, Tq) to the cache and writes logits (B, Tq, V)
  // (or only the last position's (B, V) when last_only).
  void forward_cached(T* logits, const int32_t* tokens, int Tq, bool last_only);
  // Appends Tq tokens per batch row like forward_cached, then scores them against targets (B, Tq)
  // (< 0 = ignored) through the chunked LM head: per-token losses into `losses` (B, Tq), and the
  // argmax id per position into `argmax` if given. No (B, Tq, V) logits are formed, so evaluating a
  // long sequence in chunks needs only the cache (linear in its length) and one chunk's activations
  // (long-context evaluation, docs/long-context.md). Returns the sum of the valid losses.
  double forward_cached_loss(const int32_t* tokens, const int32_t* targets, int Tq, T* losses, int32_t* argmax = nullptr);
  // Inference with bf16 weights (float models; `attnlab sample|eval|forward --weights bf16`): rounds
  // the matrices of the linear layers and the tied embedding to bf16 in place (to nearest even), so
  // every later forward, a GEMM over a prompt or a decoding step, multiplies by the same rounded
  // values, and keeps bf16 copies of them that the few-row products (decoding: up to 4 rows) read
  // instead: half the bytes a decoding step reads. Norms, biases and the other parameters stay
  // float, as do the activations and the KV cache. Not for training: the optimizer would step off
  // the rounded values (and a bf16 training forward rewrites the copies from them).
  void round_weights_to_bf16();
  bool bf16_weights() const { return half_decode_; }
  // Bytes a decoder must read from memory for one new token of one sequence at a cache length of
  // `context` positions: every parameter once (the tied embedding is read whole, as the output
  // projection; of a learned position table only the one row; 2 bytes each for the matrices read
  // in bf16 after round_weights_to_bf16), plus the keys and values of all layers at `context`
  // positions. The numerator of the decode bound (`attnlab sample`).
  struct DecodeBytes { double weights = 0, kv_cache = 0; };
  DecodeBytes decode_bytes(double context) const;
  // Bytes planned for inference: the KV cache plus the inference workspace (activations of one chunk).
  size_t inference_bytes() const { return cache_buf_.bytes() + inf_arena_.planned(); }

 private:
  struct LayerParams {
    T *ln1_w = nullptr, *ln1_b = nullptr, *qkv_w = nullptr, *qkv_b = nullptr, *proj_w = nullptr, *proj_b = nullptr;
    T *ln2_w = nullptr, *ln2_b = nullptr, *fc_w = nullptr, *fc_b = nullptr, *mlp_proj_w = nullptr, *mlp_proj_b = nullptr;
  };
  // The attention mechanisms (model/attention/) acting on layer l, in hook order, and the one that
  // owns its qkv projection, if any.
  struct LayerAttention {
    std::vector<int> mechanisms;  // indices into mechanisms_
    int projection_owner = -1;    // index into mechanisms_, or -1: the projection writes the packed rows
    int qkv_cols = 0;             // columns of the qkv projection: packed (H+2Hkv)·Dh, or the owner's
  };
  // train.precision = bf16 (float models only): bf16 copies of the matrices the linear layers and
  // the tied LM head multiply by, rewritten from the float weights at the start of every forward of
  // the training workspace (one pass over 2 bytes per weight, so nothing can go stale).
  struct HalfWeights {
    bf16 *qkv_w = nullptr, *proj_w = nullptr, *fc_w = nullptr, *mlp_proj_w = nullptr;
  };
  // Activations of one forward pass over (B, T) rows; inference and training each have one.
  struct Workspace {
    int B = 0, seq = 0;
    bool half = false;  // the linear layers and LM head run on bf16 operands (training workspace, bf16)
    bool half_weights = false;  // few-row products read the bf16 weight copies (inference, round_weights_to_bf16)
    std::unique_ptr<ResidualState> residual;  // the residual kind's states and gradients (residual.h)
    std::vector<std::unique_ptr<MechanismState>> mechanisms;  // per attention mechanism (mechanism.h), or null
    struct Layer {
      T *ln1 = nullptr, *ln1_mean = nullptr, *ln1_rstd = nullptr, *qkv = nullptr, *att = nullptr, *lse = nullptr;
      T *ln2 = nullptr, *ln2_mean = nullptr, *ln2_rstd = nullptr, *fc = nullptr, *act = nullptr;
      // bf16: the linear layers' inputs rounded, kept from the forward for the dW products
      bf16 *ln1_h = nullptr, *att_h = nullptr, *ln2_h = nullptr, *act_h = nullptr;
    };
    std::vector<Layer> layers;
    T *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr;
    // backward scratch (training only)
    T *dln = nullptr, *dqkv = nullptr, *datt = nullptr, *dfc = nullptr, *dact = nullptr;
    T* ce_scratch = nullptr;
    int ce_chunk = 0;
    T* attn_scratch = nullptr;  // the attention backward's partial dK, dV when B·Hkv is small
    size_t attn_scratch_size = 0;
    bf16* dout_h = nullptr;                            // bf16: a linear layer's dout, rounded
    bf16 *ce_x_h = nullptr, *ce_dlogits_h = nullptr;   // bf16: the LM head's chunk operands
  };
  void allocate_half_weights();  // the bf16 copies' buffer (train.precision = bf16, or bf16 inference)
  void refresh_half_weights();
  std::array<size_t, 4> half_sizes(int l) const;  // elements of qkv, proj, fc, mlp.proj weights
  // y = x·W + b, through the bf16 copies (x rounded into xh first) when ws.half.
  void linear_fwd(const Workspace& ws, T* out, const T* x, bf16* xh, const T* w, const bf16* wh, const T* b, int N,
                  int C, int OC) const;
  void linear_bwd(const Workspace& ws, T* dx, T* dw, T* db, const T* dout, const T* x, const bf16* xh, const T* w,
                  const bf16* wh, int N, int C, int OC) const;
  kernels::LmHeadBf16 lm_head_half(const Workspace& ws) const;
  void bind_layers(LayerParams* table, T* base) const;
  void plan_workspace(Arena& arena, Workspace& ws, int B, int seq, bool training, bool count_only = false);
  struct LayoutOnly {};
  GPT(const Config& cfg, LayoutOnly);  // builds reg_ (and what it needs) and allocates nothing
  void forward(Workspace& ws, const int32_t* inputs, int pos_offset, bool use_cache);
  void backward(Workspace& ws, const int32_t* inputs);
  // Layer l's attention pass over the workspace's rows (qkv: the packed rows, or their gradient).
  AttentionPass<T> attention_pass(Workspace& ws, int l, T* qkv, int pos_offset) const;
  // The kernel's sink, scale and extra terms from layer l's mechanisms (and, for the backward, their
  // gradient slots), into pass.
  void attention_kernel_terms(Workspace& ws, AttentionPass<T>& pass, bool backward) const;
  template <class Out>  // T, or bf16 (the bf16 input of the next linear layer)
  void norm_forward(Out* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N) const;
  // The MLP's activation of fc into act, or with ws.half into act_h (act is then null).
  void mlp_activation(const Workspace& ws, T* act, bf16* act_h, const T* fc, int N) const;
  void norm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const T* mean, const T* rstd, int N) const;

  Config cfg_;
  bool layernorm_ = true, gelu_ = true, learned_positions_ = false;  // model.norm, model.mlp, attn.pos = learned
  ForwardObserver<T>* observer_ = nullptr;
  BackwardListener* backward_listener_ = nullptr;
  std::unique_ptr<Residual<T>> residual_;  // residual.kind: where each sublayer reads and writes
  ParamRegistry reg_;
  Buffer params_, grads_;
  std::vector<LayerParams> layer_params_, layer_grads_;
  bool bf16_ = false;  // train.precision = bf16
  bool half_decode_ = false;  // round_weights_to_bf16() was called
  Buffer half_buf_;
  std::vector<HalfWeights> half_layers_;
  bf16* half_wte_ = nullptr;
  T *wte_ = nullptr, *wpe_ = nullptr, *lnf_w_ = nullptr, *lnf_b_ = nullptr;
  T *dwte_ = nullptr, *dwpe_ = nullptr, *dlnf_w_ = nullptr, *dlnf_b_ = nullptr;
  std::vector<std::unique_ptr<AttentionMechanism<T>>> mechanisms_;  // those acting on some layer, in hook order
  std::vector<LayerAttention> lattn_;
  int max_qkv_cols_ = 0;
  void ensure_positions(int n);      // the mechanisms' tables (RoPE, GOAT) cover positions < n

  int B_ = 0, T_ = 0;
  Arena arena_;
  Workspace ws_;

  // inference
  Arena inf_arena_;
  Workspace inf_ws_;
  std::vector<T*> k_cache_, v_cache_;  // per layer (B, capacity, Hkv*Dh)
  Buffer cache_buf_;
  int cache_cap_ = 0, cache_len_ = 0, inf_B_ = 0, inf_max_rows_ = 0;
  T* inf_logits_scratch_ = nullptr;
};

// ALiBi slopes m_h for H query heads (docs/mechanisms.md §1.2): 2^(−8(h+1)/H) for a power of two,
// otherwise the P2 = 2^floor(log2 H) slopes, then every other slope of 2·P2, keeping the first H−P2.
std::vector<double> alibi_slopes(int H);

extern template class GPT<float>;
extern template class GPT<double>;

}  // namespace attnlab
