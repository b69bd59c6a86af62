// AttnRes: Attention Residuals, Full (K = 1) and Block (docs/mechanisms.md §4). Sublayer l reads a
// per-token softmax over depth of the embedding, the completed block sums and the current block's
// partial sum, weighted by one zero-initialised pseudo-query w_l; the read-out has its own w_F.
//
// Storage (§4.4): the states S_0 = e and S_l = the current block's partial sum after sublayer l
// (F_l writes o_l into S_l's buffer and S_{l−1} is added in place when the block is already open,
// exactly the standard residual's trick). At a block's last sublayer S_l is the completed entry, so
// the history is stored once: entry 0 = S_0, entry j = S_{min(jK, 2L)}; every state's 1/ρ is computed
// once when it is written and reused by all later sublayers. Training also keeps each h_l (l ≥ 2;
// h_1 = e exactly, §4.5) and the depth weights.
//
// Backward: one gradient accumulator per history entry. A block's partial states share the
// accumulator of the entry they become (d partial_before += d partial_after, §4.4, is then free):
// when sublayer l's backward runs, dE[b(l)+1] holds exactly dLoss/dS_l = dLoss/do_l.
#include <omp.h>

#include <cstring>
#include <vector>

#include "kernels/depth_attention.h"
#include "model/residual/residual.h"

namespace attnlab {
namespace {

template <class T>
struct AttnResState : ResidualState {
  std::vector<T*> S, inv_rms;   // 2L+1 states (N, C) and their 1/ρ (N)
  std::vector<T*> h, weights;   // per sublayer l (index l): input (N, C), depth weights (N, R_l)
  T *final_out = nullptr, *final_weights = nullptr;
  // backward
  std::vector<T*> dE;           // per history entry (N, C)
  T *dh = nullptr, *scratch = nullptr, *dw_partials = nullptr;  // dw_partials: (threads, C), kernels/depth_attention.h
  int threads = 0;
  // per sublayer l: candidate values, their 1/ρ and gradient accumulators; index 2L+1: the read-out
  std::vector<std::vector<const T*>> cand, cand_inv;
  std::vector<std::vector<T*>> dcand;
};

template <class T>
class AttnRes final : public Residual<T> {
 public:
  explicit AttnRes(const Config& cfg)
      : L2_(2 * cfg.model.n_layer), C_(cfg.model.d_model), K_(cfg.residual.block_size),
        n_entries_(1 + (L2_ + K_ - 1) / K_) {}
  const char* kind() const override { return "attnres"; }

  void register_params(ParamRegistry& reg) const override {
    // Zero pseudo-queries: uniform depth weights at init, which the paper calls necessary (§4.3).
    for (int l = 1; l <= L2_; ++l) reg.add(residual_param(l, "query"), {C_}, Init::Zero, 0, false);
    reg.add(residual_final_param("query"), {C_}, Init::Zero, 0, false);
  }
  void bind(const ParamRegistry& reg, T* params, T* grads) override {
    w_.assign(L2_ + 2, nullptr);
    dw_.assign(L2_ + 2, nullptr);
    for (int l = 1; l <= L2_ + 1; ++l) {
      const ParamSpec* s = reg.find(l <= L2_ ? residual_param(l, "query") : residual_final_param("query"));
      w_[l] = params + s->offset;
      dw_[l] = grads + s->offset;
    }
  }

  std::unique_ptr<ResidualState> make_state() const override { return std::make_unique<AttnResState<T>>(); }
  void plan(Arena& arena, ResidualState& rs, size_t rows, bool training) const override {
    auto& s = st(rs);
    const size_t before = arena.planned();
    s.S.assign(L2_ + 1, nullptr);
    s.inv_rms.assign(L2_ + 1, nullptr);
    for (int i = 0; i <= L2_; ++i) {
      s.S[i] = arena.template take<T>(rows * C_);
      s.inv_rms[i] = arena.template take<T>(rows);
    }
    // Inference keeps no h or weights of earlier sublayers: one buffer of each serves them all.
    s.h.assign(L2_ + 1, nullptr);
    s.weights.assign(L2_ + 1, nullptr);
    T* shared_h = training ? nullptr : arena.template take<T>(rows * C_);
    T* shared_w = training ? nullptr : arena.template take<T>(rows * n_entries_);
    for (int l = 2; l <= L2_; ++l) {
      s.h[l] = training ? arena.template take<T>(rows * C_) : shared_h;
      s.weights[l] = training ? arena.template take<T>(rows * candidates(l)) : shared_w;
    }
    s.final_out = arena.template take<T>(rows * C_);
    s.final_weights = arena.template take<T>(rows * n_entries_);
    s.dE.assign(n_entries_, nullptr);
    if (training) {
      for (auto& d : s.dE) d = arena.template take<T>(rows * C_);
      s.dh = arena.template take<T>(rows * C_);
      s.scratch = arena.template take<T>(rows * n_entries_);
      if (!arena.committed()) s.threads = omp_get_max_threads();
      s.dw_partials = arena.template take<T>((size_t)s.threads * C_);
    }
    if (!arena.committed()) s.bytes = arena.planned() - before;
    // Candidate lists (§4.2): e and the completed entries, then the open block's partial, if any.
    s.cand.assign(L2_ + 2, {});
    s.cand_inv.assign(L2_ + 2, {});
    s.dcand.assign(L2_ + 2, {});
    for (int l = 2; l <= L2_ + 1; ++l) {
      const int b = block(l), entries = l <= L2_ ? b + 1 : n_entries_;
      for (int j = 0; j < entries; ++j) {
        s.cand[l].push_back(s.S[entry_state(j)]);
        s.cand_inv[l].push_back(s.inv_rms[entry_state(j)]);
        s.dcand[l].push_back(s.dE[j]);
      }
      if (l <= L2_ && partial_open(l)) {
        s.cand[l].push_back(s.S[l - 1]);
        s.cand_inv[l].push_back(s.inv_rms[l - 1]);
        s.dcand[l].push_back(s.dE[b + 1]);  // the partial's gradient lives in its block's entry
      }
    }
  }

  T* embedding(ResidualState& rs) const override { return st(rs).S[0]; }
  void begin(ResidualState& rs, int N) const override { kernels::rms_inverse(st(rs).inv_rms[0], st(rs).S[0], N, C_); }
  const T* read(ResidualState& rs, int l, int N) const override {
    auto& s = st(rs);
    if (l == 1) return s.S[0];  // a single candidate: h_1 = e exactly (§4.2)
    kernels::depth_attention_forward(s.h[l], s.weights[l], s.cand[l].data(), s.cand_inv[l].data(), s.cand[l].data(), w_[l], N,
                                     candidates(l), C_);
    return s.h[l];
  }
  T* branch(ResidualState& rs, int l) const override { return st(rs).S[l]; }
  void write(ResidualState& rs, int l, int N) const override {
    auto& s = st(rs);
    T* S = s.S[l];
    if (partial_open(l)) {  // partial ← partial + o_l
      const T* prev = s.S[l - 1];
      const size_t n = (size_t)N * C_;
#pragma omp parallel for simd schedule(static)
      for (size_t i = 0; i < n; ++i) S[i] += prev[i];
    }
    kernels::rms_inverse(s.inv_rms[l], S, N, C_);  // a key of every later sublayer (§4.4)
  }
  const T* read_out(ResidualState& rs, int N) const override {
    auto& s = st(rs);
    const int f = L2_ + 1;
    kernels::depth_attention_forward(s.final_out, s.final_weights, s.cand[f].data(), s.cand_inv[f].data(), s.cand[f].data(), w_[f],
                                     N, n_entries_, C_);
    return s.final_out;
  }
  const T* input(const ResidualState& rs, int l) const override { return l == 1 ? cst(rs).S[0] : cst(rs).h[l]; }
  const T* final_input(const ResidualState& rs) const override { return cst(rs).final_out; }

  T* read_out_grad(ResidualState& rs, int N) const override {
    auto& s = st(rs);
    for (T* d : s.dE) std::memset(d, 0, sizeof(T) * N * C_);
    std::memset(s.dh, 0, sizeof(T) * N * C_);
    return s.dh;
  }
  void read_out_backward(ResidualState& rs, int N) const override {
    auto& s = st(rs);
    const int f = L2_ + 1;
    kernels::depth_attention_backward(s.dcand[f].data(), s.dcand[f].data(), dw_[f], s.scratch, s.dh, s.final_weights,
                                      s.cand[f].data(), s.cand_inv[f].data(), s.cand[f].data(), w_[f], N, n_entries_, C_, s.dw_partials,
                                      s.threads);
  }
  const T* branch_grad(ResidualState& rs, int l, int) const override { return st(rs).dE[block(l) + 1]; }
  T* input_grad(ResidualState& rs, int l, int N) const override {
    auto& s = st(rs);
    if (l == 1) return s.dE[0];  // h_1 = e: dh_1 goes straight to d e (w_1's gradient is structurally 0, §1.5)
    std::memset(s.dh, 0, sizeof(T) * N * C_);
    return s.dh;
  }
  void read_backward(ResidualState& rs, int l, int N) const override {
    if (l == 1) return;
    auto& s = st(rs);
    kernels::depth_attention_backward(s.dcand[l].data(), s.dcand[l].data(), dw_[l], s.scratch, s.dh, s.weights[l],
                                      s.cand[l].data(), s.cand_inv[l].data(), s.cand[l].data(), w_[l], N, candidates(l), C_, s.dw_partials,
                                      s.threads);
  }
  const T* embedding_grad(ResidualState& rs, int) const override { return st(rs).dE[0]; }

  void inspect(const ResidualState& rs, int N, ResidualInspector<T>& ins) const override {
    const auto& s = cst(rs);
    ins.depth_weights(1, 0, nullptr, N, 1, 1);  // h_1 = e
    for (int l = 2; l <= L2_; ++l) ins.depth_weights(l, 0, s.weights[l], N, candidates(l), block(l) + 1);
    ins.depth_weights(L2_ + 1, 0, s.final_weights, N, n_entries_, n_entries_);
    for (int j = 0; j < n_entries_; ++j) ins.history_entry(j, 0, s.S[entry_state(j)], N, C_);
  }

 private:
  static AttnResState<T>& st(ResidualState& s) { return static_cast<AttnResState<T>&>(s); }
  static const AttnResState<T>& cst(const ResidualState& s) { return static_cast<const AttnResState<T>&>(s); }
  int block(int l) const { return (l - 1) / K_; }                 // 0-based block of sublayer l (l = 2L+1: past the end)
  bool partial_open(int l) const { return (l - 1) % K_ != 0; }    // sublayer l adds to a partial begun earlier
  int entry_state(int j) const { return std::min(j * K_, L2_); }  // the state that is history entry j
  int candidates(int l) const { return block(l) + 1 + (partial_open(l) ? 1 : 0); }

  int L2_, C_, K_, n_entries_;
  std::vector<T*> w_, dw_;  // index l = 1..2L, 2L+1 = read-out
};

}  // namespace

ATTNLAB_RESIDUAL_KIND(attnres) {
  ResidualKindInfo info("attnres", 20, "4");
  info.depth_streams = [](const Config&) { return 1; };
  set_residual_constructors<AttnRes>(info);
  return info;
}

}  // namespace attnlab
