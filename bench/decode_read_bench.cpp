// How fast one decode step's weights can be read, and how fast the decode kernels read them
// (docs/performance.md, Decode). The weights of the `small` preset (4 layers of d = 256 linear
// layers, 12.6 MB, and the 8192 × 256 tied embedding, 8.4 MB) in `copies` copies of distinct
// values, read copy after copy; 1 copy stays in a 32 MiB last-level cache, 8 copies (168 MB) do not
// and DRAM serves the reads. Best of `reps` passes, GB/s of weights read per second:
//   sum, 1 stream      a plain vectorised sum over each copy front to back (one add chain)
//   sum, 8 streams     the same copy cut in 8 parts read side by side (src/core/bandwidth.cpp)
//   adjacent rows      a decode step with eight adjacent rows of W per step (the first version)
//   decode kernels     linear_forward and lm_head_logits at one row, and the two apart
//   bf16 weights       the same kernels reading bf16 copies of the weights (`sample --weights bf16`:
//                      few_rows_linear, lm_head_logits on bf16); GB/s of the bf16 bytes read
// Then the decode attention alone: attention_forward with one query row (H = 4, Dh = 64) over the
// key and value caches of 4 layers at `context` positions (8 MB at 1000), GB/s of cache read.
//
//   OMP_NUM_THREADS=1 build/<dir>/decode_read_bench [copies=8] [reps=40] [context=1000]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/linear.h"

using namespace attnlab::kernels;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

float sum_streams(const float* x, size_t n, int streams) {
  if (streams == 1) {
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < n; ++i) s += x[i];
    return s;
  }
  const size_t m = n / 8;
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3, s4, s5, s6, s7)
  for (size_t i = 0; i < m; ++i) {
    s0 += x[i], s1 += x[m + i], s2 += x[2 * m + i], s3 += x[3 * m + i];
    s4 += x[4 * m + i], s5 += x[5 * m + i], s6 += x[6 * m + i], s7 += x[7 * m + i];
  }
  return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
}

// The first version of the decode path: eight adjacent rows per step (one stream in effect).
void linear_adjacent(float* out, const float* x, const float* W, int C, int OC) {
  float acc[4096] = {};  // OC <= 4·256 here
  for (int c = 0; c + 8 <= C; c += 8) {
    const float* w = W + (size_t)c * OC;
    const float* xc = x + c;
#pragma omp simd
    for (int j = 0; j < OC; ++j)
      acc[j] += ((xc[0] * w[j] + xc[1] * w[OC + j]) + (xc[2] * w[2 * OC + j] + xc[3] * w[3 * OC + j])) +
                ((xc[4] * w[4 * OC + j] + xc[5] * w[5 * OC + j]) + (xc[6] * w[6 * OC + j] + xc[7] * w[7 * OC + j]));
  }
  for (int j = 0; j < OC; ++j) out[j] = acc[j];
}
void logits_adjacent(float* out, const float* x, const float* wte, int C, int V) {
  for (int v = 0; v + 8 <= V; v += 8) {
    const float* w = wte + (size_t)v * C;
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3, s4, s5, s6, s7)
    for (int c = 0; c < C; ++c) {
      const float xc = x[c];
      s0 += xc * w[c], s1 += xc * w[C + c], s2 += xc * w[2 * C + c], s3 += xc * w[3 * C + c];
      s4 += xc * w[4 * C + c], s5 += xc * w[5 * C + c], s6 += xc * w[6 * C + c], s7 += xc * w[7 * C + c];
    }
    out[v] = s0, out[v + 1] = s1, out[v + 2] = s2, out[v + 3] = s3;
    out[v + 4] = s4, out[v + 5] = s5, out[v + 6] = s6, out[v + 7] = s7;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int copies = argc > 1 ? std::max(1, std::atoi(argv[1])) : 8, reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 40;
  const int C = 256, V = 8192;
  struct Shape { int in, out; };
  std::vector<Shape> shapes;
  for (int l = 0; l < 4; ++l) shapes.insert(shapes.end(), {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}});
  size_t per_copy = (size_t)V * C;
  for (const Shape& s : shapes) per_copy += (size_t)s.in * s.out;
  // One buffer per copy: the embedding, then the linear layers' weights. Distinct values throughout.
  std::vector<std::vector<float>> w(copies, std::vector<float>(per_copy));
  for (int k = 0; k < copies; ++k)
    for (size_t i = 0; i < per_copy; ++i) w[k][i] = float(uint32_t(i + k * per_copy) * 2654435761u % 1000003u) * 1e-9f;
  std::vector<std::vector<attnlab::bf16>> w16(copies, std::vector<attnlab::bf16>(per_copy));
  for (int k = 0; k < copies; ++k) attnlab::to_bf16(w16[k].data(), w[k].data(), per_copy);
  std::vector<float> x(4 * C, 0.5f), out(V);
  const size_t head_floats = (size_t)V * C, linear_floats = per_copy - head_floats;
  const char* names[] = {"sum, 1 stream", "sum, 8 streams", "adjacent rows", "decode kernels", "  linear layers",
                         "  LM head", "bf16 weights", "  linear layers", "  LM head"};
  // bytes read per pass
  const size_t bytes[] = {4 * per_copy, 4 * per_copy,  4 * per_copy,      4 * per_copy,     4 * linear_floats,
                          4 * head_floats, 2 * per_copy, 2 * linear_floats, 2 * head_floats};
  double best[9] = {1e30, 1e30, 1e30, 1e30, 1e30, 1e30, 1e30, 1e30, 1e30};
  volatile float sink = 0;
  // Variant after variant (each one's passes back to back): with one copy, the float and bf16 copies
  // together (31 MB) do not fit a 32 MiB last-level cache beside everything else, so alternating
  // them would time each partly from DRAM.
  for (int variant = 0; variant < 5; ++variant)
    for (int r = 0; r < reps; ++r) {
      const float* base = w[r % copies].data();
      const double t0 = now();
      double t1 = t0;
      if (variant < 2) {
        sink = sink + sum_streams(base, per_copy, variant == 0 ? 1 : 8);
      } else if (variant == 4) {
        const attnlab::bf16* b16 = w16[r % copies].data();
        const attnlab::bf16* p = b16 + head_floats;
        for (const Shape& s : shapes) {
          few_rows_linear(out.data(), x.data(), p, (const float*)nullptr, 1, s.in, s.out);
          p += (size_t)s.in * s.out;
        }
        t1 = now();
        lm_head_logits(out.data(), x.data(), b16, 1, C, V);
      } else {
        const float* p = base + head_floats;
        for (const Shape& s : shapes) {
          if (variant == 2) linear_adjacent(out.data(), x.data(), p, s.in, s.out);
          else linear_forward(out.data(), x.data(), p, (const float*)nullptr, 1, s.in, s.out);
          p += (size_t)s.in * s.out;
        }
        t1 = now();
        if (variant == 2) logits_adjacent(out.data(), x.data(), base, C, V);
        else lm_head_logits(out.data(), x.data(), base, 1, C, V);
      }
      const double t2 = now();
      const int slot = variant == 4 ? 6 : variant;
      best[slot] = std::min(best[slot], t2 - t0);
      if (variant >= 3) best[slot + 1] = std::min(best[slot + 1], t1 - t0), best[slot + 2] = std::min(best[slot + 2], t2 - t1);
    }
  std::printf("%d copies of %.1f MB, best of %d passes\n", copies, per_copy * 4 / 1e6, reps);
  for (int v = 0; v < 9; ++v)
    std::printf("%-16s %7.3f ms  %5.1f GB/s\n", names[v], best[v] * 1e3, bytes[v] / best[v] / 1e9);

  // Decode attention: one query row per head against 4 layers' caches (distinct values).
  const int context = argc > 3 ? std::max(1, std::atoi(argv[3])) : 1000, L = 4, H = 4, Dh = 64, kvC = H * Dh;
  std::vector<std::vector<float>> kc(L), vc(L);
  for (int l = 0; l < L; ++l) {
    kc[l].resize((size_t)context * kvC), vc[l].resize((size_t)context * kvC);
    for (size_t i = 0; i < kc[l].size(); ++i) {
      kc[l][i] = float(uint32_t(i + l * 77) * 2654435761u % 1000003u) * 1e-6f - 0.5f;
      vc[l][i] = float(uint32_t(3 * i + l) * 2654435761u % 1000003u) * 1e-6f - 0.5f;
    }
  }
  std::vector<float> q(3 * kvC), att(kvC), lse(H);
  for (size_t i = 0; i < q.size(); ++i) q[i] = float(i % 17) * 0.05f - 0.4f;
  AttentionShape s{};
  s.B = 1, s.Tq = 1, s.Tk = context, s.H = H, s.Hkv = H, s.Dh = Dh, s.q_stride = 3 * kvC, s.q_batch_stride = 3 * kvC;
  s.kv_stride = kvC, s.kv_batch_stride = (long)context * kvC, s.out_stride = kvC, s.pos_offset = context - 1;
  double att_best = 1e30;
  for (int r = 0; r < 5 * reps; ++r) {
    const double t0 = now();
    for (int l = 0; l < L; ++l)
      attention_forward<float>(att.data(), lse.data(), q.data(), kc[l].data(), vc[l].data(), nullptr, 0.125f, s);
    att_best = std::min(att_best, now() - t0);
    sink = sink + att[3];
  }
  const double att_bytes = 2.0 * L * context * kvC * sizeof(float);
  std::printf("decode attention, %d layers at %d positions (%.1f MB): %7.3f ms  %5.1f GB/s\n", L, context,
              att_bytes / 1e6, att_best * 1e3, att_bytes / att_best / 1e9);
  return 0;
}
