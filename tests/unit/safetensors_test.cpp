// typeflow::io safetensors: round trips, the exact bytes on disk, every
// malformed input the reader must refuse, model/file matching, and the
// writer's atomicity.
#include <typeflow/io/safetensors.hpp>

#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

namespace fs = std::filesystem;
using typeflow::io::check_tensors_match;
using typeflow::io::dtype_size;
using typeflow::io::safetensors_file;
using typeflow::io::tensor_spec;
using typeflow::io::tensor_to_write;
using typeflow::io::write_safetensors;

namespace {

// A fresh directory under the system temp directory, removed with everything
// in it when the test ends.
struct temp_dir {
  fs::path path;
  temp_dir() {
    static std::atomic<int> counter{0};
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    path = fs::temp_directory_path() / ("typeflow_safetensors_test_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(now) + "_" + std::to_string(counter++));
    fs::create_directories(path);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  fs::path operator/(const std::string& name) const { return path / name; }

  std::set<std::string> entries() const {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(path)) names.insert(entry.path().filename().string());
    return names;
  }
};

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The 8-byte little-endian length prefix.
std::string le64(std::uint64_t value) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((value >> (8 * i)) & 0xff);
  return out;
}

// A file with the given header text (its real length in the prefix) and data.
std::string file_with(const std::string& header, const std::string& data = {}) {
  return le64(header.size()) + header + data;
}

// The message of the std::runtime_error that reading path throws.
std::string read_error(const fs::path& path) {
  try {
    (void)safetensors_file::read(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  FAIL("reading " << path << " did not throw");
  return {};
}

// The message of the std::runtime_error that reading these bytes throws; the
// message must name the file.
std::string read_error_for(const temp_dir& dir, const std::string& bytes) {
  const fs::path path = dir / "bad.safetensors";
  write_bytes(path, bytes);
  std::string message = read_error(path);
  CHECK_MESSAGE(message.find(path.string()) != std::string::npos, "the message does not name the file: " << message);
  return message;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

template <class T>
tensor_to_write tensor_of(std::string name, std::string dtype, std::vector<std::int64_t> shape, const std::vector<T>& values) {
  return {std::move(name), std::move(dtype), std::move(shape), values.data(), values.size() * sizeof(T)};
}

template <class T>
std::vector<T> values_of(const safetensors_file& file, std::string_view name) {
  const std::span<const std::byte> bytes = file.data(name);
  REQUIRE(bytes.size() % sizeof(T) == 0);
  std::vector<T> values(bytes.size() / sizeof(T));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

// A one-tensor F32 entry, as a header fragment.
std::string f32_entry(const std::string& name, const std::string& shape, std::uint64_t begin, std::uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":[" + std::to_string(begin) +
         "," + std::to_string(end) + "]}";
}

}  // namespace

// ---------------------------------------------------------------------------
// dtypes
// ---------------------------------------------------------------------------

TEST_CASE("dtype_size gives the bytes per element of each safetensors dtype") {
  CHECK(dtype_size("BOOL") == 1);
  CHECK(dtype_size("U8") == 1);
  CHECK(dtype_size("I8") == 1);
  CHECK(dtype_size("F8_E4M3") == 1);
  CHECK(dtype_size("F16") == 2);
  CHECK(dtype_size("BF16") == 2);
  CHECK(dtype_size("I16") == 2);
  CHECK(dtype_size("F32") == 4);
  CHECK(dtype_size("I32") == 4);
  CHECK(dtype_size("U32") == 4);
  CHECK(dtype_size("F64") == 8);
  CHECK(dtype_size("I64") == 8);
  CHECK(dtype_size("U64") == 8);
}

TEST_CASE("dtype_size throws invalid_argument for unknown, misspelled or sub-byte dtypes") {
  CHECK_THROWS_AS(dtype_size("F33"), std::invalid_argument);
  CHECK_THROWS_AS(dtype_size("f32"), std::invalid_argument);
  CHECK_THROWS_AS(dtype_size(""), std::invalid_argument);
  CHECK_THROWS_AS(dtype_size("F4"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(dtype_size("float32"), doctest::Contains("\"float32\""), std::invalid_argument);
}

TEST_CASE("shape_string prints shapes the way typeflow::shape::str does") {
  using typeflow::io::shape_string;
  CHECK(shape_string(std::vector<std::int64_t>{784, 256}) == "(784, 256)");
  CHECK(shape_string(std::vector<std::int64_t>{10}) == "(10,)");
  CHECK(shape_string(std::vector<std::int64_t>{}) == "()");
}

// ---------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------

TEST_CASE("a written file reads back with the same names, dtypes, shapes, bytes and metadata") {
  temp_dir dir;
  const fs::path path = dir / "model.safetensors";

  // F32 values whose bits must survive exactly: a NaN with a payload, -0,
  // the smallest denormal, infinity, and ordinary numbers.
  const std::vector<std::uint32_t> kernel_bits = {0x7fc01234u, 0x80000000u, 0x00000001u, 0x7f800000u,
                                                  std::bit_cast<std::uint32_t>(3.14159274f),
                                                  std::bit_cast<std::uint32_t>(-1e-30f)};
  std::vector<float> kernel;
  for (std::uint32_t bits : kernel_bits) kernel.push_back(std::bit_cast<float>(bits));
  const std::vector<float> bias = {0.5f, -0.25f, 1e30f};
  const std::vector<std::int32_t> token_ids = {0, -1, 2147483647, -2147483647 - 1};
  const std::vector<std::uint8_t> pixels = {0, 1, 127, 255, 42};
  const std::vector<double> step = {12345.0};
  const std::vector<std::uint16_t> empty_f16;  // shape (0, 3): no elements, no bytes

  const std::vector<tensor_to_write> tensors = {
      tensor_of("dense.kernel", "F32", {3, 2}, kernel),
      tensor_of("dense.bias", "F32", {3}, bias),
      tensor_of("embedding.ids", "I32", {2, 2}, token_ids),
      tensor_of("pixels", "U8", {5}, pixels),
      tensor_of("optimizer.step", "F64", {}, step),
      tensor_of("empty", "F16", {0, 3}, empty_f16),
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"typeflow.model", "mlp \"v1\" ✓"}};
  write_safetensors(path, tensors, metadata);

  const safetensors_file file = safetensors_file::read(path);
  CHECK(file.path() == path);
  CHECK(file.metadata() == metadata);
  REQUIRE(file.tensors().size() == tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    CAPTURE(tensors[i].name);
    const tensor_spec expected{tensors[i].name, tensors[i].dtype, tensors[i].shape};
    CHECK(file.tensors()[i] == expected);  // written order is data-offset order
    const tensor_spec* found = file.find(tensors[i].name);
    REQUIRE(found != nullptr);
    CHECK(*found == expected);
    const std::span<const std::byte> bytes = file.data(tensors[i].name);
    REQUIRE(bytes.size() == tensors[i].bytes);
    if (!bytes.empty()) CHECK(std::memcmp(bytes.data(), tensors[i].data, bytes.size()) == 0);
  }

  std::vector<std::uint32_t> kernel_bits_read;
  for (float value : values_of<float>(file, "dense.kernel")) kernel_bits_read.push_back(std::bit_cast<std::uint32_t>(value));
  CHECK(kernel_bits_read == kernel_bits);
  CHECK(values_of<std::int32_t>(file, "embedding.ids") == token_ids);
  CHECK(values_of<double>(file, "optimizer.step") == step);
}

TEST_CASE("tensors() lists tensors in data-offset order, not the header's key order") {
  temp_dir dir;
  const fs::path path = dir / "order.safetensors";
  const std::vector<float> z = {1, 2}, a = {3}, m = {4, 5, 6};
  const std::vector<tensor_to_write> tensors = {tensor_of("z", "F32", {2}, z), tensor_of("a", "F32", {1}, a),
                                                tensor_of("m", "F32", {3}, m)};
  write_safetensors(path, tensors);
  const safetensors_file file = safetensors_file::read(path);
  REQUIRE(file.tensors().size() == 3);
  CHECK(file.tensors()[0].name == "z");
  CHECK(file.tensors()[1].name == "a");
  CHECK(file.tensors()[2].name == "m");
  CHECK(values_of<float>(file, "a") == a);
}

TEST_CASE("a file without tensors or metadata round trips") {
  temp_dir dir;
  const fs::path path = dir / "empty.safetensors";
  write_safetensors(path, {});
  CHECK(read_bytes(path) == le64(8) + "{}      ");
  const safetensors_file file = safetensors_file::read(path);
  CHECK(file.tensors().empty());
  CHECK(file.metadata().empty());
}

TEST_CASE("find returns nullptr and data throws for a tensor the file lacks") {
  temp_dir dir;
  const fs::path path = dir / "one.safetensors";
  const std::vector<float> w = {1};
  const std::vector<tensor_to_write> tensors = {tensor_of("w", "F32", {1}, w)};
  write_safetensors(path, tensors);
  const safetensors_file file = safetensors_file::read(path);
  CHECK(file.find("w") != nullptr);
  CHECK(file.find("v") == nullptr);
  CHECK(file.find("") == nullptr);
  CHECK_THROWS_WITH(file.data("v"), doctest::Contains("\"v\""));
  CHECK_THROWS_WITH(file.data("v"), doctest::Contains(path.string().c_str()));
}

// ---------------------------------------------------------------------------
// The bytes on disk
// ---------------------------------------------------------------------------

TEST_CASE("a tiny file has exactly the bytes the format prescribes") {
  temp_dir dir;
  const fs::path path = dir / "tiny.safetensors";
  const std::vector<float> a = {1.0f, -2.0f};
  const std::vector<tensor_to_write> tensors = {tensor_of("a", "F32", {2}, a)};
  write_safetensors(path, tensors);

  // The JSON is 54 bytes; 2 spaces pad it to N = 56 so the data starts at
  // 8 + 56 = 64, a multiple of 8. 1.0f is 0x3f800000, -2.0f is 0xc0000000.
  const std::string json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  REQUIRE(json.size() == 54);
  const std::string expected = std::string("\x38\0\0\0\0\0\0\0", 8) + json + "  " +
                               std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);
  const std::string actual = read_bytes(path);
  CHECK(actual.size() == 72);
  CHECK(actual == expected);
}

TEST_CASE("the header lists __metadata__ first and tensors in the order given") {
  temp_dir dir;
  const fs::path path = dir / "meta.safetensors";
  const std::vector<std::int32_t> y = {7};
  const std::vector<std::uint8_t> x = {1, 2, 3};
  const std::vector<tensor_to_write> tensors = {tensor_of("y", "I32", {1}, y), tensor_of("x", "U8", {3}, x)};
  write_safetensors(path, tensors, {{"format", "pt"}});

  const std::string json = R"({"__metadata__":{"format":"pt"},)"
                           R"("y":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},)"
                           R"("x":{"dtype":"U8","shape":[3],"data_offsets":[4,7]}})";
  const std::string padded = json + std::string((8 - json.size() % 8) % 8, ' ');
  const std::string expected = le64(padded.size()) + padded + std::string("\x07\0\0\0\x01\x02\x03", 7);
  CHECK(read_bytes(path) == expected);
}

TEST_CASE("the writer pads the header with spaces so the data buffer starts at a multiple of 8") {
  temp_dir dir;
  const std::vector<std::uint8_t> byte = {9};
  for (std::size_t length = 1; length <= 9; ++length) {
    CAPTURE(length);
    const fs::path path = dir / "aligned.safetensors";
    const std::vector<tensor_to_write> tensors = {tensor_of(std::string(length, 'n'), "U8", {1}, byte)};
    write_safetensors(path, tensors);
    const std::string bytes = read_bytes(path);
    REQUIRE(bytes.size() >= 9);
    std::uint64_t header_length = 0;
    for (int i = 0; i < 8; ++i)
      header_length |= std::uint64_t{static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)])} << (8 * i);
    CHECK((8 + header_length) % 8 == 0);
    CHECK(bytes.size() == 8 + header_length + 1);
    CHECK(bytes.back() == '\x09');
    const std::string header = bytes.substr(8, header_length);
    const std::size_t json_end = header.find_last_of('}') + 1;
    CHECK(header.substr(json_end) == std::string(header_length - json_end, ' '));
    CHECK(header_length - json_end < 8);
  }
}

TEST_CASE("a header that another writer padded with any number of trailing spaces is accepted") {
  temp_dir dir;
  const fs::path path = dir / "padded.safetensors";
  const std::string header = "{" + f32_entry("w", "[1]", 0, 4) + "}" + std::string(13, ' ');
  write_bytes(path, file_with(header, std::string("\x00\x00\x80\x3f", 4)));
  const safetensors_file file = safetensors_file::read(path);
  CHECK(values_of<float>(file, "w") == std::vector<float>{1.0f});
}

// ---------------------------------------------------------------------------
// Malformed files: every one is a runtime_error naming the file, the problem
// and where it is.
// ---------------------------------------------------------------------------

TEST_CASE("reading a file that cannot be opened gives the path and strerror") {
  temp_dir dir;
  const fs::path path = dir / "does_not_exist.safetensors";
  const std::string message = read_error(path);
  CHECK(contains(message, path.string()));
  CHECK(contains(message, std::strerror(ENOENT)));
}

TEST_CASE("reading a directory is refused as not a regular file") {
  temp_dir dir;
  const std::string message = read_error(dir.path);
  CHECK(contains(message, dir.path.string()));
  CHECK(contains(message, "not a regular file"));
}

TEST_CASE("reading a file shorter than 8 bytes says it lacks the header length") {
  temp_dir dir;
  for (std::size_t size : {0, 1, 7}) {
    CAPTURE(size);
    const std::string message = read_error_for(dir, std::string(size, '\0'));
    CHECK(contains(message, std::to_string(size) + " bytes long"));
    CHECK(contains(message, "8-byte header length"));
  }
}

TEST_CASE("reading a header length larger than the file says how many bytes follow it") {
  temp_dir dir;
  const std::string message = read_error_for(dir, le64(1000) + "{}");
  CHECK(contains(message, "header length at file bytes [0, 8) is 1000"));
  CHECK(contains(message, "only 2 bytes follow"));

  // A length near 2^64 must not wrap around in any bounds arithmetic.
  const std::string huge = read_error_for(dir, le64(~std::uint64_t{0}) + "{}");
  CHECK(contains(huge, std::to_string(~std::uint64_t{0})));
}

TEST_CASE("reading a header that does not begin with '{' is refused") {
  temp_dir dir;
  CHECK(contains(read_error_for(dir, file_with(" {}")), "file byte offset 8 does not begin with '{'"));
  CHECK(contains(read_error_for(dir, file_with("[1, 2]")), "does not begin with '{'"));
  CHECK(contains(read_error_for(dir, le64(0)), "does not begin with '{'"));
}

TEST_CASE("reading a header that is not valid JSON includes the parser's message and the byte offset") {
  temp_dir dir;
  // The stray 'x' is header byte 5, so file byte 13.
  const std::string message = read_error_for(dir, file_with(R"({"a":x})"));
  CHECK(contains(message, "not valid JSON"));
  CHECK(contains(message, "file byte offset 13"));
  CHECK(contains(message, "[json.exception.parse_error"));

  // A header cut short: the JSON ends where the declared length does, even
  // though the file goes on.
  const std::string truncated = read_error_for(dir, le64(5) + R"({"a":{}})");
  CHECK(contains(truncated, "not valid JSON"));
  CHECK(contains(truncated, "file bytes [8, 13)"));
}

TEST_CASE("reading a header with invalid UTF-8 is refused as invalid JSON") {
  temp_dir dir;
  const std::string message = read_error_for(dir, file_with("{\"\xff\":1}"));
  CHECK(contains(message, "not valid JSON"));
}

TEST_CASE("reading a header with the same key twice is refused") {
  temp_dir dir;
  const std::string header = "{" + f32_entry("w", "[1]", 0, 4) + "," + f32_entry("w", "[1]", 0, 4) + "}";
  CHECK(contains(read_error_for(dir, file_with(header, std::string(4, '\0'))), "has the key \"w\" twice"));
  const std::string nested = R"({"w":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  CHECK(contains(read_error_for(dir, file_with(nested, std::string(4, '\0'))), "has the key \"dtype\" twice"));
}

TEST_CASE("reading metadata that is not an object of strings is refused") {
  temp_dir dir;
  CHECK(contains(read_error_for(dir, file_with(R"({"__metadata__":{"epoch":3}})")),
                 "the value of \"epoch\" is a JSON number"));
  CHECK(contains(read_error_for(dir, file_with(R"({"__metadata__":"pt"})")), "\"__metadata__\" in the header"));
}

TEST_CASE("reading an entry without dtype, shape or data_offsets names the tensor and the missing field") {
  temp_dir dir;
  SUBCASE("no dtype") {
    const std::string message = read_error_for(dir, file_with(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", "abcd"));
    CHECK(contains(message, "tensor \"w\""));
    CHECK(contains(message, "has no \"dtype\""));
  }
  SUBCASE("no shape") {
    const std::string message = read_error_for(dir, file_with(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", "abcd"));
    CHECK(contains(message, "tensor \"w\""));
    CHECK(contains(message, "has no \"shape\""));
  }
  SUBCASE("no data_offsets") {
    const std::string message = read_error_for(dir, file_with(R"({"w":{"dtype":"F32","shape":[1]}})", "abcd"));
    CHECK(contains(message, "tensor \"w\""));
    CHECK(contains(message, "has no \"data_offsets\""));
  }
}

TEST_CASE("reading an entry whose fields have the wrong JSON types names the tensor and the field") {
  temp_dir dir;
  SUBCASE("the entry is not an object") {
    CHECK(contains(read_error_for(dir, file_with(R"({"w":[1,2]})")), "tensor \"w\" in the header (file bytes [8, 19)) is a JSON array"));
  }
  SUBCASE("dtype is a number") {
    CHECK(contains(read_error_for(dir, file_with(R"({"w":{"dtype":32,"shape":[1],"data_offsets":[0,4]}})", "abcd")),
                   "\"dtype\" is a JSON number, not a string"));
  }
  SUBCASE("shape is a string") {
    CHECK(contains(read_error_for(dir, file_with(R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", "abcd")),
                   "\"shape\" is a JSON string, not an array"));
  }
  SUBCASE("shape has a negative dimension") {
    CHECK(contains(read_error_for(dir, file_with(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd")),
                   "\"shape\" has -1 at index 0, not a non-negative integer"));
  }
  SUBCASE("shape has a fractional dimension") {
    CHECK(contains(read_error_for(dir, file_with(R"({"w":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", "abcd")),
                   "\"shape\" has 1.0 at index 0"));
  }
  SUBCASE("data_offsets has three numbers") {
    CHECK(contains(read_error_for(dir, file_with(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", "abcd")),
                   "\"data_offsets\" has 3 numbers, not the 2 of [begin, end]"));
  }
  SUBCASE("data_offsets holds a string") {
    CHECK(contains(read_error_for(dir, file_with(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":["0",4]}})", "abcd")),
                   "\"data_offsets\" has \"0\" at index 0"));
  }
}

TEST_CASE("reading an entry with a field the format does not define is refused") {
  temp_dir dir;
  const std::string message =
      read_error_for(dir, file_with(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"stride":[1]}})", "abcd"));
  CHECK(contains(message, "tensor \"w\""));
  CHECK(contains(message, "unknown field \"stride\""));
}

TEST_CASE("reading an unknown dtype names the tensor and the dtype") {
  temp_dir dir;
  const std::string message =
      read_error_for(dir, file_with(R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", "abcd"));
  CHECK(contains(message, "tensor \"w\""));
  CHECK(contains(message, "unknown safetensors dtype \"F33\""));
}

TEST_CASE("reading data_offsets whose size disagrees with shape and dtype gives both sizes") {
  temp_dir dir;
  const std::string message = read_error_for(dir, file_with("{" + f32_entry("w", "[2, 3]", 0, 20) + "}", std::string(20, '\0')));
  CHECK(contains(message, "tensor \"w\""));
  CHECK(contains(message, "\"data_offsets\" [0, 20] span 20 bytes but shape (2, 3) of dtype F32 needs 24"));
}

TEST_CASE("reading a shape whose byte size overflows 64 bits is refused") {
  temp_dir dir;
  const std::string message =
      read_error_for(dir, file_with("{" + f32_entry("w", "[4294967296, 4294967296]", 0, 0) + "}"));
  CHECK(contains(message, "more elements than 64 bits can count"));
}

TEST_CASE("reading data_offsets that end before they begin is refused") {
  temp_dir dir;
  CHECK(contains(read_error_for(dir, file_with("{" + f32_entry("w", "[1]", 8, 4) + "}", std::string(8, '\0'))),
                 "\"data_offsets\" [8, 4] ends before it begins"));
}

TEST_CASE("reading data_offsets past the end of the data buffer gives the file byte ranges") {
  temp_dir dir;
  const std::string header = "{" + f32_entry("w", "[2]", 0, 8) + "}";  // 54 bytes: data starts at 62
  REQUIRE(header.size() == 54);
  const std::string message = read_error_for(dir, file_with(header, std::string(4, '\0')));
  CHECK(contains(message, "tensor \"w\""));
  CHECK(contains(message, "(file bytes [62, 70)) reach past the end of the data buffer (file bytes [62, 66), 4 bytes)"));

  // Offsets near 2^64 must not wrap around into the buffer.
  const std::uint64_t top = ~std::uint64_t{0};
  const std::string wrapped = read_error_for(
      dir, file_with("{" + f32_entry("w", "[1]", top - 4, top) + "}", std::string(4, '\0')));
  CHECK(contains(wrapped, "reach past the end of the data buffer"));
}

TEST_CASE("reading overlapping tensors names both and their file byte ranges") {
  temp_dir dir;
  const std::string header = "{" + f32_entry("a", "[2]", 0, 8) + "," + f32_entry("b", "[2]", 4, 12) + "}";
  const std::uint64_t data_start = 8 + header.size();
  const std::string message = read_error_for(dir, file_with(header, std::string(12, '\0')));
  CHECK(contains(message, "tensor \"b\" (file bytes [" + std::to_string(data_start + 4) + ", " +
                              std::to_string(data_start + 12) + ")) overlaps tensor \"a\" (file bytes [" +
                              std::to_string(data_start) + ", " + std::to_string(data_start + 8) + "))"));
}

TEST_CASE("reading a hole between tensors gives the file bytes no tensor covers") {
  temp_dir dir;
  const std::string header = "{" + f32_entry("a", "[1]", 0, 4) + "," + f32_entry("b", "[1]", 8, 12) + "}";
  const std::uint64_t data_start = 8 + header.size();
  const std::string message = read_error_for(dir, file_with(header, std::string(12, '\0')));
  CHECK(contains(message, "file bytes [" + std::to_string(data_start + 4) + ", " + std::to_string(data_start + 8) +
                              ") of the data buffer"));
  CHECK(contains(message, "belong to no tensor; the gap lies between tensors \"a\" and \"b\""));
}

TEST_CASE("reading a hole before the first tensor is refused") {
  temp_dir dir;
  const std::string header = "{" + f32_entry("a", "[1]", 4, 8) + "}";
  const std::string message = read_error_for(dir, file_with(header, std::string(8, '\0')));
  CHECK(contains(message, "before the first tensor, \"a\""));
}

TEST_CASE("reading bytes after the last tensor that no tensor covers is refused") {
  temp_dir dir;
  const std::string header = "{" + f32_entry("a", "[1]", 0, 4) + "}";
  const std::uint64_t data_start = 8 + header.size();
  const std::string message = read_error_for(dir, file_with(header, std::string(7, '\0')));
  CHECK(contains(message, "file bytes [" + std::to_string(data_start + 4) + ", " + std::to_string(data_start + 7) +
                              ") at the end of the data buffer"));
  CHECK(contains(message, "belong to no tensor"));

  // With no tensors at all, any data byte is uncovered.
  CHECK(contains(read_error_for(dir, file_with("{}", "x")), "belong to no tensor"));
}

// ---------------------------------------------------------------------------
// check_tensors_match
// ---------------------------------------------------------------------------

namespace {

// A file holding F32 tensors with these names and shapes (zero-filled).
safetensors_file file_holding(const temp_dir& dir, const std::vector<tensor_spec>& specs) {
  std::vector<std::vector<std::byte>> storage;
  std::vector<tensor_to_write> tensors;
  for (const tensor_spec& spec : specs) {
    std::size_t bytes = dtype_size(spec.dtype);
    for (std::int64_t dim : spec.shape) bytes *= static_cast<std::size_t>(dim);
    storage.emplace_back(bytes);
  }
  for (std::size_t i = 0; i < specs.size(); ++i)
    tensors.push_back({specs[i].name, specs[i].dtype, specs[i].shape, storage[i].data(), storage[i].size()});
  const fs::path path = dir / "checkpoint.safetensors";
  write_safetensors(path, tensors);
  return safetensors_file::read(path);
}

std::string mismatch_message(const safetensors_file& file, const std::vector<tensor_spec>& expected) {
  try {
    check_tensors_match(file, expected);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  FAIL("check_tensors_match did not throw");
  return {};
}

const std::vector<tensor_spec> mlp = {
    {"layers.1.kernel", "F32", {784, 256}},
    {"layers.1.bias", "F32", {256}},
    {"layers.3.kernel", "F32", {256, 10}},
    {"layers.3.bias", "F32", {10}},
};

}  // namespace

TEST_CASE("check_tensors_match accepts a file holding exactly the expected tensors, in any order") {
  temp_dir dir;
  const safetensors_file file = file_holding(dir, mlp);
  CHECK_NOTHROW(check_tensors_match(file, mlp));
  const std::vector<tensor_spec> reversed(mlp.rbegin(), mlp.rend());
  CHECK_NOTHROW(check_tensors_match(file, reversed));
}

TEST_CASE("check_tensors_match names the file and reports a tensor missing from it") {
  temp_dir dir;
  const safetensors_file file = file_holding(dir, {mlp[0], mlp[1], mlp[2]});
  const std::string message = mismatch_message(file, mlp);
  CHECK(contains(message, file.path().string()));
  CHECK(contains(message, "(1 mismatch):\n"));
  CHECK(contains(message, "\n  layers.3.bias: missing from file"));
}

TEST_CASE("check_tensors_match reports a tensor the model does not have") {
  temp_dir dir;
  std::vector<tensor_spec> with_extra = mlp;
  with_extra.push_back({"extra.weight", "F32", {3}});
  const safetensors_file file = file_holding(dir, with_extra);
  CHECK(contains(mismatch_message(file, mlp), "\n  extra.weight: not in the model"));
}

TEST_CASE("check_tensors_match reports a shape difference with both shapes") {
  temp_dir dir;
  std::vector<tensor_spec> wider = mlp;
  wider[0].shape = {784, 512};
  const safetensors_file file = file_holding(dir, wider);
  CHECK(contains(mismatch_message(file, mlp), "\n  layers.1.kernel: shape (784, 512) in file, (784, 256) expected"));
}

TEST_CASE("check_tensors_match reports a dtype difference with both dtypes") {
  temp_dir dir;
  std::vector<tensor_spec> half = mlp;
  half[1].dtype = "F16";
  const safetensors_file file = file_holding(dir, half);
  CHECK(contains(mismatch_message(file, mlp), "\n  layers.1.bias: dtype F16 in file, F32 expected"));
}

TEST_CASE("check_tensors_match puts a dtype and a shape difference of one tensor on one line") {
  temp_dir dir;
  std::vector<tensor_spec> different = mlp;
  different[3] = {"layers.3.bias", "BF16", {20}};
  const safetensors_file file = file_holding(dir, different);
  const std::string message = mismatch_message(file, mlp);
  CHECK(contains(message, "(1 mismatch):"));
  CHECK(contains(message, "\n  layers.3.bias: dtype BF16 in file, F32 expected; shape (20,) in file, (10,) expected"));
}

TEST_CASE("check_tensors_match lists the first five mismatches, then how many more there are") {
  temp_dir dir;
  const safetensors_file file = file_holding(dir, {{"extra.a", "F32", {1}}, {"extra.b", "F32", {1}}});
  // 4 missing + 2 extra = 6 mismatches: five shown, one summarised.
  const std::string message = mismatch_message(file, mlp);
  CHECK(contains(message, "(6 mismatches):"));
  CHECK(contains(message,
                 "\n  layers.1.kernel: missing from file"
                 "\n  layers.1.bias: missing from file"
                 "\n  layers.3.kernel: missing from file"
                 "\n  layers.3.bias: missing from file"
                 "\n  extra.a: not in the model"
                 "\n  ... and 1 more"));
  CHECK_FALSE(contains(message, "extra.b"));
}

TEST_CASE("check_tensors_match refuses an expected list that names a tensor twice") {
  temp_dir dir;
  const safetensors_file file = file_holding(dir, mlp);
  const std::vector<tensor_spec> twice = {mlp[0], mlp[0]};
  CHECK_THROWS_AS(check_tensors_match(file, twice), std::invalid_argument);
}

// ---------------------------------------------------------------------------
// Writer checks and atomicity
// ---------------------------------------------------------------------------

namespace {

// The message of the std::runtime_error that writing throws.
std::string write_error(const fs::path& path, const std::vector<tensor_to_write>& tensors,
                        const std::map<std::string, std::string>& metadata = {}) {
  try {
    write_safetensors(path, tensors, metadata);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  FAIL("writing " << path << " did not throw");
  return {};
}

}  // namespace

TEST_CASE("a failed write leaves an existing file's contents untouched and no temp file behind") {
  temp_dir dir;
  const fs::path path = dir / "model.safetensors";
  const std::vector<float> good = {1, 2, 3, 4};
  const std::vector<tensor_to_write> original = {tensor_of("w", "F32", {4}, good)};
  write_safetensors(path, original);
  const std::string before = read_bytes(path);

  // 4 floats cannot fill a (2, 3) tensor.
  const std::vector<float> one = {5};
  const std::vector<tensor_to_write> mismatched = {tensor_of("v", "F32", {1}, one), tensor_of("w", "F32", {2, 3}, good)};
  const std::string message = write_error(path, mismatched);
  CHECK(contains(message, path.string()));
  CHECK(contains(message, "tensor 1 (\"w\"): shape (2, 3) of dtype F32 needs 24 bytes but 16 were given"));

  CHECK(read_bytes(path) == before);
  CHECK(dir.entries() == std::set<std::string>{"model.safetensors"});
}

TEST_CASE("when the final rename fails, the temp file is removed and the target is untouched") {
  temp_dir dir;
  // A non-empty directory at the target path: the temp file is written and
  // fsync'ed, then renaming it onto a directory fails.
  const fs::path path = dir / "model.safetensors";
  fs::create_directories(path / "keep");
  const std::vector<float> w = {1};
  const std::vector<tensor_to_write> tensors = {tensor_of("w", "F32", {1}, w)};
  const std::string message = write_error(path, tensors);
  CHECK(contains(message, path.string()));
  CHECK(contains(message, "renaming"));
  CHECK(dir.entries() == std::set<std::string>{"model.safetensors"});
  CHECK(fs::is_directory(path / "keep"));
}

TEST_CASE("writing into a directory that does not exist gives strerror and creates nothing") {
  temp_dir dir;
  const fs::path path = dir / "missing" / "model.safetensors";
  const std::vector<float> w = {1};
  const std::vector<tensor_to_write> tensors = {tensor_of("w", "F32", {1}, w)};
  const std::string message = write_error(path, tensors);
  CHECK(contains(message, path.string()));
  CHECK(contains(message, std::strerror(ENOENT)));
  CHECK(dir.entries().empty());
}

TEST_CASE("writing over an existing file replaces it whole") {
  temp_dir dir;
  const fs::path path = dir / "model.safetensors";
  const std::vector<float> big(100, 1.0f), small = {2.0f};
  write_safetensors(path, std::vector<tensor_to_write>{tensor_of("big", "F32", {100}, big)});
  write_safetensors(path, std::vector<tensor_to_write>{tensor_of("small", "F32", {1}, small)});
  const safetensors_file file = safetensors_file::read(path);
  REQUIRE(file.tensors().size() == 1);
  CHECK(file.tensors()[0].name == "small");
  CHECK(values_of<float>(file, "small") == small);
  CHECK(dir.entries() == std::set<std::string>{"model.safetensors"});
}

TEST_CASE("writing refuses duplicate, empty, reserved or non-UTF-8 names before touching the disk") {
  temp_dir dir;
  const fs::path path = dir / "model.safetensors";
  const std::vector<float> w = {1};
  SUBCASE("duplicate") {
    const std::string message = write_error(path, {tensor_of("w", "F32", {1}, w), tensor_of("w", "F32", {1}, w)});
    CHECK(contains(message, "tensor 1 (\"w\"): the name is already used by tensor 0"));
  }
  SUBCASE("empty") {
    CHECK(contains(write_error(path, {tensor_of("", "F32", {1}, w)}), "tensor 0 has an empty name"));
  }
  SUBCASE("reserved") {
    CHECK(contains(write_error(path, {tensor_of("__metadata__", "F32", {1}, w)}), "reserved"));
  }
  SUBCASE("not UTF-8") {
    CHECK(contains(write_error(path, {tensor_of("w\xff", "F32", {1}, w)}), "not valid UTF-8"));
  }
  CHECK(dir.entries().empty());
}

TEST_CASE("writing refuses an unknown dtype, a negative dimension or missing data, naming the tensor") {
  temp_dir dir;
  const fs::path path = dir / "model.safetensors";
  const std::vector<float> w = {1};
  CHECK(contains(write_error(path, {tensor_of("w", "float32", {1}, w)}), "tensor 0 (\"w\"): unknown safetensors dtype \"float32\""));
  CHECK(contains(write_error(path, {tensor_of("w", "F32", {-1}, w)}), "tensor 0 (\"w\"): shape (-1,) has a negative dimension"));
  CHECK(contains(write_error(path, {tensor_to_write{"w", "F32", {1}, nullptr, 4}}), "tensor 0 (\"w\"): data is null"));
  CHECK(dir.entries().empty());
}
