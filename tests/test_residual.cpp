// Residual kinds (src/model/residual/, docs/mechanisms.md §4, §5, §7): the invariants of §4.5 and §5.4,
// finite-difference gradients in float64 through the residual interface alone (synthetic sublayers)
// and through the whole model, KV-cached == uncached logits, exact resume, and the config keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <tuple>
#include <omp.h>

#include "check.h"
#include "core/json.h"
#include "model_util.h"
#include "core/error.h"
#include "core/rng.h"
#include "data/shard.h"
#include "model/gpt.h"
#include "model/residual/residual.h"
#include "model/residual/streams.h"
#include "train/trainer.h"

using namespace attnlab;
namespace fs = std::filesystem;

namespace {

const char* kModel = "model.n_layer = 2\nmodel.d_model = 16\nmodel.n_head = 4\nmodel.seq_len = 8\nmodel.vocab_size = 23\n";

Config tiny(const std::string& extra) { return resolve_config(parse_config_text(kModel + extra, "test")); }

std::string error_of(const std::string& extra) {
  try {
    tiny(extra);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

using test::random_tokens;

// Thousands of tiny forward passes: one thread (two CTest jobs share two cores; see test_model.cpp).
struct OneThread {
  int saved = omp_get_max_threads();
  OneThread() { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(saved); }
};

// ---------------------------------------------------------------------------------------------
// The residual interface driven alone, with synthetic sublayers F_l(h) = tanh(g_l∘h + c_l) (random
// g_l, c_l), so that its forward can be compared with direct implementations of docs/mechanisms.md and its
// backward with finite differences of every input and parameter (loss <G, read_out>).
template <class T>
struct Harness {
  Config cfg;
  std::unique_ptr<Residual<T>> R;
  ParamRegistry reg;
  std::vector<T> params, grads;
  Arena arena;
  std::unique_ptr<ResidualState> state;
  int N, C, L2;
  std::vector<std::vector<T>> gain, shift;
  std::vector<std::vector<T>> h, o;  // copies of the last forward's sublayer inputs and outputs

  Harness(const std::string& extra, int rows, uint64_t seed) : cfg(tiny(extra)), R(make_residual<T>(cfg)), N(rows) {
    C = cfg.model.d_model;
    L2 = 2 * cfg.model.n_layer;
    R->register_params(reg);
    reg.finalize();
    params.assign(reg.total(), T(0));
    grads.assign(reg.total(), T(0));
    R->bind(reg, params.data(), grads.data());
    init_params(seed);
    state = R->make_state();
    R->plan(arena, *state, N, true);
    arena.commit();
    R->plan(arena, *state, N, true);
    Rng r(seed + 100);
    gain.resize(L2 + 1);
    shift.resize(L2 + 1);
    for (int l = 1; l <= L2; ++l)
      for (int c = 0; c < C; ++c) {
        gain[l].push_back(T(0.5 + r.uniform()));
        shift[l].push_back(T(0.3 * r.normal()));
      }
  }
  void init_params(uint64_t seed) {  // the model's init (GPT::init_weights)
    Rng r(seed);
    for (const auto& s : reg.specs())
      for (size_t i = 0; i < s.numel; ++i) {
        T& p = params[s.offset + i];
        switch (s.init) {
          case Init::Normal: p = T(r.normal() * s.init_value); break;
          case Init::Zero: p = 0; break;
          case Init::One: p = 1; break;
          case Init::Constant: p = T(s.init_value); break;
          case Init::Values: p = T(s.init_values[i]); break;
        }
      }
  }
  void perturb(uint64_t seed, double scale) {
    Rng r(seed);
    for (const auto& s : reg.specs())
      for (size_t i = 0; i < s.numel; ++i) params[s.offset + i] += T(scale * r.normal());
  }
  T* param(const std::string& name) { return params.data() + reg.find(name)->offset; }

  std::vector<T> forward(const std::vector<T>& e) {
    std::copy(e.begin(), e.end(), R->embedding(*state));
    R->begin(*state, N);
    h.assign(L2 + 1, {});
    o.assign(L2 + 1, {});
    for (int l = 1; l <= L2; ++l) {
      const T* in = R->read(*state, l, N);
      h[l].assign(in, in + (size_t)N * C);
      T* out = R->branch(*state, l);
      for (int i = 0; i < N; ++i)
        for (int c = 0; c < C; ++c) out[(size_t)i * C + c] = std::tanh(gain[l][c] * in[(size_t)i * C + c] + shift[l][c]);
      o[l].assign(out, out + (size_t)N * C);
      R->write(*state, l, N);
    }
    const T* f = R->read_out(*state, N);
    return std::vector<T>(f, f + (size_t)N * C);
  }
  // After forward(): accumulates parameter gradients into `grads`, returns dLoss/de for loss <G, read_out>.
  std::vector<T> backward(const std::vector<T>& G) {
    T* df = R->read_out_grad(*state, N);
    for (size_t i = 0; i < G.size(); ++i) df[i] += G[i];
    R->read_out_backward(*state, N);
    for (int l = L2; l >= 1; --l) {
      const T* dout = R->branch_grad(*state, l, N);
      std::vector<T> dh((size_t)N * C);
      for (int i = 0; i < N; ++i)
        for (int c = 0; c < C; ++c) {
          const size_t k = (size_t)i * C + c;
          dh[k] = dout[k] * (1 - o[l][k] * o[l][k]) * gain[l][c];
        }
      T* acc = R->input_grad(*state, l, N);  // written only after `dout` is consumed (the contract)
      for (size_t k = 0; k < dh.size(); ++k) acc[k] += dh[k];
      R->read_backward(*state, l, N);
    }
    const T* de = R->embedding_grad(*state, N);
    return std::vector<T>(de, de + (size_t)N * C);
  }
};

double rms_ng_dot(const std::vector<double>& w, const double* v, int C) {  // w·RMSNorm_ng(v)
  double sq = 0, dot = 0;
  for (int c = 0; c < C; ++c) sq += v[c] * v[c];
  const double rho = std::sqrt(sq / C + 1e-6);
  for (int c = 0; c < C; ++c) dot += w[c] * v[c] / rho;
  return dot;
}

// DepthAttn of §4.1 on one row, written directly.
std::vector<double> depth_attn(const std::vector<const double*>& cand, const std::vector<double>& w, int C) {
  std::vector<double> s;
  double mx = -INFINITY, z = 0;
  for (const double* v : cand) {
    s.push_back(rms_ng_dot(w, v, C));
    mx = std::max(mx, s.back());
  }
  for (double& x : s) z += (x = std::exp(x - mx));
  std::vector<double> out(C, 0.0);
  for (size_t r = 0; r < cand.size(); ++r)
    for (int c = 0; c < C; ++c) out[c] += s[r] / z * cand[r][c];
  return out;
}

std::vector<double> query(Harness<double>& hs, const std::string& name) {
  const double* p = hs.param(name);
  return std::vector<double>(p, p + hs.C);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Configuration (§7.2).
TEST(ResidualConfig, KeysDefaultsAndValidation) {
  EXPECT_EQ(tiny("").residual.kind, "standard");
  EXPECT_EQ(tiny("residual.kind = attnres\n").residual.block_size, 1);  // §7.2 default for attnres
  EXPECT_EQ(tiny("residual.kind = mhc\n").residual.streams, 4);
  const Config m = tiny("residual.kind = mhc\nresidual.streams = 2\nresidual.mhc.sinkhorn_iters = 7\nresidual.mhc.phi_init = normal\n");
  EXPECT_EQ(m.residual.mhc_sinkhorn_iters, 7);
  EXPECT_EQ(m.residual.mhc_phi_init, "normal");
  // block_size ≥ 1, streams ≥ 2; inactive keys are errors naming the key
  EXPECT_NE(error_of("residual.kind = attnres\nresidual.block_size = 0\n").find("residual.block_size"), std::string::npos);
  EXPECT_NE(error_of("residual.kind = hyper\nresidual.streams = 1\n").find("residual.streams"), std::string::npos);
  EXPECT_NE(error_of("residual.block_size = 2\n").find("residual.block_size is set but has no effect"), std::string::npos);
  EXPECT_NE(error_of("residual.kind = attnres\nresidual.streams = 2\n").find("residual.streams"), std::string::npos);
  EXPECT_NE(error_of("residual.kind = mhc\nresidual.hc.scale_init = 0.1\n").find("residual.hc.scale_init"), std::string::npos);
  EXPECT_NE(error_of("residual.kind = hyper\nresidual.mhc.alpha_init = 0.1\n").find("residual.mhc.alpha_init"), std::string::npos);
  EXPECT_NE(error_of("residual.kind = mhc\nresidual.mhc.home_weight = 1\n").find("residual.mhc.home_weight"), std::string::npos);
  EXPECT_NE(error_of("residual.kind = mhc\nresidual.mhc.res_diag = 0\n").find("residual.mhc.res_diag"), std::string::npos);
  EXPECT_NE(error_of("residual.kind = mhc\nresidual.mhc.phi_init = ones\n").find("residual.mhc.phi_init"), std::string::npos);
  EXPECT_NE(error_of("residual.kind = hyper\nresidual.hc.unknown = 1\n").find("unknown configuration key"), std::string::npos);
  // dar's own keys: tests/test_dar.cpp
  EXPECT_EQ(error_of("residual.kind = dar\n"), "");
}

TEST(ResidualConfig, JsonRoundTrip) {
  for (const char* extra : {"residual.kind = attnres\nresidual.block_size = 3\n",
                            "residual.kind = hyper\nresidual.streams = 3\nresidual.hc.scale_init = 0.05\n",
                            "residual.kind = mhc\nresidual.streams = 2\nresidual.mhc.sinkhorn_iters = 9\nresidual.mhc.alpha_init = 0.02\n"
                            "residual.mhc.phi_init = normal\nresidual.mhc.home_weight = 0.8\nresidual.mhc.res_diag = 0.7\n"}) {
    const Config c = tiny(extra);
    const Config back = Config::from_json(c.to_json(), "roundtrip");
    EXPECT_EQ(back.to_json().dump(), c.to_json().dump()) << extra;
  }
  const auto j = tiny("residual.kind = mhc\n").to_json();
  EXPECT_TRUE(j.contains("residual.mhc.res_diag"));
  EXPECT_FALSE(j.contains("residual.block_size"));  // inactive keys are not stored
}

// ---------------------------------------------------------------------------------------------
// AttnRes (§4).
TEST(AttnRes, FullEqualsDirectImplementation) {
  // §4.5: K = 1 is h_l = Σ_{i<l} softmax_i(w_l·RMSNorm_ng(v_i))·v_i with v_0 = e, v_i = o_i, and the
  // read-out the same over v_0..v_2L with w_F.
  Harness<double> hs("residual.kind = attnres\n", 5, 1);
  hs.perturb(2, 1.0);
  const auto e = test::random_vec<double>((size_t)hs.N * hs.C, 3);
  const auto out = hs.forward(e);
  double worst = 0;
  for (int i = 0; i < hs.N; ++i) {
    std::vector<const double*> v{e.data() + (size_t)i * hs.C};
    for (int l = 1; l <= hs.L2; ++l) {
      const auto h = depth_attn(v, query(hs, residual_param(l, "query")), hs.C);
      for (int c = 0; c < hs.C; ++c) worst = std::max(worst, std::abs(h[c] - hs.h[l][(size_t)i * hs.C + c]));
      v.push_back(hs.o[l].data() + (size_t)i * hs.C);
    }
    const auto f = depth_attn(v, query(hs, residual_final_param("query")), hs.C);
    for (int c = 0; c < hs.C; ++c) worst = std::max(worst, std::abs(f[c] - out[(size_t)i * hs.C + c]));
  }
  EXPECT_LT(worst, 1e-14);
}

TEST(AttnRes, BlockEqualsSpecPseudocode) {
  // §4.2 as written: completed = [e]; partial = EMPTY; close after l mod K = 0 or l = 2L.
  for (int K : {2, 3, 4, 9}) {
    Harness<double> hs("residual.kind = attnres\nresidual.block_size = " + std::to_string(K) + "\n", 3, K);
    hs.perturb(5, 1.0);
    const auto e = test::random_vec<double>((size_t)hs.N * hs.C, 6);
    const auto out = hs.forward(e);
    double worst = 0;
    for (int i = 0; i < hs.N; ++i) {
      std::vector<std::vector<double>> completed{std::vector<double>(e.begin() + (size_t)i * hs.C, e.begin() + (size_t)(i + 1) * hs.C)};
      std::vector<double> partial;
      for (int l = 1; l <= hs.L2; ++l) {
        std::vector<const double*> cand;
        for (auto& c : completed) cand.push_back(c.data());
        if (!partial.empty()) cand.push_back(partial.data());
        const auto h = depth_attn(cand, query(hs, residual_param(l, "query")), hs.C);
        for (int c = 0; c < hs.C; ++c) worst = std::max(worst, std::abs(h[c] - hs.h[l][(size_t)i * hs.C + c]));
        const double* o = hs.o[l].data() + (size_t)i * hs.C;
        if (partial.empty()) partial.assign(o, o + hs.C);
        else for (int c = 0; c < hs.C; ++c) partial[c] += o[c];
        if (l % K == 0 || l == hs.L2) {
          completed.push_back(partial);
          partial.clear();
        }
      }
      EXPECT_EQ(completed.size(), 1u + (hs.L2 + K - 1) / K);  // histories: 1 + ceil(2L/K) entries (§4.4)
      std::vector<const double*> cand;
      for (auto& c : completed) cand.push_back(c.data());
      const auto f = depth_attn(cand, query(hs, residual_final_param("query")), hs.C);
      for (int c = 0; c < hs.C; ++c) worst = std::max(worst, std::abs(f[c] - out[(size_t)i * hs.C + c]));
    }
    EXPECT_LT(worst, 1e-14) << "K = " << K;
  }
}

TEST(AttnRes, FirstInputIsEmbeddingAndZeroQueriesGiveExactMeans) {
  for (int K : {1, 2}) {
    Harness<double> hs("residual.kind = attnres\nresidual.block_size = " + std::to_string(K) + "\n", 4, 7);  // init: w = 0
    const auto e = test::random_vec<double>((size_t)hs.N * hs.C, 8);
    const auto out = hs.forward(e);
    EXPECT_EQ(hs.h[1], e);  // h_1 = e exactly (§4.5)
    // w = 0: sublayer 2 sees e and o_1 (as entry for K = 1, as partial for K = 2): exactly their mean.
    double worst = 0;
    for (size_t k = 0; k < e.size(); ++k) worst = std::max(worst, std::abs(hs.h[2][k] - (e[k] + hs.o[1][k]) / 2));
    EXPECT_LT(worst, 1e-16) << "K = " << K;
  }
}

// Key scale invariance (§4.5) is a property of the primitive: tests/kernels/test_depth_attention.cpp.

// Gradients that are zero by structure, whatever the weights: AttnRes's w_1 (a single candidate, §1.5),
// and mHC's residual map at sublayer 1, which mixes n copies of e with rows summing to 1 (§5.3, point 3).
bool structurally_zero(const std::string& name) {
  if (name == residual_param(1, "query")) return true;
  for (const char* p : {"phi_res", "alpha_res", "b_res"})
    if (name == residual_param(1, p)) return true;
  return false;
}

// ---------------------------------------------------------------------------------------------
// Gradients through the interface alone: e and every residual parameter, after a perturbation away
// from the init (so that no gradient is structurally zero except where §1.5 says so).
void check_interface_gradients(const std::string& extra, int rows = 3) {
  Harness<double> hs(extra, rows, 21);
  hs.perturb(22, 0.3);
  auto e = test::random_vec<double>((size_t)hs.N * hs.C, 23);
  const auto G = test::random_vec<double>((size_t)hs.N * hs.C, 24);
  hs.forward(e);
  std::fill(hs.grads.begin(), hs.grads.end(), 0.0);
  const auto de = hs.backward(G);
  auto loss = [&]() { return test::dot(hs.forward(e), G); };
  test::expect_grad_close(de, test::numeric_grad(e, loss, 1e-4), 1e-6, (extra + " embedding").c_str());
  for (const auto& s : hs.reg.specs()) {
    std::vector<double> x(hs.params.begin() + s.offset, hs.params.begin() + s.offset + s.numel);
    std::vector<double> analytic(hs.grads.begin() + s.offset, hs.grads.begin() + s.offset + s.numel);
    auto loss_p = [&]() {
      std::copy(x.begin(), x.end(), hs.params.begin() + s.offset);
      return loss();
    };
    const auto numeric = test::numeric_grad(x, loss_p, 1e-4);
    std::copy(x.begin(), x.end(), hs.params.begin() + s.offset);
    if (structurally_zero(s.name)) {
      for (double g : analytic) EXPECT_LT(std::abs(g), 1e-15) << s.name;
      continue;
    }
    // h = 1e-4: the finite difference's truncation and rounding are bounded per entry by
    // expect_grad_close (tests/check.h); 1e-6 of max(tensor scale, 1e-2) is left for the analytic side.
    test::expect_grad_close(analytic, numeric, 1e-6, extra + " " + s.name, 1e-2);
  }
}

TEST(ResidualGrad, InterfaceAttnRes) {
  OneThread one;
  for (int K : {1, 2, 3, 4}) check_interface_gradients("residual.kind = attnres\nresidual.block_size = " + std::to_string(K) + "\n");
}
TEST(ResidualGrad, InterfaceHyper) {
  OneThread one;
  check_interface_gradients("residual.kind = hyper\nresidual.streams = 2\n");
  check_interface_gradients("residual.kind = hyper\nresidual.streams = 3\n");
}
TEST(ResidualGrad, InterfaceMhc) {
  OneThread one;
  check_interface_gradients("residual.kind = mhc\nresidual.streams = 2\n", 19);  // a full and a padded token group
  check_interface_gradients("residual.kind = mhc\nresidual.streams = 4\n");
  check_interface_gradients("residual.kind = mhc\nresidual.streams = 3\nresidual.mhc.sinkhorn_iters = 5\n");
}

// ---------------------------------------------------------------------------------------------
// Whole model (test_model.cpp's pattern): every parameter tensor, up to 24 entries each, by central
// differences in float64 — the residual parameters, through the unrolled Sinkhorn, and the
// embedding E (whose gradient is the sum of the head's and the residual's d e).
// The residual parameters are moved further (0.5) than the rest (0.1): far from the init, the depth and
// stream maps vary by token and their gradients are large enough to be checked.
template <class T>
void randomize(GPT<T>& m, uint64_t seed) {
  m.init_weights(seed);
  Rng r(seed + 1);
  for (const auto& s : m.registry().specs()) {
    const double scale = s.name.rfind("residual.", 0) == 0 ? 0.5 : 0.1;
    for (size_t i = 0; i < s.numel; ++i) m.params()[s.offset + i] += T(scale * r.normal());
  }
}

void check_model_gradients(const std::string& extra) {
  OneThread one;
  const Config cfg = tiny(extra);
  GPT<double> m(cfg);
  randomize(m, 3);
  const int B = 2, T = 5;
  m.plan(B, T);
  auto in = random_tokens(B * T, cfg.model.vocab_size, 5), tgt = random_tokens(B * T, cfg.model.vocab_size, 6);
  tgt[3] = -1;
  const int valid = m.count_valid(tgt.data(), tgt.size());
  m.zero_grad();
  m.train_micro_step(in.data(), tgt.data(), 1.0 / valid);
  Rng pick(17);
  int residual_tensors = 0;
  for (const auto& s : m.registry().specs()) {
    residual_tensors += s.name.rfind("residual.", 0) == 0;
    const test::FdSample fd = test::fd_sample(m, s, pick, [&] { return m.eval_loss(in.data(), tgt.data()) / valid; });
    const auto& analytic = fd.analytic;
    const auto& numeric = fd.numeric;
    if (structurally_zero(s.name)) continue;  // checked through the interface
    // The finite difference's own error is bounded in expect_grad_close; 1e-6 of max(scale, 1e-4) beyond it.
    test::expect_grad_close(analytic, numeric, 1e-6, extra + " " + s.name, 1e-4);
  }
  EXPECT_GT(residual_tensors, 0) << extra;
}

TEST(ResidualGrad, ModelAttnResFull) { check_model_gradients("residual.kind = attnres\n"); }
TEST(ResidualGrad, ModelAttnResBlock2) { check_model_gradients("residual.kind = attnres\nresidual.block_size = 2\n"); }
TEST(ResidualGrad, ModelAttnResBlock3RmsSwiglu) {
  check_model_gradients("residual.kind = attnres\nresidual.block_size = 3\nmodel.norm = rmsnorm\nmodel.mlp = swiglu\n");
}
TEST(ResidualGrad, ModelHyper2) { check_model_gradients("residual.kind = hyper\nresidual.streams = 2\n"); }
TEST(ResidualGrad, ModelMhc2) { check_model_gradients("residual.kind = mhc\nresidual.streams = 2\nattn.pos = learned\n"); }
TEST(ResidualGrad, ModelMhc4) { check_model_gradients("residual.kind = mhc\nresidual.streams = 4\n"); }
// §7.1: XSA and GOAT live inside F_l, so they compose with every residual kind.
TEST(ResidualGrad, ModelWithXsaAndGoat) {
  check_model_gradients("residual.kind = attnres\nresidual.block_size = 2\nattn.xsa = gated\n");
  check_model_gradients("residual.kind = mhc\nresidual.streams = 2\nattn.pos = goat\nattn.goat.pos_rank = 1\nmodel.n_head = 2\n");
}

// ---------------------------------------------------------------------------------------------
// HC and mHC at init equal the baseline (§5.3 point 1, §5.4): the collapsed state over n equals a
// standard model's final residual stream with the same weights (every stream is that stream).
TEST(Streams, InitEqualsBaseline) {
  for (const char* extra : {"residual.kind = hyper\nresidual.streams = 2\n", "residual.kind = hyper\nresidual.streams = 4\n",
                            "residual.kind = mhc\nresidual.streams = 2\n", "residual.kind = mhc\nresidual.streams = 4\n",
                            "residual.kind = mhc\nresidual.streams = 3\nresidual.mhc.home_weight = 0.6\nresidual.mhc.res_diag = 0.5\n"}) {
    const Config cfg = tiny(extra);
    const int n = cfg.residual.streams;
    GPT<double> base(tiny("")), wide(cfg);
    base.init_weights(31);
    wide.init_weights(31);
    for (const auto& s : base.registry().specs())  // same transformer weights, whatever the registration order
      std::copy(base.params() + s.offset, base.params() + s.offset + s.numel, wide.param(s.name));
    base.plan(2, 8);
    wide.plan(2, 8);
    const auto in = random_tokens(16, 23, 32);
    std::vector<double> lb(16 * 23), lw(16 * 23);
    base.logits(lb.data(), in.data());
    wide.logits(lw.data(), in.data());
    double worst = 0, scale = 0;
    for (int k = 0; k < 16 * 16; ++k) {
      worst = std::max(worst, std::abs(wide.final_residual()[k] / n - base.final_residual()[k]));
      scale = std::max(scale, std::abs(base.final_residual()[k]));
    }
    EXPECT_LT(worst, 1e-15 * std::max(1.0, scale)) << extra;  // rounding only (docs/mechanisms.md §5.3: < 2e-15)
  }
}

// Negative control (§5.4): with uniform bpre and Φ = 0 the model is symmetric under stream permutations,
// so the streams stay identical and the residual map, which mixes identical streams, gets no gradient,
// step after step. With the home-stream init the streams differ after one update.
TEST(Streams, MhcUniformReadNeverBreaksSymmetry) {
  OneThread one;
  for (bool uniform : {true, false}) {
    const Config cfg = tiny("residual.kind = mhc\nresidual.streams = 4\n");
    GPT<double> m(cfg);
    m.init_weights(41);
    if (uniform)
      for (int l = 1; l <= 4; ++l) std::fill_n(m.param(residual_param(l, "b_pre")), 4, -std::log(3.0));  // Hpre = 1/4
    m.plan(2, 8);
    double max_res_grad = 0;
    for (int step = 0; step < 4; ++step) {
      const auto in = random_tokens(16, 23, 50 + step), tgt = random_tokens(16, 23, 60 + step);
      m.zero_grad();
      m.train_micro_step(in.data(), tgt.data(), 1.0 / 16);
      if (step > 0)
        for (int l = 2; l <= 4; ++l)
          for (const char* name : {"b_res", "phi_res", "alpha_res"}) {
            const ParamSpec* s = m.registry().find(residual_param(l, name));
            for (size_t i = 0; i < s->numel; ++i) max_res_grad = std::max(max_res_grad, std::abs(m.grads()[s->offset + i]));
          }
      for (size_t i = 0; i < m.registry().total(); ++i) m.params()[i] -= 0.5 * m.grads()[i];  // SGD
    }
    // Measured: 4e-20 (uniform, rounding) against 3e-11 (home init; small because 3 SGD steps from the
    // init move the streams apart only a little): nine orders of magnitude.
    if (uniform) EXPECT_LT(max_res_grad, 1e-17) << "uniform bpre: the streams must stay identical";
    else EXPECT_GT(max_res_grad, 1e-13) << "home-stream init: the streams must differ after one update";
  }
}

// mHC's three blocked float kernels (streams.h: register blocks of 2 or 3 vectors of columns, rows
// and projections in blocks of 4 or 6, scalar tails) against plain double sums, on shapes with
// partial blocks everywhere. Bound: each output is a float sum of n products of float inputs, so
// |float − exact| ≤ γ_n·Σ|terms| with γ_n = n·u/(1 − n·u), u = 2^-24, in any summation order and
// with or without fused multiply-adds (the standard bound for recursive summation of rounded
// products); n counts every product and every addition into the result (the add to the existing
// value, and for project_back the k·x term and k's own float dot over P terms, below). A wrong index,
// a dropped tail or a stale block gives errors of the size of the terms, far above γ_n·Σ|terms|.
TEST(Streams, BlockedKernelsMatchDoubleSums) {
  const double u = std::ldexp(1.0, -24);
  auto gamma = [&](double n) { return n * u / (1 - n * u); };
  for (auto [rows, P, C] : {std::tuple{16, 24, 1024}, std::tuple{5, 7, 77}, std::tuple{3, 4, 16}, std::tuple{9, 6, 40}}) {
    SCOPED_TRACE(testing::Message() << "rows " << rows << " P " << P << " C " << C);
    const auto x = test::random_vec<float>((size_t)rows * C, 1), zs = test::random_vec<float>((size_t)rows * P, 2),
               a = test::random_vec<float>((size_t)rows * P, 3), acc0 = test::random_vec<float>((size_t)P * (C + 3), 4),
               dx0 = test::random_vec<float>((size_t)rows * C, 5), rstd = test::random_vec<float>(rows, 6, 0.3);
    const auto WT = test::random_vec<float>((size_t)P * (C + 3), 7);
    const size_t ld = C + 3;  // a stride with a tail, as the callers' padded ones
    // add_outer_rows: acc (P, C at ld) += zsᵀ·x over the rows.
    std::vector<float> acc = acc0, pack((size_t)rows * C);
    streams::add_outer_rows(acc.data(), ld, zs.data(), x.data(), 0, rows, P, C, pack.data());
    double worst = 0;
    for (int j = 0; j < P; ++j)
      for (int c = 0; c < C; ++c) {
        double exact = acc0[j * ld + c], mag = std::abs(exact);
        for (int r = 0; r < rows; ++r) {
          exact += double(zs[r * P + j]) * x[r * C + c];
          mag += std::abs(double(zs[r * P + j]) * x[r * C + c]);
        }
        worst = std::max(worst, std::abs(acc[j * ld + c] - exact) / (gamma(rows + 1) * mag + 1e-300));
      }
    EXPECT_LT(worst, 1.0) << "add_outer_rows: worst error / bound";
    // project_back_rms_ng_rows: dx += zs·Wᵀ − k·x, k = rstd·(zs·a)/C, rows 1..rows−1 (a start inside
    // a block of four).
    std::vector<float> dx = dx0;
    streams::project_back_rms_ng_rows(dx.data(), zs.data(), a.data(), WT.data(), ld, x.data(), rstd.data(), 1, rows, P, C);
    worst = 0;
    for (int c = 0; c < C; ++c) EXPECT_EQ(dx[c], dx0[c]) << "row 0 is outside the range";
    for (int r = 1; r < rows; ++r) {
      double dot = 0, dot_mag = 0;
      for (int j = 0; j < P; ++j) {
        dot += double(zs[r * P + j]) * a[r * P + j];
        dot_mag += std::abs(double(zs[r * P + j]) * a[r * P + j]);
      }
      const double k = rstd[r] * dot / C;
      // k in float errs by at most γ_{P+2}·|rstd|·dot_mag/C (the dot, then two roundings); that error
      // times |x| joins each output's bound.
      const double k_err = gamma(P + 2) * std::abs(double(rstd[r])) * dot_mag / C;
      for (int c = 0; c < C; ++c) {
        double exact = double(dx0[r * C + c]) - k * x[r * C + c], mag = std::abs(double(dx0[r * C + c])) + std::abs(k * x[r * C + c]);
        for (int j = 0; j < P; ++j) {
          exact += double(zs[r * P + j]) * WT[j * ld + c];
          mag += std::abs(double(zs[r * P + j]) * WT[j * ld + c]);
        }
        const double bound = gamma(P + 2) * mag + k_err * std::abs(double(x[r * C + c]));
        worst = std::max(worst, std::abs(dx[r * C + c] - exact) / (bound + 1e-300));
      }
    }
    EXPECT_LT(worst, 1.0) << "project_back_rms_ng_rows: worst error / bound";
    // project_rows: out (rows, P) = x·W, W (C, ld_w) zero beyond column P, rows 1..rows−1.
    const size_t ld_w = (size_t)(P + streams::kProjectBlock<float> - 1) / streams::kProjectBlock<float> * streams::kProjectBlock<float>;
    std::vector<float> Wf((size_t)C * ld_w, 0.0f), out((size_t)rows * P, -7.0f);
    for (int c = 0; c < C; ++c)
      for (int j = 0; j < P; ++j) Wf[c * ld_w + j] = WT[(size_t)j * ld + c];
    streams::project_rows(out.data(), x.data(), Wf.data(), ld_w, 1, rows, P, C);
    worst = 0;
    for (int j = 0; j < P; ++j) EXPECT_EQ(out[j], -7.0f) << "row 0 is outside the range";
    for (int r = 1; r < rows; ++r)
      for (int j = 0; j < P; ++j) {
        double exact = 0, mag = 0;
        for (int c = 0; c < C; ++c) {
          exact += double(x[r * C + c]) * Wf[c * ld_w + j];
          mag += std::abs(double(x[r * C + c]) * Wf[c * ld_w + j]);
        }
        worst = std::max(worst, std::abs(out[r * P + j] - exact) / (gamma(C) * mag + 1e-300));
      }
    EXPECT_LT(worst, 1.0) << "project_rows: worst error / bound";
  }
}

// ---------------------------------------------------------------------------------------------
// KV-cached == uncached logits for every kind (depth and stream mixing never cross positions, §7.1).
TEST(Residual, CachedLogitsEqualUncached) {
  for (const char* extra : {"residual.kind = standard\n", "residual.kind = attnres\n", "residual.kind = attnres\nresidual.block_size = 3\n",
                            "residual.kind = hyper\nresidual.streams = 3\n", "residual.kind = mhc\n",
                            "residual.kind = mhc\nresidual.streams = 2\nattn.pos = learned\n",
                            "residual.kind = attnres\nresidual.block_size = 2\nattn.pos = goat\nattn.goat.pos_rank = 1\nmodel.n_head = 2\nattn.xsa = on\n"}) {
    GPT<float> m(tiny(extra));
    randomize(m, 7);
    EXPECT_LT(test::cached_vs_uncached_rel_diff(m), 1e-5) << extra;
  }
}

TEST(Residual, InitValuesAndNoDecay) {
  const Config h = tiny("residual.kind = hyper\nresidual.streams = 3\n");
  GPT<float> hm(h);
  hm.init_weights(1);
  EXPECT_EQ(hm.param(residual_param(2, "m0"))[1], 1.0f);  // home stream h(2) = 1
  EXPECT_EQ(hm.param(residual_param(2, "m0"))[0], 0.0f);
  EXPECT_EQ(hm.param(residual_param(4, "m0"))[0], 1.0f);  // h(4) = 3 mod 3 = 0
  EXPECT_EQ(hm.param(residual_param(1, "a0"))[4], 1.0f);  // identity
  EXPECT_EQ(hm.param(residual_param(1, "a0"))[1], 0.0f);
  EXPECT_FLOAT_EQ(hm.param(residual_param(1, "s_alpha"))[0], 0.01f);
  const Config m = tiny("residual.kind = mhc\nresidual.streams = 4\n");
  GPT<double> mm(m);
  mm.init_weights(1);
  // §5.3 table, n = 4: bpre 2.197225 (home) and −3.367296; bres diagonal 3.295837.
  EXPECT_NEAR(mm.param(residual_param(3, "b_pre"))[2], 2.197225, 1e-6);
  EXPECT_NEAR(mm.param(residual_param(3, "b_pre"))[0], -3.367296, 1e-6);
  EXPECT_NEAR(mm.param(residual_param(3, "b_res"))[5], 3.295837, 1e-6);
  EXPECT_EQ(mm.param(residual_param(3, "b_res"))[1], 0.0);
  for (const auto& s : mm.registry().specs()) {
    if (s.name.rfind("residual.", 0) == 0) { EXPECT_FALSE(s.decay) << s.name; }  // §0: nothing of §4–§5 is decayed
  }
}

// ---------------------------------------------------------------------------------------------
// Checkpoints of every kind: exact resume (tests/test_train.cpp's pattern).
TEST(Residual, ExactResumeIsBitIdentical) {
  test::expect_exact_resume("residual", {"residual.kind = attnres\nresidual.block_size = 2\n", "residual.kind = hyper\nresidual.streams = 2\n",
                            "residual.kind = mhc\nresidual.streams = 2\n"});
}
