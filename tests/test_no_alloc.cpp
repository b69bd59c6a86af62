// "No allocation in the training loop": counts every malloc/calloc/realloc/aligned allocation made
// by the process (glibc's allocator entry points are interposed here) during training steps after
// warm-up. Forward, fused LM head, backward, clipping and AdamW must make none. The one exception is
// outside our code, inside oneDNN 2.6's primitive execute: a few hundred bytes of argument map on
// every CPU, and, where it picks its gemm:jit matmul (CPUs without AVX-512, e.g. AMD Zen 3), the
// packing workspace that its GEMM driver mallocs per call. Those are counted apart; they must be the
// same number every step (a fixed per-call cost, not growth), and nothing of ours may allocate.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/gemm.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "train/trainer.h"

// Under AddressSanitizer (the debug preset) the sanitizer owns malloc and friends: interposing them
// here as well crashes the process at start-up. There every allocation is counted through the
// sanitizer's allocation hook instead, which its allocator calls for malloc, calloc, realloc, the
// aligned forms and operator new alike: the same count by another route, not a weaker test.
#if defined(__SANITIZE_ADDRESS__)
#define ATTNLAB_COUNT_VIA_ASAN_HOOK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNLAB_COUNT_VIA_ASAN_HOOK 1
#endif
#endif

extern "C" {
#ifdef ATTNLAB_COUNT_VIA_ASAN_HOOK
// <sanitizer/allocator_interface.h> (not shipped with GCC; the function is in its libasan).
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void*, size_t),
                                              void (*free_hook)(const volatile void*));
#else
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
#endif
}

namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0}, large_allocations{0}, library_allocations{0}, library_large{0};
constexpr size_t kLarge = 4096;
// A named, non-inlined function so `break attnlab_counted_allocation` in gdb shows who allocated.
extern "C" __attribute__((noinline)) void attnlab_counted_allocation() { asm volatile(""); }
inline void note(size_t bytes) {
  if (counting.load(std::memory_order_relaxed)) {
    // Inside oneDNN's execute (its code, not ours): counted apart.
    if (attnlab::detail::onednn_executing.load(std::memory_order_relaxed)) {
      library_allocations.fetch_add(1, std::memory_order_relaxed);
      if (bytes >= kLarge) library_large.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (bytes >= kLarge) large_allocations.fetch_add(1, std::memory_order_relaxed);
    allocations.fetch_add(1, std::memory_order_relaxed);
    attnlab_counted_allocation();
  }
}
}  // namespace

#ifdef ATTNLAB_COUNT_VIA_ASAN_HOOK
namespace {
void asan_malloc_hook(const volatile void*, size_t n) { note(n); }
void asan_free_hook(const volatile void*) {}
const bool hooks_installed = __sanitizer_install_malloc_and_free_hooks(asan_malloc_hook, asan_free_hook) != 0;
}  // namespace
#else
extern "C" {
void* malloc(size_t n) { note(n); return __libc_malloc(n); }
void* calloc(size_t a, size_t b) { note(a * b); return __libc_calloc(a, b); }
void* realloc(void* p, size_t n) { note(n); return __libc_realloc(p, n); }
void* aligned_alloc(size_t al, size_t n) { note(n); return __libc_memalign(al, n); }
void* memalign(size_t al, size_t n) { note(n); return __libc_memalign(al, n); }
int posix_memalign(void** p, size_t al, size_t n) {
  note(n);
  *p = __libc_memalign(al, n);
  return *p ? 0 : 12;
}
}
#endif

using namespace attnlab;

TEST(NoAllocation, TrainingStepAllocatesNothing) {
#ifdef ATTNLAB_COUNT_VIA_ASAN_HOOK
  ASSERT_TRUE(hooks_installed) << "the sanitizer refused the allocation hooks";
#endif
  for (const char* extra : {"attn.pos = rope\n", "attn.pos = learned\nmodel.mlp = swiglu\nmodel.norm = rmsnorm\nattn.sink = learned\nmodel.kv_heads = 2\n",
                            // every residual kind (src/model/residual/)
                            "residual.kind = attnres\n", "residual.kind = attnres\nresidual.block_size = 3\n",
                            "residual.kind = hyper\n", "residual.kind = mhc\n", "residual.kind = dar\n",
                            "residual.kind = dar\nresidual.block_size = 1\ndar.sep_v = true\n",
                            // B = 1 and one KV head: the attention backward splits over query chunks (scratch)
                            "train.batch_size = 1\nmodel.seq_len = 256\nmodel.kv_heads = 1\nattn.sink = learned\n"}) {
    const std::string text = std::string("model.n_layer = 2\nmodel.d_model = 64\nmodel.n_head = 4\nmodel.seq_len = 64\n"
                                         "model.vocab_size = 300\ntrain.batch_size = 4\n") + extra;
    const Config cfg = resolve_config(parse_config_text(text, "test"));
    GPT<float> model(cfg);
    model.init_weights(1);
    const int B = cfg.train.batch_size, T = cfg.model.seq_len;
    model.plan(B, T);
    std::vector<float> m(model.registry().total()), v(model.registry().total());
    std::vector<int32_t> in(B * T), tgt(B * T);
    Rng rng(2);
    for (size_t i = 0; i < in.size(); ++i) { in[i] = (int32_t)rng.below(300); tgt[i] = (int32_t)rng.below(300); }
    auto step = [&](int t) {
      model.zero_grad();
      model.train_micro_step(in.data(), tgt.data(), 1.0f / float(B * T));
      optimizer_step(model, m.data(), v.data(), cfg.train, 1e-3, t);
    };
    step(1);
    step(2);  // warm-up: GEMM primitives and OpenMP teams are created on first use
    allocations = 0;
    large_allocations = 0;
    std::vector<long> per_step;
    for (int t = 3; t < 6; ++t) {
      library_allocations = 0;
      library_large = 0;
      counting = true;
      step(t);
      counting = false;
      per_step.push_back(library_allocations.load());
      if (t == 5)
        std::printf("allocations inside oneDNN's execute in one step: %ld (%ld of 4 KiB or more)\n",
                    library_allocations.load(), library_large.load());
    }
    EXPECT_EQ(allocations.load(), 0) << extra << " (break on attnlab_counted_allocation in gdb to see where)";
    EXPECT_EQ(large_allocations.load(), 0) << extra;
    EXPECT_EQ(per_step[0], per_step[1]) << extra;
    EXPECT_EQ(per_step[1], per_step[2]) << extra;
    // and the counter works at all
    counting = true;
    void* volatile p = std::malloc(16);  // volatile: optimizers may drop an unused malloc/free pair
    counting = false;
    std::free(p);
    EXPECT_EQ(allocations.load(), 1);
  }
}
