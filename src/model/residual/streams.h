// What the multi-stream residual kinds HC and mHC share (docs/mechanisms.md §5): the state is n
// streams of d per token, stored token-major as (N, n, d) so that each token's n×d block is
// contiguous (mHC normalises it as one vector of nd values). The row kernels of their maps first,
// then the state and the calls both kinds answer alike (StreamsResidual, at the end).
#pragma once
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/math.h"
#include "model/residual/residual.h"

namespace attnlab::streams {

// out[c] += Σ_i rows[i·ld + c] for c < M: per-token parameter-gradient contributions summed over
// tokens. Each thread owns a range of columns and walks every row: race-free, without scratch.
template <class T>
void add_column_sums(T* out, const T* rows, int N, int M, int ld) {
#pragma omp parallel
  {
    const int n_threads = omp_get_num_threads(), thread = omp_get_thread_num();
    const int chunk = (M + n_threads - 1) / n_threads;
    const int c0 = std::min(M, thread * chunk), c1 = std::min(M, c0 + chunk);
    for (int c = c0; c < c1; ++c) {
      T sum = 0;
      for (int i = 0; i < N; ++i) sum += rows[(size_t)i * ld + c];
      out[c] += sum;
    }
  }
}

// out (rows, P) = x·W for the rows r0..r1 of x (rows, C) and W (C, ld_w), ld_w a multiple of
// 3 vectors (kProjectBlock) with columns beyond P zero: mHC's forward projections per group of
// tokens, while the rows are in cache (one GEMM over all tokens read the whole state once more, and
// oneDNN runs this narrow shape, P = 24, below its rate on the model's own products: gemm_bench). Blocks of 4 rows × 3 vectors of
// columns are held in registers across C.
template <class T>
inline constexpr int kProjectBlock = 3 * kernels::Simd<T>::W;

template <class T>
void project_rows(T* out, const T* x, const T* Wt, size_t ld_w, size_t r0, size_t r1, int P, int C) {
  using L = kernels::Simd<T>;
  using V = typename L::V;
  constexpr int W = L::W;
  for (size_t r = r0; r < r1; r += 4) {
    const size_t m = std::min<size_t>(4, r1 - r);
    const T* xr[4];
    for (size_t i = 0; i < 4; ++i) xr[i] = x + (r + std::min(i, m - 1)) * C;  // a short block repeats its last row
    for (int j0 = 0; j0 < P; j0 += 3 * W) {
      V acc[4][3] = {};
      const T* w = Wt + j0;
      for (int c = 0; c < C; ++c, w += ld_w) {
        const V w0 = L::load(w), w1 = L::load(w + W), w2 = L::load(w + 2 * W);
        for (int i = 0; i < 4; ++i) {
          const T xi = xr[i][c];
          acc[i][0] += xi * w0;
          acc[i][1] += xi * w1;
          acc[i][2] += xi * w2;
        }
      }
      const int cols = std::min(3 * W, P - j0);
      for (size_t i = 0; i < m; ++i) {
        alignas(64) T row[3 * W];
        for (int h = 0; h < 3; ++h) L::store(row + h * W, acc[i][h]);
        std::copy(row, row + cols, out + (r + i) * P + j0);
      }
    }
  }
}

// acc (P, C; rows ld_acc apart) += zsᵀ·x over the rows r0..r1 of zs (rows, P) and x (rows, C): a
// projection's weight gradient dWᵀ = zsᵀ·x accumulated a block of rows at a time, while the rows are
// in cache (mHC's backward calls it per group of tokens instead of one GEMM over all of them, which
// re-read the whole state, 16 MB per sublayer at the bench shape, below oneDNN's rate on the model's
// own products at this narrow shape P = 24: gemm_bench). Blocks of 6 rows of acc × 2 vectors of columns
// are held in registers across the rows. The rows' columns are first copied to `pack`
// ((r1 − r0)·C entries), one block of 2 vectors after another: read in place, the rows' same columns
// lie C·4 bytes apart, a multiple of 4 KiB at the bench shape, so they share one L1 set (about 3x
// slower in a standalone loop).
template <class T>
void add_outer_rows(T* acc, size_t ld_acc, const T* zs, const T* x, size_t r0, size_t r1, int P, int C, T* pack) {
  using L = kernels::Simd<T>;
  using V = typename L::V;
  constexpr int W = L::W, Cols = 2 * W, J = 6;  // 6 rows of acc × 2 vectors: 12 accumulators
  const size_t rows = r1 - r0;
  const int blocks = C / Cols;
  for (size_t r = 0; r < rows; ++r)
    for (int cb = 0; cb < blocks; ++cb)
      for (int h = 0; h < 2; ++h) L::store(pack + ((size_t)cb * rows + r) * Cols + h * W, L::load(x + (r0 + r) * C + cb * Cols + h * W));
  for (int j0 = 0; j0 < P; j0 += J) {
    const int mj = std::min(J, P - j0);
    int j[J];
    for (int i = 0; i < J; ++i) j[i] = j0 + std::min(i, mj - 1);  // a short last block repeats its last row (not stored)
    for (int cb = 0; cb < blocks; ++cb) {
      const int c = cb * Cols;
      V a[J][2];
      for (int i = 0; i < J; ++i)
        for (int h = 0; h < 2; ++h) a[i][h] = L::load(acc + (size_t)j[i] * ld_acc + c + h * W);
      const T* xp = pack + (size_t)cb * rows * Cols;
      for (size_t r = 0; r < rows; ++r) {
        const V x0 = L::load(xp + r * Cols), x1 = L::load(xp + r * Cols + W);
        const T* z = zs + (r0 + r) * P;
        for (int i = 0; i < J; ++i) {
          a[i][0] += z[j[i]] * x0;
          a[i][1] += z[j[i]] * x1;
        }
      }
      for (int i = 0; i < mj; ++i)
        for (int h = 0; h < 2; ++h) L::store(acc + (size_t)j[i] * ld_acc + c + h * W, a[i][h]);
    }
    for (int i = 0; i < mj; ++i)  // the last C mod 2W columns
      for (int cc = blocks * Cols; cc < C; ++cc) {
        T v = acc[(size_t)j[i] * ld_acc + cc];
        for (size_t r = r0; r < r1; ++r) v += zs[r * P + j[i]] * x[r * C + cc];
        acc[(size_t)j[i] * ld_acc + cc] = v;
      }
  }
}

// The maps' backward into the state, in one pass per row (§0, §5.2, §5.3): with the forward
// a = rstd·(x·W) (rows, P) of the projection W (C, P), and zs = rstd·dL/da (rows, P), it adds
// RMSNorm_ng's backward of dx̄ = dL/da·Wᵀ:
//   dx += (dx̄ − x̄(x̄·dx̄)/C)·rstd = zs·Wᵀ − k·x,  k = rstd²·(x·(zs·Wᵀ))/C = rstd·(zs·a)/C,
// so x·Y needs no second pass over the row (x·Wᵀ's columns are a/rstd). WT (P, C) is W transposed.
// dx, x (rows, C); rstd (rows); WT's rows ld_wt apart. Replaces a (rows, P)×(P, C) GEMM (K = P ≤ 24,
// memory-bound, and a full write and re-read of its output) followed by a separate norm backward.
// An ld_wt a multiple of 4 KiB puts every row of Wᵀ a column block reads in the same L1 set; callers
// pad it (mHC: C + 16).
template <class T>
void project_back_rms_ng_rows(T* dx, const T* zs, const T* a, const T* WT, size_t ld_wt, const T* x, const T* rstd, size_t r0,
                              size_t r1, int P, int C) {
  using L = kernels::Simd<T>;
  using V = typename L::V;
  constexpr int W = L::W, Cols = 2 * W;  // columns per register block: 4 rows × 2 vectors of accumulators
  for (size_t r = r0; r < r1; r += 4) {
    const size_t m = std::min<size_t>(4, r1 - r);
    // Rows beyond the last repeat it (their sums are computed, never stored).
    T* d[4];
    const T *xr[4], *z[4];
    T k[4];
    for (size_t i = 0; i < 4; ++i) {
      const size_t row = r + std::min(i, m - 1);
      d[i] = dx + row * C;
      xr[i] = x + row * C;
      z[i] = zs + row * P;
      T dot = 0;
      for (int j = 0; j < P; ++j) dot += zs[row * P + j] * a[row * P + j];
      k[i] = rstd[row] * dot / T(C);
    }
    // dx_i += Σ_j z_ij·Wᵀ_j − k_i·x_i over a block of columns, the sum held in registers: each row of
    // Wᵀ is read once per four rows and dx once, instead of one read and write of dx per projection.
    int c = 0;
    for (; c + Cols <= C; c += Cols) {
      V acc[4][2];
      for (int i = 0; i < 4; ++i)
        for (int h = 0; h < 2; ++h) acc[i][h] = L::load(d[i] + c + h * W) - k[i] * L::load(xr[i] + c + h * W);
      for (int j = 0; j < P; ++j) {
        const T* w = WT + (size_t)j * ld_wt + c;
        const V w0 = L::load(w), w1 = L::load(w + W);
        for (int i = 0; i < 4; ++i) {
          acc[i][0] += z[i][j] * w0;
          acc[i][1] += z[i][j] * w1;
        }
      }
      for (size_t i = 0; i < m; ++i)
        for (int h = 0; h < 2; ++h) L::store(d[i] + c + h * W, acc[i][h]);
    }
    for (size_t i = 0; i < m; ++i)  // the last C mod 2W columns
      for (int cc = c; cc < C; ++cc) {
        T v = d[i][cc] - k[i] * xr[i][cc];
        for (int j = 0; j < P; ++j) v += z[i][j] * WT[(size_t)j * ld_wt + cc];
        d[i][cc] = v;
      }
  }
}

// Expand (§5.1): every stream of X (N, n, C) starts as e (N, C).
template <class T>
void expand(T* X, const T* e, int N, int n, int C) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i)
    for (int s = 0; s < n; ++s) std::copy(e + (size_t)i * C, e + (size_t)(i + 1) * C, X + ((size_t)i * n + s) * C);
}

// Collapse (§5.1): x (N, C) = Σ_s X_s.
template <class T>
void collapse(T* x, const T* X, int N, int n, int C) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    T* y = x + (size_t)i * C;
    const T* X0 = X + (size_t)i * n * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) y[c] = X0[c];
    for (int s = 1; s < n; ++s) {
      const T* Xs = X0 + (size_t)s * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) y[c] += Xs[c];
    }
  }
}

// dX_s = dx for every stream (the backward of collapse), written.
template <class T>
void broadcast(T* dX, const T* dx, int N, int n, int C) { expand(dX, dx, N, n, C); }

// out[u] = a·B_u for u < n, B_u = B + u·stride (length C each), four at a time (kernels::dots4).
template <class T>
void dots(T* out, const T* a, const T* B, size_t stride, int n, int C) {
  for (int u = 0; u < n; u += 4) {
    const int m = std::min(4, n - u);
    const T* b[4];
    for (int k = 0; k < 4; ++k) b[k] = B + (size_t)(u + std::min(k, m - 1)) * stride;
    kernels::dots4(out + u, a, b, m, C);
  }
}

// y = Σ_{s<n} coef[s]·X_s (+ extra_coef·extra when extra is given), X_s = X + s·stride, in passes
// over y of up to four sources each (not one pass per source).
template <class T>
void combine(T* y, const T* coef, const T* X, size_t stride, int n, int C, const T* extra = nullptr, T extra_coef = 0) {
  for (int s = 0; s < n; s += 4) {
    const int m = std::min(4, n - s);
    const T* x[4];
    T a[4];
    for (int k = 0; k < 4; ++k) {
      x[k] = X + (size_t)(s + std::min(k, m - 1)) * stride;
      a[k] = k < m ? coef[s + k] : T(0);
    }
    const bool first = s == 0;
    const T* e = first ? extra : nullptr;
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      T v = (first ? T(0) : y[c]) + a[0] * x[0][c] + a[1] * x[1][c] + a[2] * x[2][c] + a[3] * x[3][c];
      if (e) v += extra_coef * e[c];
      y[c] = v;
    }
  }
}

// 1/sqrt(mean(x²) + 1e-6) of one row (RMSNorm_ng, §0), serial: called per token inside the
// kinds' parallel loops, right after the row is written, so the next sublayer's read needs no
// separate pass over the state.
template <class T>
T inv_rms(const T* x, int C) {
  using L = kernels::Simd<T>;
  using V = typename L::V;
  constexpr int W = L::W;
  V acc[4] = {};  // four independent accumulator chains
  int c = 0;
  for (; c + 4 * W <= C; c += 4 * W)
    for (int k = 0; k < 4; ++k) {
      const V v = L::load(x + c + k * W);
      acc[k] += v * v;
    }
  T sq = 0;
  for (; c < C; ++c) sq += x[c] * x[c];
  const V v = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (int j = 0; j < W; ++j) sq += v[j];
  return T(1.0 / std::sqrt(double(sq) / C + 1e-6));
}

// Diagnostics only (docs/mechanisms.md §8.5 for HC and mHC): replaces stream s's contribution to a
// sublayer input, u += P − w_s·X_s per token, with w_s = weight(i) (the read weight of token i) and
// P (N, C) the replacement. Never called in training.
template <class T, class Weight>
void patch_contribution(T* u, const T* P, const T* X, int s, int N, int n, int C, Weight weight) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const T w = weight(i);
    const T* x = X + ((size_t)i * n + s) * C;
    const T* p = P + (size_t)i * C;
    T* y = u + (size_t)i * C;
    for (int c = 0; c < C; ++c) y[c] += p[c] - w * x[c];
  }
}

constexpr int kMaxStreams = 16;  // residual.streams is validated against it (config.cpp)

// The buffers of a workspace both kinds keep; each kind's state adds its maps' own.
template <class T>
struct StreamsState : ResidualState {
  T* e = nullptr;          // (N, d) the embedding, expanded into X[0]
  std::vector<T*> X;       // 2L+1 states (N, n, d); inference: two, alternating
  std::vector<T*> rstd;    // per sublayer: 1/ρ of each stream (HC, N·n) or of each token's n·d values (mHC, N)
  std::vector<T*> h, o;    // per sublayer: input u and output o (N, d)
  T *final_out = nullptr, *pack = nullptr;  // pack: the sublayer's projection weights, transposed
  // backward
  T *dX[2] = {nullptr, nullptr}, *dh = nullptr, *dout = nullptr, *z = nullptr, *per_token = nullptr,
    *dpack = nullptr, *sums = nullptr;
  std::vector<const T*> patch;  // §8.5 diagnostics: [l·n + s] replaces stream s's share of read l (l = 2L+1: read-out)
  int cur = 0;  // dX[cur] holds dLoss/dX_l during sublayer l's backward
};

// The calls HC and mHC answer alike (§5.1): e expanded into every stream, the read-out a sum of the
// streams (and its backward a broadcast), the saved inputs, the §8.5 patch of a stream's share. The
// kinds differ in their maps: read, write, their backward, parameters and plan. State derives
// from StreamsState<T>.
template <class T, class State>
class StreamsResidual : public Residual<T> {
 public:
  explicit StreamsResidual(const Config& cfg) : L2_(2 * cfg.model.n_layer), C_(cfg.model.d_model), n_(cfg.residual.streams) {}

  std::unique_ptr<ResidualState> make_state() const override { return std::make_unique<State>(); }
  T* embedding(ResidualState& rs) const override { return st(rs).e; }
  T* branch(ResidualState& rs, int l) const override { return st(rs).o[l]; }
  const T* read_out(ResidualState& rs, int N) const override {
    auto& s = st(rs);
    collapse(s.final_out, s.X[L2_], N, n_, C_);
    for (int s2 = 0; s2 < n_; ++s2)  // §8.5 diagnostics: the read-out's share of stream s is X_s
      if (const T* P = s.patch[(size_t)(L2_ + 1) * n_ + s2])
        patch_contribution(s.final_out, P, s.X[L2_], s2, N, n_, C_, [](int) { return T(1); });
    return s.final_out;
  }
  void set_read_patch(ResidualState& rs, int q, int j, const T* src) const override {
    if (q < 1 || q > L2_ + 1 || j < 0 || j >= n_) fail(this->kind(), " read patch: no read ", q, " of stream ", j);
    st(rs).patch[(size_t)q * n_ + j] = src;
  }
  const T* input(const ResidualState& rs, int l) const override { return cst(rs).h[l]; }
  const T* final_input(const ResidualState& rs) const override { return cst(rs).final_out; }

  T* read_out_grad(ResidualState& rs, int N) const override {
    std::memset(st(rs).dh, 0, sizeof(T) * N * C_);
    return st(rs).dh;
  }
  void read_out_backward(ResidualState& rs, int N) const override {
    auto& s = st(rs);
    s.cur = 0;
    broadcast(s.dX[0], s.dh, N, n_, C_);
  }
  T* input_grad(ResidualState& rs, int, int N) const override {
    std::memset(st(rs).dh, 0, sizeof(T) * N * C_);
    return st(rs).dh;
  }
  const T* embedding_grad(ResidualState& rs, int N) const override {
    auto& s = st(rs);
    collapse(s.dh, s.dX[s.cur], N, n_, C_);  // d e = Σ_s dX_0,s (the backward of expand)
    return s.dh;
  }

 protected:
  // Takes, in this order: e; at inference two states that alternate and one buffer of each kind for
  // every sublayer (nothing of earlier sublayers is kept); in training every state X_l and, per
  // sublayer, 1/ρ (rstd_cols per row), the kind's two map buffers map_a and map_b (map_cols per row
  // each), u and o; then the read-out, and sizes the patch table. The kind takes the rest after it.
  void plan_states(Arena& arena, State& s, size_t rows, bool training, size_t rstd_cols, size_t map_cols,
                   std::vector<T*>& map_a, std::vector<T*>& map_b) const {
    const size_t nd = (size_t)n_ * C_;
    s.e = arena.template take<T>(rows * C_);
    for (auto* v : {&s.X, &s.rstd, &map_a, &map_b, &s.h, &s.o}) v->assign(L2_ + 1, nullptr);
    T* alt[2] = {nullptr, nullptr};
    T *rstd = nullptr, *a = nullptr, *b = nullptr, *h = nullptr, *o = nullptr;
    if (!training) {
      alt[0] = arena.template take<T>(rows * nd);
      alt[1] = arena.template take<T>(rows * nd);
      rstd = arena.template take<T>(rows * rstd_cols);
      a = arena.template take<T>(rows * map_cols);
      b = arena.template take<T>(rows * map_cols);
      h = arena.template take<T>(rows * C_);
      o = arena.template take<T>(rows * C_);
    }
    for (int l = 0; l <= L2_; ++l) {
      s.X[l] = training ? arena.template take<T>(rows * nd) : alt[l % 2];
      if (l == 0) continue;
      s.rstd[l] = training ? arena.template take<T>(rows * rstd_cols) : rstd;
      map_a[l] = training ? arena.template take<T>(rows * map_cols) : a;
      map_b[l] = training ? arena.template take<T>(rows * map_cols) : b;
      s.h[l] = training ? arena.template take<T>(rows * C_) : h;
      s.o[l] = training ? arena.template take<T>(rows * C_) : o;
    }
    s.final_out = arena.template take<T>(rows * C_);
    s.patch.assign((size_t)(L2_ + 2) * n_, nullptr);
  }

  static State& st(ResidualState& s) { return static_cast<State&>(s); }
  static const State& cst(const ResidualState& s) { return static_cast<const State&>(s); }

  int L2_, C_, n_;  // 2L sublayers, d, n streams
};

}  // namespace attnlab::streams
