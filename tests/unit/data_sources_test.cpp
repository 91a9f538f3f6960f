// typeflow::data sources: range, generator, from_values, text_file,
// lm_windows, csv, gzipped IDX (mnist) and fashion_mnist.
//
// Files are written to a fresh temp directory per test. The Fashion-MNIST
// tests read Debian's dataset-fashion-mnist (installed by scripts/setup.sh)
// from fashion_mnist_default_dir and fail, rather than skip, without it.
#include <doctest/doctest.h>
#include <zlib.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <typeflow/data/data.hpp>

#include "../support/test_support.hpp"

namespace data = typeflow::data;
using typeflow::shape;

namespace {

using typeflow::testing::collect;
using typeflow::testing::contains;
using typeflow::testing::message_of;

struct temp_dir : typeflow::testing::temp_dir {
  temp_dir() : typeflow::testing::temp_dir("typeflow_data_sources_test") {}
};




void write_bytes(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// bytes as one gzip member (zlib's deflate with gzip framing).
std::vector<std::uint8_t> gzipped(const std::vector<std::uint8_t>& bytes) {
  z_stream stream{};
  REQUIRE(deflateInit2(&stream, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::vector<std::uint8_t> out(deflateBound(&stream, static_cast<uLong>(bytes.size())) + 64);
  stream.next_in = const_cast<Bytef*>(bytes.data());
  stream.avail_in = static_cast<uInt>(bytes.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&stream, Z_FINISH) == Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

void put_big_endian(std::vector<std::uint8_t>& out, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(value >> shift));
}

// An IDX file's bytes: magic, dims, then the payload.
std::vector<std::uint8_t> idx_bytes(std::uint32_t magic, const std::vector<std::uint32_t>& dims,
                                    const std::vector<std::uint8_t>& payload) {
  std::vector<std::uint8_t> bytes;
  put_big_endian(bytes, magic);
  for (std::uint32_t d : dims) put_big_endian(bytes, d);
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  return bytes;
}

constexpr std::uint32_t images_magic = 0x00000803;
constexpr std::uint32_t labels_magic = 0x00000801;

// Three 28x28 images whose pixels vary (so that gzip has work to do) and labels 7, 0, 9.
std::vector<std::uint8_t> small_images() {
  std::vector<std::uint8_t> pixels(3 * 28 * 28);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>((i * 37 + i / 28) % 256);
  return idx_bytes(images_magic, {3, 28, 28}, pixels);
}
std::vector<std::uint8_t> small_labels() { return idx_bytes(labels_magic, {3}, {7, 0, 9}); }

std::string mnist_error(const std::filesystem::path& dir) {
  return message_of<std::runtime_error>([&] { data::mnist(dir, data::split::train); });
}

using scalar_label = data::tensor_value<std::int32_t, shape<>>;

}  // namespace

// ---- range, generator, from_values ----------------------------------------------------------

TEST_CASE("range yields start, start + step, ... up to but not including stop, and counts them") {
  static_assert(std::is_same_v<data::range_dataset::element_type, std::int64_t>);
  CHECK(collect(data::range(5)) == std::vector<std::int64_t>{0, 1, 2, 3, 4});
  CHECK(collect(data::range(2, 10, 3)) == std::vector<std::int64_t>{2, 5, 8});
  CHECK(collect(data::range(5, 0, -2)) == std::vector<std::int64_t>{5, 3, 1});
  CHECK(collect(data::range(3, 3)).empty());
  CHECK(collect(data::range(4, 1)).empty());
  CHECK(data::range(2, 10, 3).cardinality() == 3);
  CHECK(data::range(5, 0, -2).cardinality() == 3);
  CHECK(data::range(0).cardinality() == 0);
  CHECK(contains(message_of<std::invalid_argument>([] { data::range(0, 5, 0); }), "step must not be 0"));
}

TEST_CASE("generator calls a fresh copy of the user's callable each pass, until it returns std::nullopt") {
  auto squares = data::generator([i = 0]() mutable -> std::optional<int> {
    if (i == 4) return std::nullopt;
    const int value = i * i;
    ++i;
    return value;
  });
  static_assert(std::is_same_v<decltype(squares)::element_type, int>);
  static_assert(data::dataset<decltype(squares)>);
  CHECK(squares.cardinality() == data::unknown_cardinality);
  CHECK(collect(squares) == std::vector<int>{0, 1, 4, 9});
  CHECK(collect(squares, 1) == std::vector<int>{0, 1, 4, 9});  // the captured counter starts afresh

  auto cursor = squares.open(0);
  int value = 0;
  for (int i = 0; i < 4; ++i) CHECK(cursor.next(value));
  CHECK_FALSE(cursor.next(value));
  CHECK_FALSE(cursor.next(value));  // and stays ended, without calling f again
}

TEST_CASE("generator<E> fills elements in place until the callable returns false, and may state its size") {
  using element = data::example<data::tensor_value<float, shape<2>>, scalar_label>;
  auto made = data::generator<element>(
      [i = 0](element& out) mutable {
        if (i == 3) return false;
        out.features[0] = static_cast<float>(i);
        out.features[1] = -static_cast<float>(i);
        out.label[0] = i++;
        return true;
      },
      3);
  static_assert(std::is_same_v<decltype(made)::element_type, element>);
  CHECK(made.cardinality() == 3);
  const auto elements = collect(made | data::batch<2>);
  REQUIRE(elements.size() == 2);
  CHECK(elements[0].labels == std::vector<std::int32_t>{0, 1});
  CHECK(elements[1].features == std::vector<float>{2, -2, 0, 0});
  CHECK(elements[1].valid == 1);
}

TEST_CASE("from_values yields each value in order, shared by every copy") {
  const auto names = data::from_values(std::vector<std::string>{"a.txt", "b.txt", "c.txt"});
  static_assert(std::is_same_v<decltype(names)::element_type, std::string>);
  CHECK(names.cardinality() == 3);
  const auto copy = names;
  CHECK(collect(copy) == std::vector<std::string>{"a.txt", "b.txt", "c.txt"});
}

// ---- text_file and lm_windows -------------------------------------------------------------------

TEST_CASE("text_file yields a file's bytes as int32 token ids, or as uint8 bytes") {
  temp_dir dir;
  write_bytes(dir.path / "doc.txt", {'h', 'i', '\n', 0xFF, 0x00});
  const auto tokens = data::text_file(dir.path / "doc.txt");
  static_assert(std::is_same_v<decltype(tokens)::element_type, std::int32_t>);
  CHECK(tokens.cardinality() == 5);
  CHECK(collect(tokens) == std::vector<std::int32_t>{104, 105, 10, 255, 0});
  CHECK(tokens.tokens() == std::vector<std::int32_t>{104, 105, 10, 255, 0});

  const auto bytes = data::text_file<std::uint8_t>(dir.path / "doc.txt");
  static_assert(std::is_same_v<decltype(bytes)::element_type, std::uint8_t>);
  CHECK(collect(bytes) == std::vector<std::uint8_t>{'h', 'i', '\n', 0xFF, 0x00});
}

TEST_CASE("text_file of a missing file is an error naming it") {
  temp_dir dir;
  const std::string message = message_of<std::runtime_error>([&] { data::text_file(dir.path / "absent.txt"); });
  CHECK(contains(message, (dir.path / "absent.txt").string()));
  CHECK(contains(message, "was not found"));
}

TEST_CASE("lm_windows cuts token ids into sequences of T, with targets the inputs shifted by one") {
  std::vector<std::int32_t> tokens(10);
  for (int i = 0; i < 10; ++i) tokens[static_cast<std::size_t>(i)] = 100 + i;
  const auto windows = data::lm_windows<4>(tokens);
  using sequence = data::tensor_value<std::int32_t, shape<4>>;
  static_assert(std::is_same_v<decltype(windows)::element_type, data::example<sequence, sequence>>);
  // Windows need T + 1 = 5 tokens: at 0 and 4; the one at 8 would need tokens up to 12.
  CHECK(windows.cardinality() == 2);
  const auto elements = collect(windows);
  REQUIRE(elements.size() == 2);
  CHECK(elements[0].features.values == std::array<std::int32_t, 4>{100, 101, 102, 103});
  CHECK(elements[0].label.values == std::array<std::int32_t, 4>{101, 102, 103, 104});
  CHECK(elements[1].features.values == std::array<std::int32_t, 4>{104, 105, 106, 107});
  CHECK(elements[1].label.values == std::array<std::int32_t, 4>{105, 106, 107, 108});
}

TEST_CASE("lm_windows with a stride makes overlapping windows, and too few tokens make none") {
  std::vector<std::int32_t> tokens{0, 1, 2, 3, 4, 5, 6};
  const auto windows = data::lm_windows<3>(tokens, 1);
  CHECK(windows.cardinality() == 4);  // starts 0, 1, 2, 3: the last target is token 6
  const auto elements = collect(windows);
  REQUIRE(elements.size() == 4);
  CHECK(elements[3].features.values == std::array<std::int32_t, 3>{3, 4, 5});
  CHECK(elements[3].label.values == std::array<std::int32_t, 3>{4, 5, 6});

  CHECK(data::lm_windows<7>(tokens).cardinality() == 0);
  CHECK(collect(data::lm_windows<7>(tokens)).empty());
  CHECK(data::lm_windows<6>(tokens).cardinality() == 1);
  CHECK(contains(message_of<std::invalid_argument>([&] { data::lm_windows<3>(tokens, 0); }),
                 "stride must be at least 1"));
}

TEST_CASE("lm_windows over a text_file batches into a language model's inputs and next-token targets") {
  temp_dir dir;
  write_text(dir.path / "corpus.txt", "abcdefghijklmnopq");  // 17 bytes
  const auto pipeline = data::lm_windows<8>(data::text_file(dir.path / "corpus.txt")) | data::batch<2>;
  using batch_type = decltype(pipeline)::element_type;
  static_assert(std::is_same_v<batch_type::features_type, data::tensor_value<std::int32_t, shape<8>>>);
  static_assert(std::is_same_v<batch_type::label_type, data::tensor_value<std::int32_t, shape<8>>>);
  const auto batches = collect(pipeline);
  REQUIRE(batches.size() == 1);
  CHECK(batches[0].valid == 2);
  CHECK(batches[0].features[0] == 'a');
  CHECK(batches[0].labels[0] == 'b');
  CHECK(batches[0].features[8] == 'i');
  CHECK(batches[0].labels[15] == 'q');
}

// ---- csv -------------------------------------------------------------------------------------------

TEST_CASE("csv reads numeric columns into float features and the label column into an int32 class id") {
  temp_dir dir;
  write_text(dir.path / "iris.csv",
             "sepal_length,sepal_width,species,petal_length\r\n"
             "5.1, 3.5 ,0,1.4\r\n"
             "\r\n"
             "4.9,3.0,2.0,-1e-3\r\n"
             "+7,nan,1,inf\n");
  const auto rows = data::csv<4>(dir.path / "iris.csv", /*label_column=*/2, /*has_header=*/true);
  static_assert(std::is_same_v<decltype(rows)::element_type,
                               data::example<data::tensor_value<float, shape<3>>, scalar_label>>);
  CHECK(rows.cardinality() == 3);
  const auto elements = collect(rows);
  REQUIRE(elements.size() == 3);
  CHECK(elements[0].features.values == std::array<float, 3>{5.1f, 3.5f, 1.4f});
  CHECK(elements[0].label[0] == 0);
  CHECK(elements[1].features[2] == doctest::Approx(-1e-3f));
  CHECK(elements[1].label[0] == 2);  // "2.0" is the integer 2
  CHECK(elements[2].features[0] == 7.f);
  CHECK(elements[2].features[1] != elements[2].features[1]);  // nan
  CHECK(elements[2].features[2] == std::numeric_limits<float>::infinity());
}

TEST_CASE("csv with a float label reads regression targets, and a negative label_column counts from the end") {
  temp_dir dir;
  write_text(dir.path / "houses.csv", "1,2,0.5\n3,4,1.25\n");
  const auto rows = data::csv<3, float>(dir.path / "houses.csv", -1);
  static_assert(std::is_same_v<decltype(rows)::element_type::label_type, data::tensor_value<float, shape<>>>);
  const auto elements = collect(rows);
  REQUIRE(elements.size() == 2);
  CHECK(elements[1].features.values == std::array<float, 2>{3.f, 4.f});
  CHECK(elements[1].label[0] == 1.25f);
}

TEST_CASE("a csv field that is not a number is an error naming the file, the line and the column") {
  temp_dir dir;
  write_text(dir.path / "bad.csv", "a,b,label\n1,2,0\n1,x2,1\n");
  const std::string message = message_of<std::runtime_error>([&] { data::csv<3>(dir.path / "bad.csv", 2, true); });
  CHECK(contains(message, (dir.path / "bad.csv").string()));
  CHECK(contains(message, "line 3"));
  CHECK(contains(message, "column 2"));
  CHECK(contains(message, "\"x2\" is not a number"));
  CHECK(contains(message, "byte offset 18"));  // where the field starts

  write_text(dir.path / "empty_field.csv", "1,,0\n");
  CHECK(contains(message_of<std::runtime_error>([&] { data::csv<3>(dir.path / "empty_field.csv", 2); }),
                 "line 1 (byte offset 2): column 2: \"\" is not a number"));
}

TEST_CASE("a csv label that is not an integer class id is an error naming the line and column") {
  temp_dir dir;
  write_text(dir.path / "labels.csv", "1,2,0\n3,4,1.5\n");
  const std::string message = message_of<std::runtime_error>([&] { data::csv<3>(dir.path / "labels.csv", 2); });
  CHECK(contains(message, "line 2"));
  CHECK(contains(message, "column 3"));
  CHECK(contains(message, "\"1.5\" is not an integer class id"));
  // Negative ids are no class (before: -1 was read as a label, and trained on).
  for (const char* negative : {"-1", "-2147483648", "-3.0"}) {
    CAPTURE(negative);
    write_text(dir.path / "negative.csv", std::string("1,2,0\n3,4,") + negative + "\n");
    CHECK(contains(message_of<std::runtime_error>([&] { data::csv<3>(dir.path / "negative.csv", 2); }),
                   "is not an integer class id, 0 or more"));
  }
}

TEST_CASE("a csv field of 10 MB that is not a number is quoted by its start and length, not whole") {
  temp_dir dir;
  write_text(dir.path / "long.csv", "1,2,0\n3," + std::string(10 << 20, 'x') + ",1\n");
  const std::string message = message_of<std::runtime_error>([&] { data::csv<3>(dir.path / "long.csv", 2); });
  CHECK(contains(message, "line 2"));
  CHECK(contains(message, "xxx...(10485760 bytes)\" is not a number"));
  CHECK(message.size() < 1000);  // before: 10,485,866 characters
}

TEST_CASE("a csv line or header with the wrong number of columns is an error naming the line and both counts") {
  temp_dir dir;
  write_text(dir.path / "short.csv", "1,2,0\n3,4\n");
  const std::string message = message_of<std::runtime_error>([&] { data::csv<3>(dir.path / "short.csv", 2); });
  CHECK(contains(message, (dir.path / "short.csv").string()));
  CHECK(contains(message, "line 2"));
  CHECK(contains(message, "has 2 columns, expected 3"));

  write_text(dir.path / "header.csv", "a,b,c,d\n1,2,0\n");
  CHECK(contains(message_of<std::runtime_error>([&] { data::csv<3>(dir.path / "header.csv", 2, true); }),
                 "line 1 (byte offset 0): the header has 4 columns, expected 3"));
}

TEST_CASE("csv refuses a label_column outside the file's columns, and a missing file names it") {
  temp_dir dir;
  write_text(dir.path / "ok.csv", "1,2,0\n");
  CHECK(contains(message_of<std::invalid_argument>([&] { data::csv<3>(dir.path / "ok.csv", 3); }),
                 "label_column 3 is not one of the file's 3 columns"));
  CHECK(contains(message_of<std::invalid_argument>([&] { data::csv<3>(dir.path / "ok.csv", -4); }),
                 "label_column -4"));
  CHECK(contains(message_of<std::runtime_error>([&] { data::csv<3>(dir.path / "none.csv", 0); }),
                 (dir.path / "none.csv").string()));
}

// ---- gzipped IDX --------------------------------------------------------------------------------------

TEST_CASE("MNIST files present only as .gz are decompressed with zlib and give the same samples") {
  temp_dir raw, compressed;
  write_bytes(raw.path / "train-images-idx3-ubyte", small_images());
  write_bytes(raw.path / "train-labels-idx1-ubyte", small_labels());
  write_bytes(compressed.path / "train-images-idx3-ubyte.gz", gzipped(small_images()));
  write_bytes(compressed.path / "train-labels-idx1-ubyte.gz", gzipped(small_labels()));

  const auto from_raw = collect(data::mnist(raw.path, data::split::train));
  const auto from_gz = collect(data::mnist(compressed.path, data::split::train));
  REQUIRE(from_gz.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(from_gz[i].features.values == from_raw[i].features.values);
    CHECK(from_gz[i].label[0] == from_raw[i].label[0]);
  }
  CHECK(from_gz[2].label[0] == 9);
}

TEST_CASE("read_idx reads a path ending in .gz, and concatenated gzip members one after another") {
  temp_dir dir;
  const std::vector<std::uint8_t> whole = small_labels();
  std::vector<std::uint8_t> two_members = gzipped({whole.begin(), whole.begin() + 5});
  const std::vector<std::uint8_t> second = gzipped({whole.begin() + 5, whole.end()});
  two_members.insert(two_members.end(), second.begin(), second.end());
  write_bytes(dir.path / "labels.gz", two_members);
  const data::idx_array labels = data::read_idx(dir.path / "labels.gz", data::idx_type::uint8, 1);
  CHECK(labels.compressed);
  CHECK(labels.file == dir.path / "labels.gz");
  CHECK(labels.bytes == std::vector<std::uint8_t>{7, 0, 9});
}

TEST_CASE("a gzip-compressed file without the .gz suffix is an error saying to add the suffix") {
  temp_dir dir;
  write_bytes(dir.path / "train-images-idx3-ubyte", gzipped(small_images()));
  write_bytes(dir.path / "train-labels-idx1-ubyte", small_labels());
  const std::string message = mnist_error(dir.path);
  CHECK(contains(message, "found 0x1F8B08"));
  CHECK(contains(message, "give it the .gz suffix"));
}

TEST_CASE("a missing MNIST file, raw and .gz, is an error naming both names") {
  temp_dir dir;
  write_bytes(dir.path / "train-images-idx3-ubyte.gz", gzipped(small_images()));
  const std::string message = mnist_error(dir.path);
  CHECK(contains(message, (dir.path / "train-labels-idx1-ubyte").string()));
  CHECK(contains(message, "was not found, nor train-labels-idx1-ubyte.gz"));
}

TEST_CASE("a corrupt gzip file is an error naming the file and the compressed byte offset") {
  temp_dir dir;
  std::vector<std::uint8_t> bytes = gzipped(small_images());
  for (std::size_t i = 20; i < 60; ++i) bytes[i] = 0xFF;  // garbage in the deflate data after the 10-byte header
  write_bytes(dir.path / "train-images-idx3-ubyte.gz", bytes);
  write_bytes(dir.path / "train-labels-idx1-ubyte", small_labels());
  const std::string message = mnist_error(dir.path);
  CHECK(contains(message, "gzip file " + (dir.path / "train-images-idx3-ubyte.gz").string()));
  CHECK(contains(message, "is corrupt at byte offset "));
  CHECK(contains(message, "zlib: "));
}

TEST_CASE("a corrupt gzip checksum is an error at the offset of the trailer") {
  temp_dir dir;
  std::vector<std::uint8_t> bytes = gzipped(small_labels());
  bytes[bytes.size() - 8] ^= 0x01;  // the CRC-32 in the trailer
  write_bytes(dir.path / "labels.gz", bytes);
  const std::string message =
      message_of<std::runtime_error>([&] { data::read_idx(dir.path / "labels.gz", data::idx_type::uint8, 1); });
  CHECK(contains(message, "is corrupt at byte offset " + std::to_string(bytes.size() - 4)));
  CHECK(contains(message, "incorrect data check"));
}

TEST_CASE("a truncated gzip file is an error naming the file and the offset where its data ends") {
  temp_dir dir;
  std::vector<std::uint8_t> bytes = gzipped(small_images());
  const std::size_t cut = bytes.size() / 2;
  bytes.resize(cut);
  write_bytes(dir.path / "train-images-idx3-ubyte.gz", bytes);
  write_bytes(dir.path / "train-labels-idx1-ubyte.gz", gzipped(small_labels()));
  const std::string message = mnist_error(dir.path);
  CHECK(contains(message, (dir.path / "train-images-idx3-ubyte.gz").string()));
  CHECK(contains(message, "is truncated: its data ends at byte offset " + std::to_string(cut)));
}

TEST_CASE("a .gz file that is not gzip, or has bytes after its stream, is an error naming it and the offset") {
  temp_dir dir;
  write_bytes(dir.path / "train-images-idx3-ubyte.gz", small_images());  // renamed, not compressed
  write_bytes(dir.path / "train-labels-idx1-ubyte", small_labels());
  std::string message = mnist_error(dir.path);
  CHECK(contains(message, "train-images-idx3-ubyte.gz is not gzip-compressed: at byte offset 0"));
  CHECK(contains(message, "1F 8B"));

  std::vector<std::uint8_t> bytes = gzipped(small_images());
  const std::size_t end = bytes.size();
  bytes.insert(bytes.end(), {'j', 'u', 'n', 'k'});
  write_bytes(dir.path / "train-images-idx3-ubyte.gz", bytes);
  message = mnist_error(dir.path);
  CHECK(contains(message, "has 4 bytes of trailing data at byte offset " + std::to_string(end)));
}

TEST_CASE("a gzipped IDX file whose content is truncated says so, counting decompressed bytes") {
  temp_dir dir;
  std::vector<std::uint8_t> images = small_images();
  images.resize(1000);
  write_bytes(dir.path / "train-images-idx3-ubyte.gz", gzipped(images));
  write_bytes(dir.path / "train-labels-idx1-ubyte.gz", gzipped(small_labels()));
  const std::string message = mnist_error(dir.path);
  CHECK(contains(message, "train-images-idx3-ubyte.gz (decompressed) is truncated"));
  CHECK(contains(message, "the data ends at byte 1000"));
}

TEST_CASE("a label above 9 in a gzipped file is an error naming the file and its decompressed offset") {
  temp_dir dir;
  write_bytes(dir.path / "train-images-idx3-ubyte.gz", gzipped(small_images()));
  write_bytes(dir.path / "train-labels-idx1-ubyte.gz", gzipped(idx_bytes(labels_magic, {3}, {1, 2, 42})));
  const std::string message = mnist_error(dir.path);
  CHECK(contains(message, "train-labels-idx1-ubyte.gz (decompressed)"));
  CHECK(contains(message, "label 42 at byte offset 10"));
}

// ---- Fashion-MNIST, from Debian's dataset-fashion-mnist --------------------------------------------

namespace {
void require_fashion_mnist() {
  REQUIRE_MESSAGE(std::filesystem::is_regular_file(std::filesystem::path(data::fashion_mnist_default_dir) /
                                                   "train-images-idx3-ubyte.gz"),
                  "Fashion-MNIST not found in " << data::fashion_mnist_default_dir
                                                << ": run scripts/setup.sh (it installs the Debian package "
                                                   "dataset-fashion-mnist)");
}
}  // namespace

TEST_CASE("Fashion-MNIST from its default directory: 60000 and 10000 28x28 images, 10 balanced classes") {
  require_fashion_mnist();
  const data::fashion_mnist train(data::split::train);
  static_assert(std::is_same_v<data::fashion_mnist::element_type, data::mnist::element_type>);
  CHECK(train.cardinality() == 60000);
  std::array<int, 10> counts{};
  data::fashion_mnist::element_type first{};
  int seen = 0;
  auto cursor = train.open(0);
  for (data::fashion_mnist::element_type element{}; cursor.next(element); ++seen) {
    if (seen == 0) first = element;
    ++counts[static_cast<std::size_t>(element.label[0])];
  }
  CHECK(seen == 60000);
  CHECK(counts == std::array<int, 10>{6000, 6000, 6000, 6000, 6000, 6000, 6000, 6000, 6000, 6000});
  CHECK(first.label[0] == 9);
  CHECK(data::fashion_mnist::class_names[9] == "Ankle boot");
  int pixel_sum = 0;
  for (std::uint8_t p : first.features.values) pixel_sum += p;
  CHECK(pixel_sum == 76247);

  const data::fashion_mnist test(data::fashion_mnist_default_dir, data::split::test);
  CHECK(test.cardinality() == 10000);
  auto test_cursor = test.open(0);
  data::fashion_mnist::element_type element{};
  REQUIRE(test_cursor.next(element));
  CHECK(element.label[0] == 9);
  REQUIRE(test_cursor.next(element));
  CHECK(element.label[0] == 2);
}

TEST_CASE("fashion_mnist's errors say fashion_mnist and name the file") {
  temp_dir dir;
  write_bytes(dir.path / "t10k-images-idx3-ubyte.gz", gzipped(small_images()));
  write_bytes(dir.path / "t10k-labels-idx1-ubyte.gz", gzipped(idx_bytes(labels_magic, {2}, {1, 2})));
  const std::string message =
      message_of<std::runtime_error>([&] { data::fashion_mnist(dir.path, data::split::test); });
  CHECK(contains(message, "fashion_mnist: "));
  CHECK(contains(message, "holds 3 images"));
  CHECK(contains(message, "t10k-labels-idx1-ubyte.gz holds 2 labels"));
}
