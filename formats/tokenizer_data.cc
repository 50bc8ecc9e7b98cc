// tokenizer.ggml.* metadata <-> TokenizerData.
//
// Defaults follow llama.cpp's vocabulary loader, so a file that leaves a key
// out means the same thing here as there:
//   "llama" (SentencePiece): bos 1, eos 2, unk 0, no pad; add_bos true,
//           add_eos false, add_space_prefix true.
//   "gpt2" (byte-level BPE): bos 11, eos 11 (GPT-2's historical ids), no unk
//           or pad (no bos for the GLM-4 pre-tokenizers); add_space_prefix
//           false; add_bos true only for the pre-tokenizers llama.cpp turns it
//           on for (Llama 3 family, tekken, chameleon), add_eos false.
// A default id that falls outside the vocabulary means "none". An id the file
// states must be in range; 0xFFFFFFFF (or -1) states "none".
#include "formats/tokenizer_data.h"

#include <limits>
#include <stdexcept>
#include <string_view>

#include "base/error.h"
#include "formats/gguf.h"

namespace sparrow {
namespace {

constexpr const char* kModel = "tokenizer.ggml.model";
constexpr const char* kPre = "tokenizer.ggml.pre";
constexpr const char* kChatTemplate = "tokenizer.chat_template";
constexpr const char* kTokens = "tokenizer.ggml.tokens";
constexpr const char* kScores = "tokenizer.ggml.scores";
constexpr const char* kTokenType = "tokenizer.ggml.token_type";
constexpr const char* kMerges = "tokenizer.ggml.merges";
constexpr const char* kBos = "tokenizer.ggml.bos_token_id";
constexpr const char* kEos = "tokenizer.ggml.eos_token_id";
constexpr const char* kUnk = "tokenizer.ggml.unknown_token_id";
constexpr const char* kPad = "tokenizer.ggml.padding_token_id";
constexpr const char* kEot = "tokenizer.ggml.eot_token_id";
constexpr const char* kAddBos = "tokenizer.ggml.add_bos_token";
constexpr const char* kAddEos = "tokenizer.ggml.add_eos_token";
constexpr const char* kAddSpacePrefix = "tokenizer.ggml.add_space_prefix";

constexpr uint32_t kNoToken = 0xFFFFFFFFu;

struct Defaults {
  int32_t bos = -1, eos = -1, unk = -1, pad = -1, eot = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;
};

bool PreAddsBos(std::string_view pre) {
  for (std::string_view p : {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1",
                             "pixtral", "midm-2.0", "lfm2", "jina-v5-nano", "tekken",
                             "chameleon"}) {
    if (pre == p) return true;
  }
  return false;
}

Defaults DefaultsFor(std::string_view model, std::string_view pre, size_t n_tokens) {
  Defaults d;
  if (model == "llama") {
    d.bos = 1;
    d.eos = 2;
    d.unk = 0;
    d.add_bos = true;
    d.add_space_prefix = true;
  } else {  // gpt2
    d.bos = 11;
    d.eos = 11;
    if (pre == "glm4" || pre == "chatglm-bpe") d.bos = -1;
    d.add_bos = PreAddsBos(pre);
  }
  for (int32_t* id : {&d.bos, &d.eos, &d.unk, &d.pad, &d.eot}) {
    if (*id >= 0 && static_cast<size_t>(*id) >= n_tokens) *id = -1;
  }
  return d;
}

// The id the file states for `key`, `fallback` if absent.
int32_t ReadSpecialId(const gguf::GgufFile& file, const char* key, int32_t fallback,
                      size_t n_tokens) {
  const gguf::Value* v = file.Find(key);
  if (v == nullptr) return fallback;
  if (const auto i = v->AsInt(); i.has_value() && *i == -1) return -1;
  const auto u = v->AsUInt();
  if (!u.has_value()) {
    if (v->AsInt().has_value()) {
      ThrowInputError(file.name(), ": ", key, " is negative (", *v->AsInt(), ")");
    }
    ThrowInputError(file.name(), ": ", key, " is ", gguf::TypeDescription(*v),
                    ", expected an integer token id");
  }
  if (*u == kNoToken || *u == std::numeric_limits<uint64_t>::max()) return -1;
  if (*u >= n_tokens) {
    ThrowInputError(file.name(), ": ", key, " ", *u, " is out of range (", n_tokens,
                    " tokens)");
  }
  return static_cast<int32_t>(*u);
}

// "left right": llama.cpp splits at the first space after the first byte.
bool IsMerge(const std::string& merge) {
  return merge.size() >= 3 && merge.find(' ', 1) != std::string::npos;
}

}  // namespace

TokenizerData TokenizerData::FromGguf(const gguf::GgufFile& file) {
  const std::string& name = file.name();
  TokenizerData data;
  const auto model = file.GetString(kModel);
  if (!model.has_value()) {
    ThrowInputError(name, ": the file has no tokenizer (", kModel, " is missing)");
  }
  if (*model != "llama" && *model != "gpt2") {
    ThrowInputError(name, ": tokenizer model '", gguf::Printable(*model),
                    "' is not supported (only 'llama' and 'gpt2')");
  }
  data.model = *model;
  data.pre = file.GetString(kPre).value_or(data.model == "gpt2" ? "default" : "");

  data.tokens = file.GetStringArray(kTokens);
  const size_t n = data.tokens.size();
  if (n == 0) ThrowInputError(name, ": the tokenizer has no tokens (", kTokens, ")");
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    ThrowInputError(name, ": the tokenizer has ", n, " tokens, more than ids can number");
  }
  // llama.cpp renames empty tokens so that every token has text to match.
  for (size_t i = 0; i < n; ++i) {
    if (data.tokens[i].empty()) data.tokens[i] = StrCat("[EMPTY_", i, "]");
  }

  if (file.Find(kScores) != nullptr) {
    data.scores = file.GetFloatArray(kScores);
    if (data.scores.size() != n) {
      ThrowInputError(name, ": ", kScores, " has ", data.scores.size(), " entries for ", n,
                      " tokens");
    }
  } else {
    data.scores.assign(n, 0.0f);
  }

  if (file.Find(kTokenType) != nullptr) {
    const std::vector<int64_t> types = file.GetIntArray(kTokenType);
    if (types.size() != n) {
      ThrowInputError(name, ": ", kTokenType, " has ", types.size(), " entries for ", n,
                      " tokens");
    }
    data.types.reserve(n);
    for (int64_t t : types) {
      // Unknown codes read as undefined, as in llama.cpp.
      const bool known = t >= static_cast<int64_t>(TokenType::kUndefined) &&
                         t <= static_cast<int64_t>(TokenType::kByte);
      data.types.push_back(known ? static_cast<TokenType>(t) : TokenType::kUndefined);
    }
  } else {
    data.types.assign(n, TokenType::kNormal);
  }

  if (file.Find(kMerges) != nullptr) {
    data.merges = file.GetStringArray(kMerges);
    for (size_t i = 0; i < data.merges.size(); ++i) {
      if (!IsMerge(data.merges[i])) {
        ThrowInputError(name, ": ", kMerges, " entry ", i, " ('",
                        gguf::Printable(data.merges[i]), "') is not two tokens separated by a space");
      }
    }
  } else if (data.model == "gpt2") {
    ThrowInputError(name, ": gpt2 tokenizer without merges (", kMerges, " is missing)");
  }

  const Defaults d = DefaultsFor(data.model, data.pre, n);
  data.bos_id = ReadSpecialId(file, kBos, d.bos, n);
  data.eos_id = ReadSpecialId(file, kEos, d.eos, n);
  data.unk_id = ReadSpecialId(file, kUnk, d.unk, n);
  data.pad_id = ReadSpecialId(file, kPad, d.pad, n);
  data.eot_id = ReadSpecialId(file, kEot, d.eot, n);

  const auto add_bos = file.GetBool(kAddBos);
  const auto add_eos = file.GetBool(kAddEos);
  data.add_bos = add_bos.value_or(d.add_bos);
  data.add_eos = add_eos.value_or(d.add_eos);
  data.add_space_prefix = file.GetBool(kAddSpacePrefix).value_or(d.add_space_prefix);
  data.chat_template = file.GetString(kChatTemplate).value_or("");
  // A default that cannot apply is dropped; a stated one is an error.
  if (data.add_bos && data.bos_id < 0) {
    if (add_bos.has_value()) {
      ThrowInputError(name, ": ", kAddBos, " is true but the tokenizer has no BOS token");
    }
    data.add_bos = false;
  }
  if (data.add_eos && data.eos_id < 0) {
    if (add_eos.has_value()) {
      ThrowInputError(name, ": ", kAddEos, " is true but the tokenizer has no EOS token");
    }
    data.add_eos = false;
  }
  return data;
}

void TokenizerData::AddToGguf(gguf::GgufWriter& writer) const {
  const size_t n = tokens.size();
  if (model != "llama" && model != "gpt2") {
    throw std::invalid_argument(StrCat("TokenizerData: unsupported model '", model, "'"));
  }
  if ((!scores.empty() && scores.size() != n) || (!types.empty() && types.size() != n)) {
    throw std::invalid_argument("TokenizerData: scores or types not one per token");
  }
  writer.Add(kModel, gguf::Value::String(model));
  if (!pre.empty()) writer.Add(kPre, gguf::Value::String(pre));
  writer.Add(kTokens, gguf::Value::StringArray(tokens));
  if (!scores.empty()) writer.Add(kScores, gguf::Value::F32Array(scores));
  if (!types.empty()) {
    std::vector<int32_t> codes;
    codes.reserve(types.size());
    for (TokenType t : types) codes.push_back(static_cast<int32_t>(t));
    writer.Add(kTokenType, gguf::Value::I32Array(codes));
  }
  if (!merges.empty() || model == "gpt2") writer.Add(kMerges, gguf::Value::StringArray(merges));

  // An id that is "none" is written as 0xFFFFFFFF only where leaving the key
  // out would bring a default back.
  const Defaults d = DefaultsFor(model, pre, n);
  const auto add_id = [&](const char* key, int32_t id, int32_t fallback) {
    if (id >= 0) {
      writer.Add(key, gguf::Value::U32(static_cast<uint32_t>(id)));
    } else if (fallback >= 0) {
      writer.Add(key, gguf::Value::U32(kNoToken));
    }
  };
  add_id(kBos, bos_id, d.bos);
  add_id(kEos, eos_id, d.eos);
  add_id(kUnk, unk_id, d.unk);
  add_id(kPad, pad_id, d.pad);
  add_id(kEot, eot_id, d.eot);
  writer.Add(kAddBos, gguf::Value::Bool(add_bos));
  writer.Add(kAddEos, gguf::Value::Bool(add_eos));
  writer.Add(kAddSpacePrefix, gguf::Value::Bool(add_space_prefix));
  if (!chat_template.empty()) writer.Add(kChatTemplate, gguf::Value::String(chat_template));
}

}  // namespace sparrow
