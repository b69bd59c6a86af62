// safetensors reader/writer (src/checkpoint/safetensors.h): round trips, every validation rule with a
// hand-made corrupt file, truncation at every byte, random mutations and garbage (an Error or a
// valid file, never a crash), atomic writes that keep the old file on failure, and interop with
// the official Python `safetensors` package in both directions.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "core/rng.h"
#include "checkpoint/safetensors.h"

using namespace attnlab;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "attnlab_st_XXXXXX").string();
    if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    ::chmod(path_.c_str(), 0755);  // a test may have made it read-only
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// 8-byte little-endian length, header, data: a file built by hand, for corruptions.
std::string raw_file(const std::string& header, const std::string& data, uint64_t length) {
  std::string s(8, '\0');
  for (int b = 0; b < 8; ++b) s[b] = char(length >> (8 * b));
  return s + header + data;
}
std::string raw_file(const std::string& header, const std::string& data) { return raw_file(header, data, header.size()); }

// An in-memory file (memfd) reachable by a path, so that thousands of fuzz cases cost no disk
// I/O (rewriting a file on this VM's ext4 costs milliseconds each).
class MemFile {
 public:
  MemFile() : fd_(::memfd_create("attnlab_st_fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) throw std::runtime_error("memfd_create failed");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  void set(const std::string& bytes) {
    ASSERT_EQ(::ftruncate(fd_, 0), 0);
    ASSERT_EQ(::pwrite(fd_, bytes.data(), bytes.size(), 0), ssize_t(bytes.size()));
  }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

// Runs open() and returns the Error message ("" if it opened). Any other exception fails the test.
std::string open_error(const std::string& path) {
  try {
    SafetensorsFile f = SafetensorsFile::open(path);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

// Bytes of a vector, for comparisons of raw tensor contents.
template <class T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Several tensors of different dtypes, including a scalar, an empty tensor and an odd-sized U8
// one (which would misalign everything after it if the writer did not order by element size).
struct Sample {
  std::vector<float> w = {1.5f, -2.25f, 3.0f, 0.0f, -0.0f, 1e-30f, 6.0f, 7.0f, 8.0f, 9.0f, 10.0f, 11.0f};
  std::vector<double> d = {3.141592653589793, -1e300, 2.0, 5e-324, 0.5, 0.25, -4.0, 8.0};
  std::vector<int32_t> i32 = {-7, 0, 7, INT32_MAX, INT32_MIN};
  std::vector<int64_t> scalar = {INT64_MIN + 1};
  std::vector<uint8_t> u8 = {0, 200, 255};
  std::vector<uint16_t> bf16 = {0x3f80, 0xc000};  // 1.0, -2.0 as bfloat16 bit patterns
  std::vector<float> empty;
  std::map<std::string, std::string> meta = {{"format", "attnlab"},
                                             {"config", R"({"d": 64, "name": "tiny \"quoted\""})"},
                                             {"unicode", "h\xc3\xa9llo \xe2\x9c\x93"},
                                             {"empty", ""}};
  std::vector<TensorRef> refs() const {
    return {{"blocks.0.attn.qkv.weight", {3, 4}, w.data()},
            {"d", {2, 2, 2}, d.data(), "F64"},
            {"ints", {5}, i32.data(), "I32"},
            {"step", {}, scalar.data(), "I64"},
            {"bytes", {3}, u8.data(), "U8"},
            {"half", {2}, bf16.data(), "BF16"},
            {"nothing", {0, 7}, nullptr}};
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Round trip and layout

TEST(Safetensors, RoundTripSeveralTensorsAndMetadata) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  Sample s;
  write_safetensors(path, s.refs(), s.meta);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.metadata(), s.meta);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"blocks.0.attn.qkv.weight", "bytes", "d", "half", "ints", "nothing", "step"}));
  EXPECT_TRUE(f.has("d"));
  EXPECT_FALSE(f.has("missing"));

  std::vector<float> w(12);
  f.read("blocks.0.attn.qkv.weight", w.data(), {3, 4});
  EXPECT_EQ(bytes_of(w), bytes_of(s.w));  // bitwise, so -0.0 and denormals survive
  std::vector<double> d(8);
  f.read("d", d.data(), {2, 2, 2}, "F64");
  EXPECT_EQ(bytes_of(d), bytes_of(s.d));
  std::vector<int32_t> i32(5);
  f.read("ints", i32.data(), {5}, "I32");
  EXPECT_EQ(i32, s.i32);
  int64_t step = 0;
  f.read("step", &step, {}, "I64");
  EXPECT_EQ(step, s.scalar[0]);
  std::vector<uint8_t> u8(3);
  f.read("bytes", u8.data(), {3}, "U8");
  EXPECT_EQ(u8, s.u8);
  std::vector<uint16_t> bf16(2);
  f.read("half", bf16.data(), {2}, "BF16");
  EXPECT_EQ(bf16, s.bf16);
  f.read("nothing", nullptr, {0, 7});  // zero bytes: dst is never touched

  const auto& info = f.info("d");
  EXPECT_EQ(info.dtype, "F64");
  EXPECT_EQ(info.shape, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(info.nbytes, 64u);
  EXPECT_EQ(std::memcmp(f.data("d"), s.d.data(), 64), 0);
  EXPECT_EQ(f.info("nothing").nbytes, 0u);

  // Every tensor starts at a multiple of its element size in memory (8-aligned data section,
  // largest elements first), so data() can be dereferenced as its type.
  for (const auto& name : f.names()) {
    const size_t itemsize = safetensors_dtype_size(f.info(name).dtype);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(f.data(name)) % itemsize, 0u) << name;
  }

  // Moving keeps the mapping valid; the moved-from object owns nothing.
  SafetensorsFile g = std::move(f);
  EXPECT_EQ(std::memcmp(g.data("d"), s.d.data(), 64), 0);
}

TEST(Safetensors, LayoutMatchesTheFormat) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  Sample s;
  write_safetensors(path, s.refs(), s.meta);
  const std::string bytes = read_bytes(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int b = 0; b < 8; ++b) n |= uint64_t(uint8_t(bytes[b])) << (8 * b);
  EXPECT_EQ(n % 8, 0u) << "header is padded so the data section is 8-aligned";
  const json h = json::parse(bytes.substr(8, n));
  size_t total = 0;
  for (auto it = h.begin(); it != h.end(); ++it)
    if (it.key() != "__metadata__") total += it.value()["data_offsets"][1].get<size_t>() - it.value()["data_offsets"][0].get<size_t>();
  EXPECT_EQ(bytes.size(), 8 + n + total);
  EXPECT_EQ(h["__metadata__"]["format"], "attnlab");
  // F64 (8 bytes) first, then F32/I32 by name, BF16, U8 last: no padding is needed anywhere.
  EXPECT_EQ(h["d"]["data_offsets"], json({0, 64}));
  EXPECT_EQ(h["step"]["data_offsets"], json({64, 72}));
  EXPECT_EQ(h["blocks.0.attn.qkv.weight"]["data_offsets"], json({72, 120}));
  EXPECT_EQ(h["half"]["data_offsets"], json({140, 144}));
  EXPECT_EQ(h["bytes"]["data_offsets"], json({144, 147}));
  EXPECT_EQ(h["step"]["shape"], json::array());
}

TEST(Safetensors, EdgeCasesThatAreValid) {
  TempDir dir;
  const std::string path = dir.file("v.safetensors");
  // No tensors and no metadata at all.
  write_safetensors(path, {}, {});
  {
    SafetensorsFile f = SafetensorsFile::open(path);
    EXPECT_TRUE(f.names().empty());
    EXPECT_TRUE(f.metadata().empty());
  }
  // Written by hand: unpadded header, null metadata (what the official reader accepts as none),
  // extra fields in an entry (ignored, as the official reader does), zero-size tensors sharing
  // the offset of a non-empty one.
  const std::string header =
      R"({"__metadata__":null,"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3],"extra":[1]},)"
      R"("z":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"y":{"dtype":"F16","shape":[2,0],"data_offsets":[3,3]}})";
  write_bytes(path, raw_file(header, "xyz"));
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "y", "z"}));
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_EQ(std::string(static_cast<const char*>(f.data("a")), 3), "xyz");

  // JSON whitespace around the object, a duplicated metadata key (the last wins, as in the
  // official reader), and a complex64 tensor.
  write_bytes(path, raw_file(" \n" R"({"__metadata__":{"k":"1","k":"2"},"c":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})"
                             "\t\r\n",
                             "01234567"));
  SafetensorsFile g = SafetensorsFile::open(path);
  EXPECT_EQ(g.metadata().at("k"), "2");
  EXPECT_EQ(g.info("c").nbytes, 8u);
}

TEST(Safetensors, ReadChecksDtypeShapeAndName) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  Sample s;
  write_safetensors(path, s.refs(), s.meta);
  SafetensorsFile f = SafetensorsFile::open(path);
  std::vector<double> buf(64);
  auto message = [&](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string shape = message([&] { f.read("blocks.0.attn.qkv.weight", buf.data(), {4, 3}); });
  EXPECT_NE(shape.find(path), std::string::npos) << shape;
  EXPECT_NE(shape.find("blocks.0.attn.qkv.weight"), std::string::npos) << shape;
  EXPECT_NE(shape.find("expected F32 [4,3], found F32 [3,4]"), std::string::npos) << shape;
  const std::string dtype = message([&] { f.read("d", buf.data(), {2, 2, 2}); });
  EXPECT_NE(dtype.find("expected F32 [2,2,2], found F64 [2,2,2]"), std::string::npos) << dtype;
  EXPECT_NE(dtype.find(path), std::string::npos) << dtype;
  for (const std::string& missing : {message([&] { f.info("wte"); }), message([&] { f.data("wte"); }),
                                     message([&] { f.read("wte", buf.data(), {1}); })}) {
    EXPECT_NE(missing.find(path), std::string::npos) << missing;
    EXPECT_NE(missing.find("no tensor 'wte'"), std::string::npos) << missing;
  }
}

// ---------------------------------------------------------------------------------------------
// Validation on open: one hand-made file per rule.

TEST(Safetensors, EveryCorruptionIsAnErrorNamingTheFile) {
  TempDir dir;
  const std::string ok8 = "01234567";
  auto entry = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return R"({"dtype":)" + dtype + R"(,"shape":)" + shape + R"(,"data_offsets":)" + offsets + "}";
  };
  const std::string a = entry(R"("F32")", "[2]", "[0,8]");
  std::string deep = "[";
  for (int i = 0; i < 40; ++i) deep += "[";
  for (int i = 0; i < 41; ++i) deep += "]";
  struct Case {
    const char* what;
    std::string bytes;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {"empty file", "", "shorter than the 8-byte header length"},
      {"5-byte file", "abcde", "shorter than the 8-byte header length"},
      {"header length past the end", raw_file(R"({"a":)" + a + "}", ok8, 1000), "exceeds"},
      {"header length one past the end", raw_file(R"({"a":)" + a + "}", "", (R"({"a":)" + a + "}").size() + 1), "exceeds"},
      {"absurd header length", raw_file("{}", "", 100'000'001), "absurd"},
      {"header length 2^64-1", raw_file("{}", "", UINT64_MAX), "absurd"},
      {"zero header length", raw_file("", "{}", 0), "not valid JSON"},
      {"header is an array", raw_file("[1,2]", ""), "header is a JSON array, not an object"},
      {"header is a string", raw_file(" \"x\" ", ""), "header is a JSON string, not an object"},
      {"header is not JSON", raw_file(R"({"a": )", ""), "not valid JSON"},
      {"garbage after the JSON", raw_file(R"({"a":)" + a + "}x", ok8), "not valid JSON"},
      {"NUL padding", raw_file(std::string(R"({"a":)" + a + "}") + '\0', ok8), "NUL byte"},
      {"NUL hiding garbage", raw_file(std::string(R"({"a":)" + a + "}") + '\0' + "garbage", ok8), "NUL byte"},
      {"invalid UTF-8 in a name", raw_file("{\"\xff\xfe\":" + a + "}", ok8), "not valid JSON"},
      {"entry is a number", raw_file(R"({"a":5})", ""), "not an object"},
      {"entry is null", raw_file(R"({"a":null})", ""), "not an object"},
      {"missing dtype", raw_file(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", ok8), "has no \"dtype\""},
      {"missing shape", raw_file(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", ok8), "has no \"shape\""},
      {"missing data_offsets", raw_file(R"({"a":{"dtype":"F32","shape":[2]}})", ok8), "has no \"data_offsets\""},
      {"dtype is a number", raw_file(R"({"a":)" + entry("4", "[2]", "[0,8]") + "}", ok8), "dtype is a JSON number"},
      {"unknown dtype", raw_file(R"({"a":)" + entry(R"("F31")", "[2]", "[0,8]") + "}", ok8), "unknown or unsupported dtype 'F31'"},
      {"lower-case dtype", raw_file(R"({"a":)" + entry(R"("f32")", "[2]", "[0,8]") + "}", ok8), "unknown or unsupported dtype"},
      {"shape is a number", raw_file(R"({"a":)" + entry(R"("F32")", "2", "[0,8]") + "}", ok8), "shape is a JSON number"},
      {"shape entry is a string", raw_file(R"({"a":)" + entry(R"("F32")", R"(["2"])", "[0,8]") + "}", ok8), "non-negative integers"},
      {"shape entry is a float", raw_file(R"({"a":)" + entry(R"("F32")", "[2.0]", "[0,8]") + "}", ok8), "non-negative integers"},
      {"negative dimension", raw_file(R"({"a":)" + entry(R"("F32")", "[-2]", "[0,8]") + "}", ok8), "negative dimension -2"},
      {"negative dimensions cancelling", raw_file(R"({"a":)" + entry(R"("F32")", "[-1,-2]", "[0,8]") + "}", ok8), "negative dimension"},
      {"dimension beyond int64", raw_file(R"({"a":)" + entry(R"("F32")", "[18446744073709551615]", "[0,8]") + "}", ok8), "absurd dimension"},
      {"element count overflows", raw_file(R"({"a":)" + entry(R"("F32")", "[4294967296,4294967296,4]", "[0,8]") + "}", ok8), "more bytes than memory"},
      {"size does not match offsets", raw_file(R"({"a":)" + entry(R"("F32")", "[3]", "[0,8]") + "}", ok8), "needs 12 bytes"},
      {"size wraps to match offsets", raw_file(R"({"a":)" + entry(R"("F32")", "[4611686018427387904,1]", "[0,0]") + "}", ""), "more bytes than memory"},
      {"data_offsets is an object", raw_file(R"({"a":)" + entry(R"("F32")", "[2]", R"({"b":0})") + "}", ok8), "must be an array"},
      {"data_offsets has one entry", raw_file(R"({"a":)" + entry(R"("F32")", "[2]", "[8]") + "}", ok8), "must be an array"},
      {"data_offsets has three entries", raw_file(R"({"a":)" + entry(R"("F32")", "[2]", "[0,8,8]") + "}", ok8), "must be an array"},
      {"negative offset", raw_file(R"({"a":)" + entry(R"("F32")", "[2]", "[-8,0]") + "}", ok8), "non-negative integers"},
      {"float offset", raw_file(R"({"a":)" + entry(R"("F32")", "[2]", "[0,8.0]") + "}", ok8), "non-negative integers"},
      {"end before begin", raw_file(R"({"a":)" + entry(R"("F32")", "[0]", "[8,0]") + "}", ok8), "end before they begin"},
      {"offsets past the data", raw_file(R"({"a":)" + entry(R"("F32")", "[4]", "[0,16]") + "}", ok8), "run past the 8-byte data section"},
      {"offsets far past the data", raw_file(R"({"a":)" + entry(R"("F32")", "[2]", "[9223372036854775800,9223372036854775808]") + "}", ok8), "non-negative integers"},
      {"overlapping tensors",
       raw_file(R"({"a":)" + a + R"(,"b":)" + entry(R"("F32")", "[2]", "[4,12]") + "}", ok8 + "89ab"), "overlaps"},
      {"same bytes twice", raw_file(R"({"a":)" + a + R"(,"b":)" + a + "}", ok8), "overlaps"},
      {"empty tensor inside another", raw_file(R"({"a":)" + a + R"(,"e":)" + entry(R"("F32")", "[0]", "[4,4]") + "}", ok8), "overlaps"},
      {"gap between tensors",
       raw_file(R"({"a":)" + a + R"(,"b":)" + entry(R"("F32")", "[1]", "[12,16]") + "}", ok8 + "89abcdef"), "belong to no tensor"},
      {"gap at the start", raw_file(R"({"a":)" + entry(R"("F32")", "[1]", "[4,8]") + "}", ok8), "belong to no tensor"},
      {"trailing bytes", raw_file(R"({"a":)" + a + "}", ok8 + "89ab"), "trailing bytes"},
      {"data but no tensors", raw_file("{}", ok8), "trailing bytes"},
      {"metadata is an array", raw_file(R"({"__metadata__":[1],"a":)" + a + "}", ok8), "__metadata__ is a JSON array"},
      {"metadata is a string", raw_file(R"({"__metadata__":"x","a":)" + a + "}", ok8), "__metadata__ is a JSON string"},
      {"metadata value is a number", raw_file(R"({"__metadata__":{"step":1},"a":)" + a + "}", ok8), "value of 'step' is a JSON number"},
      {"metadata value is an object", raw_file(R"({"__metadata__":{"c":{}},"a":)" + a + "}", ok8), "not a string"},
      {"duplicate tensor name", raw_file(R"({"a":)" + a + R"(,"a":)" + a + "}", ok8), "names 'a' twice"},
      {"duplicate metadata", raw_file(R"({"__metadata__":{},"__metadata__":{},"a":)" + a + "}", ok8), "twice"},
      {"duplicate field", raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"dtype":"I32"}})", ok8),
       "tensor 'a': entry has the field 'dtype' twice"},
      {"sub-byte dtype", raw_file(R"({"a":)" + entry(R"("F4")", "[2]", "[0,1]") + "}", "x"), "unsupported dtype 'F4'"},
      {"absurd nesting", raw_file(R"({"__metadata__":)" + deep + "}", ""), "nests deeper"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = dir.file("case" + std::to_string(i) + ".safetensors");
    write_bytes(path, cases[i].bytes);
    const std::string msg = open_error(path);
    EXPECT_FALSE(msg.empty()) << cases[i].what << ": opened without error";
    EXPECT_NE(msg.find(path), std::string::npos) << cases[i].what << ": message does not name the file: " << msg;
    EXPECT_NE(msg.find(cases[i].needle), std::string::npos)
        << cases[i].what << ": expected \"" << cases[i].needle << "\" in: " << msg;
  }

  // Not a file at all.
  const std::string missing = open_error(dir.file("nope.safetensors"));
  EXPECT_NE(missing.find("nope.safetensors: cannot open: No such file or directory"), std::string::npos) << missing;
  const std::string directory = open_error(dir.path());
  EXPECT_NE(directory.find("not a regular file"), std::string::npos) << directory;
}

TEST(Safetensors, ControlBytesInNamesAreEscapedInMessages) {
  TempDir dir;
  const std::string path = dir.file("esc.safetensors");
  // A JSON-escaped newline and escape character in a tensor name with a bad dtype.
  write_bytes(path, raw_file(R"({"a\n\u001b[31m":{"dtype":"X","shape":[],"data_offsets":[0,0]}})", ""));
  const std::string msg = open_error(path);
  EXPECT_NE(msg.find(R"('a\x0a\x1b[31m')"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------------------------
// Robustness: truncation at every byte, random mutations, random garbage.

TEST(Safetensors, TruncationAtEveryByteIsAnError) {
  TempDir dir;
  const std::string good = dir.file("good.safetensors"), cut = dir.file("cut.safetensors");
  std::vector<float> w = {1, 2, 3, 4, 5, 6};
  std::vector<uint8_t> u = {9, 8, 7};
  write_safetensors(good, {{"w", {2, 3}, w.data()}, {"u", {3}, u.data(), "U8"}}, {{"k", "v"}});
  const std::string bytes = read_bytes(good);
  ASSERT_GT(bytes.size(), 100u);
  for (size_t len = 0; len < bytes.size(); ++len) {
    write_bytes(cut, bytes.substr(0, len));
    const std::string msg = open_error(cut);
    // Every strict prefix is invalid: the header or the last tensor is cut short.
    ASSERT_FALSE(msg.empty()) << "prefix of " << len << " of " << bytes.size() << " bytes opened";
    ASSERT_NE(msg.find(cut), std::string::npos) << msg;
  }
  write_bytes(cut, bytes + "x");  // and one byte too many
  EXPECT_NE(open_error(cut).find("trailing bytes"), std::string::npos);
  write_bytes(cut, bytes);
  EXPECT_EQ(open_error(cut), "");
}

// Opens `path` and, if it is accepted, touches every tensor the way a loader would: the bytes
// must lie inside the file. Returns whether it opened.
bool open_and_touch(const std::string& path, size_t file_size) {
  try {
    SafetensorsFile f = SafetensorsFile::open(path);
    for (const auto& name : f.names()) {
      const auto& info = f.info(name);
      const char* p = static_cast<const char*>(f.data(name));
      EXPECT_LE(info.offset + info.nbytes, file_size) << name;
      std::vector<char> buf(info.nbytes);
      f.read(name, buf.data(), info.shape, info.dtype);
      EXPECT_TRUE(info.nbytes == 0 || std::memcmp(buf.data(), p, info.nbytes) == 0);
    }
    return true;
  } catch (const Error&) {
    return false;
  }
}

TEST(Safetensors, RandomMutationsAndGarbageNeverCrash) {
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  MemFile bad;
  Sample s;
  write_safetensors(good, s.refs(), s.meta);
  const std::string bytes = read_bytes(good);
  uint64_t header_len = 0;
  for (int b = 0; b < 8; ++b) header_len |= uint64_t(uint8_t(bytes[b])) << (8 * b);

  Rng rng(1234);
  int opened = 0, rejected = 0;
  const char* interesting = "{}[],:\"0123456789-.eE \\u";
  for (int iter = 0; iter < 20000; ++iter) {
    std::string m = bytes;
    const int edits = 1 + int(rng.below(3));
    for (int e = 0; e < edits; ++e) {
      // Mostly the header, where the structure is; sometimes the length field or anywhere.
      const uint64_t kind = rng.below(10);
      const size_t pos = kind < 7 ? 8 + rng.below(header_len) : kind < 8 ? rng.below(8) : rng.below(m.size());
      if (pos >= m.size()) continue;
      switch (rng.below(4)) {
        case 0: m[pos] = char(rng.below(256)); break;
        case 1: m[pos] = interesting[rng.below(std::strlen(interesting))]; break;
        case 2: m.erase(pos, 1 + rng.below(4)); break;
        default: m.insert(pos, 1, interesting[rng.below(std::strlen(interesting))]); break;
      }
    }
    bad.set(m);
    (open_and_touch(bad.path(), m.size()) ? opened : rejected)++;
  }
  // Pure garbage, half of it with a plausible length prefix and an opening brace.
  for (int iter = 0; iter < 1000; ++iter) {
    std::string m(rng.below(200), '\0');
    for (auto& c : m) c = char(rng.below(256));
    if (iter % 2 && m.size() > 9) {
      const uint64_t n = rng.below(m.size() - 7);
      for (int b = 0; b < 8; ++b) m[b] = char(n >> (8 * b));
      m[8] = '{';
    }
    bad.set(m);
    (open_and_touch(bad.path(), m.size()) ? opened : rejected)++;
  }
  // Both outcomes must occur, or the mutations were not exercising the validator.
  EXPECT_GT(opened, 300);
  EXPECT_GT(rejected, 10000);
  std::printf("[          ] mutated/garbage files: %d opened, %d rejected with an Error\n", opened, rejected);
}

// ---------------------------------------------------------------------------------------------
// Atomic writes: a failure never damages the previous file and never leaves the tmp file.

namespace {
struct OldFile {
  std::string path, bytes;
  explicit OldFile(const std::string& p) : path(p) {
    std::vector<float> v = {42, 43};
    write_safetensors(path, {{"old", {2}, v.data()}}, {{"generation", "old"}});
    bytes = read_bytes(path);
  }
  void expect_intact(const char* after) const {
    EXPECT_EQ(read_bytes(path), bytes) << "previous file changed after " << after;
    EXPECT_FALSE(fs::exists(path + ".tmp")) << "tmp file left after " << after;
    SafetensorsFile f = SafetensorsFile::open(path);
    EXPECT_EQ(f.metadata().at("generation"), "old");
  }
};
std::string write_error(const std::string& path, const std::vector<TensorRef>& t) {
  try {
    write_safetensors(path, t, {{"generation", "new"}});
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}
}  // namespace

TEST(Safetensors, SuccessfulWriteReplacesTheOldFile) {
  TempDir dir;
  OldFile old(dir.file("ckpt.safetensors"));
  std::vector<float> v = {1, 2, 3};
  write_safetensors(old.path, {{"new", {3}, v.data()}}, {{"generation", "new"}});
  EXPECT_FALSE(fs::exists(old.path + ".tmp"));
  SafetensorsFile f = SafetensorsFile::open(old.path);
  EXPECT_EQ(f.names(), std::vector<std::string>{"new"});
  EXPECT_EQ(f.metadata().at("generation"), "new");
}

TEST(Safetensors, FailedWritesKeepTheOldFile) {
  TempDir dir;
  OldFile old(dir.file("ckpt.safetensors"));
  std::vector<float> v(4, 1.0f);

  // Invalid requests are refused before the disk is touched.
  const std::vector<std::pair<std::vector<TensorRef>, const char*>> invalid = {
      {{{"a", {4}, v.data()}, {"a", {4}, v.data()}}, "given twice"},
      {{{"a", {4}, v.data(), "F31"}}, "unknown dtype"},
      {{{"a", {-4}, v.data()}}, "negative dimension"},
      {{{"a", {4}, nullptr}}, "null pointer"},
      {{{"", {4}, v.data()}}, "empty name"},
      {{{"__metadata__", {4}, v.data()}}, "reserved"},
      {{{"a", {INT64_MAX, INT64_MAX}, v.data()}}, "too large"},
  };
  for (const auto& [tensors, needle] : invalid) {
    const std::string msg = write_error(old.path, tensors);
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_NE(msg.find(old.path), std::string::npos) << msg;
    old.expect_intact(needle);
  }
  try {
    write_safetensors(old.path, {{"a", {4}, v.data()}}, {{"bad", "\xff"}});
    ADD_FAILURE() << "invalid UTF-8 metadata was written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("UTF-8"), std::string::npos) << e.what();
  }
  old.expect_intact("invalid UTF-8 metadata");

  // The directory does not exist: the error names the path and the errno text.
  const std::string nodir = dir.file("no/such/dir/ckpt.safetensors");
  const std::string msg = write_error(nodir, {{"a", {4}, v.data()}});
  EXPECT_NE(msg.find(nodir), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
}

TEST(Safetensors, WriteOntoADirectoryFailsAndKeepsIt) {
  TempDir dir;
  const std::string target = dir.file("ckpt.safetensors");
  fs::create_directory(target);
  write_bytes(target + "/inside", "keep me");
  std::vector<float> v(4, 1.0f);
  const std::string msg = write_error(target, {{"a", {4}, v.data()}});
  EXPECT_NE(msg.find(target), std::string::npos) << msg;
  EXPECT_NE(msg.find("Is a directory"), std::string::npos) << msg;
  EXPECT_TRUE(fs::is_directory(target));
  EXPECT_EQ(read_bytes(target + "/inside"), "keep me");
  EXPECT_FALSE(fs::exists(target + ".tmp"));
}

TEST(Safetensors, FailureMidwayKeepsTheOldFile) {
  // A real write error after the header: the file-size limit makes write(2) fail with EFBIG
  // partway through the data (SIGXFSZ ignored so it is an error, not a kill).
  TempDir dir;
  OldFile old(dir.file("ckpt.safetensors"));
  std::vector<float> big(1 << 16, 3.0f);  // 256 KiB
  struct rlimit keep {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &keep), 0);
  struct rlimit small = keep;
  small.rlim_cur = 64 * 1024;
  void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string msg = write_error(old.path, {{"big", {1 << 16}, big.data()}});
  setrlimit(RLIMIT_FSIZE, &keep);
  signal(SIGXFSZ, old_handler);
  EXPECT_NE(msg.find(old.path), std::string::npos) << msg;
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
  old.expect_intact("a write failing midway");
}

TEST(Safetensors, WriteIntoReadOnlyDirectoryKeepsTheOldFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: permission bits do not stop root from writing";
  TempDir dir;
  OldFile old(dir.file("ckpt.safetensors"));
  ASSERT_EQ(::chmod(dir.path().c_str(), 0555), 0);
  std::vector<float> v(4, 1.0f);
  const std::string msg = write_error(old.path, {{"a", {4}, v.data()}});
  ::chmod(dir.path().c_str(), 0755);
  EXPECT_NE(msg.find(old.path), std::string::npos) << msg;
  EXPECT_NE(msg.find("Permission denied"), std::string::npos) << msg;
  old.expect_intact("a read-only directory");
}

// ---------------------------------------------------------------------------------------------
// Interop with the official implementation (pip package `safetensors`, numpy backend).

namespace {
const char* kPython = "/usr/bin/python3";

bool python_safetensors_available() {
  const std::string cmd = std::string(kPython) + " -c 'import numpy, safetensors.numpy' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// The values both sides compute independently: element i of every tensor is f(i).
double pattern(size_t i) { return double(i % 97) * 0.375 - 11.0; }

// Writes `name` with the official writer; then checks the file at `ours` with the official reader.
const char* kInteropScript = R"PY(
import sys, numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file, load_file
mode, path = sys.argv[1], sys.argv[2]
def pattern(n): return (np.arange(n) % 97) * 0.375 - 11.0
want = {"f32": ("float32", (3, 5)), "f64": ("float64", (2, 3, 4)), "i64": ("int64", ()),
        "i32": ("int32", (7,)), "u8": ("uint8", (5,)), "empty": ("float32", (0, 3))}
def expected():
    out = {}
    for name, (dt, shape) in want.items():
        n = int(np.prod(shape)) if shape else 1
        v = pattern(n)
        if dt.startswith("int") or dt.startswith("uint"): v = np.arange(n) * 3 - (0 if dt == "uint8" else 5)
        out[name] = v.astype(dt).reshape(shape)
    return out
meta = {"format": "attnlab", "note": "h\u00e9llo", "config": "{\"d\": 4}"}
if mode == "write":
    save_file(expected(), path, metadata=meta)
else:
    got = load_file(path)
    with safe_open(path, framework="np") as f:
        got_meta = f.metadata()
    exp = expected()
    assert sorted(got) == sorted(exp), (sorted(got), sorted(exp))
    for k in exp:
        assert got[k].dtype == exp[k].dtype and got[k].shape == exp[k].shape, (k, got[k].dtype, got[k].shape)
        assert np.array_equal(got[k], exp[k]), k
    assert got_meta == meta, got_meta
    print("python: official reader accepted attnlab's file; all values and metadata match")
)PY";
}  // namespace

TEST(SafetensorsInterop, OfficialWriterToOursAndOursToOfficialReader) {
  if (!python_safetensors_available())
    GTEST_SKIP() << kPython << " cannot import safetensors/numpy; install with: " << kPython
                 << " -m pip install --break-system-packages safetensors";
  TempDir dir;
  const std::string script = dir.file("interop.py");
  write_bytes(script, kInteropScript);

  // Official writer -> our reader.
  const std::string theirs = dir.file("theirs.safetensors");
  ASSERT_EQ(std::system((std::string(kPython) + " " + script + " write " + theirs).c_str()), 0);
  SafetensorsFile f = SafetensorsFile::open(theirs);
  const std::map<std::string, std::string> meta = {{"format", "attnlab"}, {"note", "h\xc3\xa9llo"}, {"config", "{\"d\": 4}"}};
  EXPECT_EQ(f.metadata(), meta);
  std::vector<float> f32(15);
  f.read("f32", f32.data(), {3, 5});
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_EQ(f32[i], float(pattern(i))) << i;
  std::vector<double> f64(24);
  f.read("f64", f64.data(), {2, 3, 4}, "F64");
  for (size_t i = 0; i < f64.size(); ++i) EXPECT_EQ(f64[i], pattern(i)) << i;
  int64_t i64 = 1;
  f.read("i64", &i64, {}, "I64");
  EXPECT_EQ(i64, -5);
  std::vector<int32_t> i32(7);
  f.read("i32", i32.data(), {7}, "I32");
  for (size_t i = 0; i < i32.size(); ++i) EXPECT_EQ(i32[i], int32_t(3 * i) - 5);
  std::vector<uint8_t> u8(5);
  f.read("u8", u8.data(), {5}, "U8");
  for (size_t i = 0; i < u8.size(); ++i) EXPECT_EQ(u8[i], uint8_t(3 * i));
  EXPECT_EQ(f.info("empty").shape, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(f.info("empty").nbytes, 0u);

  // Our writer -> official reader (values computed again on the Python side).
  std::vector<float> w32(15);
  std::vector<double> w64(24);
  for (size_t i = 0; i < w32.size(); ++i) w32[i] = float(pattern(i));
  for (size_t i = 0; i < w64.size(); ++i) w64[i] = pattern(i);
  const int64_t s64 = -5;
  std::vector<int32_t> w_i32(7);
  for (size_t i = 0; i < w_i32.size(); ++i) w_i32[i] = int32_t(3 * i) - 5;
  std::vector<uint8_t> w_u8(5);
  for (size_t i = 0; i < w_u8.size(); ++i) w_u8[i] = uint8_t(3 * i);
  const std::string ours = dir.file("ours.safetensors");
  write_safetensors(ours,
                    {{"f32", {3, 5}, w32.data()},
                     {"f64", {2, 3, 4}, w64.data(), "F64"},
                     {"i64", {}, &s64, "I64"},
                     {"i32", {7}, w_i32.data(), "I32"},
                     {"u8", {5}, w_u8.data(), "U8"},
                     {"empty", {0, 3}, nullptr}},
                    meta);
  EXPECT_EQ(std::system((std::string(kPython) + " " + script + " check " + ours).c_str()), 0)
      << "the official reader rejected or misread our file (its message is above)";
}

// Driven by tests/python/test_safetensors_official.py: ATTNLAB_ST_CORPUS names a directory with
// manifest.json listing files made with the official package (valid ones, corrupt ones and random
// mutations) and the official reader's verdict on each. Ours must agree on every file, read the
// same bytes from the valid ones, and rewrite them so that Python can check our writer.
TEST(SafetensorsCorpus, AgreesWithTheOfficialReader) {
  const char* corpus = std::getenv("ATTNLAB_ST_CORPUS");
  if (!corpus || !*corpus)
    GTEST_SKIP() << "run by tests/python/test_safetensors_official.py (set ATTNLAB_ST_CORPUS to its corpus directory)";
  const std::string root = corpus;
  const json manifest = json::parse(read_bytes(root + "/manifest.json"));
  int agreed = 0;
  for (const json& c : manifest.at("cases")) {
    const std::string path = root + "/" + c.at("file").get<std::string>();
    const bool official_ok = c.at("official") == "ok";
    // A few files the official reader accepts are refused by attnlab on purpose; the manifest
    // marks them with "ours" (docs/checkpoint-format.md lists the differences).
    const bool expect_ok = c.value("ours", c.at("official").get<std::string>()) == "ok";
    std::string error;
    try {
      SafetensorsFile f = SafetensorsFile::open(path);
      if (c.contains("tensors")) {
        std::vector<TensorRef> refs;
        for (auto it = c["tensors"].begin(); it != c["tensors"].end(); ++it) {
          const auto& info = f.info(it.key());
          EXPECT_EQ(info.dtype, it.value().at("dtype").get<std::string>()) << path << " " << it.key();
          EXPECT_EQ(info.shape, it.value().at("shape").get<std::vector<int64_t>>()) << path << " " << it.key();
          const std::string hex = it.value().at("hex");
          std::string want(hex.size() / 2, '\0');
          for (size_t i = 0; i < want.size(); ++i) want[i] = char(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
          EXPECT_EQ(std::string(static_cast<const char*>(f.data(it.key())), info.nbytes), want) << path << " " << it.key();
          refs.push_back({it.key(), info.shape, f.data(it.key()), info.dtype});
        }
        using StringMap = std::map<std::string, std::string>;
        const StringMap want_meta = c.value("metadata", json::object()).get<StringMap>();
        EXPECT_EQ(f.metadata(), want_meta) << path;
        if (c.contains("rewrite")) write_safetensors(root + "/" + c["rewrite"].get<std::string>(), refs, f.metadata());
      }
    } catch (const Error& e) {
      error = e.what();
    }
    const bool ours_ok = error.empty();
    if (ours_ok == expect_ok) {
      ++agreed;
      continue;
    }
    ADD_FAILURE() << path << " (" << c.value("what", "") << "): official reader "
                  << (official_ok ? "accepts" : "rejects (" + c.value("official_error", std::string()) + ")")
                  << ", ours " << (ours_ok ? "accepts" : "rejects: " + error) << ", expected ours to "
                  << (expect_ok ? "accept" : "reject");
  }
  std::printf("[          ] corpus: %d of %zu files judged as expected (as the official reader does, but for the "
              "marked deliberate differences)\n",
              agreed, manifest.at("cases").size());
}
