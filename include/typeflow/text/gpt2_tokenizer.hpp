// gpt2_tokenizer: GPT-2's byte-level BPE, as OpenAI's encoder.py does it.
//
//   auto gpt2 = gpt2_tokenizer::load("data/gpt2");   // encoder.json + vocab.bpe
//   gpt2.encode("Hello world")                        // {15496, 995}
//   gpt2.decode(ids)                                  // the UTF-8 bytes back
//   gpt2.vocab_size()                                 // 50257
//   gpt2.end_of_text()                                // 50256, "<|endoftext|>"
//
// scripts/setup.sh (setup_gpt2_bpe) fetches the two files into data/gpt2.
//
// encode: the text is cut into pieces by encoder.py's regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (PCRE2, UTF and UCP mode); each piece's bytes start as one token each, and
// the adjacent pair with the lowest rank in vocab.bpe is merged, every
// occurrence left to right, until no pair has a rank. Results are cached per
// piece, as encoder.py does. Every merge makes a token of encoder.json (load
// checks this), so the merging runs on token ids, not strings: the same
// result as encoder.py's string pairs, without building strings.
//
// Where the result can differ from encoder.py: \s, \p{L} and \p{N} follow
// PCRE2's Unicode tables (Unicode 14 in Debian 12's PCRE2 10.42), Python's
// follow the `regex` module's. Checked code point by code point against
// regex 2026.5.9, the pieces differ only for U+180E (whitespace to Python)
// and for the ~14000 characters assigned after Unicode 14; Node's regex (in
// gpt-3-encoder) also differs on U+0085 and U+FEFF. The ids agree with
// encoder.py and gpt-3-encoder on the fixture (tests/reference/gpt2_bpe.json)
// and on all of Moby Dick.
// "<|endoftext|>" in the text is encoded as the literal characters, as
// encoder.py does; end_of_text() gives its single id to append yourself.
//
// The input must be valid UTF-8 (encoder.py takes a Python str, which cannot
// hold anything else): encode throws std::invalid_argument naming the byte
// offset of the first invalid sequence (overlong forms, surrogates and code
// points above U+10FFFF included), before PCRE2 sees the text.
//
// decode concatenates the tokens' bytes and returns them as they are: ids
// that cut a character in two give bytes that are not valid UTF-8, where
// encoder.py's decode would put U+FFFD. An id outside [0, vocab_size()) throws
// std::invalid_argument naming it and its position.
//
// load throws std::runtime_error naming the file and what is wrong with it: a
// missing directory or file, JSON that does not parse (nlohmann's line and
// column), a token or id that is not GPT-2's kind, a malformed or unknown merge
// (with its line number in vocab.bpe). Copies share the loaded tables and the
// cache; encode and decode are const and may be called from several threads
// (the cache is behind a mutex).
#pragma once

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8  // pcre2.h insists on one; the code below names the _8 functions itself
#endif
#include <pcre2.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <queue>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "typeflow/data/read_file.hpp"
#include "typeflow/text/char_tokenizer.hpp"

namespace typeflow::text {

namespace detail {

// bytes_to_unicode() of encoder.py: the 188 printable bytes stand for
// themselves, the other 68 for the code points 256, 257, ... in byte order,
// so that every token of encoder.json is printable text.
inline const std::array<char32_t, 256>& gpt2_byte_to_unicode() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

// The byte a code point of encoder.json stands for, or -1 if none does.
inline int gpt2_unicode_to_byte(char32_t code_point) {
  static const std::array<int, 324> table = [] {
    std::array<int, 324> t;
    t.fill(-1);
    const auto& forward = gpt2_byte_to_unicode();
    for (int b = 0; b < 256; ++b) t[forward[b]] = b;
    return t;
  }();
  return code_point < table.size() ? table[code_point] : -1;
}

// The offset of the first byte of text that starts no valid UTF-8 sequence
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), or
// nullopt when all of text is valid.
inline std::optional<std::size_t> first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) low = 0xA0;   // overlong
      if (c == 0xED) high = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) low = 0x90;   // overlong
      if (c == 0xF4) high = 0x8F;  // above U+10FFFF
    } else {
      return i;  // a continuation byte, C0/C1 (overlong) or F5..FF
    }
    if (i + length > n || s[i + 1] < low || s[i + 1] > high) return i;
    for (std::size_t k = 2; k < length; ++k)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
    i += length;
  }
  return std::nullopt;
}

// Decodes UTF-8 that nlohmann::json produced (so valid) into code points.
inline std::u32string utf8_code_points(std::string_view text) {
  std::u32string out;
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t length = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    char32_t cp = length == 1 ? c : length == 2 ? (c & 0x1F) : length == 3 ? (c & 0x0F) : (c & 0x07);
    for (std::size_t k = 1; k < length && i + k < text.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    out.push_back(cp);
    i += length;
  }
  return out;
}

struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

// The compiled pre-tokenization regex; JIT-compiled where PCRE2 can.
class gpt2_regex {
 public:
  gpt2_regex() {
    static constexpr std::string_view pattern =
        R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    code_ = pcre2_compile_8(reinterpret_cast<PCRE2_SPTR8>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                            &error, &error_offset, nullptr);
    if (!code_)
      throw std::runtime_error("gpt2_tokenizer: PCRE2 cannot compile GPT-2's regex: " + message(error) +
                               " at offset " + std::to_string(error_offset));
    // Without JIT (not built in, or no executable memory) the interpreter gives the same matches, slower.
    (void)pcre2_jit_compile_8(code_, PCRE2_JIT_COMPLETE);
  }
  ~gpt2_regex() { pcre2_code_free_8(code_); }
  gpt2_regex(const gpt2_regex&) = delete;
  gpt2_regex& operator=(const gpt2_regex&) = delete;

  // Calls piece(begin, end) for every match in text, in order. text must be
  // valid UTF-8: PCRE2's own check is skipped, as it would rescan the rest of
  // the text at every match.
  template <class Piece>
  void for_each_piece(std::string_view text, Piece&& piece) const {
    std::unique_ptr<pcre2_match_data_8, decltype(&pcre2_match_data_free_8)> match(
        pcre2_match_data_create_from_pattern_8(code_, nullptr), &pcre2_match_data_free_8);
    if (!match) throw std::bad_alloc();
    const auto* subject = reinterpret_cast<PCRE2_SPTR8>(text.data());
    std::size_t offset = 0;
    while (offset < text.size()) {
      const int rc = pcre2_match_8(code_, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, match.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;  // cannot happen: every character matches some alternative
      if (rc < 0)
        throw std::runtime_error("gpt2_tokenizer::encode: PCRE2 failed at byte offset " + std::to_string(offset) +
                                 ": " + message(rc));
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer_8(match.get());
      if (ovector[1] <= offset)  // no alternative matches empty text; a guard against looping forever
        throw std::logic_error("gpt2_tokenizer::encode: empty regex match at byte offset " + std::to_string(offset));
      piece(static_cast<std::size_t>(ovector[0]), static_cast<std::size_t>(ovector[1]));
      offset = ovector[1];
    }
  }

 private:
  static std::string message(int error) {
    PCRE2_UCHAR8 buffer[256];
    const int length = pcre2_get_error_message_8(error, buffer, sizeof buffer);
    return length < 0 ? "PCRE2 error " + std::to_string(error)
                      : std::string(reinterpret_cast<const char*>(buffer), static_cast<std::size_t>(length));
  }

  pcre2_code_8* code_ = nullptr;
};

// vocab.bpe's merges: (first id << 32 | second id) -> its rank (its line,
// counted from 0 after the #version line) and the token the pair becomes.
struct bpe_merge_rule {
  std::int32_t rank;
  std::int32_t merged;
};
using bpe_merges = std::unordered_map<std::uint64_t, bpe_merge_rule>;
inline std::uint64_t bpe_pair_key(std::int32_t first, std::int32_t second) noexcept {
  return std::uint64_t{static_cast<std::uint32_t>(first)} << 32 | static_cast<std::uint32_t>(second);
}

// encoder.py's bpe() on a word of token ids, in place: merge the
// lowest-ranked adjacent pair, every occurrence left to right, until no
// adjacent pair is a merge. Rescanning the word for each merge, as
// encoder.py does, was quadratic in a piece's length (a 1 MB run of
// letters took 79 s); here the pairs wait in a heap by (rank, position)
// over a linked list of the word's tokens, so each merge costs a few heap
// operations. All occurrences of one rank are merged before any pair that
// those merges made (which may rank lower): encoder.py's order, and so its
// result, exactly (tests/unit/tokenizer_test.cpp replays encoder.py's loop
// against it).
inline void bpe_merge(std::vector<std::int32_t>& word, const bpe_merges& merges) {
  const std::size_t n = word.size();
  if (n < 2) return;
  constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::vector<std::size_t> next(n), previous(n);
  for (std::size_t i = 0; i < n; ++i) next[i] = i + 1 < n ? i + 1 : none, previous[i] = i == 0 ? none : i - 1;
  std::vector<bool> alive(n, true);
  struct candidate {
    std::int32_t rank;
    std::size_t left;  // the pair's first token's position; the second is next[left]
    std::int32_t first, second, merged;
    bool operator>(const candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<candidate, std::vector<candidate>, std::greater<>> heap;
  const auto offer = [&](std::size_t left) {
    if (left == none || next[left] == none) return;
    const auto found = merges.find(bpe_pair_key(word[left], word[next[left]]));
    if (found != merges.end())
      heap.push({found->second.rank, left, word[left], word[next[left]], found->second.merged});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) offer(i);
  std::vector<std::size_t> touched;
  while (!heap.empty()) {
    const std::int32_t rank = heap.top().rank;
    touched.clear();
    while (!heap.empty() && heap.top().rank == rank) {  // left to right: the heap orders by position
      const candidate c = heap.top();
      heap.pop();
      const std::size_t right = next[c.left];
      if (!alive[c.left] || right == none || word[c.left] != c.first || word[right] != c.second) continue;  // stale
      word[c.left] = c.merged;
      alive[right] = false;
      next[c.left] = next[right];
      if (next[right] != none) previous[next[right]] = c.left;
      touched.push_back(c.left);
    }
    // The pairs these merges made, offered only now: none of them is this rank's pair.
    for (const std::size_t at : touched) {
      offer(previous[at]);
      offer(at);
    }
  }
  std::size_t out = 0;
  for (std::size_t i = 0; i != none; i = next[i]) word[out++] = word[i];
  word.resize(out);
}

}  // namespace detail

class gpt2_tokenizer {
 public:
  // Reads directory/encoder.json and directory/vocab.bpe.
  static gpt2_tokenizer load(const std::filesystem::path& directory) {
    std::error_code error;
    if (!std::filesystem::is_directory(directory, error))
      throw std::runtime_error("gpt2_tokenizer::load: the directory " + directory.string() +
                               " does not exist (scripts/setup.sh's setup_gpt2_bpe fetches GPT-2's "
                               "encoder.json and vocab.bpe into data/gpt2)");
    auto tables = std::make_shared<state>();
    read_encoder(directory / "encoder.json", *tables);
    read_merges(directory / "vocab.bpe", *tables);
    return gpt2_tokenizer(std::move(tables));
  }

  std::size_t vocab_size() const noexcept { return state_->tokens.size(); }

  // The id of "<|endoftext|>" (50256 in GPT-2), which separates documents.
  std::int32_t end_of_text() const {
    if (state_->end_of_text < 0)
      throw std::logic_error("gpt2_tokenizer::end_of_text: the vocabulary has no \"<|endoftext|>\" token");
    return state_->end_of_text;
  }

  // The bytes of one token.
  const std::string& token_bytes(std::int32_t id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= vocab_size())
      throw std::invalid_argument("gpt2_tokenizer::token_bytes: id " + std::to_string(id) +
                                  " is out of range: the vocabulary has ids 0 to " + std::to_string(vocab_size() - 1));
    return state_->tokens[static_cast<std::size_t>(id)];
  }

  std::vector<std::int32_t> encode(std::string_view utf8) const {
    if (const auto bad = detail::first_invalid_utf8(utf8))
      throw std::invalid_argument("gpt2_tokenizer::encode: the text is not valid UTF-8: the byte " +
                                  detail::describe_byte(static_cast<unsigned char>(utf8[*bad])) +
                                  " at byte offset " + std::to_string(*bad) +
                                  " does not start a valid UTF-8 sequence");
    std::vector<std::int32_t> ids;
    ids.reserve(utf8.size() / 3 + 1);
    std::vector<std::int32_t> word;
    state_->regex.for_each_piece(utf8, [&](std::size_t begin, std::size_t end) {
      const std::string_view piece = utf8.substr(begin, end - begin);
      {
        const std::lock_guard lock(state_->cache_mutex);
        if (const auto hit = state_->cache.find(piece); hit != state_->cache.end()) {
          ids.insert(ids.end(), hit->second.begin(), hit->second.end());
          return;
        }
      }
      bpe(piece, word);
      ids.insert(ids.end(), word.begin(), word.end());
      const std::lock_guard lock(state_->cache_mutex);
      // Bounded, so that an endless stream of distinct pieces cannot fill memory.
      if (state_->cache.size() >= max_cache_entries) state_->cache.clear();
      state_->cache.emplace(std::string(piece), word);
    });
    return ids;
  }

  std::string decode(std::span<const std::int32_t> ids) const {
    std::string text;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || static_cast<std::size_t>(ids[i]) >= vocab_size())
        detail::throw_id_out_of_range("gpt2_tokenizer::decode", ids[i], i, vocab_size());
      text += state_->tokens[static_cast<std::size_t>(ids[i])];
    }
    return text;
  }

 private:
  static constexpr std::size_t max_cache_entries = std::size_t{1} << 20;

  struct state {
    std::vector<std::string> tokens;  // id -> bytes
    std::array<std::int32_t, 256> byte_token{};  // byte -> the id of the one-byte token
    detail::bpe_merges merges;
    std::int32_t end_of_text = -1;
    detail::gpt2_regex regex;
    std::mutex cache_mutex;
    std::unordered_map<std::string, std::vector<std::int32_t>, detail::string_hash, std::equal_to<>> cache;
  };

  explicit gpt2_tokenizer(std::shared_ptr<state> tables) : state_(std::move(tables)) {}

  // encoder.py's bpe() over one piece (detail::bpe_merge).
  void bpe(std::string_view piece, std::vector<std::int32_t>& word) const {
    word.clear();
    for (char c : piece) word.push_back(state_->byte_token[static_cast<unsigned char>(c)]);
    detail::bpe_merge(word, state_->merges);
  }

  [[noreturn]] static void file_error(const std::filesystem::path& path, const std::string& what) {
    throw std::runtime_error("gpt2_tokenizer::load: " + path.string() + ": " + what);
  }

  static std::string read_whole(const std::filesystem::path& path) {
    std::error_code error;
    if (!std::filesystem::exists(path, error))
      file_error(path, "no such file (scripts/setup.sh's setup_gpt2_bpe fetches it)");
    const std::vector<std::uint8_t> bytes = data::read_file_bytes(path);
    return std::string(bytes.begin(), bytes.end());
  }

  // A token as encoder.json and vocab.bpe write it (one printable character
  // per byte, bytes_to_unicode) -> its bytes; nullopt if a character stands
  // for no byte.
  static std::optional<std::string> token_bytes_of(std::string_view printable) {
    std::string bytes;
    for (char32_t cp : detail::utf8_code_points(printable)) {
      const int byte = detail::gpt2_unicode_to_byte(cp);
      if (byte < 0) return std::nullopt;
      bytes.push_back(static_cast<char>(byte));
    }
    return bytes;
  }

  // encoder.json: {"token": id, ...}, the ids exactly 0..n-1.
  static void read_encoder(const std::filesystem::path& path, state& s) {
    const std::string text = read_whole(path);
    nlohmann::json document;
    try {
      document = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      // parse_error, and out_of_range for a number beyond a double (1e999)
      file_error(path, std::string("is not valid JSON: ") + e.what());
    }
    if (!document.is_object() || document.empty())
      file_error(path, std::string("must hold a non-empty JSON object of token -> id, but holds ") +
                           (document.is_object() ? "an empty object" : document.type_name()));
    const std::size_t n = document.size();
    s.tokens.assign(n, std::string());
    std::vector<bool> taken(n, false);
    for (const auto& [key, value] : document.items()) {
      // An array or object is named, not printed: printing recurses once per
      // level, and a hostile file nests deeper than the stack holds.
      if (!value.is_number_integer())
        file_error(path, "the token \"" + key + "\" has the value " +
                             (value.is_structured() ? std::string("a JSON ") + value.type_name() : value.dump()) +
                             ", not an integer id");
      const auto id = value.get<std::int64_t>();
      if (id < 0 || static_cast<std::uint64_t>(id) >= n)
        file_error(path, "the token \"" + key + "\" has the id " + std::to_string(id) + ", outside 0.." +
                             std::to_string(n - 1) + " (the file has " + std::to_string(n) + " tokens)");
      if (taken[static_cast<std::size_t>(id)])
        file_error(path, "the id " + std::to_string(id) + " is used twice (again by \"" + key + "\")");
      taken[static_cast<std::size_t>(id)] = true;
      auto bytes = token_bytes_of(key);
      if (!bytes || bytes->empty())
        file_error(path, "the token \"" + key + "\" (id " + std::to_string(id) +
                             ") is not written in GPT-2's byte characters (bytes_to_unicode)");
      s.tokens[static_cast<std::size_t>(id)] = std::move(*bytes);
      if (key == "<|endoftext|>") s.end_of_text = static_cast<std::int32_t>(id);
    }
    s.byte_token.fill(-1);
    for (std::size_t id = 0; id < n; ++id)
      if (s.tokens[id].size() == 1) s.byte_token[static_cast<unsigned char>(s.tokens[id][0])] = static_cast<std::int32_t>(id);
    for (int b = 0; b < 256; ++b)
      if (s.byte_token[b] < 0)
        file_error(path, "has no token for the byte " + detail::describe_byte(static_cast<unsigned char>(b)) +
                             "; GPT-2's vocabulary starts with all 256 bytes");
  }

  // vocab.bpe: a "#version" line, then one merge "first second" per line, by rank.
  static void read_merges(const std::filesystem::path& path, state& s) {
    const std::string text = read_whole(path);
    std::unordered_map<std::string_view, std::int32_t> id_of;
    id_of.reserve(s.tokens.size());
    for (std::size_t id = 0; id < s.tokens.size(); ++id) id_of.emplace(s.tokens[id], static_cast<std::int32_t>(id));
    std::unordered_map<std::uint64_t, std::size_t> line_of;  // for the message about a repeated merge

    std::size_t line_number = 0, begin = 0;
    std::int32_t rank = 0;
    while (begin < text.size()) {
      std::size_t end = text.find('\n', begin);
      if (end == std::string::npos) end = text.size();
      std::string_view line(text.data() + begin, end - begin);
      begin = end + 1;
      ++line_number;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      const auto where = "line " + std::to_string(line_number) + ": ";
      if (line_number == 1) {
        if (!line.starts_with("#version"))
          file_error(path, where + "expected the \"#version\" header of GPT-2's vocab.bpe, found \"" +
                               std::string(line.substr(0, 60)) + "\"");
        continue;
      }
      if (line.empty()) {
        if (begin >= text.size()) break;  // the newline that ends the file
        file_error(path, where + "is empty; every line after the first must be a merge \"first second\"");
      }
      const std::size_t space = line.find(' ');
      if (space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
          line.find(' ', space + 1) != std::string_view::npos)
        file_error(path, where + "expected a merge: two tokens separated by one space, found \"" +
                             std::string(line) + "\"");
      const std::string_view parts[2] = {line.substr(0, space), line.substr(space + 1)};
      std::int32_t ids[2];
      std::string joined;
      for (int k = 0; k < 2; ++k) {
        const auto bytes = token_bytes_of(parts[k]);
        if (!bytes)
          file_error(path, where + "\"" + std::string(parts[k]) +
                               "\" is not written in GPT-2's byte characters (bytes_to_unicode)");
        const auto found = id_of.find(*bytes);
        if (found == id_of.end())
          file_error(path, where + "the merge \"" + std::string(line) + "\" has the part \"" +
                               std::string(parts[k]) + "\", which encoder.json lacks");
        ids[k] = found->second;
        joined += *bytes;
      }
      const auto merged = id_of.find(joined);
      if (merged == id_of.end())
        file_error(path, where + "the merge \"" + std::string(line) + "\" makes \"" + std::string(parts[0]) +
                             std::string(parts[1]) + "\", which encoder.json lacks");
      const std::uint64_t key = detail::bpe_pair_key(ids[0], ids[1]);
      if (const auto [previous, inserted] = line_of.emplace(key, line_number); !inserted)
        file_error(path, where + "the merge \"" + std::string(line) + "\" repeats line " +
                             std::to_string(previous->second));
      s.merges.emplace(key, detail::bpe_merge_rule{rank++, merged->second});
    }
    if (line_number == 0) file_error(path, "is empty");
  }

  std::shared_ptr<state> state_;
};

}  // namespace typeflow::text
