// attnlab train: the safetensors container that checkpoints and exported weights are stored in.
// Format (docs/checkpoint-format.md): an 8-byte little-endian header length N, N bytes of JSON
// header, then the raw little-endian tensor bytes, packed back to back. The same files load with
// the official `safetensors` Python package (safetensors.numpy.load_file / safetensors.torch).
//
// The reader trusts nothing in the file: every malformed input (truncated, garbage, lying
// offsets, overlapping tensors, absurd sizes) becomes an attnlab::Error naming the file and the
// problem, never a crash or an out-of-bounds read. The writer is atomic: a reader sees either the
// previous file or the complete new one, never a half-written checkpoint.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace attnlab {

// Bytes per element of a safetensors dtype ("F32" -> 4); 0 for a dtype this library does not
// know. Known: BOOL U8 I8 F8_E5M2 F8_E4M3 F8_E8M0 F8_E4M3FNUZ F8_E5M2FNUZ (1), I16 U16 F16 BF16
// (2), I32 U32 F32 (4), I64 U64 F64 C64 (8): every dtype of safetensors 0.8 except the sub-byte
// ones (F4, F6_E2M3, F6_E3M2), which no whole-byte size describes.
size_t safetensors_dtype_size(const std::string& dtype);

// One tensor to write: `data` points at product(shape) contiguous little-endian elements of
// `dtype` (row-major, last dimension fastest). An empty shape is a scalar (one element); a zero
// dimension makes an empty tensor, whose data may be null.
struct TensorRef {
  std::string name;
  std::vector<int64_t> shape;
  const void* data;
  std::string dtype = "F32";
};

// Writes `tensors` and string `metadata` to `path` atomically: the bytes go to a temporary of this
// call's own in the same directory ("<path>.tmp.<pid>.<n>", created with O_EXCL, core/files.h),
// which is fsync'ed, renamed over `path`, and the directory fsync'ed. A failure at any point leaves any previous file at `path` intact, removes the tmp file, and
// throws an attnlab::Error naming the path and the errno text. Tensors are laid out by
// decreasing element size, then by name, so every tensor starts at a multiple of its element
// size (the header is space-padded so the data section starts at a multiple of 8).
void write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata);

// A safetensors file mapped read-only and fully validated on open. Move-only; the mapping lives
// as long as the object. The file must not be truncated by someone else while open (the mapping
// would fault); write_safetensors never does that, it replaces the file by rename.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& o) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& o) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  std::vector<std::string> names() const;  // sorted

  // offset: from the start of the data section (as in the header); nbytes = end - begin.
  struct Info {
    std::string dtype;
    std::vector<int64_t> shape;
    size_t offset, nbytes;
  };
  const Info& info(const std::string& name) const;  // Error naming file + tensor if missing

  // Copies tensor `name` into dst (nbytes of it) after checking dtype == expected_dtype and
  // shape == expected_shape; the error names the file, the tensor, expected vs found.
  void read(const std::string& name, void* dst, const std::vector<int64_t>& expected_shape,
            const std::string& expected_dtype = "F32") const;

  // The tensor's bytes inside the mapping. Aligned to the element size for files written by
  // write_safetensors and by the official writer; other writers may leave it unaligned, so copy
  // (read) rather than dereference when the file's origin is unknown.
  const void* data(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  void release() noexcept;

  std::string path_;
  const unsigned char* map_ = nullptr;  // the whole file
  size_t file_size_ = 0;
  size_t data_start_ = 0;  // 8 + header length
  std::map<std::string, Info> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace attnlab
