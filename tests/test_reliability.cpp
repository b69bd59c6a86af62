// Reliability: the non-finite guard (no NaN checkpoint, valid JSON log, a clean stop), safe
// concurrent writers (unique temporaries, the run-directory lock, stale temporaries), honest
// resume (metrics truncated to the resumed step, hostile step metadata, the numeric environment)
// and cheap checks before large allocations (a checkpoint's configuration against its tensors).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "attnlab/printable.h"
#include "core/error.h"
#include "core/files.h"
#include "core/json.h"
#include "core/rng.h"
#include "data/shard.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checksums.h"
#include "train/environment.h"
#include "checkpoint/safetensors.h"
#include "train/trainer.h"
#include "train_util.h"

using namespace attnlab;
namespace fs = std::filesystem;

namespace {
fs::path temp_dir(const std::string& name) { return test_util::temp_dir("rel", name); }
void write_data(const fs::path& dir, int V) { test_util::write_learnable_shards(dir, V); }

Config config_for(const fs::path& dir, const std::string& run, const std::string& extra) {
  std::string text = "model.n_layer = 2\nmodel.d_model = 32\nmodel.n_head = 4\nmodel.seq_len = 16\nmodel.vocab_size = 50\n"
                     "train.batch_size = 4\ntrain.steps = 6\ntrain.warmup = 2\ntrain.lr = 3e-3\ntrain.eval_every = 0\n"
                     "train.eval_batches = 2\n"
                     "data.dir = \"" + dir.string() + "\"\ntrain.out_dir = \"" + (dir / run).string() + "\"\n" + extra;
  return resolve_config(parse_config_text(text, "test"));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// Rewrites a safetensors file with some metadata replaced (tensors copied as they are).
void rewrite_metadata(const std::string& path, const std::map<std::string, std::string>& changes) {
  std::vector<std::vector<char>> bytes;
  std::vector<TensorRef> refs;
  std::map<std::string, std::string> meta;
  {
    SafetensorsFile f = SafetensorsFile::open(path);
    meta = f.metadata();
    for (const auto& name : f.names()) {
      const auto& i = f.info(name);
      const char* p = static_cast<const char*>(f.data(name));
      bytes.emplace_back(p, p + i.nbytes);
      refs.push_back({name, i.shape, nullptr, i.dtype});
    }
  }
  for (size_t k = 0; k < refs.size(); ++k) refs[k].data = bytes[k].data();
  for (const auto& [k, v] : changes) meta[k] = v;
  write_safetensors(path, refs, meta);
}

// Rewrites a checkpoint as a writer other than save_checkpoint would: element `index` of tensor
// `name` set to `value`, the checksums recomputed (so that only the value is wrong), and the
// metadata keys in `drop` left out.
void rewrite_tensor(const std::string& path, const std::string& name, size_t index, float value,
                    const std::vector<std::string>& drop = {}) {
  std::vector<std::vector<char>> bytes;
  std::vector<TensorRef> refs;
  std::map<std::string, std::string> meta, sums;
  {
    SafetensorsFile f = SafetensorsFile::open(path);
    meta = f.metadata();
    for (const auto& n : f.names()) {
      const auto& i = f.info(n);
      const char* p = static_cast<const char*>(f.data(n));
      bytes.emplace_back(p, p + i.nbytes);
      if (n == name) std::memcpy(bytes.back().data() + 4 * index, &value, 4);
      refs.push_back({n, i.shape, nullptr, i.dtype});
      sums[n] = tensor_checksum(bytes.back().data(), i.nbytes);
    }
  }
  for (size_t k = 0; k < refs.size(); ++k) refs[k].data = bytes[k].data();
  meta[kChecksumKey] = encode_checksums(sums);
  for (const auto& k : drop) meta.erase(k);
  write_safetensors(path, refs, meta);
}

// Flips bit `bit` of byte `byte` of tensor `name`'s data in place, the header untouched.
void flip_bit(const std::string& path, const std::string& name, size_t byte, int bit) {
  size_t at = 0;
  {
    SafetensorsFile f = SafetensorsFile::open(path);
    std::ifstream in(path, std::ios::binary);
    uint64_t header = 0;
    in.read(reinterpret_cast<char*>(&header), 8);
    at = 8 + header + f.info(name).offset + byte;
  }
  std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(std::streamoff(at));
  char c = 0;
  io.read(&c, 1);
  c = char(c ^ (1 << bit));
  io.seekp(std::streamoff(at));
  io.write(&c, 1);
}

bool file_weights_finite(const std::string& path) {
  SafetensorsFile f = SafetensorsFile::open(path);
  for (const auto& name : f.names()) {
    const auto& i = f.info(name);
    if (i.dtype != "F32") continue;
    std::vector<float> x(i.nbytes / 4);
    std::memcpy(x.data(), f.data(name), i.nbytes);
    for (float v : x)
      if (!std::isfinite(v)) return false;
  }
  return true;
}
}  // namespace

// ---- 1. the non-finite guard ------------------------------------------------------------------

TEST(NonFinite, OptimizerStepLeavesEverythingUntouchedOnANaNGradient) {
  const fs::path dir = temp_dir("optstep");
  const Config cfg = config_for(dir, "run", "");
  GPT<float> m(cfg);
  m.init_weights(1);
  const size_t n = m.registry().total();
  std::vector<float> am(n, 0.5f), av(n, 0.25f);
  for (size_t i = 0; i < n; ++i) m.grads()[i] = 1e-3f;
  m.grads()[n / 2] = NAN;
  const std::vector<float> before(m.params(), m.params() + n);
  const double norm = optimizer_step(m, am.data(), av.data(), cfg.train, 1e-3, 1);
  EXPECT_FALSE(std::isfinite(norm));
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(m.params()[i], before[i]) << i;
    ASSERT_EQ(am[i], 0.5f) << i;
    ASSERT_EQ(av[i], 0.25f) << i;
  }
  m.grads()[n / 2] = INFINITY;
  EXPECT_FALSE(std::isfinite(optimizer_step(m, am.data(), av.data(), cfg.train, 1e-3, 1)));
  EXPECT_EQ(std::vector<float>(m.params(), m.params() + n), before);
  fs::remove_all(dir);
}

// The reproducer at test scale: lr = 10 with weight decay 10 multiplies the weights by
// -99 per step until the loss or the gradient overflows. The run must stop with an error, every
// checkpoint on disk must hold finite weights (and load), and metrics.jsonl must be valid JSON.
TEST(NonFinite, DivergingRunStopsWithoutANaNCheckpoint) {
  const fs::path dir = temp_dir("diverge");
  write_data(dir, 50);
  const Config cfg = config_for(dir, "run",
                                "train.steps = 60\ntrain.warmup = 0\ntrain.lr = 10\ntrain.weight_decay = 10\n"
                                "train.ckpt_every = 1\nattn.xsa = gated\n");
  TrainOptions quiet;
  quiet.quiet = true;
  const std::string err = error_of([&] { train(cfg, quiet); });
  EXPECT_NE(err.find("diverged"), std::string::npos) << err;
  int checkpoints = 0;
  for (const auto& e : fs::directory_iterator(dir / "run")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) != 0 && name != "model.safetensors") continue;
    ++checkpoints;
    EXPECT_TRUE(file_weights_finite(e.path().string())) << name << " holds NaN or Inf";
    GPT<float> back(read_checkpoint_config(e.path().string()));
    std::vector<float> bm(back.registry().total()), bv(back.registry().total());
    EXPECT_NO_THROW(load_checkpoint(e.path().string(), back, bm.data(), bv.data())) << name;
  }
  EXPECT_GT(checkpoints, 0);
  bool skipped = false;
  for (const auto& line : lines_of(dir / "run/metrics.jsonl")) {
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << "not JSON: " << line;
    if (j.contains("skipped")) {
      skipped = true;
      EXPECT_TRUE(j["loss"].is_null() || j["grad_norm"].is_null()) << line;
    }
  }
  // This configuration diverges through non-finite gradients: the guard skipped steps and stopped
  // after train.max_bad_steps of them (3) in a row.
  EXPECT_TRUE(skipped);
  EXPECT_NE(err.find("3 steps in a row"), std::string::npos) << err;
  fs::remove_all(dir);
}

TEST(NonFinite, CheckpointsWithNaNAreNeitherWrittenNorLoaded) {
  const fs::path dir = temp_dir("nanckpt");
  const Config cfg = config_for(dir, "run", "");
  GPT<float> m(cfg);
  m.init_weights(1);
  const std::string path = (dir / "c.safetensors").string();
  save_checkpoint(path, m, nullptr, nullptr, TrainingState{});
  const auto good = fs::file_size(path);
  m.params()[3] = NAN;
  const std::string err = error_of([&] { save_checkpoint(path, m, nullptr, nullptr, TrainingState{}); });
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_NE(err.find("NaN"), std::string::npos) << err;
  EXPECT_EQ(fs::file_size(path), good);
  EXPECT_TRUE(file_weights_finite(path));
  // A NaN file written by someone else: loading names the file and the tensor.
  const std::string bad = (dir / "bad.safetensors").string();
  {
    SafetensorsFile f = SafetensorsFile::open(path);
    std::vector<TensorRef> refs;
    std::vector<std::vector<float>> copies;
    for (const auto& name : f.names()) {
      const auto& i = f.info(name);
      copies.emplace_back(i.nbytes / 4);
      std::memcpy(copies.back().data(), f.data(name), i.nbytes);
    }
    size_t k = 0;
    for (const auto& name : f.names()) {
      if (name == "wte") copies[k][0] = NAN;
      refs.push_back({name, f.info(name).shape, copies[k].data(), "F32"});
      ++k;
    }
    write_safetensors(bad, refs, f.metadata());
  }
  // (with its checksums recomputed: the NaN check, not the checksum, must catch it)
  rewrite_tensor(bad, "wte", 0, NAN);
  GPT<float> back(read_checkpoint_config(bad));
  const std::string lerr = error_of([&] { load_checkpoint(bad, back, nullptr, nullptr); });
  EXPECT_NE(lerr.find(bad), std::string::npos) << lerr;
  EXPECT_NE(lerr.find("'wte'"), std::string::npos) << lerr;
  fs::remove_all(dir);
}

// ---- 2. concurrent writers ----------------------------------------------------------------------

TEST(Files, TemporariesAreUniqueAndStaleOnesAreRemoved) {
  const fs::path dir = temp_dir("tmpnames");
  const std::string target = (dir / "x.bin").string();
  TempFile a = create_temp_beside(target), b = create_temp_beside(target);
  ASSERT_GE(a.fd, 0);
  ASSERT_GE(b.fd, 0);
  EXPECT_NE(a.path, b.path);
  ::close(a.fd);
  ::close(b.fd);
  // A temporary of a process that no longer exists (pids are below 2^22 on Linux) is stale; ours is not.
  const fs::path dead = dir / "x.bin.tmp.999999999.0";
  std::ofstream(dead) << "partial";
  const fs::path foreign = dir / "notes.tmp";
  std::ofstream(foreign) << "not ours";
  EXPECT_EQ(remove_stale_temps(dir.string()), 1u);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(a.path));
  EXPECT_TRUE(fs::exists(foreign));
  fs::remove_all(dir);
}

// Two writers of one path at once (the issue: two `init` to one file, two trainings in one
// out_dir). Each write must succeed and the file must always be one writer's complete bytes.
TEST(Files, ConcurrentWritersOfOnePathNeverMix) {
  const fs::path dir = temp_dir("concurrent");
  const std::string path = (dir / "w.safetensors").string();
  std::vector<std::string> errors(2);
  auto writer = [&](int id) {
    std::vector<float> data(1 << 18, float(id + 1));
    for (int k = 0; k < 25; ++k) {
      try {
        write_safetensors(path, {{"x", {int64_t(data.size())}, data.data(), "F32"}}, {{"writer", std::to_string(id)}});
      } catch (const Error& e) {
        errors[id] = e.what();
        return;
      }
    }
  };
  std::thread t0(writer, 0), t1(writer, 1);
  t0.join();
  t1.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  SafetensorsFile f = SafetensorsFile::open(path);
  const float want = float(std::stoi(f.metadata().at("writer")) + 1);
  std::vector<float> got(1 << 18);
  f.read("x", got.data(), {int64_t(got.size())});
  for (float v : got) ASSERT_EQ(v, want);
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  fs::remove_all(dir);
}

TEST(Files, ASecondTrainerInOneDirectoryIsRefusedNamingTheHolder) {
  const fs::path dir = temp_dir("lock");
  write_data(dir, 50);
  const Config cfg = config_for(dir, "run", "");
  fs::create_directories(dir / "run");
  const DirLock held = DirLock::acquire((dir / "run").string(), "train.out_dir", "attnlab train");
  TrainOptions quiet;
  quiet.quiet = true;
  const std::string err = error_of([&] { train(cfg, quiet); });
  EXPECT_NE(err.find("in use"), std::string::npos) << err;
  EXPECT_NE(err.find("pid " + std::to_string(::getpid())), std::string::npos) << err;
  EXPECT_NE(err.find((dir / "run").string()), std::string::npos) << err;
  fs::remove_all(dir);
}

// The cells of a compare array share --out's lock; a plain compare holds it alone
// (docs/distributed.md). flock is per open file, so two holds in one process behave like two
// processes.
TEST(Files, SharedLocksCoexistAndExcludeAnExclusiveOne) {
  const fs::path dir = temp_dir("shared_lock");
  fs::create_directories(dir);
  struct Case {
    const char* name;
    bool first_shared, second_shared, second_allowed;
  };
  for (const Case& c : {Case{"shared beside shared", true, true, true}, Case{"exclusive beside shared", true, false, false},
                        Case{"shared beside exclusive", false, true, false}, Case{"exclusive beside exclusive", false, false, false}}) {
    SCOPED_TRACE(c.name);
    auto take = [&](bool shared, const char* command) {
      return shared ? DirLock::acquire_shared(dir.string(), "compare --out", command) : DirLock::acquire(dir.string(), "compare --out", command);
    };
    const DirLock first = take(c.first_shared, "first holder");
    std::string err;
    try {
      const DirLock second = take(c.second_shared, "second holder");
    } catch (const Error& e) {
      err = e.what();
    }
    if (c.second_allowed) {
      EXPECT_EQ(err, "");
    } else {
      EXPECT_NE(err.find("in use by another process"), std::string::npos) << err;
      EXPECT_NE(err.find("first holder"), std::string::npos) << err;  // the record names the holder
    }
  }
  // Released (destroyed) holds leave nothing behind: an exclusive lock is free again.
  EXPECT_NO_THROW(DirLock::acquire(dir.string(), "compare --out", "after"));
  fs::remove_all(dir);
}

TEST(Files, TrainRemovesStaleTemporariesOfKilledWriters) {
  const fs::path dir = temp_dir("stale");
  write_data(dir, 50);
  fs::create_directories(dir / "run");
  const fs::path stale = dir / "run/step_000004.safetensors.tmp.999999999.3";
  std::ofstream(stale) << "half a checkpoint";
  TrainOptions quiet;
  quiet.quiet = true;
  train(config_for(dir, "run", "train.steps = 2\n"), quiet);
  EXPECT_FALSE(fs::exists(stale));
  fs::remove_all(dir);
}

// ---- 7., 9. honest runs: the metrics log, reuse of an out_dir -----------------------------------

TEST(Metrics, ResumeFromAnOlderCheckpointKeepsEachStepOnce) {
  const fs::path dir = temp_dir("metrics");
  write_data(dir, 50);
  TrainOptions quiet;
  quiet.quiet = true;
  const Config cfg = config_for(dir, "run", "train.ckpt_every = 2\n");
  train(cfg, quiet);  // 6 steps: step_000002, _000004, _000006, model
  // A torn last line, as after kill -9 in the middle of a write.
  std::ofstream(dir / "run/metrics.jsonl", std::ios::app) << "{\"step\":7,\"lo";
  TrainOptions resume = quiet;
  resume.resume = (dir / "run/step_000002.safetensors").string();
  train(cfg, resume);
  std::map<int64_t, int> train_lines;
  for (const auto& line : lines_of(dir / "run/metrics.jsonl")) {
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << line;
    if (j.contains("loss")) ++train_lines[j["step"].get<int64_t>()];
  }
  ASSERT_EQ(train_lines.size(), 6u);
  for (const auto& [step, count] : train_lines) EXPECT_EQ(count, 1) << "step " << step;
  fs::remove_all(dir);
}

TEST(Metrics, WriteErrorsStopTheRun) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const fs::path dir = temp_dir("devfull");
  write_data(dir, 50);
  fs::create_directories(dir / "run");
  fs::create_symlink("/dev/full", dir / "run/metrics.jsonl");
  TrainOptions quiet;
  quiet.quiet = true;
  const std::string err = error_of([&] { train(config_for(dir, "run", ""), quiet); });
  EXPECT_NE(err.find("metrics.jsonl"), std::string::npos) << err;
  EXPECT_NE(err.find(std::strerror(ENOSPC)), std::string::npos) << err;
  fs::remove_all(dir);
}

TEST(Train, AFreshRunRefusesAnotherRunsCheckpointsUnlessForced) {
  const fs::path dir = temp_dir("reuse");
  write_data(dir, 50);
  TrainOptions quiet;
  quiet.quiet = true;
  train(config_for(dir, "run", "train.steps = 4\ntrain.ckpt_every = 2\n"), quiet);
  ASSERT_TRUE(fs::exists(dir / "run/step_000004.safetensors"));
  const Config again = config_for(dir, "run", "train.steps = 2\ntrain.ckpt_every = 1\n");
  const std::string err = error_of([&] { train(again, quiet); });
  EXPECT_NE(err.find("already holds checkpoints"), std::string::npos) << err;
  EXPECT_NE(err.find("--force"), std::string::npos) << err;
  EXPECT_NE(err.find("--resume"), std::string::npos) << err;
  TrainOptions force = quiet;
  force.force = true;
  train(again, force);
  EXPECT_TRUE(fs::exists(dir / "run/step_000002.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "run/step_000004.safetensors")) << "an old run's step file left beside the new run's";
  fs::remove_all(dir);
}

// ---- 5., 6. hostile checkpoints ----------------------------------------------------------------

TEST(Checkpoint, HostileStepMetadataIsAnErrorNamingFileAndKey) {
  const fs::path dir = temp_dir("step");
  const Config cfg = config_for(dir, "run", "");
  GPT<float> m(cfg);
  m.init_weights(1);
  std::vector<float> am(m.registry().total()), av(m.registry().total());
  const std::string path = (dir / "c.safetensors").string();
  for (const char* step : {"-1", "99999999999", "+3", " 7", "7x", ""}) {
    save_checkpoint(path, m, am.data(), av.data(), TrainingState{5, 0, 1, 100});
    rewrite_metadata(path, {{"step", step}});
    GPT<float> back(cfg);
    std::vector<float> bm(back.registry().total()), bv(back.registry().total());
    const std::string err = error_of([&] { load_checkpoint(path, back, bm.data(), bv.data()); });
    EXPECT_NE(err.find(path), std::string::npos) << "step '" << step << "': " << err;
    EXPECT_NE(err.find("step"), std::string::npos) << "step '" << step << "': " << err;
  }
  fs::remove_all(dir);
}

TEST(Checkpoint, ResumingAtOrPastTrainStepsIsAnError) {
  const fs::path dir = temp_dir("done");
  write_data(dir, 50);
  TrainOptions quiet;
  quiet.quiet = true;
  const Config cfg = config_for(dir, "run", "train.steps = 2\n");
  train(cfg, quiet);
  TrainOptions resume = quiet;
  resume.resume = (dir / "run/model.safetensors").string();
  const std::string err = error_of([&] { train(cfg, resume); });
  EXPECT_NE(err.find("nothing left to train"), std::string::npos) << err;
  EXPECT_NE(err.find("train.steps"), std::string::npos) << err;
  fs::remove_all(dir);
}

TEST(Checkpoint, StoredConfigurationIsCheckedAgainstTheTensorsBeforeAllocating) {
  const fs::path dir = temp_dir("bigcfg");
  const Config cfg = config_for(dir, "run", "");
  GPT<float> m(cfg);
  m.init_weights(1);
  const std::string path = (dir / "c.safetensors").string();
  save_checkpoint(path, m, nullptr, nullptr, TrainingState{});
  // The stored configuration claims d = 65536, L = 1024: ~200 TB of parameters.
  nlohmann::json j = cfg.to_json();
  j["model.d_model"] = 65536;
  j["model.n_layer"] = 1024;
  j["model.n_head"] = 4;
  j["model.kv_heads"] = 4;
  j.erase("model.mlp_hidden");
  rewrite_metadata(path, {{"config", j.dump()}});
  const std::string err = error_of([&] { read_checkpoint_config(path); });
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_NE(err.find("wte"), std::string::npos) << err;
  fs::remove_all(dir);
}

// ---- 10. the numeric environment of exact resume -----------------------------------------------

TEST(Checkpoint, RecordsTheNumericEnvironment) {
  const fs::path dir = temp_dir("env");
  const Config cfg = config_for(dir, "run", "");
  GPT<float> m(cfg);
  m.init_weights(1);
  const std::string path = (dir / "c.safetensors").string();
  save_checkpoint(path, m, nullptr, nullptr, TrainingState{});
  const std::string env = read_checkpoint_environment(path);
  const auto j = nlohmann::json::parse(env);
  for (const char* key : {"threads", "cpu_isa", "build_isa", "onednn", "ftz", "daz"}) EXPECT_TRUE(j.contains(key)) << key << " in " << env;
  EXPECT_TRUE(numeric_environment_differences(env).empty());
  auto other = j;
  other["threads"] = "977";
  const auto diff = numeric_environment_differences(other.dump());
  ASSERT_EQ(diff.size(), 1u);
  EXPECT_NE(diff[0].find("threads 977 -> "), std::string::npos) << diff[0];
  fs::remove_all(dir);
}

// ---- 5. `attnlab info` counts activation memory without allocating it ----------------------------

TEST(Model, PlanCountOnlyCountsWhatPlanAllocates) {
  const fs::path dir = temp_dir("count");
  for (const char* extra : {"", "residual.kind = dar\n", "residual.kind = mhc\n"}) {
    const Config cfg = config_for(dir, "run", extra);
    GPT<float> counted(cfg), planned(cfg);
    counted.plan_count_only(4, 16);
    planned.plan(4, 16);
    EXPECT_EQ(counted.activation_bytes(), planned.activation_bytes()) << extra;
    EXPECT_EQ(counted.residual_activation_bytes(), planned.residual_activation_bytes()) << extra;
  }
  // A shape whose activations would be ~100 GB is counted, not allocated.
  GPT<float> big(config_for(dir, "run", ""));
  big.plan_count_only(1 << 16, 16);
  EXPECT_GT(big.activation_bytes(), size_t(1) << 30);
  fs::remove_all(dir);
}

// ---- round 2 (issue 28): 1. checksums, 2. optimizer state ----------------------------------------

TEST(Checksums, AFlippedBitInAnyTensorIsAnErrorNamingFileAndTensor) {
  const fs::path dir = temp_dir("checksum");
  const Config cfg = config_for(dir, "run", "");
  GPT<float> m(cfg);
  m.init_weights(1);
  std::vector<float> am(m.registry().total(), 0.01f), av(m.registry().total(), 0.02f);
  const std::string path = (dir / "c.safetensors").string();
  // A parameter, a first moment, a second moment; low and high bits (a low mantissa bit leaves
  // the value finite and almost unchanged: nothing but the checksum can see it).
  for (const auto& [name, byte, bit] : std::vector<std::tuple<std::string, size_t, int>>{
           {"wte", 0, 0}, {"blocks.1.mlp.proj.weight", 17, 6}, {"adam.m.ln_f.weight", 4, 0}, {"adam.v.wte", 2, 7}}) {
    save_checkpoint(path, m, am.data(), av.data(), TrainingState{});
    flip_bit(path, name, byte, bit);
    GPT<float> back(read_checkpoint_config(path));
    std::vector<float> bm(back.registry().total()), bv(back.registry().total());
    const std::string err = error_of([&] { load_checkpoint(path, back, bm.data(), bv.data()); });
    EXPECT_NE(err.find(path), std::string::npos) << name << ": " << err;
    EXPECT_NE(err.find("tensor '" + name + "' fails its checksum"), std::string::npos) << name << ": " << err;
    // Skipping the verification loads it (the damage then goes unnoticed).
    set_verify_checkpoint_checksums(false);
    EXPECT_EQ(error_of([&] { load_checkpoint(path, back, bm.data(), bv.data()); }), "") << name;
    set_verify_checkpoint_checksums(true);
  }
  // An undamaged file loads, and every tensor has its checksum.
  save_checkpoint(path, m, am.data(), av.data(), TrainingState{});
  {
    SafetensorsFile f = SafetensorsFile::open(path);
    const auto sums = decode_checksums(path, f.metadata().at(kChecksumKey));
    EXPECT_EQ(sums.size(), f.names().size());
    for (const auto& n : f.names()) EXPECT_EQ(sums.at(n), tensor_checksum(f.data(n), f.info(n).nbytes)) << n;
  }
  GPT<float> back(cfg);
  std::vector<float> bm(back.registry().total()), bv(back.registry().total());
  EXPECT_EQ(error_of([&] { load_checkpoint(path, back, bm.data(), bv.data()); }), "");
  EXPECT_EQ(std::memcmp(back.params(), m.params(), 4 * m.registry().total()), 0);
  fs::remove_all(dir);
}

TEST(Checksums, FilesWithoutThemLoadAndBadChecksumMetadataIsNamed) {
  const fs::path dir = temp_dir("checksum_old");
  const Config cfg = config_for(dir, "run", "");
  GPT<float> m(cfg);
  m.init_weights(1);
  const std::string path = (dir / "c.safetensors").string();
  GPT<float> back(cfg);
  // Written before checksums were stored: loads (with a note on stderr).
  save_checkpoint(path, m, nullptr, nullptr, TrainingState{});
  rewrite_tensor(path, "wte", 0, 0.5f, {kChecksumKey});
  EXPECT_EQ(error_of([&] { load_checkpoint(path, back, nullptr, nullptr); }), "");
  EXPECT_EQ(back.params()[back.registry().specs()[0].offset], 0.5f);
  // Damaged checksum metadata, or a tensor left out of it: errors naming the file and the key.
  for (const std::string& bad : {std::string("{"), std::string("[]"), std::string("{\"wte\": \"xyz\"}"),
                                 std::string("{\"wte\": 7}"), std::string("{}")}) {
    save_checkpoint(path, m, nullptr, nullptr, TrainingState{});
    rewrite_metadata(path, {{kChecksumKey, bad}});
    const std::string err = error_of([&] { load_checkpoint(path, back, nullptr, nullptr); });
    EXPECT_NE(err.find(path), std::string::npos) << bad << ": " << err;
    EXPECT_NE(err.find(kChecksumKey), std::string::npos) << bad << ": " << err;
  }
  fs::remove_all(dir);
}

TEST(Checkpoint, ANegativeOrNonFiniteAdamSecondMomentIsRefusedNamingFileAndTensor) {
  const fs::path dir = temp_dir("adam_v");
  const Config cfg = config_for(dir, "run", "");
  GPT<float> m(cfg);
  m.init_weights(1);
  std::vector<float> am(m.registry().total(), 0.01f), av(m.registry().total(), 0.02f);
  const std::string path = (dir / "c.safetensors").string();
  for (float bad : {-1.0f, -1e-30f, float(NAN), float(INFINITY)}) {
    save_checkpoint(path, m, am.data(), av.data(), TrainingState{});
    rewrite_tensor(path, "adam.v.ln_f.weight", 3, bad);  // checksums recomputed: the value itself is refused
    GPT<float> back(cfg);
    std::vector<float> bm(back.registry().total()), bv(back.registry().total());
    const std::string err = error_of([&] { load_checkpoint(path, back, bm.data(), bv.data()); });
    EXPECT_NE(err.find(path), std::string::npos) << bad << ": " << err;
    EXPECT_NE(err.find("tensor 'adam.v.ln_f.weight'"), std::string::npos) << bad << ": " << err;
    EXPECT_NE(err.find("element 3"), std::string::npos) << bad << ": " << err;
  }
  // Nor is such a state written.
  av[5] = -1;
  const std::string err = error_of([&] { save_checkpoint(path, m, am.data(), av.data(), TrainingState{}); });
  EXPECT_NE(err.find("negative"), std::string::npos) << err;
  fs::remove_all(dir);
}

// printable(): what a message may echo of a hostile file's bytes (include/attnlab/printable.h).
TEST(Printable, EscapesControlsAndMalformedUtf8ButKeepsCharacters) {
  using attnlab::printable;
  EXPECT_EQ(printable("key = 1"), "'key = 1'");
  EXPECT_EQ(printable("a'b\\c"), "'a\\'b\\\\c'");
  EXPECT_EQ(printable(std::string("\x1b[2J\n\x7f", 6)), "'\\x1b[2J\\x0a\\x7f'");
  EXPECT_EQ(printable("\xc3\xa9t\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80"), "'\xc3\xa9t\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80'");
  EXPECT_EQ(printable("\xc2\x9b" "31m"), "'\\xc2\\x9b31m'");        // C1 CSI: a terminal control
  EXPECT_EQ(printable("\xd0" "a"), "'\\xd0a'");                     // lead byte without continuation
  EXPECT_EQ(printable("\x80\xbf"), "'\\x80\\xbf'");                 // stray continuation bytes
  EXPECT_EQ(printable("\xc0\xaf"), "'\\xc0\\xaf'");                 // overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "'\\xed\\xa0\\x80'");        // a surrogate
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "'\\xf4\\x90\\x80\\x80'");  // beyond U+10FFFF
  EXPECT_EQ(printable("\xe2\x80"), "'\\xe2\\x80'");                 // truncated at the end
  EXPECT_EQ(printable("a\xe2\x80\xae" "b"), "'a\\xe2\\x80\\xaeb'");        // U+202E right-to-left override
  EXPECT_EQ(printable("\xe2\x81\xa6"), "'\\xe2\\x81\\xa6'");            // U+2066 left-to-right isolate
  EXPECT_EQ(printable("\xe2\x80\xa7"), "'\xe2\x80\xa7'");                // U+2027 hyphenation point stays
  EXPECT_EQ(printable("abcdef", 3), "'abc...'");
  EXPECT_EQ(printable("ab\xc3\xa9", 3), "'ab...'");                 // never half a character
  EXPECT_TRUE(attnlab::is_printable_text("caf\xc3\xa9\tok"));
  EXPECT_FALSE(attnlab::is_printable_text("\xc2\x9b"));
  EXPECT_FALSE(attnlab::is_printable_text("\xff"));
  EXPECT_FALSE(attnlab::is_printable_text("a\nb"));
}
