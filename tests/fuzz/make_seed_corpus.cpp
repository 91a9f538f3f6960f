// make_seed_corpus OUT DATA: writes each fuzz target's seed corpus into
// OUT/<target>/ (scripts/fuzz.sh runs it before fuzzing; nothing of it is
// committed). DATA is the repository's data/ (Moby-Dick and GPT-2's BPE
// files, from scripts/setup.sh), read for realistic text and merges.
//
// Each target gets valid inputs, made with typeflow's own writers where it
// has them, and from each valid input some variants: cut short at a few
// places, and with single bytes flipped (a fixed pseudo-random sequence, so
// the corpus is the same every run).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <zlib.h>

#include <nlohmann/json.hpp>

#include <typeflow/data/idx.hpp>
#include <typeflow/io/checkpoint.hpp>
#include <typeflow/io/safetensors.hpp>
#include <typeflow/text/gpt2_tokenizer.hpp>

#include "fuzz_checkpoint.hpp"

namespace fs = std::filesystem;
namespace io = typeflow::io;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("make_seed_corpus: cannot read " + path.string());
  return {std::istreambuf_iterator<char>(in), {}};
}

// A seed directory: valid inputs go in with their cut and flipped variants.
class corpus {
 public:
  corpus(const fs::path& root, const std::string& target) : dir_(root / target) { fs::create_directories(dir_); }

  // Adds input, and unless only_as_is, its variants.
  void add(const std::string& input, bool only_as_is = false) {
    write(input);
    if (only_as_is || input.size() < 2) return;
    for (std::size_t cut : {input.size() / 2, input.size() - 1, std::min<std::size_t>(input.size() - 1, 9)})
      write(input.substr(0, cut));
    for (int flip = 0; flip < 4; ++flip) {
      std::string flipped = input;
      state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
      flipped[(state_ >> 33) % flipped.size()] ^= static_cast<char>(1u << (state_ >> 61));
      write(flipped);
    }
  }

 private:
  void write(const std::string& input) {
    char name[32];
    std::snprintf(name, sizeof name, "seed-%04d", count_++);
    std::ofstream(dir_ / name, std::ios::binary) << input;
  }

  fs::path dir_;
  int count_ = 0;
  std::uint64_t state_ = 42;
};

// Two files as one input, as fuzz_support.hpp's split_two reads them back.
std::string two_parts(const std::string& first, const std::string& second) {
  if (first.size() > 0xFFFF) throw std::runtime_error("make_seed_corpus: a first part over 64 KiB");
  return std::string{static_cast<char>(first.size() & 0xFF), static_cast<char>(first.size() >> 8)} + first + second;
}

std::string gzip(const std::string& bytes) {
  z_stream stream{};
  deflateInit2(&stream, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&stream, bytes.size()) + 32, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  stream.avail_in = static_cast<uInt>(bytes.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

std::string safetensors_bytes(const fs::path& scratch, std::span<const io::tensor_to_write> tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  const fs::path path = scratch / "seed.safetensors";
  io::write_safetensors(path, tensors, metadata);
  return read_text(path);
}

// An IDX file: big-endian dims, then count * element bytes of a pattern.
std::string idx_bytes(std::uint8_t type, const std::vector<std::uint32_t>& dims, std::size_t element_bytes) {
  std::string out{0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  std::size_t count = 1;
  for (std::uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(d >> shift));
    count *= d;
  }
  for (std::size_t i = 0; i < count * element_bytes; ++i) out.push_back(static_cast<char>(i * 37 % 251));
  return out;
}

void safetensors_seeds(const fs::path& out, const fs::path& scratch) {
  corpus seeds(out, "fuzz_safetensors");
  const std::vector<float> kernel{1, 2, 3, 4, 5, 6};
  const std::vector<std::int32_t> ids{7, -8};
  const std::uint16_t bf16[8] = {0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0, 0x40E0, 0x4100};
  const double scalar = 0.5;
  const io::tensor_to_write two[] = {{"dense.kernel", "F32", {2, 3}, kernel.data(), 24},
                                     {"ids", "I32", {2}, ids.data(), 8}};
  seeds.add(safetensors_bytes(scratch, two, {{"format", "pt"}}));
  const io::tensor_to_write odd[] = {{"scalar", "F64", {}, &scalar, 8},
                                     {"empty", "U8", {0, 5}, nullptr, 0},
                                     {"bf", "BF16", {2, 2, 2}, bf16, 16}};
  seeds.add(safetensors_bytes(scratch, odd));
  seeds.add(safetensors_bytes(scratch, {}));
}

void checkpoint_seeds(const fs::path& out, const fs::path& scratch) {
  corpus seeds(out, "fuzz_checkpoint");
  const typeflow::checkpoint_identity& id = typeflow::fuzz::checkpoint_fuzz_identity;
  typeflow::checkpoint_counters counters;
  counters.optimizer = typeflow::fuzz::checkpoint_fuzz_optimizer;
  counters.slots = typeflow::fuzz::checkpoint_fuzz_slots;
  counters.iterations = 120;
  counters.epochs_begun = 3;
  counters.batch_size = 32;
  const std::string manifest = typeflow::make_checkpoint_manifest(id, counters).dump(2) + "\n";
  const std::vector<float> region(id.parameter_floats, 0.25f);
  const io::tensor_to_write tensors[] = {{"parameters", "F32", {16}, region.data(), 64},
                                         {"optimizer.slot.0", "F32", {16}, region.data(), 64},
                                         {"optimizer.slot.1", "F32", {16}, region.data(), 64}};
  const std::string state = safetensors_bytes(scratch, tensors, {{"format", "typeflow-checkpoint"}});
  seeds.add(two_parts(manifest, state));
  seeds.add(two_parts(manifest, state.substr(0, state.size() / 2)), true);  // the tensors cut short
  seeds.add(two_parts(typeflow::make_checkpoint_manifest({"other", "float32", "mirrored<2>", "cpu", 8}, counters).dump(),
                      state),
            true);
  // A zero<k> model's: the slots in two shard files (absent here), the layout in "shards".
  nlohmann::ordered_json sharded = typeflow::make_checkpoint_manifest(id, counters);
  io::checkpoint_shard_layout layout{{0, 16, 16}, {}};
  for (int i = 0; i < 2; ++i)
    layout.files.push_back({io::checkpoint_shard_name(i, 2), {{"optimizer.slot.0", "00000000"}, {"optimizer.slot.1", "00000000"}}});
  sharded["shards"] = io::shard_layout_json(layout);
  const std::string weights_only = safetensors_bytes(scratch, std::span(tensors, 1), {{"format", "typeflow-checkpoint"}});
  seeds.add(two_parts(sharded.dump(2) + "\n", weights_only), true);
}

void idx_seeds(const fs::path& out) {
  namespace t = typeflow::data::idx_type;
  const std::string files[] = {idx_bytes(t::uint8, {2, 3, 3}, 1), idx_bytes(t::uint8, {5}, 1),
                               idx_bytes(t::float32, {2, 2}, 4), idx_bytes(t::int16, {3}, 2),
                               idx_bytes(t::float64, {1, 1, 1, 2}, 8), idx_bytes(t::int32, {}, 4)};
  corpus raw(out, "fuzz_idx"), gz(out, "fuzz_idx_gz");
  for (const std::string& file : files) {
    raw.add(file);
    gz.add(std::string(1, '\0') + gzip(file));      // mode 0: the .gz file as it is
    gz.add(std::string(1, '\2') + gzip(file), true);  // mode 2: read_idx finds the .gz itself
    gz.add(std::string(1, '\1') + file, true);        // mode 1: compressed by the target
  }
  gz.add(std::string(1, '\0') + gzip(files[0]) + gzip(files[1]), true);  // two gzip members
}

void csv_seeds(const fs::path& out) {
  corpus seeds(out, "fuzz_csv");
  seeds.add(std::string(1, '\0') + "1,2,0\n4.5,-6,1\n");
  seeds.add(std::string(1, '\1') + "a,b,label\r\n 1 , 2e3 ,3.0\r\n\r\nnan,inf,-2\n");
  seeds.add(std::string(1, '\2') + "0.5,1,2\n3,4,5");
  seeds.add(std::string(1, '\x0D') + "x,y,z\n+1,-0,7\n\n");
}

void text_seeds(const fs::path& out, const std::string& moby_dick) {
  corpus text(out, "fuzz_text_file"), chars(out, "fuzz_char_tokenizer"), gpt2(out, "fuzz_gpt2_encode");
  const std::string opening = moby_dick.substr(0, 1024);
  text.add(opening);
  text.add(std::string("\0\xFF\r\n\x80 bytes", 10));
  chars.add(two_parts(opening, moby_dick.substr(1024, 256)));
  chars.add(two_parts("abc", "cab"));
  chars.add(two_parts("abc", "abd"));
  chars.add(two_parts("", "x"), true);
  const std::string samples[] = {
      "Hello world! It's 2026; they're here, we've seen 'em, I'm sure you'll agree, he'd say.",
      "  leading and trailing spaces  \n\n\ttabs\r\n",
      "Ελληνικά, русский, 日本語のテキスト, 한국어, عربي, עברית",
      "emoji 😀👍🏽 and combining e\xCC\x81, ZWJ 👩\xE2\x80\x8D💻, \xE2\x80\xA8 line separator",
      "numbers 1234567890 ١٢٣ ½ Ⅻ",
      "<|endoftext|> is text here",
      "\xC0\xAF overlong, \xED\xA0\x80 surrogate, \xF4\x90\x80\x80 too big, cut \xE2\x82",
  };
  for (const std::string& s : samples) gpt2.add(s);
  for (std::size_t at = 4096; at < 4096 * 4; at += 4096) gpt2.add(moby_dick.substr(at, 1024), true);
}

// A small GPT-2 vocabulary: the 256 byte tokens, the tokens that vocab.bpe's
// first `merges` merges make, and <|endoftext|>.
void gpt2_load_seeds(const fs::path& out, const fs::path& gpt2_dir) {
  corpus seeds(out, "fuzz_gpt2_load");
  const auto& to_unicode = typeflow::text::detail::gpt2_byte_to_unicode();
  const auto printable = [&](const std::string& bytes) {
    std::u32string s;
    for (unsigned char b : bytes) s.push_back(to_unicode[b]);
    std::string utf8;
    for (char32_t cp : s) {
      if (cp < 0x80) utf8.push_back(static_cast<char>(cp));
      else {
        utf8.push_back(static_cast<char>(0xC0 | cp >> 6));
        utf8.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
    }
    return utf8;
  };
  for (int merges : {0, 40, 300}) {
    nlohmann::ordered_json encoder = nlohmann::ordered_json::object();
    int next = 0;
    for (int b = 0; b < 256; ++b) encoder[printable(std::string(1, static_cast<char>(b)))] = next++;
    std::istringstream lines(read_text(gpt2_dir / "vocab.bpe"));
    std::string line, bpe;
    std::getline(lines, line);
    bpe = line + "\n";
    for (int m = 0; m < merges && std::getline(lines, line); ++m) {
      const auto space = line.find(' ');
      const std::string merged = line.substr(0, space) + line.substr(space + 1);
      if (!encoder.contains(merged)) encoder[merged] = next++;
      bpe += line + "\n";
    }
    encoder["<|endoftext|>"] = next++;
    seeds.add(two_parts(encoder.dump(), bpe), merges == 300);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s OUT_DIR DATA_DIR\n", argv[0]);
    return 2;
  }
  try {
    const fs::path out = argv[1], data = argv[2];
    const fs::path scratch = out / ".scratch";
    fs::create_directories(scratch);
    const std::string moby_dick = read_text(data / "moby_dick" / "moby_dick.txt");
    safetensors_seeds(out, scratch);
    checkpoint_seeds(out, scratch);
    idx_seeds(out);
    csv_seeds(out);
    text_seeds(out, moby_dick);
    gpt2_load_seeds(out, data / "gpt2");
    fs::remove_all(scratch);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "make_seed_corpus: %s\n", error.what());
    return 1;
  }
  return 0;
}
