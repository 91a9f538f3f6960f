// typeflow::text: the character, byte and GPT-2 tokenizers.
//
// The GPT-2 ids come from tests/reference/gpt2_bpe.json, written by
// tests/reference/gpt2_bpe_reference.js with the npm package gpt-3-encoder's
// own encode(): fixed sentences, and all of Moby Dick as hashed chunks. The
// tests that need data read $TYPEFLOW_DATA_DIR/gpt2 and
// $TYPEFLOW_DATA_DIR/moby_dick (ctest sets it to <repo>/data; without it,
// <repo>/data) and fail, rather than skip, when the files are missing: run
// scripts/setup.sh to fetch them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <typeflow/text/text.hpp>

#include "../support/test_support.hpp"
#include "../support/reference_json.hpp"

namespace text = typeflow::text;
using typeflow::testing::contains;
using typeflow::testing::data_dir;
using typeflow::testing::require_data;
using typeflow::testing::message_of;
using typeflow::testing::temp_dir;
using json = nlohmann::json;

namespace {

using ids = std::vector<std::int32_t>;

const text::gpt2_tokenizer& gpt2() {
  static const text::gpt2_tokenizer tokenizer = text::gpt2_tokenizer::load(require_data("gpt2", "setup_gpt2_bpe"));
  return tokenizer;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string moby_dick() {
  static const std::string book = read_text(require_data("moby_dick", "setup_moby_dick") / "moby_dick.txt");
  return book;
}

const json& reference() {
  static const json document = typeflow::testing::read_reference("gpt2_bpe.json");
  return document;
}

// The fixture's hash of a list of ids (see gpt2_bpe_reference.js).
std::int64_t hash_ids(const ids& list) {
  std::int64_t h = 0;
  for (std::int32_t id : list) h = (h * 1000003 + id + 1) % 2147483647;
  return h;
}

void write_file(const std::filesystem::path& path, std::string_view contents) {
  std::ofstream out(path, std::ios::binary);
  out << contents;
  REQUIRE(out.good());
}

// encoder.py's bytes_to_unicode(), written out again: byte -> its character in
// encoder.json and vocab.bpe, as UTF-8.
std::string byte_character(int byte) {
  int code_point = byte;
  if (!((byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF))) {
    code_point = 256;
    for (int b = 0; b < byte; ++b)
      if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))) ++code_point;
  }
  std::string out;
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else {
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
  return out;
}

// A tiny GPT-2-style vocabulary in dir: the 256 bytes (ids 0..255, in byte
// order), then `extra` tokens (ids 256...), and the merges, in rank order.
void write_tiny_vocabulary(const std::filesystem::path& dir, const std::vector<std::string>& extra,
                           const std::vector<std::string>& merges) {
  json encoder = json::object();
  for (int b = 0; b < 256; ++b) encoder[byte_character(b)] = b;
  for (std::size_t i = 0; i < extra.size(); ++i) encoder[extra[i]] = 256 + static_cast<int>(i);
  write_file(dir / "encoder.json", encoder.dump());
  std::string bpe = "#version: 0.2\n";
  for (const auto& merge : merges) bpe += merge + "\n";
  write_file(dir / "vocab.bpe", bpe);
}

}  // namespace

// ---------------------------------------------------------------------------
// char_tokenizer, byte_tokenizer

TEST_CASE("char_tokenizer: the vocabulary is the sorted distinct bytes, and decode(encode(s)) == s") {
  const text::char_tokenizer chars("hello world");
  CHECK(chars.vocabulary() == " dehlorw");
  CHECK(chars.vocab_size() == 8);
  CHECK(chars.encode("hello") == ids{3, 2, 4, 4, 5});
  CHECK(chars.encode("") == ids{});
  CHECK(chars.decode(ids{7, 5, 6, 4, 1}) == "world");
  CHECK(chars.decode(chars.encode("old hello drew")) == "old hello drew");
}

TEST_CASE("char_tokenizer: it is byte-level, so a UTF-8 character outside ASCII is several ids") {
  const text::char_tokenizer chars("café");  // c a f C3 A9
  CHECK(chars.vocab_size() == 5);
  CHECK(chars.vocabulary() == "acf\xA9\xC3");  // sorted by byte value
  CHECK(chars.encode("é") == ids{4, 3});
  CHECK(chars.decode(chars.encode("caf\xC3\xA9" "ca")) == "caf\xC3\xA9" "ca");
  CHECK(chars.decode(ids{3}) == "\xA9");  // half a character: the bytes as they are
}

TEST_CASE("char_tokenizer: a character outside the vocabulary names itself and its byte offset") {
  const text::char_tokenizer chars("abc");
  const std::string printable = message_of<std::invalid_argument>([&] { chars.encode("abcz"); });
  CHECK(contains(printable, "'z'"));
  CHECK(contains(printable, "byte offset 3"));
  const std::string unprintable = message_of<std::invalid_argument>([&] { chars.encode("ab\ncé"); });
  CHECK(contains(unprintable, "\\x0A"));
  CHECK(contains(unprintable, "byte offset 2"));
  const std::string utf8 = message_of<std::invalid_argument>([&] { chars.encode("cab\xC3\xA9"); });
  CHECK(contains(utf8, "\\xC3"));
  CHECK(contains(utf8, "byte offset 3"));
}

TEST_CASE("char_tokenizer: decode of an out-of-range id names it and its position") {
  const text::char_tokenizer chars("abc");
  const std::string high = message_of<std::invalid_argument>([&] { chars.decode(ids{0, 1, 3}); });
  CHECK(contains(high, "id 3 at position 2"));
  CHECK(contains(high, "0 to 2"));
  const std::string negative = message_of<std::invalid_argument>([&] { chars.decode(ids{-1}); });
  CHECK(contains(negative, "id -1 at position 0"));
}

TEST_CASE("char_tokenizer: from_vocabulary rebuilds the tokenizer that vocabulary() came from") {
  const text::char_tokenizer trained("the quick brown fox\n");
  const auto restored = text::char_tokenizer::from_vocabulary(trained.vocabulary());
  CHECK(restored.vocabulary() == trained.vocabulary());
  CHECK(restored.encode("the fox\n") == trained.encode("the fox\n"));

  const auto custom = text::char_tokenizer::from_vocabulary("zyx");  // the order given is the id order
  CHECK(custom.encode("xyz") == ids{2, 1, 0});

  const std::string twice =
      message_of<std::invalid_argument>([] { text::char_tokenizer::from_vocabulary("abca"); });
  CHECK(contains(twice, "'a' at offset 3 occurs twice"));
  CHECK(contains(message_of<std::invalid_argument>([] { text::char_tokenizer::from_vocabulary(""); }), "empty"));
  CHECK(contains(message_of<std::invalid_argument>([] { (void)text::char_tokenizer{""}; }), "empty"));
}

TEST_CASE("char_tokenizer: Moby Dick has 85 distinct bytes and round-trips") {
  const std::string book = moby_dick();
  const text::char_tokenizer chars(book);
  CHECK(chars.vocab_size() == 85);
  CHECK(chars.vocabulary().substr(0, 3) == "\n !");
  const ids encoded = chars.encode(book);
  CHECK(encoded.size() == book.size());
  CHECK(chars.decode(encoded) == book);
}

TEST_CASE("byte_tokenizer: every byte is its own id") {
  const text::byte_tokenizer bytes;
  static_assert(text::byte_tokenizer::vocab_size() == 256);
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const ids encoded = bytes.encode(all);
  for (int b = 0; b < 256; ++b) CHECK(encoded[b] == b);
  CHECK(bytes.decode(encoded) == all);
  CHECK(bytes.encode("é") == ids{0xC3, 0xA9});
  CHECK(contains(message_of<std::invalid_argument>([&] { bytes.decode(ids{65, 256}); }), "id 256 at position 1"));
  CHECK(contains(message_of<std::invalid_argument>([&] { bytes.decode(ids{-5}); }), "id -5 at position 0"));
}

// ---------------------------------------------------------------------------
// gpt2_tokenizer against GPT-2's files

TEST_CASE("gpt2_tokenizer: well-known ids") {
  const auto& tokenizer = gpt2();
  CHECK(tokenizer.vocab_size() == 50257);
  CHECK(tokenizer.end_of_text() == 50256);
  CHECK(tokenizer.encode("Hello") == ids{15496});
  CHECK(tokenizer.encode(" world") == ids{995});
  CHECK(tokenizer.encode("Hello world") == ids{15496, 995});
  CHECK(tokenizer.encode("") == ids{});
  CHECK(tokenizer.token_bytes(220) == " ");
  CHECK(tokenizer.token_bytes(198) == "\n");
  CHECK(tokenizer.decode(ids{50256}) == "<|endoftext|>");
  // The literal text is not the special token (encoder.py has no special tokens).
  CHECK(tokenizer.encode("<|endoftext|>") != ids{50256});
}

TEST_CASE("gpt2_tokenizer: the fixture's sentences give gpt-3-encoder's ids and decode back") {
  const auto& tokenizer = gpt2();
  const json& samples = reference().at("samples");
  REQUIRE(samples.size() >= 10);
  for (const auto& sample : samples) {
    const auto sentence = sample.at("text").get<std::string>();
    const auto expected = sample.at("ids").get<ids>();
    CAPTURE(sentence);
    CHECK(tokenizer.encode(sentence) == expected);
    CHECK(tokenizer.decode(expected) == sentence);
  }
}

TEST_CASE("gpt2_tokenizer: all of Moby Dick gives gpt-3-encoder's ids, chunk by chunk") {
  const auto& tokenizer = gpt2();
  const std::string book = moby_dick();
  const json& expected = reference().at("moby_dick");
  REQUIRE(book.size() == expected.at("bytes").get<std::size_t>());
  std::size_t total = 0;
  for (const auto& chunk : expected.at("chunks")) {
    const auto begin = chunk.at("begin").get<std::size_t>();
    const auto end = chunk.at("end").get<std::size_t>();
    CAPTURE(begin);
    CAPTURE(end);
    const ids encoded = tokenizer.encode(std::string_view(book).substr(begin, end - begin));
    CHECK(encoded.size() == chunk.at("count").get<std::size_t>());
    CHECK(hash_ids(encoded) == chunk.at("hash").get<std::int64_t>());
    total += encoded.size();
  }
  CHECK(total == expected.at("total_ids").get<std::size_t>());

  // The chunks are cut where encoding them apart changes nothing: the whole
  // book at once gives the same ids, and they decode to the book.
  const ids whole = tokenizer.encode(book);
  CHECK(whole.size() == total);
  CHECK(tokenizer.decode(whole) == book);
}

TEST_CASE("gpt2_tokenizer: copies share the tables and the cache, and encode from several threads") {
  const auto tokenizer = gpt2();
  const std::string book = moby_dick().substr(0, 200'000);
  const ids expected = tokenizer.encode(book);
  std::vector<ids> results(4);
  std::vector<std::thread> threads;
  for (auto& result : results) threads.emplace_back([&] { result = tokenizer.encode(book); });
  for (auto& thread : threads) thread.join();
  for (const auto& result : results) CHECK(result == expected);
}

TEST_CASE("gpt2_tokenizer: text that is not valid UTF-8 throws with the byte offset") {
  const auto& tokenizer = gpt2();
  struct bad_case {
    std::string text;
    std::string expected;
  };
  const bad_case cases[] = {
      {"abc\x80", "byte \\x80 at byte offset 3"},             // a continuation byte alone
      {"ab\xC3", "byte \\xC3 at byte offset 2"},              // cut short
      {"ab\xC3(", "byte \\xC3 at byte offset 2"},             // a non-continuation after a lead byte
      {"\xC0\x80", "byte \\xC0 at byte offset 0"},            // overlong NUL
      {"x\xE0\x80\x80", "byte \\xE0 at byte offset 1"},       // overlong
      {"ok \xED\xA0\x80", "byte \\xED at byte offset 3"},     // a surrogate, U+D800
      {"\xF4\x90\x80\x80", "byte \\xF4 at byte offset 0"},    // above U+10FFFF
      {"é\xFF", "byte \\xFF at byte offset 2"},               // never in UTF-8
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    const std::string message = message_of<std::invalid_argument>([&] { tokenizer.encode(c.text); });
    CHECK(contains(message, "not valid UTF-8"));
    CHECK(contains(message, c.expected));
  }
  // The largest code point and the last one before the surrogates are valid.
  CHECK(tokenizer.decode(tokenizer.encode("\xF4\x8F\xBF\xBF \xED\x9F\xBF")) == "\xF4\x8F\xBF\xBF \xED\x9F\xBF");
}

TEST_CASE("gpt2_tokenizer: decode returns the bytes as they are, and names an id out of range") {
  const auto& tokenizer = gpt2();
  const ids emoji = tokenizer.encode("😀");  // 4 bytes, more than one token
  REQUIRE(emoji.size() > 1);
  CHECK(tokenizer.decode(ids{emoji[0]}) == tokenizer.token_bytes(emoji[0]));  // part of a character
  const std::string message = message_of<std::invalid_argument>([&] { tokenizer.decode(ids{15496, 50257}); });
  CHECK(contains(message, "id 50257 at position 1"));
  CHECK(contains(message, "0 to 50256"));
  CHECK(contains(message_of<std::invalid_argument>([&] { tokenizer.decode(ids{-1}); }), "id -1 at position 0"));
}

// ---------------------------------------------------------------------------
// gpt2_tokenizer's merging, on a tiny vocabulary

TEST_CASE("gpt2_tokenizer: the lowest-ranked pair merges first, every occurrence left to right") {
  temp_dir dir("typeflow_tokenizer");
  // ids: 256 "ab", 257 "bc", 258 "abc", 259 "aa"
  write_tiny_vocabulary(dir.path, {"ab", "bc", "abc", "aa"}, {"b c", "a b", "a bc", "a a"});
  const auto tiny = text::gpt2_tokenizer::load(dir.path);
  CHECK(tiny.vocab_size() == 260);
  CHECK(tiny.encode("abc") == ids{258});             // "b c" (rank 0) before "a b" (rank 1), then "a bc"
  CHECK(tiny.encode("abab") == ids{256, 256});        // "a b" twice
  CHECK(tiny.encode("aaa") == ids{259, 'a'});         // non-overlapping, from the left
  CHECK(tiny.encode("aaaa") == ids{259, 259});
  CHECK(tiny.encode("ab c") == ids{256, ' ', 'c'});   // pieces do not merge across each other
  CHECK(contains(message_of<std::logic_error>([&] { tiny.end_of_text(); }), "<|endoftext|>"));
}

// ---------------------------------------------------------------------------
// gpt2_tokenizer::load's errors

TEST_CASE("gpt2_tokenizer: load names a missing directory or file") {
  temp_dir dir("typeflow_tokenizer");
  const std::string missing =
      message_of<std::runtime_error>([&] { text::gpt2_tokenizer::load(dir.path / "no_such_dir"); });
  CHECK(contains(missing, (dir.path / "no_such_dir").string()));
  CHECK(contains(missing, "does not exist"));
  CHECK(contains(missing, "setup_gpt2_bpe"));

  const std::string no_encoder = message_of<std::runtime_error>([&] { text::gpt2_tokenizer::load(dir.path); });
  CHECK(contains(no_encoder, (dir.path / "encoder.json").string()));
  CHECK(contains(no_encoder, "no such file"));

  write_tiny_vocabulary(dir.path, {}, {});
  std::filesystem::remove(dir.path / "vocab.bpe");
  const std::string no_merges = message_of<std::runtime_error>([&] { text::gpt2_tokenizer::load(dir.path); });
  CHECK(contains(no_merges, (dir.path / "vocab.bpe").string()));
  CHECK(contains(no_merges, "no such file"));
}

TEST_CASE("gpt2_tokenizer: load names what is wrong in a corrupt encoder.json") {
  temp_dir dir("typeflow_tokenizer");
  write_tiny_vocabulary(dir.path, {}, {});
  const auto path = (dir.path / "encoder.json").string();
  const auto load_error = [&](std::string_view encoder_json) {
    write_file(dir.path / "encoder.json", encoder_json);
    return message_of<std::runtime_error>([&] { text::gpt2_tokenizer::load(dir.path); });
  };

  // Cut short, as an interrupted download leaves it.
  std::string truncated = read_text(require_data("gpt2", "setup_gpt2_bpe") / "encoder.json");
  truncated.resize(truncated.size() / 2);
  const std::string cut = load_error(truncated);
  CHECK(contains(cut, path));
  CHECK(contains(cut, "is not valid JSON"));
  CHECK(contains(cut, "parse error"));

  const std::string array = load_error("[1, 2, 3]");
  CHECK(contains(array, path));
  CHECK(contains(array, "JSON object of token -> id, but holds array"));

  CHECK(contains(load_error(R"({"a": "x"})"), "the token \"a\" has the value \"x\", not an integer id"));
  CHECK(contains(load_error(R"({"a": 0, "b": 5})"), "the token \"b\" has the id 5, outside 0..1"));
  CHECK(contains(load_error(R"({"a": 0, "b": 0})"), "the id 0 is used twice"));
  CHECK(contains(load_error(R"({"a": 0, "\u4e00": 1})"), "is not written in GPT-2's byte characters"));
  CHECK(contains(load_error(R"({"a": 0, "b": 1})"), "has no token for the byte \\x00"));
}

TEST_CASE("gpt2_tokenizer: load names the line of a malformed merge in vocab.bpe") {
  temp_dir dir("typeflow_tokenizer");
  write_tiny_vocabulary(dir.path, {"ab", "abc"}, {"a b"});
  const auto path = (dir.path / "vocab.bpe").string();
  const auto load_error = [&](std::string_view vocab_bpe) {
    write_file(dir.path / "vocab.bpe", vocab_bpe);
    return message_of<std::runtime_error>([&] { text::gpt2_tokenizer::load(dir.path); });
  };

  const std::string header = load_error("a b\nab c\n");
  CHECK(contains(header, path));
  CHECK(contains(header, "line 1: expected the \"#version\" header"));

  const std::string three = load_error("#version: 0.2\na b\nab c d\n");
  CHECK(contains(three, path));
  CHECK(contains(three, "line 3: expected a merge: two tokens separated by one space, found \"ab c d\""));
  CHECK(contains(load_error("#version: 0.2\na b\nabc\n"), "line 3: expected a merge"));
  CHECK(contains(load_error("#version: 0.2\n\na b\n"), "line 2: is empty"));
  CHECK(contains(load_error("#version: 0.2\na b\nx y\n"), "line 3: the merge \"x y\" makes \"xy\", which encoder.json lacks"));
  CHECK(contains(load_error("#version: 0.2\na b\nab q\u4e00\n"), "line 3: \"q\u4e00\" is not written in GPT-2's byte characters"));
  CHECK(contains(load_error("#version: 0.2\na b\nxy z\n"), "line 3: the merge \"xy z\" has the part \"xy\", which encoder.json lacks"));
  CHECK(contains(load_error("#version: 0.2\na b\nab c\na b\n"), "line 4: the merge \"a b\" repeats line 2"));

  // CRLF line ends and a missing final newline are fine.
  CHECK(load_error("#version: 0.2\r\na b\r\nab c") == "");
  CHECK(text::gpt2_tokenizer::load(dir.path).encode("abc") == ids{257});
}

namespace {
// encoder.py's bpe() as written: rescan the word for its lowest-ranked pair,
// merge every occurrence left to right, repeat. Quadratic; the reference.
std::vector<std::int32_t> bpe_as_encoder_py(std::vector<std::int32_t> word, const typeflow::text::detail::bpe_merges& merges) {
  while (word.size() >= 2) {
    const typeflow::text::detail::bpe_merge_rule* best = nullptr;
    std::uint64_t best_key = 0;
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      const auto key = typeflow::text::detail::bpe_pair_key(word[i], word[i + 1]);
      const auto found = merges.find(key);
      if (found != merges.end() && (!best || found->second.rank < best->rank)) best = &found->second, best_key = key;
    }
    if (!best) break;
    std::vector<std::int32_t> merged;
    for (std::size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && typeflow::text::detail::bpe_pair_key(word[i], word[i + 1]) == best_key) {
        merged.push_back(best->merged);
        i += 2;
      } else {
        merged.push_back(word[i++]);
      }
    }
    word = std::move(merged);
  }
  return word;
}
}  // namespace

TEST_CASE("gpt2_tokenizer: the heap's bpe merges as encoder.py's loop does, on random merge tables and words") {
  // Three letters and the tokens merges make of them, with random ranks:
  // ties between overlapping occurrences ("aaa"), merges whose result ranks
  // lower than the pair that made it ("abab" -> "ab" "ab" or "aba" "b"),
  // chains of merges of merges.
  std::mt19937 rng(11);
  for (int table = 0; table < 40; ++table) {
    typeflow::text::detail::bpe_merges merges;
    std::vector<std::int32_t> ids{0, 1, 2};
    std::vector<std::int32_t> ranks(30);
    std::iota(ranks.begin(), ranks.end(), 0);
    std::shuffle(ranks.begin(), ranks.end(), rng);
    for (std::int32_t r : ranks) {
      const std::int32_t a = ids[rng() % ids.size()], b = ids[rng() % ids.size()];
      const auto key = typeflow::text::detail::bpe_pair_key(a, b);
      if (merges.contains(key)) continue;
      const std::int32_t merged = 100 + static_cast<std::int32_t>(merges.size());
      merges.emplace(key, typeflow::text::detail::bpe_merge_rule{r, merged});
      ids.push_back(merged);
    }
    for (int w = 0; w < 300; ++w) {
      std::vector<std::int32_t> word(rng() % 40);
      for (auto& t : word) t = static_cast<std::int32_t>(rng() % 3);
      std::vector<std::int32_t> heap_result = word;
      typeflow::text::detail::bpe_merge(heap_result, merges);
      const auto expected = bpe_as_encoder_py(word, merges);
      REQUIRE(heap_result == expected);
    }
  }
}
