// Malformed GGUF files, generated from a valid one built in the test: every
// one must be rejected with an InputError whose message is one non-empty line
// naming the file, never a crash or an out-of-bounds read (the suite also runs
// under ASan+UBSan). A representative of each kind also goes through the CLI,
// `sparrow info -m FILE`, which must exit 2 with one line on stderr.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <thread>

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/tokenizer_data.h"
#include "tests/gguf_test_util.h"

extern char** environ;

namespace sparrow {
namespace {

using gguf::GgufFile;
using namespace sparrow::testing;

constexpr uint64_t kMax64 = ~uint64_t{0};

// Overwrites `bytes` little-endian bytes at `offset`.
void Patch(Bytes& b, size_t offset, uint64_t value, int bytes) {
  REQUIRE(offset + static_cast<size_t>(bytes) <= b.size());
  for (int i = 0; i < bytes; ++i) b[offset + i] = static_cast<uint8_t>(value >> (8 * i));
}

struct Case {
  std::string category;  // one of each goes through the CLI
  std::string name;
  Bytes bytes;
  std::string needle;    // expected somewhere in the message
  bool tokenizer = false;  // the GGUF layer accepts it; the tokenizer must not
};

// Offset of the first tensor info in ValidRawFile().Build().
size_t FirstTensorInfoOffset(const RawFile& f) {
  std::vector<size_t> ends;
  f.Build(&ends);
  return ends[3 + 4 * f.kvs.size()];
}

std::vector<Case> MalformedCases() {
  std::vector<Case> cases;
  const auto add = [&](std::string category, std::string name, Bytes bytes,
                       std::string needle, bool tokenizer = false) {
    cases.push_back({std::move(category), std::move(name), std::move(bytes),
                     std::move(needle), tokenizer});
  };
  const auto with = [](const std::function<void(RawFile&)>& edit) {
    RawFile f = ValidRawFile();
    edit(f);
    return f.Build();
  };
  const Bytes valid = ValidRawFile().Build();

  // Magic and version.
  add("magic", "bad magic", with([](RawFile& f) { f.magic = 0x47554747; }), "not a GGUF file");
  add("magic", "an ELF file", Bytes{0x7f, 'E', 'L', 'F', 2, 1, 1, 0}, "not a GGUF file");
  add("magic", "old ggjt model", with([](RawFile& f) { f.magic = 0x67676a74; }), "GGJT");
  add("magic", "three bytes", Bytes{'G', 'G', 'U'}, "too short");
  add("magic", "empty file", Bytes{}, "empty");
  for (uint32_t v : {0u, 4u, 1000u, 0xffffffffu}) {
    add("version", "version " + std::to_string(v), with([v](RawFile& f) { f.version = v; }),
        "unsupported GGUF version");
  }
  add("version", "version 1", with([](RawFile& f) { f.version = 1; }), "version 1");
  add("version", "big-endian", with([](RawFile& f) { f.version = 0x03000000; }), "big-endian");

  // Counts that the remaining bytes cannot hold.
  for (uint64_t n : {kMax64, kMax64 - 1, uint64_t{1} << 63, kMax64 / 32 + 1, uint64_t{1000}}) {
    add("tensor count", "tensor count " + std::to_string(n),
        with([n](RawFile& f) { f.tensor_count = n; }), "tensor");
    add("kv count", "kv count " + std::to_string(n), with([n](RawFile& f) { f.kv_count = n; }),
        "metadata");
  }
  add("kv count", "one kv too many", with([](RawFile& f) { f.kv_count = f.kvs.size() + 1; }), "");
  add("tensor count", "one tensor too many",
      with([](RawFile& f) { f.tensor_count = f.tensors.size() + 1; }), "");

  // String lengths past the end of the file.
  for (uint64_t len : {kMax64, uint64_t{1} << 40, uint64_t{valid.size()}}) {
    Bytes b = valid;
    Patch(b, 24, len, 8);  // length of the first key
    add("string length", "key length " + std::to_string(len), b, "string length");
    add("string length", "string value length " + std::to_string(len),
        with([len](RawFile& f) {
          Bytes v = EncU64(len);
          v.push_back('x');
          f.kvs.push_back({"general.name", kTString, v});
        }),
        "string length");
    Bytes t = valid;
    Patch(t, FirstTensorInfoOffset(ValidRawFile()), len, 8);
    add("string length", "tensor name length " + std::to_string(len), t, "string length");
  }

  // Array lengths no file could hold.
  for (uint64_t n : {kMax64, uint64_t{1} << 61, uint64_t{1} << 32}) {
    for (uint32_t et : {kTU8, kTU64, kTString, kTArray}) {
      add("array length", "array of type " + std::to_string(et) + " length " + std::to_string(n),
          with([n, et](RawFile& f) {
            f.kvs.push_back({"k.arr", kTArray, EncArray(et, n, Bytes(16, 0))});
          }),
          "cannot fit");
    }
  }
  add("array length", "token list longer than its bytes",
      with([](RawFile& f) {
        f.kvs[4].value = EncArray(kTString, 5, EncStrArray({"a"}));  // claims 5, holds 1
      }),
      "");

  // Unknown value types, and nesting too deep.
  for (uint32_t t : {13u, 100u, 0xffffffffu}) {
    add("value type", "value type " + std::to_string(t),
        with([t](RawFile& f) { f.kvs.push_back({"k.bad", t, EncU32(0)}); }), "unknown value type");
    add("value type", "array element type " + std::to_string(t),
        with([t](RawFile& f) { f.kvs.push_back({"k.bad", kTArray, EncArray(t, 1, EncU32(0))}); }),
        "unknown array element type");
  }
  {
    Bytes deep = EncArray(kTU8, 0, {});
    for (uint32_t i = 1; i < gguf::kMaxArrayDepth + 1; ++i) deep = EncArray(kTArray, 1, deep);
    add("nesting", "arrays nested too deep",
        with([&](RawFile& f) { f.kvs.push_back({"k.deep", kTArray, deep}); }), "nested");
  }

  // Keys.
  add("keys", "duplicate key",
      with([](RawFile& f) { f.kvs.push_back({"llama.embedding_length", kTU32, EncU32(9)}); }),
      "duplicate metadata key 'llama.embedding_length'");
  add("keys", "empty key", with([](RawFile& f) { f.kvs.push_back({"", kTU32, EncU32(9)}); }),
      "empty key");
  add("keys", "duplicate key with a newline in it",
      with([](RawFile& f) {
        f.kvs.push_back({"a\nb", kTU32, EncU32(1)});
        f.kvs.push_back({"a\nb", kTU32, EncU32(2)});
      }),
      "a\\x0ab");

  // general.alignment.
  for (uint32_t a : {0u, 3u, 48u, 0x80000001u}) {
    add("alignment", "alignment " + std::to_string(a),
        with([a](RawFile& f) { f.kvs.push_back({"general.alignment", kTU32, EncU32(a)}); }),
        "power of two");
  }
  add("alignment", "alignment as u64",
      with([](RawFile& f) { f.kvs.push_back({"general.alignment", kTU64, EncU64(32)}); }),
      "must be a u32");
  add("alignment", "alignment as string",
      with([](RawFile& f) { f.kvs.push_back({"general.alignment", kTString, EncStr("32")}); }),
      "must be a u32");

  // Tensor infos.
  for (uint32_t rank : {0u, 5u}) {
    add("rank", "rank " + std::to_string(rank),
        with([rank](RawFile& f) { f.tensors[1].dims.assign(rank == 5 ? 5 : 0, 1); }),
        "dimensions");
  }
  {
    // Rank field itself patched to a huge value (no dims follow).
    Bytes b = valid;
    const size_t name_len_at = FirstTensorInfoOffset(ValidRawFile());
    Patch(b, name_len_at + 8 + 1, 0xffffffffu, 4);  // tensor "a": 8-byte length + 1 byte name
    add("rank", "rank 2^32-1 patched", b, "4294967295 dimensions");
  }
  add("rank", "zero dimension", with([](RawFile& f) { f.tensors[0].dims = {0}; }),
      "empty dimension");
  // 1024: Sparrow's own Q4_0S, a bundle record type that no GGUF file holds.
  for (uint32_t t : {4u, 5u, 31u, 36u, 40u, 1000u, 1024u, 0xffffffffu}) {
    add("tensor type", "tensor type " + std::to_string(t),
        with([t](RawFile& f) { f.tensors[2].type = t; }), "unknown tensor type id");
  }
  add("tensor type", "row not a whole number of blocks",
      with([](RawFile& f) { f.tensors[1].dims = {33, 2}; }), "whole number of q8_0 blocks");
  const std::vector<std::vector<uint64_t>> overflowing = {
      {uint64_t{1} << 32, uint64_t{1} << 32},
      {uint64_t{1} << 62, 4},
      {kMax64},
      {uint64_t{1} << 63},
      {uint64_t{1} << 31, uint64_t{1} << 31, 4},
      {65536, 65536, 65536, 65536},
  };
  for (const auto& dims : overflowing) {
    add("dims overflow", "dims overflow " + std::to_string(dims[0]),
        with([dims](RawFile& f) { f.tensors[0].dims = dims; }), "overflow");
  }
  add("dims overflow", "f32 byte size overflows",
      with([](RawFile& f) { f.tensors[0].dims = {uint64_t{1} << 62}; }), "overflow");
  add("duplicate tensor", "duplicate tensor name",
      with([](RawFile& f) { f.tensors[2].name = "a"; }), "duplicate tensor 'a'");
  add("duplicate tensor", "empty tensor name",
      with([](RawFile& f) { f.tensors[2].name = ""; }), "empty name");

  // Tensor data placement.
  add("misaligned", "offset 33", with([](RawFile& f) { f.tensors[2].offset = 129; }),
      "not a multiple of the alignment 32");
  add("misaligned", "offset 16", with([](RawFile& f) { f.tensors[1].offset = 48; }),
      "alignment");
  add("past eof", "data past the end",
      with([](RawFile& f) { f.tensors[2].offset = 160; }), "past the end of the file");
  add("past eof", "huge offset",
      with([](RawFile& f) { f.tensors[2].offset = kMax64 - 31; }), "overflows");
  add("past eof", "offset 2^63", with([](RawFile& f) { f.tensors[2].offset = uint64_t{1} << 63; }),
      "past the end");
  add("past eof", "a tensor larger than the file",
      with([](RawFile& f) { f.tensors[2].dims = {1 << 20, 1 << 20}; }), "past the end");
  add("past eof", "data section missing",
      with([](RawFile& f) { f.data.clear(); }), "past the end");
  add("overlap", "overlapping tensors",
      with([](RawFile& f) { f.tensors[1].offset = 0; }), "overlap");
  add("overlap", "same offset",
      with([](RawFile& f) { f.tensors[2].offset = 32; }), "overlap");

  // Tokenizer metadata the GGUF layer accepts but the tokenizer must not.
  add("token list", "scores one short",
      with([](RawFile& f) { f.kvs[5].value = EncF32Array({0, 0, 0}); }),
      "3 entries for 4 tokens", true);
  add("token list", "token types one too many",
      with([](RawFile& f) { f.kvs[6].value = EncI32Array({1, 1, 1, 1, 1}); }),
      "5 entries for 4 tokens", true);
  add("token list", "bos out of range",
      with([](RawFile& f) { f.kvs[7].value = EncU32(4); }), "out of range", true);
  add("token list", "unsupported tokenizer model",
      with([](RawFile& f) { f.kvs[3].value = EncStr("bert"); }), "'bert'", true);
  return cases;
}

// Loads the way a model load does: the GGUF layer, then the tokenizer.
std::string LoadError(const Bytes& bytes, bool* gguf_threw) {
  *gguf_threw = false;
  try {
    GgufFile file = GgufFile::FromBytes(bytes, "bad.gguf");
    try {
      (void)TokenizerData::FromGguf(file);
    } catch (const InputError& e) {
      return e.what();
    }
  } catch (const InputError& e) {
    *gguf_threw = true;
    return e.what();
  }
  return "";
}

void CheckMessage(const std::string& msg) {
  CHECK_FALSE(msg.empty());
  CHECK(msg.find('\n') == std::string::npos);
  CHECK(msg.find('\r') == std::string::npos);
  CHECK(msg.rfind("bad.gguf: ", 0) == 0);
  CHECK(msg.size() > std::string("bad.gguf: ").size());
}

TEST_CASE("malformed: the base file is valid") {
  const Bytes valid = ValidRawFile().Build();
  const GgufFile file = GgufFile::FromBytes(valid, "base.gguf");
  CHECK(file.tensors().size() == 3);
  // Every mutation below starts from this file, so it must stay loadable.
  CHECK(TokenizerData::FromGguf(file).tokens.size() == 4);
}

TEST_CASE("malformed: truncation at every byte is rejected") {
  const Bytes valid = ValidRawFile().Build();
  // Every prefix: each header field boundary and every byte in between.
  for (size_t len = 0; len < valid.size(); ++len) {
    CAPTURE(len);
    Bytes prefix(valid.begin(), valid.begin() + static_cast<ptrdiff_t>(len));
    bool gguf_threw = false;
    const std::string msg = LoadError(prefix, &gguf_threw);
    CHECK(gguf_threw);
    CheckMessage(msg);
  }
}

TEST_CASE("malformed: every generated case is rejected with a one-line message") {
  const std::vector<Case> cases = MalformedCases();
  CHECK(cases.size() > 80);
  for (const Case& c : cases) {
    CAPTURE(c.name);
    bool gguf_threw = false;
    const std::string msg = LoadError(c.bytes, &gguf_threw);
    CAPTURE(msg);
    CHECK(gguf_threw != c.tokenizer);
    CheckMessage(msg);
    if (!c.needle.empty()) CHECK(msg.find(c.needle) != std::string::npos);
  }
}

// Runs `bin info -m file`; stderr captured, stdout discarded.
struct RunResult {
  bool exited = false;
  int exit_code = -1;
  int signal = 0;
  std::string err;
};

RunResult RunInfo(const std::string& bin, const std::string& file, const std::string& err_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  std::vector<std::string> args = {bin, "info", "-m", file};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, bin.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE_MESSAGE(rc == 0, "cannot start " << bin << ": " << std::strerror(rc));
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL("sparrow info did not finish within 120 s on " << file);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  RunResult r;
  r.exited = WIFEXITED(status);
  r.exit_code = r.exited ? WEXITSTATUS(status) : -1;
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  const Bytes err = ReadFile(err_path);
  r.err.assign(err.begin(), err.end());
  return r;
}

TEST_CASE("malformed: sparrow info exits 2 with one line on stderr") {
  const char* bin_env = std::getenv("SPARROW_BIN");
  if (bin_env == nullptr || *bin_env == '\0') {
    FAIL("SPARROW_BIN is not set: run through `meson test` or point it at build/sparrow");
  }
  const std::string bin = bin_env;
  REQUIRE_MESSAGE(::access(bin.c_str(), X_OK) == 0, "SPARROW_BIN=" << bin << " is not an executable");
  TempDir dir;
  std::set<std::string> seen;
  std::vector<std::pair<std::string, Bytes>> runs;
  for (Case& c : MalformedCases()) {
    if (seen.insert(c.category).second) runs.emplace_back(c.name, std::move(c.bytes));
  }
  const Bytes valid = ValidRawFile().Build();
  std::vector<size_t> ends;
  ValidRawFile().Build(&ends);
  for (size_t cut : {ends[3], ends[7], ends[3 + 4 * 8 + 1]}) {
    runs.emplace_back("truncated at " + std::to_string(cut),
                      Bytes(valid.begin(), valid.begin() + static_cast<ptrdiff_t>(cut)));
  }
  CHECK(runs.size() >= 20);
  int index = 0;
  for (const auto& [name, bytes] : runs) {
    const auto& name_ = name;  // clang 14 cannot capture a structured binding
    CAPTURE(name_);
    const std::string path = dir.File("case" + std::to_string(index++) + ".gguf");
    WriteFile(path, bytes);
    const RunResult r = RunInfo(bin, path, dir.File("stderr.txt"));
    CAPTURE(r.err);
    CHECK(r.signal == 0);
    CHECK(r.exited);
    CHECK(r.exit_code == 2);
    // Exactly one non-empty line.
    CHECK(r.err.size() > 1);
    if (r.err.empty()) continue;
    CHECK(r.err.back() == '\n');
    CHECK(r.err.find('\n') == r.err.size() - 1);
  }
}

}  // namespace
}  // namespace sparrow
