// cache(), cache(path): keep the elements of the first complete pass and
// serve every later pass from them, like tf.data's Dataset.cache.
//
//   source | cache()        in memory, shared by every copy of the dataset
//   source | cache(path)    in a file, which later runs of the program reuse
//   element_type and cardinality: the source's
//
// The first pass reads the source and records what it hands out; from the
// pass after the first *complete* one, the source is not opened again. Only
// a complete pass is ever served: a pass that ends early (its cursor
// destroyed mid-epoch, an exception) leaves no cache, and the next pass
// reads the source again. "Complete" is known as the last element is handed
// out: the cursor reads one element ahead, so a consumer that stops after
// the last element without calling next() again (fit does, at a last partial
// batch) still completes the cache.
//
// cache(path) writes the pass to a temporary file beside path
// ("<path>.tmp-<pid>-<n>"), and only when the pass is complete fsyncs it and
// renames it onto path; an interrupted pass removes its temporary file, and
// one left by a crash is never read. A pass opened while path exists replays
// it. The file holds raw element bytes (native byte order: a cache is local
// to the machine) after a 32-byte header:
//
//   bytes 0-7     "TFCACHE1"
//   bytes 8-15    record bytes (uint64)
//   bytes 16-23   a fingerprint of the element type (uint64)
//   bytes 24-31   record count (uint64)
//   then          count records
//
// so it can hold elements that are trivially copyable (examples of
// tensor_values are) or batch_of batches (features, labels, then valid as
// int32); another element type is a compile error with one sentence. A cache
// file that is not one, was written for another element type, or is
// truncated or too long is a std::runtime_error naming the file and the byte
// offset; delete the file to rebuild it.
//
// Replaying allocates nothing per element: from memory, next() copy-assigns
// into the caller's element (a batch_of's vectors keep their storage); from a
// file, it reads into it through a buffer made at open().
#pragma once

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fcntl.h>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"

namespace typeflow::data {

namespace detail {

// How one element is laid out in a cache file.
template <class E>
struct cache_record {
  static constexpr bool supported = std::is_trivially_copyable_v<E>;
  static constexpr std::size_t bytes = sizeof(E);
  static bool write(std::FILE* file, const E& element) { return std::fwrite(&element, sizeof(E), 1, file) == 1; }
  static bool read(std::FILE* file, E& element) { return std::fread(&element, sizeof(E), 1, file) == 1; }
};

template <int N, class F, class L>
struct cache_record<batch_of<N, F, L>> {
  using batch = batch_of<N, F, L>;
  using feature_value = typename batch::feature_value;
  using label_value = typename batch::label_value;
  static constexpr std::size_t feature_count = static_cast<std::size_t>(N) * F::size;
  static constexpr std::size_t label_count = static_cast<std::size_t>(N) * L::size;
  static constexpr bool supported =
      std::is_trivially_copyable_v<feature_value> && std::is_trivially_copyable_v<label_value>;
  static constexpr std::size_t bytes =
      feature_count * sizeof(feature_value) + label_count * sizeof(label_value) + 2 * sizeof(std::int32_t) +
      static_cast<std::size_t>(N) * sizeof(float);  // valid, weighted, then the sample weights (zeros if none)

  static bool write(std::FILE* file, const batch& element) {
    const auto valid = static_cast<std::int32_t>(element.valid);
    return std::fwrite(element.features.data(), sizeof(feature_value), feature_count, file) == feature_count &&
           std::fwrite(element.labels.data(), sizeof(label_value), label_count, file) == label_count &&
           std::fwrite(&valid, sizeof valid, 1, file) == 1 && write_weights(file, element.sample_weights);
  }
  static bool write_weights(std::FILE* file, const std::vector<float>& weights) {
    const std::int32_t weighted = weights.empty() ? 0 : 1;
    if (std::fwrite(&weighted, sizeof weighted, 1, file) != 1) return false;
    if (weighted) return std::fwrite(weights.data(), sizeof(float), N, file) == static_cast<std::size_t>(N);
    const float zeros[N] = {};
    return std::fwrite(zeros, sizeof(float), N, file) == static_cast<std::size_t>(N);
  }
  static bool read(std::FILE* file, batch& element) {
    if (element.features.size() != feature_count) element.features.resize(feature_count);
    if (element.labels.size() != label_count) element.labels.resize(label_count);
    std::int32_t valid = 0;
    const bool whole = std::fread(element.features.data(), sizeof(feature_value), feature_count, file) == feature_count &&
                       std::fread(element.labels.data(), sizeof(label_value), label_count, file) == label_count &&
                       std::fread(&valid, sizeof valid, 1, file) == 1;
    element.valid = valid;
    std::int32_t weighted = 0;
    element.sample_weights.resize(N);
    const bool weights = std::fread(&weighted, sizeof weighted, 1, file) == 1 &&
                         std::fread(element.sample_weights.data(), sizeof(float), N, file) == static_cast<std::size_t>(N);
    if (!weighted) element.sample_weights.clear();
    return whole && weights;
  }
};

inline constexpr char cache_magic[8] = {'T', 'F', 'C', 'A', 'C', 'H', 'E', '1'};
inline constexpr std::size_t cache_header_bytes = 32;
inline constexpr std::size_t cache_count_offset = 24;
inline constexpr std::size_t cache_buffer_bytes = std::size_t{1} << 20;

// FNV-1a of the element type's name and record size: a file written by a
// pipeline whose elements differ is refused rather than misread.
template <class E>
std::uint64_t cache_fingerprint() {
  std::uint64_t hash = 0xCBF29CE484222325ull;
  for (const char* c = typeid(E).name(); *c; ++c) hash = (hash ^ static_cast<unsigned char>(*c)) * 0x100000001B3ull;
  return hash ^ cache_record<E>::bytes;
}

inline std::string errno_message(int error) { return std::strerror(error); }

// An open FILE with its buffer; closes on destruction.
struct cache_file {
  std::FILE* file = nullptr;
  std::vector<char> buffer;

  cache_file(const std::filesystem::path& path, const char* mode) : buffer(cache_buffer_bytes) {
    file = std::fopen(path.c_str(), mode);
    if (file) std::setvbuf(file, buffer.data(), _IOFBF, buffer.size());
  }
  ~cache_file() { close(); }
  cache_file(const cache_file&) = delete;
  cache_file& operator=(const cache_file&) = delete;
  int close() {
    if (!file) return 0;
    const int status = std::fclose(file);
    file = nullptr;
    return status;
  }
};

// The unique name of one pass's temporary file.
inline std::filesystem::path cache_temp_path(const std::filesystem::path& path) {
  static std::atomic<unsigned long> counter{0};
  return path.string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
}

[[noreturn]] inline void cache_error(const std::filesystem::path& path, const std::string& what) {
  throw std::runtime_error("cache file " + path.string() + " " + what);
}

// Reads a cache file record by record, after checking its header against its size.
template <class E>
class cache_reader {
 public:
  explicit cache_reader(const std::filesystem::path& path) : path_(path), file_(path, "rb") {
    if (!file_.file) cache_error(path, "cannot be opened for reading: " + errno_message(errno));
    std::error_code error;
    const std::uintmax_t size = std::filesystem::file_size(path, error);
    if (error) cache_error(path, "cannot be sized: " + error.message());
    unsigned char header[cache_header_bytes] = {};
    const std::size_t got = std::fread(header, 1, cache_header_bytes, file_.file);
    if (got < sizeof cache_magic || std::memcmp(header, cache_magic, sizeof cache_magic) != 0)
      cache_error(path, "is not a typeflow cache file: bad magic at byte offset 0 (expected \"TFCACHE1\"); "
                        "delete it to rebuild the cache");
    if (got < cache_header_bytes)
      cache_error(path, "is truncated inside its header: it has " + std::to_string(size) +
                            " bytes and the header needs " + std::to_string(cache_header_bytes));
    std::uint64_t record_bytes = 0, fingerprint = 0;
    std::memcpy(&record_bytes, header + 8, 8);
    std::memcpy(&fingerprint, header + 16, 8);
    std::memcpy(&count_, header + cache_count_offset, 8);
    if (record_bytes != cache_record<E>::bytes || fingerprint != cache_fingerprint<E>())
      cache_error(path, "was written for another element type (header at byte offset 8: records of " +
                            std::to_string(record_bytes) + " bytes, this pipeline's are " +
                            std::to_string(cache_record<E>::bytes) + " bytes" +
                            (record_bytes == cache_record<E>::bytes ? ", of another type" : "") +
                            "); delete it to rebuild the cache");
    // A hostile count times the record size could wrap around 64 bits to a
    // product that matches a short file: refuse a count that cannot fit first.
    if (count_ > (std::numeric_limits<std::uint64_t>::max() - cache_header_bytes) / record_bytes)
      cache_error(path, "is corrupt: its header at byte offset " + std::to_string(cache_count_offset) + " says " +
                            std::to_string(count_) + " records of " + std::to_string(record_bytes) +
                            " bytes, more bytes than 64 bits can count, but it has " + std::to_string(size) +
                            "; delete it to rebuild the cache");
    const std::uintmax_t expected = cache_header_bytes + count_ * record_bytes;
    if (size < expected)
      cache_error(path, "is truncated: its header says " + std::to_string(count_) + " records of " +
                            std::to_string(record_bytes) + " bytes, " + std::to_string(expected) +
                            " bytes in all, but it has " + std::to_string(size) + "; the data ends at byte offset " +
                            std::to_string(size) + ", in record " +
                            std::to_string((size - cache_header_bytes) / record_bytes));
    if (size > expected)
      cache_error(path, "is too long: its header says " + std::to_string(count_) + " records, " +
                            std::to_string(expected) + " bytes in all, but it has " + std::to_string(size) +
                            " (extra bytes from byte offset " + std::to_string(expected) + ")");
  }

  bool next(E& out) {
    if (index_ >= count_) return false;
    if (!cache_record<E>::read(file_.file, out))
      cache_error(path_, "is truncated: record " + std::to_string(index_) + " of " + std::to_string(count_) +
                             " could not be read at byte offset " +
                             std::to_string(cache_header_bytes + index_ * cache_record<E>::bytes));
    ++index_;
    return true;
  }

 private:
  std::filesystem::path path_;
  cache_file file_;
  std::uint64_t count_ = 0;
  std::uint64_t index_ = 0;
};

// Writes one pass to a temporary file, renamed onto path by commit().
template <class E>
class cache_writer {
 public:
  explicit cache_writer(const std::filesystem::path& path)
      : path_(path), temp_(cache_temp_path(path)), file_(temp_, "wb") {
    if (!file_.file)
      cache_error(path, "cannot be written: creating " + temp_.string() + " failed: " + errno_message(errno));
    unsigned char header[cache_header_bytes] = {};
    const std::uint64_t record_bytes = cache_record<E>::bytes, fingerprint = cache_fingerprint<E>();
    std::memcpy(header, cache_magic, sizeof cache_magic);
    std::memcpy(header + 8, &record_bytes, 8);
    std::memcpy(header + 16, &fingerprint, 8);
    if (std::fwrite(header, 1, cache_header_bytes, file_.file) != cache_header_bytes) {
      const int error = errno;
      file_.close();
      std::error_code ignored;
      std::filesystem::remove(temp_, ignored);  // the destructor will not run
      errno = error;
      fail("writing the header");
    }
  }
  ~cache_writer() {
    if (!committed_) {
      file_.close();
      std::error_code ignored;
      std::filesystem::remove(temp_, ignored);
    }
  }
  cache_writer(const cache_writer&) = delete;
  cache_writer& operator=(const cache_writer&) = delete;

  void write(const E& element) {
    if (!cache_record<E>::write(file_.file, element)) fail("writing record " + std::to_string(count_));
    ++count_;
  }

  // The pass is complete: the count into the header, the bytes to the disk, the name into place.
  void commit() {
    if (std::fseek(file_.file, static_cast<long>(cache_count_offset), SEEK_SET) != 0 ||
        std::fwrite(&count_, sizeof count_, 1, file_.file) != 1 || std::fflush(file_.file) != 0)
      fail("writing the record count");
    if (::fsync(::fileno(file_.file)) != 0) fail("fsync");
    if (file_.close() != 0) fail("closing it");
    std::error_code error;
    std::filesystem::rename(temp_, path_, error);
    if (error) cache_error(path_, "cannot be written: renaming " + temp_.string() + " onto it failed: " + error.message());
    committed_ = true;
    const std::filesystem::path directory = path_.has_parent_path() ? path_.parent_path() : ".";
    const int dir = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      ::fsync(dir);  // the rename's durability; the file is in place either way
      ::close(dir);
    }
  }

 private:
  [[noreturn]] void fail(const std::string& step) {
    cache_error(path_, "cannot be written: " + step + " of " + temp_.string() + " failed at byte offset " +
                           std::to_string(cache_header_bytes + count_ * cache_record<E>::bytes) + ": " +
                           errno_message(errno));
  }

  std::filesystem::path path_;
  std::filesystem::path temp_;
  cache_file file_;
  std::uint64_t count_ = 0;
  bool committed_ = false;
};

// The in-memory cache shared by copies of one `source | cache()`.
template <class E>
struct memory_cache_storage {
  std::mutex mutex;
  std::shared_ptr<const std::vector<E>> complete;  // null until a pass completes
};

}  // namespace detail

// Both caches' cursors: replaying, or recording a pass of the source one
// element ahead. Store is the memory or the file side.
template <dataset Source, class Store>
class cache_cursor {
 public:
  using element_type = typename Source::element_type;

  bool next(element_type& out) {
    if (store_.replaying()) return store_.replay(out);
    if (!started_) {
      started_ = true;
      has_pending_ = source_->next(pending_);
      if (!has_pending_) store_.complete();  // an empty source is a complete pass of nothing
    }
    if (pending_error_) std::rethrow_exception(std::exchange(pending_error_, nullptr));
    if (!has_pending_) return false;
    detail::hand_over(pending_, out);
    store_.record(out);
    // The source's error while reading ahead belongs to the next call, after
    // this element is delivered; that pass is then incomplete and not cached.
    try {
      has_pending_ = source_->next(pending_);
    } catch (...) {
      has_pending_ = false;
      pending_error_ = std::current_exception();
      return true;
    }
    if (!has_pending_) store_.complete();
    return true;
  }

  cache_cursor(std::optional<cursor_t<Source>> source, Store store)
      : source_(std::move(source)), store_(std::move(store)) {}

 private:
  std::optional<cursor_t<Source>> source_;  // empty when replaying
  Store store_;
  element_type pending_{};  // the next element, read ahead
  std::exception_ptr pending_error_;
  bool has_pending_ = false;
  bool started_ = false;
};

template <dataset Source>
class memory_cache_dataset {
 public:
  using element_type = typename Source::element_type;

  explicit memory_cache_dataset(Source source)
      : source_(std::move(source)), storage_(std::make_shared<detail::memory_cache_storage<element_type>>()) {}

  std::int64_t cardinality() const { return source_.cardinality(); }
  std::int64_t full_batches() const
    requires requires(const Source& s) { s.full_batches(); }
  {
    return source_.full_batches();
  }

  // Whether a complete pass is cached, so that open() will replay it.
  bool cached() const {
    std::lock_guard lock(storage_->mutex);
    return storage_->complete != nullptr;
  }

  class store {
   public:
    bool replaying() const noexcept { return elements_ != nullptr; }
    bool replay(element_type& out) {
      if (index_ >= elements_->size()) return false;
      out = (*elements_)[index_++];
      return true;
    }
    void record(const element_type& element) { recording_.push_back(element); }
    void complete() {
      std::lock_guard lock(storage_->mutex);
      if (!storage_->complete) storage_->complete = std::make_shared<const std::vector<element_type>>(std::move(recording_));
    }

   private:
    friend class memory_cache_dataset;
    std::shared_ptr<detail::memory_cache_storage<element_type>> storage_;
    std::shared_ptr<const std::vector<element_type>> elements_;  // replaying
    std::vector<element_type> recording_;
    std::size_t index_ = 0;
  };
  using cursor = cache_cursor<Source, store>;

  cursor open(std::uint64_t epoch = 0) const {
    store s;
    s.storage_ = storage_;
    {
      std::lock_guard lock(storage_->mutex);
      s.elements_ = storage_->complete;
    }
    if (s.elements_) return cursor(std::nullopt, std::move(s));
    const std::int64_t n = source_.cardinality();
    if (n > 0) s.recording_.reserve(static_cast<std::size_t>(n));
    return cursor(source_.open(epoch), std::move(s));
  }

 private:
  Source source_;
  std::shared_ptr<detail::memory_cache_storage<element_type>> storage_;
};

template <dataset Source>
class file_cache_dataset {
 public:
  using element_type = typename Source::element_type;

  file_cache_dataset(Source source, std::filesystem::path path) : source_(std::move(source)), path_(std::move(path)) {}

  std::int64_t cardinality() const { return source_.cardinality(); }
  std::int64_t full_batches() const
    requires requires(const Source& s) { s.full_batches(); }
  {
    return source_.full_batches();
  }
  const std::filesystem::path& path() const noexcept { return path_; }

  class store {
   public:
    bool replaying() const noexcept { return reader_ != nullptr; }
    bool replay(element_type& out) { return reader_->next(out); }
    void record(const element_type& element) { writer_->write(element); }
    void complete() { writer_->commit(); }

   private:
    friend class file_cache_dataset;
    std::unique_ptr<detail::cache_reader<element_type>> reader_;
    std::unique_ptr<detail::cache_writer<element_type>> writer_;
  };
  using cursor = cache_cursor<Source, store>;

  cursor open(std::uint64_t epoch = 0) const {
    store s;
    std::error_code error;
    if (std::filesystem::exists(path_, error)) {
      s.reader_ = std::make_unique<detail::cache_reader<element_type>>(path_);
      return cursor(std::nullopt, std::move(s));
    }
    s.writer_ = std::make_unique<detail::cache_writer<element_type>>(path_);
    return cursor(source_.open(epoch), std::move(s));
  }

 private:
  Source source_;
  std::filesystem::path path_;
};

struct memory_cache_adaptor {
  static constexpr bool is_pipeline_adaptor = true;

  template <dataset Source>
  memory_cache_dataset<Source> operator()(Source source) const {
    return memory_cache_dataset<Source>(std::move(source));
  }
};

struct file_cache_adaptor {
  static constexpr bool is_pipeline_adaptor = true;
  std::filesystem::path path;

  template <dataset Source>
  auto operator()(Source source) const {
    using element = typename Source::element_type;
    if constexpr (!detail::cache_record<element>::supported) {
      static_assert(dependent_false<Source>,
                    "cache(path): a cache file stores elements as raw bytes, so the element type must be "
                    "trivially copyable (an example of tensor_values is) or a batch_of; cache() in memory "
                    "takes any element");
      return source;
    } else {
      return file_cache_dataset<Source>(std::move(source), path);
    }
  }
};

inline memory_cache_adaptor cache() { return {}; }
inline file_cache_adaptor cache(std::filesystem::path path) {
  if (path.empty()) throw std::invalid_argument("cache(path): the path is empty; cache() caches in memory");
  return {std::move(path)};
}

}  // namespace typeflow::data
