// attnlab data: `attnlab prepare` — text files to tokenizer + train/val shards (docs/data.md).
#include "data/prepare.h"

#include <omp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "core/files.h"
#include "core/rng.h"
#include "core/timer.h"
#include "data/files.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace attnlab {

namespace {

// A line-aligned piece of one document: the unit of parallel encoding and of the train/val split.
struct Piece {
  uint32_t file;
  size_t begin, size;    // byte range in that file's text, blank separator lines excluded
  bool starts_document;  // first piece of its document
  bool val = false;
};

// Offset of the first byte that is not part of well-formed UTF-8, or npos.
size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if ((c >> 5) == 0x6) { len = 2; cp = c & 0x1F; }
    else if ((c >> 4) == 0xE) { len = 3; cp = c & 0x0F; }
    else if ((c >> 3) == 0x1E) { len = 4; cp = c & 0x07; }
    else return i;
    if (i + len > s.size()) return i;
    for (size_t k = 1; k < len; ++k) {
      const unsigned char d = s[i + k];
      if ((d >> 6) != 0x2) return i;
      cp = (cp << 6) | (d & 0x3F);
    }
    // overlong forms, surrogates and values past U+10FFFF are not UTF-8 either
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
      return i;
    i += len;
  }
  return std::string_view::npos;
}

bool is_blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}

// Documents are runs of non-blank lines; a document longer than kPrepareMaxPieceBytes is cut
// before a line, and a single longer line before a single space between words. Both cuts leave
// the tokens unchanged: the tokenizer has no dummy prefix and never merges across a newline or
// into a following word (tokenizer.h), so encoding the pieces and concatenating equals encoding
// the document.
void cut_pieces(std::string_view text, uint32_t file, std::vector<Piece>& out) {
  size_t pos = 0, begin = 0;
  bool in_document = false, starts_document = false;
  auto close = [&](size_t end) {
    if (end > begin) out.push_back({file, begin, end - begin, starts_document});
  };
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    end = end == std::string_view::npos ? text.size() : end + 1;
    if (is_blank(text.substr(pos, end - pos))) {
      if (in_document) close(pos);
      in_document = false;
      pos = end;
      continue;
    }
    if (!in_document) {
      begin = pos;
      in_document = starts_document = true;
    } else if (end - begin > kPrepareMaxPieceBytes && pos > begin) {
      close(pos);
      begin = pos;
      starts_document = false;
    }
    while (end - begin > kPrepareMaxPieceBytes) {  // one line longer than a piece
      size_t cut = 0;
      for (size_t c = begin + kPrepareMaxPieceBytes; c > begin + 1; --c)
        if (text[c] == ' ' && text[c - 1] != ' ' && c + 1 < end && text[c + 1] != ' ') { cut = c; break; }
      if (cut == 0) break;  // no space to cut at: keep the line whole
      close(cut);
      begin = cut;
      starts_document = false;
    }
    pos = end;
  }
  if (in_document) close(text.size());
}

constexpr const char* kStagingPrefix = ".prepare-staging.";

// Staging directories of prepare runs that were killed (their pid is gone).
void remove_stale_staging(const std::filesystem::path& out) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kStagingPrefix, 0) != 0) continue;
    const std::string pid = name.substr(std::strlen(kStagingPrefix));
    if (pid.empty() || pid.size() > 18 || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (::kill(pid_t(std::atol(pid.c_str())), 0) != 0 && errno == ESRCH) std::filesystem::remove_all(e.path(), ec);
  }
  remove_stale_temps(out.string());
}

std::string megabytes(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MB", bytes / 1e6);
  return buf;
}

}  // namespace

void prepare(const PrepareOptions& options) {
  namespace fs = std::filesystem;
  const bool verbose = options.verbose;
  auto say = [&](const char* fmt, auto... args) {
    if (!verbose) return;
    std::printf(fmt, args...);
    std::fflush(stdout);
  };

  if (options.inputs.empty()) fail("prepare: no input files; pass one or more text files with --input FILE");
  if (options.out_dir.empty()) fail("prepare: no output directory; pass --out DIR");
  if (options.vocab_size > 65536 || options.vocab_size < 1)
    fail("prepare: vocab size ", options.vocab_size, " is out of range; token shards hold uint16 ids, so use 260..65536");
  if (!(options.val_fraction > 0 && options.val_fraction <= 0.5))
    fail("prepare: val fraction ", options.val_fraction, " is out of range; use a value in (0, 0.5], e.g. 0.02");

  // 1. read and check the inputs before spending time on training
  std::vector<std::string> texts;
  size_t total_bytes = 0;
  for (const auto& path : options.inputs) {
    texts.push_back(data_files::read_text_file(path, "prepare input"));
    const std::string& t = texts.back();
    const size_t bad = find_invalid_utf8(t);
    if (bad != std::string_view::npos)
      fail("prepare input ", path, ": invalid UTF-8 at byte ", bad, " (line ",
           1 + std::count(t.begin(), t.begin() + std::ptrdiff_t(bad), '\n'),
           "); convert the file to UTF-8 first, e.g. `iconv -f latin1 -t utf-8`");
    if (is_blank(t)) fail("prepare input ", path, ": holds only blank lines; give a file with text in it");
    total_bytes += t.size();
  }
  say("prepare: %zu input file%s, %s\n", texts.size(), texts.size() == 1 ? "" : "s", megabytes(double(total_bytes)).c_str());

  // 2. documents, pieces and the train/val split (before training: a bad input fails fast)
  std::vector<Piece> pieces;
  std::vector<size_t> documents_per_file(texts.size(), 0);
  for (size_t f = 0; f < texts.size(); ++f) {
    const size_t before = pieces.size();
    cut_pieces(texts[f], uint32_t(f), pieces);
    for (size_t i = before; i < pieces.size(); ++i) documents_per_file[f] += pieces[i].starts_document;
  }
  size_t piece_bytes = 0;
  for (const auto& p : pieces) piece_bytes += p.size;
  if (pieces.size() < 2)
    fail("prepare input ", options.inputs.front(), ": the text is a single document of ", piece_bytes,
         " bytes, and val.bin needs a document of its own; separate documents with blank lines or give more text");
  {
    // A seeded random order of the pieces; the first ones, up to val_fraction of the bytes, are
    // val. At least one piece goes to each side.
    std::vector<size_t> order(pieces.size());
    std::iota(order.begin(), order.end(), size_t(0));
    Rng rng(options.seed ^ 0x76616c6964617465ULL);  // "validate": decorrelated from the tokenizer sample
    for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
    const double target = options.val_fraction * double(piece_bytes);
    size_t val_bytes = 0;
    for (size_t k = 0; k + 1 < order.size() && double(val_bytes) < target; ++k) {
      pieces[order[k]].val = true;
      val_bytes += pieces[order[k]].size;
    }
  }

  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec || !fs::is_directory(options.out_dir))
    fail("prepare: cannot create the output directory ", options.out_dir, " (", ec ? ec.message() : "not a directory",
         ")");
  const fs::path out(options.out_dir);
  // Every output goes into a staging directory inside out_dir first and is renamed into place
  // only when the whole set is written: a failure (ENOSPC, a kill) leaves the previous set intact
  // instead of a new tokenizer beside old shards. One prepare per directory at a time.
  const DirLock lock = DirLock::acquire(options.out_dir, "prepare --out", "attnlab prepare");
  remove_stale_staging(out);
  const fs::path staging = out / (std::string(kStagingPrefix) + std::to_string(long(::getpid())));
  fs::remove_all(staging, ec);
  fs::create_directory(staging, ec);
  if (ec) fail("prepare: cannot create the staging directory ", staging.string(), " (", ec.message(), ")");
  struct RemoveOnFailure {
    fs::path dir;
    bool armed = true;
    ~RemoveOnFailure() {
      std::error_code e;
      if (armed) fs::remove_all(dir, e);
    }
  } cleanup{staging};

  // 3. the tokenizer (trained on all of the text, val included, the usual practice)
  Timer timer;
  say("prepare: training a BPE tokenizer, vocab %d, on at most %s of lines ...\n", options.vocab_size,
      megabytes(double(kTokenizerTrainingBytes)).c_str());
  const std::string model_path = (staging / "tokenizer.model").string();
  train_tokenizer(options.inputs, (staging / "tokenizer").string(), options.vocab_size, options.seed);
  const Tokenizer tokenizer = Tokenizer::load(model_path);
  say("prepare: %s in %.1f s\n", (out / "tokenizer.model").string().c_str(), timer.seconds());

  // 4. encode in parallel (SentencePiece runs at a few MB/s per thread). Errors inside the
  // parallel region are carried out of it: an exception must not cross an OpenMP boundary.
  timer.reset();
  const int threads = omp_get_max_threads();
  say("prepare: encoding %zu pieces of %zu documents on %d thread%s ...\n", pieces.size(),
      std::accumulate(documents_per_file.begin(), documents_per_file.end(), size_t(0)), threads,
      threads == 1 ? "" : "s");
  std::vector<std::vector<int>> encoded(pieces.size());
  std::atomic<size_t> bytes_done{0};
  std::atomic<size_t> next_report{piece_bytes / 4};
  std::string error;
#pragma omp parallel for schedule(dynamic, 8)
  for (size_t i = 0; i < pieces.size(); ++i) {
    try {
      const Piece& p = pieces[i];
      tokenizer.encode_into(std::string_view(texts[p.file]).substr(p.begin, p.size), encoded[i]);
      const size_t done = bytes_done.fetch_add(p.size) + p.size;
      if (verbose && done >= next_report) {
#pragma omp critical(attnlab_prepare_progress)
        if (done >= next_report && done < piece_bytes) {
          say("prepare:   %3.0f%% (%.1f s)\n", 100.0 * double(done) / double(piece_bytes), timer.seconds());
          next_report.store(done + piece_bytes / 4);
        }
      }
    } catch (const std::exception& e) {
#pragma omp critical(attnlab_prepare_error)
      if (error.empty()) error = e.what();
    }
  }
  if (!error.empty()) throw Error(error);
  const double encode_seconds = timer.seconds();

  // 5. assemble the shards in input order
  std::vector<uint16_t> train, val;
  size_t train_bytes = 0, val_bytes = 0, train_pieces = 0, val_pieces = 0;
  {
    size_t train_tokens = 0, val_tokens = 0;
    for (size_t i = 0; i < pieces.size(); ++i)
      (pieces[i].val ? val_tokens : train_tokens) += encoded[i].size() + 1;
    train.reserve(train_tokens);  // (an upper bound: not every piece gets a bos)
    val.reserve(val_tokens);
  }
  const int bos = tokenizer.bos_id();
  // bos marks a break in the text: a document start, or a piece whose predecessor in its
  // document went to the other shard. Between two bos ids a shard holds contiguous input text.
  auto starts_context = [&](size_t i) { return pieces[i].starts_document || pieces[i - 1].val != pieces[i].val; };
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    std::vector<uint16_t>& dst = p.val ? val : train;
    (p.val ? val_bytes : train_bytes) += p.size;
    ++(p.val ? val_pieces : train_pieces);
    if (starts_context(i)) dst.push_back(uint16_t(bos));
    for (int id : encoded[i]) {
      ATTNLAB_CHECK(id >= 0 && id < 65536, "token id out of the uint16 range");
      dst.push_back(uint16_t(id));
    }
    std::vector<int>().swap(encoded[i]);  // free as we go: the int ids are twice the shard's size
  }
  const size_t total_tokens = train.size() + val.size();
  say("prepare: %zu tokens in %.1f s (%.2f MB/s, %.2f bytes per token)\n", total_tokens, encode_seconds,
      double(piece_bytes) / 1e6 / std::max(encode_seconds, 1e-9), double(piece_bytes) / double(std::max<size_t>(total_tokens, 1)));

  // 6. write everything into the staging directory; prepare.json last, as the record of a finished run
  const std::string train_path = (out / "train.bin").string(), val_path = (out / "val.bin").string();
  write_shard((staging / "train.bin").string(), train.data(), train.size());
  write_shard((staging / "val.bin").string(), val.data(), val.size());

  nlohmann::ordered_json meta;
  meta["format"] = "attnlab-prepare";
  meta["version"] = 1;
  meta["inputs"] = nlohmann::ordered_json::array();
  for (size_t f = 0; f < texts.size(); ++f)
    meta["inputs"].push_back({{"path", options.inputs[f]}, {"bytes", texts[f].size()}, {"documents", documents_per_file[f]}});
  meta["tokenizer"] = {{"file", "tokenizer.model"},
                       {"type", "sentencepiece-bpe"},
                       {"vocab_size", tokenizer.vocab_size()},
                       {"bos_id", tokenizer.bos_id()},
                       {"eos_id", tokenizer.eos_id()},
                       {"training_bytes_cap", kTokenizerTrainingBytes}};
  meta["seed"] = options.seed;
  meta["val_fraction"] = options.val_fraction;
  meta["max_piece_bytes"] = kPrepareMaxPieceBytes;
  meta["train"] = {{"file", "train.bin"}, {"tokens", train.size()}, {"bytes", train_bytes}, {"pieces", train_pieces}};
  meta["val"] = {{"file", "val.bin"}, {"tokens", val.size()}, {"bytes", val_bytes}, {"pieces", val_pieces}};
  const std::string json_path = (out / "prepare.json").string();
  data_files::write_file_atomically((staging / "prepare.json").string(), {meta.dump(2), "\n"}, "prepare record");

  // 7. switch the complete set in: the old prepare.json goes first (while the files are renamed
  // one by one the directory is not a finished set), the new one last.
  fs::remove(out / "prepare.json", ec);
  for (const char* name : {"tokenizer.model", "train.bin", "val.bin", "prepare.json"}) {
    fs::rename(staging / name, out / name, ec);
    if (ec) fail("prepare: cannot move ", (staging / name).string(), " into ", options.out_dir, " (", ec.message(), ")");
  }
  sync_directory(options.out_dir);
  fs::remove_all(staging, ec);
  cleanup.armed = false;
  say("prepare: wrote %s (%zu tokens, %s), %s (%zu tokens, %s), %s\n", train_path.c_str(), train.size(),
      megabytes(double(train_bytes)).c_str(), val_path.c_str(), val.size(), megabytes(double(val_bytes)).c_str(),
      json_path.c_str());
}

}  // namespace attnlab
