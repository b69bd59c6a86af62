// Configuration: strict keys (docs/mechanisms.md §7.2 Validation), presets, JSON round trip.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json.h"
#include "model/config.h"

using namespace attnlab;

namespace {
Config from_text(const std::string& text) { return resolve_config(parse_config_text(text, "test.toml")); }

// The error message of resolving `text`, or "" if it resolved.
std::string error_of(const std::string& text) {
  try {
    from_text(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string source_dir() {
  if (const char* s = std::getenv("ATTNLAB_SOURCE_DIR")) return s;
  std::string f = __FILE__;
  return f.substr(0, f.rfind("/tests/"));
}
}  // namespace

TEST(Config, DefaultsAndDerived) {
  const Config c = from_text("model.d_model = 96\nmodel.n_head = 3\n");
  EXPECT_EQ(c.model.kv_heads, 3);            // kv_heads defaults to n_head
  EXPECT_EQ(c.model.mlp_hidden, 4 * 96);     // gelu: 4d
  const Config s = from_text("model.d_model = 768\nmodel.n_head = 12\nmodel.mlp = swiglu\n");
  EXPECT_EQ(s.model.mlp_hidden, 2048);       // §1.1: 64*ceil(8d/192) = 2048 for d = 768
  EXPECT_EQ(c.data.train, "data/heldout/train.bin");
}

TEST(Config, TablesCommentsAndTypes) {
  const Config c = from_text("[model]\nn_layer = 3 # comment\nnorm = \"rmsnorm\"\n[attn]\npos = learned\n[train]\nlr = 1e-4\n");
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.model.norm, "rmsnorm");
  EXPECT_EQ(c.attn.pos, "learned");
  EXPECT_DOUBLE_EQ(c.train.lr, 1e-4);
}

TEST(Config, ErrorsNameTheKeyAndPlace) {
  EXPECT_NE(error_of("model.n_layers = 4\n").find("unknown configuration key 'model.n_layers'"), std::string::npos);
  EXPECT_NE(error_of("\n\nmodel.n_layer = four\n").find("test.toml:3"), std::string::npos);
  EXPECT_NE(error_of("model.norm = batchnorm\n").find("model.norm"), std::string::npos);
  // inactive mechanism keys (§7.2)
  EXPECT_NE(error_of("attn.pos = learned\nattn.rope.base = 500\n").find("attn.rope.base"), std::string::npos);
  EXPECT_NE(error_of("attn.sink.init = 1\n").find("attn.sink.init"), std::string::npos);
  EXPECT_NE(error_of("train.wsd_decay_frac = 0.3\n").find("train.wsd_decay_frac"), std::string::npos);
  // invalid combinations
  EXPECT_NE(error_of("model.n_head = 4\nmodel.kv_heads = 3\n").find("model.kv_heads"), std::string::npos);
  EXPECT_NE(error_of("model.d_model = 100\nmodel.n_head = 3\n").find("not divisible"), std::string::npos);
  EXPECT_NE(error_of("model.d_model = 12\nmodel.n_head = 4\n").find("even head dimension"), std::string::npos);
  EXPECT_EQ(error_of("model.d_model = 12\nmodel.n_head = 4\nattn.pos = none\n"), "");
  EXPECT_NE(error_of("train.steps = 10\ntrain.warmup = 20\n").find("train.warmup"), std::string::npos);
  // specified but not yet implemented mechanisms are named, not silently ignored
  EXPECT_EQ(error_of("residual.kind = hyper\n"), "");  // residual kinds: tests/test_residual.cpp
  EXPECT_EQ(error_of("attn.pos = alibi\nmodel.d_model = 12\nmodel.n_head = 4\n"), "");  // odd head size is fine without RoPE
  EXPECT_EQ(error_of("residual.kind = dar\n"), "");  // built (tests/test_dar.cpp has its keys)
  EXPECT_NE(error_of("garbage line\n").find("expected `key = value`"), std::string::npos);
  EXPECT_THROW(parse_override("noequals"), Error);
  // keys_once (grid files): a key given twice is an error naming both places, also through a table
  // header; otherwise the later assignment wins (a text appended to another overrides it)
  try {
    parse_config_text("model.n_layer = 2\n[model]\nn_layer = 3\n", "grid.toml", true);
    ADD_FAILURE() << "a key given twice was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("grid.toml:3: model.n_layer is given a second time (first at grid.toml:1)"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(resolve_config(parse_config_text("model.n_layer = 2\nmodel.n_layer = 3\n", "t")).model.n_layer, 3);
}

TEST(Config, XsaAndGoatKeys) {
  // §7.2 keys of XSA and GOAT: defaults, layer lists, inactive keys, and the invalid combinations.
  const Config g = from_text("attn.pos = goat\nattn.xsa = gated\nattn.xsa.layers = [2, 0]\nattn.goat.layers = [1]\n"
                             "attn.goat.other_pos = alibi\nmodel.n_layer = 3\n");
  EXPECT_EQ(g.attn.goat.train_len, g.model.seq_len);  // τ defaults to model.seq_len
  EXPECT_EQ(g.attn.xsa_layers, (std::vector<int>{0, 2}));
  EXPECT_TRUE(g.attn.xsa_at(0));
  EXPECT_FALSE(g.attn.xsa_at(1));
  EXPECT_EQ(g.attn.pos_at(0), "alibi");
  EXPECT_EQ(g.attn.pos_at(1), "goat");
  const Config back = Config::from_json(g.to_json(), "roundtrip");
  EXPECT_EQ(back.to_json().dump(), g.to_json().dump());
  EXPECT_EQ(back.attn.goat.layers, (std::vector<int>{1}));
  // inactive keys name themselves
  EXPECT_NE(error_of("attn.goat.pos_rank = 2\n").find("attn.goat.pos_rank"), std::string::npos);
  EXPECT_NE(error_of("attn.xsa.layers = [0]\n").find("attn.xsa.layers"), std::string::npos);
  EXPECT_NE(error_of("attn.pos = goat\nattn.goat.other_pos = none\nattn.rope.base = 100\n").find("attn.rope.base"),
            std::string::npos);
  // D_h − (2R + key_bias) < 1: d = 64 with 8 heads has D_h = 8 < 9
  EXPECT_NE(error_of("attn.pos = goat\nmodel.d_model = 64\nmodel.n_head = 8\n").find("attn.goat.pos_rank"), std::string::npos);
  EXPECT_EQ(error_of("attn.pos = goat\nmodel.d_model = 64\nmodel.n_head = 8\nattn.goat.pos_rank = 3\n"), "");
  // layer indices outside [0, L), malformed lists
  EXPECT_NE(error_of("attn.xsa = on\nattn.xsa.layers = [4]\n").find("outside [0, 4)"), std::string::npos);
  EXPECT_NE(error_of("attn.pos = goat\nattn.goat.layers = [0, 0]\n").find("distinct"), std::string::npos);
  EXPECT_NE(error_of("attn.xsa = on\nattn.xsa.layers = 1,2\n").find("attn.xsa.layers"), std::string::npos);
  EXPECT_NE(error_of("attn.xsa = maybe\n").find("off | on | gated"), std::string::npos);
  // RoPE on the non-GOAT layers needs an even head size
  EXPECT_NE(error_of("attn.pos = goat\nmodel.d_model = 60\nmodel.n_head = 4\nattn.goat.layers = [0]\n").find("attn.goat.other_pos"),
            std::string::npos);
}

TEST(Config, JsonRoundTrip) {
  const Config c = from_text("model.n_layer = 3\nmodel.kv_heads = 2\nattn.sink = learned\nattn.sink.init = -1.5\nmodel.bias = false\n");
  const Config back = Config::from_json(c.to_json(), "roundtrip");
  EXPECT_EQ(back.to_json().dump(), c.to_json().dump());
  EXPECT_EQ(back.attn.sink_init, -1.5);
  EXPECT_FALSE(back.model.bias);
  // inactive keys are not stored, so a stored config re-resolves cleanly
  EXPECT_FALSE(c.to_json().contains("train.wsd_decay_frac"));
}

TEST(Config, PresetsMatchConfigFiles) {
  for (const char* name : {"tiny", "small", "bench"}) {
    std::ifstream f(source_dir() + "/configs/" + name + ".toml");
    ASSERT_TRUE(f) << name;
    std::stringstream ss;
    ss << f.rdbuf();
    EXPECT_EQ(ss.str(), preset_config_text(name)) << "configs/" << name << ".toml differs from the built-in preset";
    EXPECT_NO_THROW(from_text(ss.str()));
  }
}
