// attnlab train: safetensors reader (mmap + validation) and atomic writer.
// The container rules enforced here are the official ones (huggingface/safetensors, documented in
// docs/checkpoint-format.md); each check exists so that a damaged or hostile file fails with a
// message naming the file, before any tensor byte is touched.
#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <set>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "core/files.h"
#include "attnlab/printable.h"
#include "core/json.h"

namespace attnlab {

// Tensor bytes are written and read as they lie in memory; the format is little-endian.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

using json = nlohmann::json;

// The official implementation's limit (MAX_HEADER_SIZE); anything larger is garbage or hostile.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// A valid header nests three deep (object -> tensor object -> shape array); a limit keeps a
// header of 100 MB of '[' from building a deep tree before it is rejected.
constexpr int kMaxJsonDepth = 16;

std::string errno_text(int err) { return std::string(std::strerror(err)); }

// Tensor names and dtypes come from the file: printed through printable() (attnlab/printable.h).

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);  // appended separately: GCC 12 misreports `"," + to_string` (-Wrestrict)
  }
  return s + "]";
}

// product(shape) * itemsize, or false on overflow of size_t.
bool byte_count(const std::vector<int64_t>& shape, size_t itemsize, size_t& out) {
  size_t n = itemsize;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (__builtin_mul_overflow(n, static_cast<size_t>(d), &n)) return false;
  }
  out = n;
  return true;
}

// A JSON value that is a non-negative integer fitting int64 (nlohmann stores big unsigned values
// as number_unsigned and anything beyond 2^64 or with a fraction/exponent as a float).
bool as_nonneg_int(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return out <= uint64_t(INT64_MAX);
  }
  if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if (x < 0) return false;
    out = uint64_t(x);
    return true;
  }
  return false;
}

const char* json_type(const json& v) { return v.type_name(); }

// A short description of a JSON value from the file for an error message: scalars as written,
// containers by type (they may be large).
std::string value_text(const json& v) {
  if (v.is_structured()) return std::string("a JSON ") + v.type_name();
  return printable(v.dump());
}

// write(2) until everything is written, retrying on EINTR and short writes.
bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, size_t(1) << 30);
    const ssize_t w = ::write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (w == 0) {
      errno = EIO;
      return false;
    }
    p += w;
    n -= size_t(w);
  }
  return true;
}


}  // namespace

size_t safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1},        {"U8", 1},          {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"F8_E4M3FNUZ", 1}, {"F8_E5M2FNUZ", 1}, {"I16", 2}, {"U16", 2},     {"F16", 2},     {"BF16", 2},
      {"I32", 4},         {"U32", 4},         {"F32", 4}, {"I64", 8},     {"U64", 8},     {"F64", 8},
      {"C64", 8},
  };
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

// ---------------------------------------------------------------------------------------------
// Writer

void write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Validate everything before touching the disk, so a bad call never costs the old file.
  std::vector<size_t> nbytes(tensors.size());
  std::set<std::string> seen;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorRef& t = tensors[i];
    if (t.name.empty()) fail("safetensors file ", path, ": tensor #", i, " has an empty name");
    if (t.name == "__metadata__") fail("safetensors file ", path, ": '__metadata__' is reserved and cannot name a tensor");
    if (!seen.insert(t.name).second) fail("safetensors file ", path, ": tensor ", printable(t.name), " is given twice");
    const size_t itemsize = safetensors_dtype_size(t.dtype);
    if (itemsize == 0) fail("safetensors file ", path, ": tensor ", printable(t.name), " has unknown dtype ", printable(t.dtype));
    for (int64_t d : t.shape)
      if (d < 0) fail("safetensors file ", path, ": tensor ", printable(t.name), " has a negative dimension in shape ", shape_text(t.shape));
    if (!byte_count(t.shape, itemsize, nbytes[i]))
      fail("safetensors file ", path, ": tensor ", printable(t.name), " of shape ", shape_text(t.shape), " is too large");
    if (nbytes[i] > 0 && t.data == nullptr)
      fail("safetensors file ", path, ": tensor ", printable(t.name), " has no data (null pointer)");
  }

  // Largest elements first, then by name: with the data section 8-aligned, every tensor then
  // starts at a multiple of its element size (the official writer orders the same way).
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const size_t sa = safetensors_dtype_size(tensors[a].dtype), sb = safetensors_dtype_size(tensors[b].dtype);
    if (sa != sb) return sa > sb;
    return tensors[a].name < tensors[b].name;
  });

  std::string header;
  {
    json h = json::object();
    if (!metadata.empty()) {
      json m = json::object();
      for (const auto& [k, v] : metadata) m[k] = v;
      h["__metadata__"] = std::move(m);
    }
    uint64_t offset = 0;
    for (size_t i : order) {
      const TensorRef& t = tensors[i];
      h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + nbytes[i]}}};
      offset += nbytes[i];
    }
    try {
      header = h.dump();
    } catch (const json::exception& e) {
      // nlohmann refuses strings that are not valid UTF-8, as would every reader.
      fail("safetensors file ", path, ": a tensor name or metadata string is not valid UTF-8 (", e.what(), ")");
    }
  }
  // Space padding (legal JSON whitespace) so the data section starts at a multiple of 8.
  header.append((8 - header.size() % 8) % 8, ' ');
  if (header.size() > kMaxHeaderBytes)
    fail("safetensors file ", path, ": the header would be ", header.size(), " bytes, over the ", kMaxHeaderBytes,
         "-byte limit of every safetensors reader; store large metadata in a tensor or a separate file");
  unsigned char len_le[8];
  for (int b = 0; b < 8; ++b) len_le[b] = static_cast<unsigned char>(uint64_t(header.size()) >> (8 * b));

  // A temporary of our own (unique name, O_EXCL): a second writer of the same path never shares it.
  TempFile tf = create_temp_beside(path);
  const std::string& tmp = tf.path;
  int fd = tf.fd;
  if (fd < 0) {
    const int err = errno;
    fail("safetensors file ", path, ": cannot create temporary file ", tmp, ": ", errno_text(err),
         " (is the directory there and writable?)");
  }
  // From here on every failure closes and removes the tmp file, leaving `path` as it was.
  // errno is read first thing, before anything else can overwrite it.
  auto abandon = [&](const char* what) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    fail("safetensors file ", path, ": ", what, " ", tmp, ": ", errno_text(err), "; any previous file is unchanged");
  };
  if (!write_all(fd, len_le, sizeof len_le) || !write_all(fd, header.data(), header.size())) abandon("cannot write");
  for (size_t i : order)
    if (nbytes[i] > 0 && !write_all(fd, tensors[i].data, nbytes[i])) abandon("cannot write");
  if (::fsync(fd) != 0) abandon("cannot flush to disk");
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) abandon("cannot close");
  if (::rename(tmp.c_str(), path.c_str()) != 0) abandon("cannot rename into place");

  // Make the rename itself durable. The new file is already in place if this fails.
  const std::string dir = parent_directory(path);
  if (!sync_directory(dir)) {
    const int err = errno;
    fail("safetensors file ", path, ": written, but cannot sync directory ", dir, ": ", errno_text(err),
         "; the file may not survive a crash");
  }
}

// ---------------------------------------------------------------------------------------------
// Reader

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept { *this = std::move(o); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    file_size_ = std::exchange(o.file_size_, 0);
    data_start_ = std::exchange(o.data_start_, 0);
    tensors_ = std::move(o.tensors_);
    metadata_ = std::move(o.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { release(); }

void SafetensorsFile::release() noexcept {
  if (map_) ::munmap(const_cast<unsigned char*>(map_), file_size_);
  map_ = nullptr;
  file_size_ = 0;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;  // owns the mapping from the moment it exists, so every throw below unmaps
  f.path_ = path;
  auto bad = [&](const auto&... what) { fail("safetensors file ", path, ": ", what...); };

  {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      bad("cannot open: ", errno_text(err));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      bad("cannot stat: ", errno_text(err));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      bad("not a regular file (a directory?)");
    }
    if (st.st_size < 8) {
      ::close(fd);
      bad("file is ", st.st_size, " bytes, shorter than the 8-byte header length; it is truncated or not a safetensors file");
    }
    void* p = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);  // the mapping keeps the file alive
    if (p == MAP_FAILED) bad("cannot map ", st.st_size, " bytes: ", errno_text(err));
    f.map_ = static_cast<const unsigned char*>(p);
    f.file_size_ = size_t(st.st_size);
  }

  uint64_t header_len = 0;
  for (int b = 0; b < 8; ++b) header_len |= uint64_t(f.map_[b]) << (8 * b);
  if (header_len > kMaxHeaderBytes)
    bad("header length ", header_len, " is absurd (limit ", kMaxHeaderBytes, " bytes); not a safetensors file or corrupted");
  if (header_len > f.file_size_ - 8)
    bad("header length ", header_len, " exceeds the ", f.file_size_ - 8, " bytes after the length field; the file is truncated");
  // nlohmann's lexer takes a NUL byte for the end of input and would ignore whatever follows;
  // JSON text never contains one (inside strings it must be escaped), so refuse it outright.
  if (std::memchr(f.map_ + 8, 0, header_len))
    bad("header contains a NUL byte at offset ",
        8 + (static_cast<const unsigned char*>(std::memchr(f.map_ + 8, 0, header_len)) - f.map_),
        "; not a safetensors file or corrupted");
  f.data_start_ = 8 + size_t(header_len);
  const size_t data_len = f.file_size_ - f.data_start_;

  // Parse, rejecting absurd nesting and duplicate keys: a tensor named twice (the later entry
  // would silently win and the earlier one's bytes become an unexplained hole; the official reader
  // lets the last one win, we refuse) and a field given twice in one tensor entry (the official
  // reader refuses too). Duplicate metadata keys are allowed, the last one winning, as officially.
  json h;
  {
    std::set<std::string> names, fields;
    std::string entry;  // the top-level key whose value is being parsed
    const char* begin = reinterpret_cast<const char*>(f.map_ + 8);
    auto check = [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth > kMaxJsonDepth) bad("header JSON nests deeper than ", kMaxJsonDepth, " levels");
      if (event != json::parse_event_t::key) return true;
      if (depth == 1) {
        entry = parsed.get<std::string>();
        if (!names.insert(entry).second) bad("header names ", printable(entry), " twice");
        fields.clear();
      } else if (depth == 2 && entry != "__metadata__" && !fields.insert(parsed.get<std::string>()).second) {
        bad("tensor ", printable(entry), ": entry has the field ", printable(parsed.get<std::string>()), " twice");
      }
      return true;
    };
    try {
      h = json::parse(begin, begin + header_len, check);
    } catch (const json::exception& e) {
      bad("header is not valid JSON (", e.what(), ")");
    }
  }
  if (!h.is_object()) bad("header is a JSON ", json_type(h), ", not an object");

  struct Extent {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Extent> extents;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (v.is_null()) continue;  // the official reader reads null as "no metadata"
      if (!v.is_object()) bad("__metadata__ is a JSON ", json_type(v), ", not an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          bad("__metadata__ value of ", printable(m.key()), " is a JSON ", json_type(m.value()), ", not a string");
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string tn = "tensor " + printable(name);
    if (!v.is_object()) bad(tn, ": entry is a JSON ", json_type(v), ", not an object");
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!v.contains(field)) bad(tn, ": entry has no \"", field, "\"");

    const json& jd = v["dtype"];
    if (!jd.is_string()) bad(tn, ": dtype is a JSON ", json_type(jd), ", not a string");
    Info info;
    info.dtype = jd.get<std::string>();
    const size_t itemsize = safetensors_dtype_size(info.dtype);
    if (itemsize == 0) bad(tn, ": unknown or unsupported dtype ", printable(info.dtype));

    const json& js = v["shape"];
    if (!js.is_array()) bad(tn, ": shape is a JSON ", json_type(js), ", not an array");
    for (const json& d : js) {
      uint64_t dim = 0;
      if (!as_nonneg_int(d, dim)) {
        if (d.is_number_unsigned()) bad(tn, ": shape has an absurd dimension ", d.get<uint64_t>());
        if (d.is_number_integer()) bad(tn, ": shape has a negative dimension ", d.get<int64_t>());
        bad(tn, ": shape entries must be non-negative integers, found ", value_text(d));
      }
      info.shape.push_back(int64_t(dim));
    }

    const json& jo = v["data_offsets"];
    if (!jo.is_array() || jo.size() != 2) bad(tn, ": data_offsets must be an array [begin, end]");
    uint64_t b = 0, e = 0;
    if (!as_nonneg_int(jo[0], b) || !as_nonneg_int(jo[1], e))
      bad(tn, ": data_offsets must be non-negative integers below 2^63, found ", value_text(jo[0]), " and ", value_text(jo[1]));
    if (e < b) bad(tn, ": data_offsets [", b, ", ", e, "] end before they begin");
    if (e > data_len)
      bad(tn, ": data_offsets [", b, ", ", e, "] run past the ", data_len, "-byte data section; the file is truncated or corrupted");

    size_t expected = 0;
    if (!byte_count(info.shape, itemsize, expected))
      bad(tn, ": shape ", shape_text(info.shape), " of ", info.dtype, " has more bytes than memory can address");
    if (expected != e - b)
      bad(tn, ": shape ", shape_text(info.shape), " of ", info.dtype, " needs ", expected, " bytes but data_offsets [",
          b, ", ", e, "] hold ", e - b);
    info.offset = size_t(b);
    info.nbytes = size_t(e - b);
    auto [pos, inserted] = f.tensors_.emplace(name, std::move(info));
    (void)inserted;  // duplicates were rejected while parsing
    extents.push_back({b, e, &pos->first});
  }

  // Tensors must tile the data section exactly: no overlap (two tensors aliasing bytes), no gap
  // (bytes nobody owns, usually a sign of a lost tensor) and nothing left over at the end.
  std::sort(extents.begin(), extents.end(),
            [](const Extent& a, const Extent& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t covered = 0;
  const std::string* prev = nullptr;
  for (const Extent& x : extents) {
    if (x.begin < covered)
      bad("tensor ", printable(*x.name), " (bytes ", x.begin, "..", x.end, ") overlaps tensor ", printable(*prev),
          " (ending at ", covered, ")");
    if (x.begin > covered)
      bad("bytes ", covered, "..", x.begin, " of the data section belong to no tensor (gap before ", printable(*x.name), ")");
    covered = x.end;
    prev = x.name;
  }
  if (covered != data_len)
    bad("the data section has ", data_len, " bytes but the tensors cover only ", covered,
        "; trailing bytes belong to no tensor");
  return f;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, info] : tensors_) out.push_back(name);
  return out;
}

const SafetensorsFile::Info& SafetensorsFile::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    std::ostringstream os;
    size_t shown = 0;
    for (const auto& [n, i] : tensors_) {
      if (shown == 8) {
        os << ", ...";
        break;
      }
      os << (shown++ ? ", " : "") << n;
    }
    fail("safetensors file ", path_, ": has no tensor ", printable(name), " (it holds ", tensors_.size(), " tensors",
         tensors_.empty() ? std::string() : ": " + os.str(), ")");
  }
  return it->second;
}

void SafetensorsFile::read(const std::string& name, void* dst, const std::vector<int64_t>& expected_shape,
                           const std::string& expected_dtype) const {
  const Info& i = info(name);
  if (i.dtype != expected_dtype || i.shape != expected_shape)
    fail("safetensors file ", path_, ": tensor ", printable(name), ": expected ", expected_dtype, " ",
         shape_text(expected_shape), ", found ", i.dtype, " ", shape_text(i.shape));
  if (i.nbytes > 0) std::memcpy(dst, map_ + data_start_ + i.offset, i.nbytes);
}

const void* SafetensorsFile::data(const std::string& name) const {
  const Info& i = info(name);
  return map_ + data_start_ + i.offset;
}

}  // namespace attnlab
