#include "tokenizer/bpe_tokenizer.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "util/file_util.h"
#include "util/json.h"
#include "tokenizer/unicode.h"

namespace flover {
namespace {

constexpr absl::string_view kEndOfText = "<|endoftext|>";

// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the rest to
// code points from U+0100 upwards, so every byte is a visible symbol.
void BuildByteSymbols(std::string (&symbols)[256]) {
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
                           (b >= 0xAE && b <= 0xFF);
    symbols[b].clear();
    AppendUtf8(printable ? b : 256 + next++, &symbols[b]);
  }
}

bool StartsWithContraction(const std::vector<Utf8Char>& cs, size_t i, size_t* len) {
  if (cs[i].cp != '\'' || i + 1 >= cs.size()) return false;
  const char32_t a = cs[i + 1].cp;
  if (a == 's' || a == 't' || a == 'm' || a == 'd') {
    *len = 2;
    return true;
  }
  if (i + 2 < cs.size()) {
    const char32_t b = cs[i + 2].cp;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
      *len = 3;
      return true;
    }
  }
  return false;
}

bool IsOther(char32_t cp) { return !IsSpace(cp) && !IsLetter(cp) && !IsNumber(cp); }

}  // namespace

absl::StatusOr<std::vector<absl::string_view>> PreTokenize(absl::string_view text) {
  auto decoded = DecodeUtf8(text);
  if (!decoded.ok()) return decoded.status();
  const std::vector<Utf8Char>& cs = *decoded;
  const size_t n = cs.size();
  std::vector<absl::string_view> pieces;
  auto emit = [&](size_t from, size_t to) {  // code-point range [from, to)
    pieces.push_back(text.substr(cs[from].begin, cs[to - 1].end - cs[from].begin));
  };
  auto run = [&](size_t from, bool (*pred)(char32_t)) {
    while (from < n && pred(cs[from].cp)) ++from;
    return from;
  };
  for (size_t i = 0; i < n;) {
    size_t len = 0;
    if (StartsWithContraction(cs, i, &len)) {
      emit(i, i + len);
      i += len;
      continue;
    }
    // " ?X+" for X in letters, numbers, other: an optional single space.
    const size_t start = (cs[i].cp == ' ' && i + 1 < n) ? i + 1 : i;
    bool matched = false;
    for (auto pred : {&IsLetter, &IsNumber, &IsOther}) {
      if (pred(cs[start].cp)) {
        const size_t end = run(start, pred);
        emit(i, end);
        i = end;
        matched = true;
        break;
      }
    }
    if (matched) continue;
    // A space not followed by a letter/number/other, or other white space.
    const size_t end = run(i, &IsSpace);
    // \s+(?!\S): a run of spaces ending at the end of text, or otherwise all
    // but its last space (which then starts the next piece).
    if (end == n || end - i == 1) {
      emit(i, end);
      i = end;
    } else {
      emit(i, end - 1);
      i = end - 1;
    }
  }
  return pieces;
}

absl::StatusOr<BpeTokenizer> BpeTokenizer::Load(const std::string& vocab_path,
                                                const std::string& merges_path) {
  auto vocab = ReadFile(vocab_path);
  if (!vocab.ok()) return vocab.status();
  auto merges = ReadFile(merges_path);
  if (!merges.ok()) return merges.status();
  return FromStrings(*vocab, *merges, absl::StrCat(vocab_path, " + ", merges_path));
}

absl::StatusOr<BpeTokenizer> BpeTokenizer::FromStrings(absl::string_view vocab_json,
                                                       absl::string_view merges,
                                                       absl::string_view what) {
  BpeTokenizer t;
  BuildByteSymbols(t.byte_symbol_);
  absl::flat_hash_map<std::string, uint8_t> symbol_byte;
  for (int b = 0; b < 256; ++b) symbol_byte[t.byte_symbol_[b]] = static_cast<uint8_t>(b);

  auto vocab = ParseJsonObject(vocab_json, absl::StrCat(what, ": vocab.json"));
  if (!vocab.ok()) return vocab.status();
  const int64_t size = vocab->fields_size();
  if (size == 0) return absl::InvalidArgumentError(absl::StrCat(what, ": empty vocabulary"));
  t.id_to_bytes_.resize(size);
  std::vector<bool> seen(size, false);
  for (const auto& [token, value] : vocab->fields()) {
    auto id = JsonToInt(value, absl::StrCat("vocab id of '", token, "'"), 0, size - 1);
    if (!id.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": ", id.status().message(), " (ids must be dense, 0..size-1)"));
    }
    if (seen[*id]) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": id ", *id, " is used twice"));
    }
    seen[*id] = true;
    t.token_to_id_[token] = static_cast<int32_t>(*id);
    if (token == kEndOfText) {
      t.end_of_text_id_ = static_cast<int32_t>(*id);
      t.id_to_bytes_[*id] = token;
      continue;
    }
    // Map each symbol back to its byte; a token of other symbols (an added
    // token) stands for its own UTF-8 text.
    auto chars = DecodeUtf8(token);
    std::string bytes;
    bool byte_level = chars.ok();
    if (byte_level) {
      for (const Utf8Char& c : *chars) {
        auto it = symbol_byte.find(token.substr(c.begin, c.end - c.begin));
        if (it == symbol_byte.end()) {
          byte_level = false;
          break;
        }
        bytes += static_cast<char>(it->second);
      }
    }
    t.id_to_bytes_[*id] = byte_level ? bytes : token;
  }
  for (int b = 0; b < 256; ++b) {
    if (!t.token_to_id_.contains(t.byte_symbol_[b])) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": vocab.json lacks the symbol for byte ", b));
    }
  }

  int32_t rank = 0;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(merges, '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.substr(0, 8) == "#version")) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
    if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": merges.txt line ", line_no, " is not two symbols separated by a space"));
    }
    if (!t.token_to_id_.contains(absl::StrCat(parts[0], parts[1]))) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": merges.txt line ", line_no, " makes '", parts[0], parts[1],
          "', which is not in vocab.json"));
    }
    t.merge_rank_[std::string(line)] = rank++;  // a repeated pair keeps its last rank, as in HF
  }
  return t;
}

void BpeTokenizer::EncodeWord(absl::string_view word, std::vector<int32_t>* ids) const {
  std::vector<std::string> symbols;
  symbols.reserve(word.size());
  for (const char c : word) symbols.push_back(byte_symbol_[static_cast<uint8_t>(c)]);
  std::string key;
  while (symbols.size() > 1) {
    // The pair of lowest rank, then every left-to-right occurrence of it.
    int32_t best = std::numeric_limits<int32_t>::max();
    size_t best_i = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      key.assign(symbols[i]).append(" ").append(symbols[i + 1]);
      auto it = merge_rank_.find(key);
      if (it != merge_rank_.end() && it->second < best) {
        best = it->second;
        best_i = i;
      }
    }
    if (best == std::numeric_limits<int32_t>::max()) break;
    const std::string first = symbols[best_i], second = symbols[best_i + 1];
    std::vector<std::string> merged;
    merged.reserve(symbols.size());
    for (size_t i = 0; i < symbols.size();) {
      if (i + 1 < symbols.size() && symbols[i] == first && symbols[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(std::move(symbols[i]));
        i += 1;
      }
    }
    symbols = std::move(merged);
  }
  // Every symbol is a byte symbol or a merge result, both checked at load.
  for (const std::string& s : symbols) ids->push_back(token_to_id_.at(s));
}

absl::StatusOr<std::vector<int32_t>> BpeTokenizer::Encode(absl::string_view text) const {
  std::vector<int32_t> ids;
  while (!text.empty()) {
    size_t special = end_of_text_id_ >= 0 ? text.find(kEndOfText) : absl::string_view::npos;
    absl::string_view chunk = text.substr(0, special);
    auto pieces = PreTokenize(chunk);
    if (!pieces.ok()) return pieces.status();
    for (absl::string_view piece : *pieces) EncodeWord(piece, &ids);
    if (special == absl::string_view::npos) break;
    ids.push_back(end_of_text_id_);
    text.remove_prefix(special + kEndOfText.size());
  }
  return ids;
}

std::string BpeTokenizer::DecodeBytes(absl::Span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out += id_to_bytes_[id];
  return out;
}

std::string BpeTokenizer::Decode(absl::Span<const int32_t> ids) const {
  return SanitizeUtf8(DecodeBytes(ids));
}

}  // namespace flover
