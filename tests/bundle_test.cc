// Bundles: conversion from GGUF (both layouts, all record types, several
// source types), records checked against the source matrices through an
// independent reading of the GGUF, the resident section byte for byte, and
// every way a damaged file must be refused with a message that says where.
#include <doctest/doctest.h>

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/crc32c.h"
#include "base/error.h"
#include "base/read_file.h"
#include "formats/bundle.h"
#include "formats/bundle_writer.h"
#include "formats/gguf.h"
#include "formats/tokenizer_data.h"
#include "simd/quantize.h"
#include "src/convert.h"
#include "src/engine.h"
#include "src/model/config.h"
#include "src/ops/ops.h"
#include "src/runtime/loader.h"
#include "src/synth.h"
#include "tests/error_test_util.h"
#include "tests/temp_dir.h"

namespace sparrow {
namespace {

using bundle::Bundle;
using bundle::Layout;
using bundle::RecordKind;
using bundle::UnitGroup;

std::string SharedDir() {
  const char* dir = std::getenv("SPARROW_SHARED_DIR");
  return dir != nullptr ? dir : "../shared";
}

std::string Stories() { return SharedDir() + "/models/stories260K.gguf"; }

using testing::TempDir;

std::vector<uint8_t> ReadAll(const std::string& path) {
  return ReadWholeFileBytes(path, "test file");
}

void WriteAll(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

using testing::Contains;
using testing::ErrorOf;

// ---- An independent view of what records must hold ----------------------

// A source matrix dequantized to f32 with the scalar reference, row-major.
struct Matrix {
  uint64_t rows = 0, cols = 0;
  std::vector<float> v;
  float At(uint64_t r, uint64_t c) const { return v[r * cols + c]; }
};

Matrix Dequantized(const gguf::GgufFile& src, const std::string& name) {
  const gguf::TensorInfo* t = src.FindTensor(name);
  REQUIRE(t != nullptr);
  Matrix m;
  m.cols = t->dims[0];
  m.rows = t->rows();
  m.v.resize(m.rows * m.cols);
  uint64_t row_bytes = 0;
  REQUIRE(TensorTypeBytes(t->type, m.cols, &row_bytes));
  for (uint64_t r = 0; r < m.rows; ++r) {
    simd::DequantizeRowReference(t->type, t->data + r * row_bytes, m.cols, m.v.data() + r * m.cols);
  }
  return m;
}

// The values part `part` of unit `unit` must hold, from the format's
// definition: neuron = [gate row | up row | down column], dip input =
// [up column | gate column], dip output = [down column].
std::vector<float> ExpectedPart(RecordKind kind, uint32_t part, uint32_t unit, const Matrix& gate,
                                const Matrix& up, const Matrix& down) {
  std::vector<float> out;
  const auto row = [&](const Matrix& m) {
    for (uint64_t c = 0; c < m.cols; ++c) out.push_back(m.At(unit, c));
  };
  const auto column = [&](const Matrix& m) {
    for (uint64_t r = 0; r < m.rows; ++r) out.push_back(m.At(r, unit));
  };
  switch (kind) {
    case RecordKind::kNeuron:
      if (part == 0) row(gate);
      if (part == 1) row(up);
      if (part == 2) column(down);
      break;
    case RecordKind::kDipInput:
      column(part == 0 ? up : gate);
      break;
    case RecordKind::kDipOutput:
      column(down);
      break;
    case RecordKind::kUpRow:
      row(up);
      break;
    case RecordKind::kGateRow:
      row(gate);
      break;
  }
  return out;
}

// Largest error the record type's rounding allows for each element of a
// block of 32 (or for one element of f32/f16), from the formats' definitions:
// q8_0 rounds x / d with d = amax / 127 stored as f16; q4_0 uses d = -max / 8
// with levels -8..7, so the value opposite the extreme may clip by |d|.
std::vector<float> ErrorBounds(TensorType type, const std::vector<float>& want) {
  std::vector<float> bound(want.size());
  if (type == TensorType::kF32) return bound;  // exact
  if (type == TensorType::kF16) {
    for (size_t i = 0; i < want.size(); ++i) {
      bound[i] = std::fabs(want[i]) * (1.0f / 2048.0f) + 6e-8f;
    }
    return bound;
  }
  for (size_t b = 0; b < want.size(); b += 32) {
    const size_t e = std::min(want.size(), b + 32);
    float amax = 0.0f;
    for (size_t i = b; i < e; ++i) amax = std::max(amax, std::fabs(want[i]));
    const float d = type == TensorType::kQ8_0 ? amax / 127.0f : amax / 8.0f;
    const float allowed = type == TensorType::kQ8_0 ? d * 0.5f + amax * (1.0f / 1024.0f)
                                                    : d * 1.0f + amax * (1.0f / 1024.0f);
    for (size_t i = b; i < e; ++i) bound[i] = allowed + 1e-12f;
  }
  return bound;
}

uint64_t StoredBytes(TensorType type, uint64_t elems) {
  switch (type) {
    case TensorType::kF32: return elems * 4;
    case TensorType::kF16: return elems * 2;
    case TensorType::kQ8_0: return elems / 32 * 34;
    case TensorType::kQ4_0:
    case TensorType::kQ4_0S: return elems / 32 * 18;
    default: FAIL("not a record type"); return 0;
  }
}

// Checks everything a bundle converted from `source` must be.
void CheckBundle(const std::string& source, const std::string& path, Layout layout,
                 TensorType type) {
  const gguf::GgufFile src = gguf::GgufFile::Open(source);
  const ModelConfig config = ModelConfig::FromGguf(src);
  const Bundle b = Bundle::Open(path);
  CHECK(Bundle::LooksLikeBundle(path));
  CHECK(b.layout() == layout);
  CHECK(b.record_type() == type);
  CHECK(b.n_layers() == config.n_layers);
  CHECK(b.d_model() == config.d_model);
  CHECK(b.d_ff() == config.d_ff);

  // The header is a model description the engine can use as is.
  const ModelConfig from_header = ModelConfig::FromGguf(b.header());
  CHECK(from_header.arch == config.arch);
  CHECK(from_header.n_heads == config.n_heads);
  CHECK(from_header.n_kv_heads == config.n_kv_heads);
  CHECK(from_header.rope_base == config.rope_base);
  CHECK(from_header.rms_eps == config.rms_eps);
  const TokenizerData tok_src = TokenizerData::FromGguf(src);
  const TokenizerData tok = TokenizerData::FromGguf(b.header());
  CHECK(tok.tokens == tok_src.tokens);
  CHECK(tok.scores == tok_src.scores);
  CHECK(tok.bos_id == tok_src.bos_id);

  // Resident section: exactly the non-FFN tensors, byte for byte.
  const gguf::GgufFile resident = b.LoadResident();
  std::set<std::string> expected_names;
  for (const gguf::TensorInfo& t : src.tensors()) {
    const bool ffn = Contains(t.name, ".ffn_gate.weight") || Contains(t.name, ".ffn_up.weight") ||
                     Contains(t.name, ".ffn_down.weight");
    if (!ffn) expected_names.insert(t.name);
  }
  std::set<std::string> names;
  for (const gguf::TensorInfo& t : resident.tensors()) {
    names.insert(t.name);
    const gguf::TensorInfo* s = src.FindTensor(t.name);
    REQUIRE(s != nullptr);
    CHECK(t.type == s->type);
    CHECK(t.dims == s->dims);
    REQUIRE(t.n_bytes == s->n_bytes);
    CHECK(std::memcmp(t.data, s->data, t.n_bytes) == 0);
  }
  CHECK(names == expected_names);

  // Groups: geometry from the definition, sections aligned, identity order.
  const std::vector<RecordKind> kinds =
      layout == Layout::kNeuron ? std::vector<RecordKind>{RecordKind::kNeuron}
      : layout == Layout::kDip
          ? std::vector<RecordKind>{RecordKind::kDipInput, RecordKind::kDipOutput}
          : std::vector<RecordKind>{RecordKind::kUpRow, RecordKind::kGateRow, RecordKind::kDipOutput};
  REQUIRE(b.groups().size() == config.n_layers * kinds.size());
  const std::vector<uint8_t> file = ReadAll(path);
  CHECK(file.size() % 4096 == 0);
  const uint32_t block = GetTensorTypeInfo(type).block_elems;
  for (uint32_t layer = 0; layer < config.n_layers; ++layer) {
    const std::string blk = "blk." + std::to_string(layer) + ".";
    const Matrix gate = Dequantized(src, blk + "ffn_gate.weight");
    const Matrix up = Dequantized(src, blk + "ffn_up.weight");
    const Matrix down = Dequantized(src, blk + "ffn_down.weight");
    for (RecordKind kind : kinds) {
      const UnitGroup* g = b.FindGroup(layer, kind);
      REQUIRE(g != nullptr);
      CAPTURE(layer);
      CAPTURE(bundle::RecordKindName(kind));
      const bool dip_in = kind == RecordKind::kDipInput;
      CHECK(g->n_units == (dip_in ? config.d_model : config.d_ff));
      CHECK(g->parts == (kind == RecordKind::kNeuron ? 3u : dip_in ? 2u : 1u));
      CHECK(g->part_elems == (dip_in ? config.d_ff : config.d_model));
      CHECK(g->part_padded_elems == (g->part_elems + block - 1) / block * block);
      CHECK(g->part_bytes == StoredBytes(type, g->part_padded_elems));
      CHECK(g->payload_bytes == g->parts * g->part_bytes);
      CHECK(g->record_bytes == (g->payload_bytes + 3) / 4 * 4 + 4);
      CHECK(g->offset % 4096 == 0);
      REQUIRE(g->offset + g->section_bytes() <= file.size());
      std::vector<float> got(g->part_padded_elems);
      size_t mismatches = 0;
      float largest_scale = 0.0f;  // over the group's records: the header's
      for (uint32_t u = 0; u < g->n_units; ++u) {
        REQUIRE(g->slot_of_unit[u] == u);
        const uint8_t* record = file.data() + g->UnitOffset(u);
        b.VerifyRecord(*g, u, record);
        CHECK(Crc32c(record, g->record_bytes - 4, bundle::RecordSeed(b.bundle_id(), *g, u)) ==
              (uint32_t{record[g->record_bytes - 4]} | uint32_t{record[g->record_bytes - 3]} << 8 |
               uint32_t{record[g->record_bytes - 2]} << 16 |
               uint32_t{record[g->record_bytes - 1]} << 24));
        // Valid in its own place only.
        CHECK_FALSE(bundle::RecordCrcMatches(*g, b.bundle_id() ^ 1, u, record));
        CHECK_FALSE(bundle::RecordCrcMatches(*g, b.bundle_id(), (u + 1) % g->n_units, record));
        for (uint32_t p = 0; p < g->parts; ++p) {
          largest_scale = std::max(
              largest_scale,
              simd::LargestBlockScale(type, record + p * g->part_bytes, g->part_padded_elems));
          simd::DequantizeRowReference(type, record + p * g->part_bytes, g->part_padded_elems,
                                       got.data());
          const std::vector<float> want = ExpectedPart(kind, p, u, gate, up, down);
          REQUIRE(want.size() == g->part_elems);
          const std::vector<float> bound = ErrorBounds(type, want);
          for (uint32_t i = 0; i < g->part_elems; ++i) {
            if (!(std::fabs(got[i] - want[i]) <= bound[i])) {
              if (mismatches++ < 5) {
                MESSAGE("unit " << u << " part " << p << " elem " << i << ": got " << got[i]
                                << ", want " << want[i]);
              }
            }
          }
          for (uint32_t i = g->part_elems; i < g->part_padded_elems; ++i) {
            if (got[i] != 0.0f) ++mismatches;
          }
        }
      }
      CHECK(mismatches == 0);
      CHECK(g->largest_scale == largest_scale);
      if (type == TensorType::kQ4_0S || type == TensorType::kQ8_0) CHECK(largest_scale > 0.0f);
    }
  }
}

TEST_CASE("convert stories260K: every layout, every record type") {
  TempDir dir;
  for (Layout layout : {Layout::kNeuron, Layout::kDip, Layout::kSplit}) {
    for (TensorType type : {TensorType::kF32, TensorType::kF16, TensorType::kQ8_0,
                            TensorType::kQ4_0, TensorType::kQ4_0S}) {
      const std::string name = StrCat(bundle::LayoutName(layout), "_", TensorTypeName(type));
      CAPTURE(name);
      const std::string out = dir.File(name + ".sparrow");
      ConvertOptions options;
      options.layout = layout;
      options.record_type = type;
      uint64_t last_done = 0, last_total = 0;
      ConvertGgufToBundle(Stories(), out, options, [&](uint64_t done, uint64_t total) {
        CHECK(done >= last_done);
        CHECK(done <= total);
        last_done = done;
        last_total = total;
      });
      CHECK(last_done == last_total);
      CheckBundle(Stories(), out, layout, type);
    }
  }
  // Nothing but the bundles: no temporary files left behind.
  CHECK(dir.EntryCount() == 15);
}

TEST_CASE("convert from quantized and bf16 sources, with tiles narrower than a layer") {
  TempDir dir;
  struct Case {
    TensorType source;
    TensorType expected_default;
  };
  for (const Case c : {Case{TensorType::kQ4_K, TensorType::kQ8_0}, Case{TensorType::kQ6_K, TensorType::kQ8_0},
                       Case{TensorType::kBF16, TensorType::kQ8_0}, Case{TensorType::kF16, TensorType::kF16},
                       Case{TensorType::kQ4_0, TensorType::kQ4_0S}}) {
    CAPTURE(TensorTypeName(c.source));
    SynthSpec spec;
    spec.dim = 512;
    spec.ffn = 768;
    spec.layers = 2;
    spec.heads = 4;
    spec.kv_heads = 2;
    spec.vocab = 400;
    spec.context_length = 256;
    spec.type = c.source;
    const std::string model = dir.File(StrCat("synth_", TensorTypeName(c.source), ".gguf"));
    WriteSyntheticModel(spec, model);
    CHECK(DefaultRecordType(gguf::GgufFile::Open(model)) == c.expected_default);
    for (Layout layout : {Layout::kNeuron, Layout::kDip, Layout::kSplit}) {
      const std::string out = dir.File(StrCat("synth_", TensorTypeName(c.source), "_",
                                              bundle::LayoutName(layout), ".sparrow"));
      ConvertOptions options;
      options.layout = layout;
      // 256-column tiles (one q4_K block): three tiles for down, two for
      // the dip layout's up/gate columns.
      options.column_tile_bytes = 64 << 10;
      ConvertGgufToBundle(model, out, options);
      CheckBundle(model, out, layout, c.expected_default);
    }
  }
}

// ---- Corruption and truncation -----------------------------------------

// Flips one byte of a file in place for its lifetime.
class FlippedByte {
 public:
  FlippedByte(const std::string& path, uint64_t offset) : path_(path), offset_(offset) { Flip(); }
  ~FlippedByte() { Flip(); }

 private:
  void Flip() {
    std::fstream f(path_, std::ios::binary | std::ios::in | std::ios::out);
    REQUIRE(f.good());
    f.seekg(static_cast<std::streamoff>(offset_));
    const int c = f.get();
    REQUIRE(c != EOF);
    f.seekp(static_cast<std::streamoff>(offset_));
    f.put(static_cast<char>(c ^ 0x20));
    REQUIRE(f.good());
  }
  std::string path_;
  uint64_t offset_;
};

TEST_CASE("one flipped byte is caught: header at open, resident at load, records at verify") {
  TempDir dir;
  for (Layout layout : {Layout::kNeuron, Layout::kDip, Layout::kSplit}) {
    const std::string good = dir.File("good.sparrow");
    ConvertOptions options;
    options.layout = layout;
    options.record_type = TensorType::kQ8_0;
    options.force = true;
    ConvertGgufToBundle(Stories(), good, options);
    const std::vector<uint8_t> original = ReadAll(good);
    const Bundle b = Bundle::Open(good);

    // Every byte of the header region, sampled, is protected.
    const std::string path = dir.File("bad.sparrow");
    WriteAll(path, original);
    for (uint64_t at = 0; at < b.header_bytes(); at += (at < 64 ? 1 : 37)) {
      CAPTURE(at);
      const FlippedByte flip(path, at);
      const std::string msg = ErrorOf([&] { Bundle::Open(path); });
      CHECK(Contains(msg, path));
      if (at >= 64 || (at >= 24 && at < 60)) {
        CHECK(Contains(msg, "header checksum mismatch"));
      } else {
        CHECK((Contains(msg, "magic") || Contains(msg, "version") || Contains(msg, "header")));
      }
    }

    // Resident section: open succeeds, loading names the section.
    for (uint64_t at : {b.resident_offset(), b.resident_offset() + b.resident_bytes() / 2,
                        b.resident_offset() + b.resident_bytes() - 1}) {
      const FlippedByte flip(path, at);
      const Bundle damaged = Bundle::Open(path);
      const std::string msg = ErrorOf([&] { damaged.LoadResident(); });
      CHECK(Contains(msg, "resident section checksum mismatch"));
      CHECK(Contains(msg, path));
    }

    // A record of each kind: its first and last payload bytes and its CRC
    // itself; the message names layer, kind and unit; neighbours still pass.
    for (const UnitGroup& g : b.groups()) {
      if (g.layer != b.n_layers() - 1 && g.layer != 0) continue;
      const uint32_t unit = g.n_units / 2 + 1;
      for (uint64_t within : {uint64_t{0}, uint64_t{g.payload_bytes} - 1, uint64_t{g.record_bytes} - 1}) {
        const uint64_t at = g.UnitOffset(unit) + within;
        std::vector<uint8_t> bytes = original;
        bytes[at] ^= 0x01;
        const Bundle fine = Bundle::Open(good);  // records are not read at open
        const std::string msg = ErrorOf([&] { fine.VerifyRecord(g, unit, bytes.data() + g.UnitOffset(unit)); });
        CHECK(Contains(msg, StrCat("layer ", g.layer, " ")));
        CHECK(Contains(msg, std::string(bundle::RecordKindName(g.kind))));
        CHECK(Contains(msg, StrCat("unit ", unit, " ")));
        CHECK(Contains(msg, good));
        fine.VerifyRecord(g, unit - 1, bytes.data() + g.UnitOffset(unit - 1));
        fine.VerifyRecord(g, unit + 1, bytes.data() + g.UnitOffset(unit + 1));
      }
    }
    // VerifyAll reads everything and finds a damaged record on disk.
    Bundle::Open(path).VerifyAll();
    {
      const UnitGroup& g = b.groups().back();
      const FlippedByte flip(path, g.UnitOffset(3) + 1);
      const std::string msg = ErrorOf([&] { Bundle::Open(path).VerifyAll(); });
      CHECK(Contains(msg, StrCat("layer ", g.layer, " ", bundle::RecordKindName(g.kind), " unit 3 ")));
    }
    CHECK(ReadAll(path) == original);
    Bundle::Open(path).LoadResident();
    ::unlink(path.c_str());
  }
}

// A pass that fails part way (here a damaged record, read in the middle of
// the model) must leave the streamed FFN ready for the next pass: a server
// answers the next request after one failed. Once the file is whole again,
// the same session computes what a fresh model computes.
TEST_CASE("a streamed model works on after a pass that failed part way") {
  TempDir dir;
  const std::string path = dir.File("stories.sparrow");
  ConvertOptions convert;
  convert.record_type = TensorType::kQ8_0;
  ConvertGgufToBundle(Stories(), path, convert);
  const Bundle b = Bundle::Open(path);
  const UnitGroup& middle = b.groups()[b.groups().size() / 2];

  EngineOptions options;
  options.n_ctx = 64;
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 301, 29};
  LoadedModel fresh = OpenModel(path, options);
  const std::unique_ptr<Session> reference_session = fresh.NewSession();
  Session& reference = *reference_session;
  const float* want_logits = reference.Eval(prompt.data(), prompt.size(), false);
  const std::vector<float> want(want_logits, want_logits + fresh.model->config().n_vocab);

  LoadedModel loaded = OpenModel(path, options);
  const std::unique_ptr<Session> owned = loaded.NewSession();
  Session& session = *owned;
  {
    const FlippedByte flip(path, middle.UnitOffset(middle.n_units / 2) + 3);
    const std::string msg = ErrorOf([&] { session.Eval(prompt.data(), prompt.size(), false); });
    CHECK(Contains(msg, "checksum"));
  }
  CHECK(session.n_past() == 0);
  const float* got = session.Eval(prompt.data(), prompt.size(), false);
  for (size_t i = 0; i < want.size(); ++i) REQUIRE(got[i] == want[i]);
  // Only completed passes are in the statistics.
  CHECK(loaded.streamed->stats().per_token().size() == 1);
  CHECK_FALSE(loaded.streamed->stats().open());
}

// A Q4_0S or Q4_0 dip bundle's column sums, and a neuron bundle's down
// parts, go through ops::RowAxpysInt where the CPU has the integer form
// (the bundle bounds each group's block scales): the logits stay within
// the rounding of the multiples of the reference kernels', dense and
// pruned, a batch's tokens as when they come one by one.
TEST_CASE("a bundle's integer column sums stay near the reference kernels") {
  const std::pair<TensorType, Layout> cases[] = {{TensorType::kQ4_0S, Layout::kDip},
                                                 {TensorType::kQ4_0, Layout::kDip},
                                                 {TensorType::kQ4_0S, Layout::kNeuron},
                                                 {TensorType::kQ4_0, Layout::kNeuron}};
  for (const std::pair<TensorType, Layout>& c : cases) {
    // (Plain variables: Clang 14's lambdas, CAPTURE's, cannot take
    // structured bindings.)
    const TensorType type = c.first;
    const Layout layout = c.second;
    CAPTURE(TensorTypeName(type));
    CAPTURE(static_cast<int>(layout));
    TempDir dir;
    const std::string path = dir.File("bundle.sparrow");
    ConvertOptions convert;
    convert.layout = layout;
    convert.record_type = type;
    ConvertGgufToBundle(Stories(), path, convert);
    const Bundle bundle = Bundle::Open(path);
    for (const UnitGroup& g : bundle.groups()) CHECK(g.largest_scale > 0.0f);
    const std::string usable = ops::RowAxpyIntSums::Usable(type) ? "yes" : "no";
    MESSAGE(TensorTypeName(type) << " integer column sums on this CPU: " << usable);

    const std::vector<int32_t> prompt = {1, 403, 407, 261, 301, 29, 88, 310};
    // The neuron layout has no ranking to prune by.
    const std::vector<SparsityKind> kinds =
        layout == Layout::kDip ? std::vector{SparsityKind::kDense, SparsityKind::kDip}
                               : std::vector{SparsityKind::kDense};
    for (SparsityKind kind : kinds) {
      CAPTURE(static_cast<int>(kind));
      EngineOptions options;
      options.n_ctx = 64;
      options.sparsity.kind = kind;
      options.sparsity.density = kind == SparsityKind::kDense ? 1.0 : 0.5;
      const auto logits = [&](bool one_by_one) {
        LoadedModel loaded = OpenModel(path, options);
        const size_t v = loaded.model->config().n_vocab;
        const std::unique_ptr<Session> session = loaded.NewSession();
        std::vector<float> out;
        if (one_by_one) {
          for (int32_t token : prompt) {
            const float* l = session->Eval(&token, 1, false);
            out.insert(out.end(), l, l + v);
          }
        } else {
          const float* l = session->Eval(prompt.data(), prompt.size(), true);
          out.assign(l, l + prompt.size() * v);
        }
        return out;
      };
      const std::vector<float> batch = logits(false), single = logits(true);
      ops::SetKernelMode(ops::KernelMode::kReference);
      const std::vector<float> reference = logits(false);
      ops::SetKernelMode(ops::KernelMode::kFast);
      REQUIRE(batch.size() == reference.size());
      double largest = 0.0, off = 0.0, batch_off = 0.0;
      for (size_t i = 0; i < batch.size(); ++i) {
        largest = std::max(largest, std::fabs(double(reference[i])));
        off = std::max(off, std::fabs(double(batch[i]) - reference[i]));
        batch_off = std::max(batch_off, std::fabs(double(batch[i]) - single[i]));
      }
      // Measured (Zen 4, integer sums): dip 5e-4 of the largest logit
      // dense, 1.1e-2 pruned (a unit crossing a top-K boundary moves a
      // token's logits more); neuron 7.6e-3, as with the float sums: its
      // dot products take 8-bit activations (the dip layout has none). A
      // batch's tokens got the bits of single ones.
      const double bound = kind == SparsityKind::kDip  ? 5e-2
                           : layout == Layout::kNeuron ? 2e-2
                                                       : 2e-3;
      CHECK(off <= bound * largest);
      CHECK(batch_off <= 1e-3 * largest);
    }
  }
}

// A NaN in the feed-forward's input reaches its output: the integer sums
// would count a NaN coefficient as zero, so a token with one takes the
// float sums (before this was checked coefficient by coefficient,
// std::max passed a NaN over when finding the step).
TEST_CASE("a NaN entering a bundle's integer column sums reaches the output") {
  for (Layout layout : {Layout::kDip, Layout::kNeuron}) {
    CAPTURE(static_cast<int>(layout));
    TempDir dir;
    const std::string path = dir.File("bundle.sparrow");
    ConvertOptions convert;
    convert.layout = layout;
    convert.record_type = TensorType::kQ4_0S;
    ConvertGgufToBundle(Stories(), path, convert);
    EngineOptions options;
    options.n_ctx = 16;
    LoadedModel loaded = OpenModel(path, options);
    REQUIRE(loaded.streamed != nullptr);
    const size_t d = loaded.model->config().d_model;
    std::vector<float> x(d), out(d, 0.0f);
    for (size_t i = 0; i < d; ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
    // Finite input first: finite output (the integer path where the CPU has it).
    loaded.streamed->BeginPass(1);
    loaded.streamed->Forward(0, x.data(), 1, out.data());
    loaded.streamed->EndPass(true);
    for (float v : out) REQUIRE(std::isfinite(v));
    x[5] = std::numeric_limits<float>::quiet_NaN();
    std::fill(out.begin(), out.end(), 0.0f);
    loaded.streamed->BeginPass(1);
    loaded.streamed->Forward(0, x.data(), 1, out.data());
    loaded.streamed->EndPass(true);
    size_t nans = 0;
    for (float v : out) nans += std::isnan(v);
    CHECK(nans > 0);
  }
}

// Pages wholly inside [p, p + n) that are in memory (mincore), of at least
// eight such pages.
size_t BackedPagesWithin(const uint8_t* p, uint64_t n) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t begin = (start + page - 1) / page * page;
  const uintptr_t end = (start + n) / page * page;
  REQUIRE(end > begin + 8 * page);
  std::vector<unsigned char> in_core((end - begin) / page);
  REQUIRE(::mincore(reinterpret_cast<void*>(begin), end - begin, in_core.data()) == 0);
  size_t backed = 0;
  for (unsigned char c : in_core) backed += c & 1;
  return backed;
}

// Under a DRAM budget the embedding table (stories260K's is not the output
// head's) stays on flash: the same logits, its memory neither charged nor
// backed (it passed through a small buffer as the section loaded), and a
// row that changed in the file since it was loaded refused with one line,
// the session working on once the file is whole again.
TEST_CASE("under a budget a bundle's embedding table is read from flash, each row checked") {
  TempDir dir;
  const std::string path = dir.File("stories.sparrow");
  ConvertGgufToBundle(Stories(), path, ConvertOptions{});
  const Bundle b = Bundle::Open(path);
  const gguf::GgufFile resident = b.LoadResident();
  const gguf::TensorInfo* table = resident.FindTensor("token_embd.weight");
  REQUIRE(table != nullptr);
  const uint64_t row_bytes = table->n_bytes / table->rows();

  EngineOptions options;
  options.n_ctx = 64;
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 301, 29};
  LoadedModel fresh = OpenModel(path, options);
  CHECK_FALSE(fresh.model->weights().embedding_row);
  const std::unique_ptr<Session> reference = fresh.NewSession();
  const float* want_logits = reference->Eval(prompt.data(), prompt.size(), false);
  const std::vector<float> want(want_logits, want_logits + fresh.model->config().n_vocab);
  uint64_t resident_without = 0;
  for (const auto& [what, bytes] : fresh.budget->items()) {
    if (Contains(what, "resident")) resident_without = bytes;
  }

  options.dram_budget = 64ull << 20;
  LoadedModel loaded = OpenModel(path, options);
  REQUIRE(loaded.model->weights().embedding_row);
  uint64_t resident_with = 0, checksums = 0;
  for (const auto& [what, bytes] : loaded.budget->items()) {
    if (Contains(what, "resident")) {
      CHECK(Contains(what, "embeddings read from flash"));
      resident_with = bytes;
    }
    if (what == "embedding row checksums") checksums = bytes;
  }
  CHECK(checksums == 4 * table->rows());
  // The table's whole pages are not charged (all but at most two)...
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  CHECK(resident_without - resident_with + 2 * page >= table->n_bytes);
  CHECK(resident_without - resident_with <= table->n_bytes);
  // ...and none of them is in memory.
  CHECK(BackedPagesWithin(loaded.model->weights().token_embd.data, table->n_bytes) == 0);

  const std::unique_ptr<Session> session = loaded.NewSession();
  {
    const float* got = session->Eval(prompt.data(), prompt.size(), false);
    for (size_t i = 0; i < want.size(); ++i) REQUIRE(got[i] == want[i]);
  }
  session->Reset();
  const uint64_t row_403 = b.resident_offset() + resident.data_offset() + table->offset +
                           403 * row_bytes;
  {
    const FlippedByte flip(path, row_403 + 5);
    const std::string msg = ErrorOf([&] { session->Eval(prompt.data(), prompt.size(), false); });
    CHECK(msg == StrCat(path, ": the embedding of token 403 (file offset ", row_403,
                        ") differs from the one loaded: the bundle changed while in use"));
  }
  session->Reset();
  const float* got = session->Eval(prompt.data(), prompt.size(), false);
  for (size_t i = 0; i < want.size(); ++i) REQUIRE(got[i] == want[i]);

  // The section's header, read first to plan the table, damaged: the
  // section's checksum names it, as without a budget.
  const FlippedByte flip(path, b.resident_offset() + 9);
  CHECK(Contains(ErrorOf([&] { OpenModel(path, options); }), "resident section checksum mismatch"));
}

// LoadResident can pass one tensor through a small buffer instead of
// keeping it: every row once, in order, the same bytes; the section's
// checksum still covers them; the rest of the section as without it.
// ReadResidentHeader gives the section's header alone, from its first bytes.
TEST_CASE("the resident section loads with one tensor passed through in rows") {
  TempDir dir;
  const std::string path = dir.File("stories.sparrow");
  ConvertGgufToBundle(Stories(), path, ConvertOptions{});
  const Bundle b = Bundle::Open(path);
  const gguf::GgufFile whole = b.LoadResident();
  const gguf::GgufFile header = b.ReadResidentHeader();
  REQUIRE(header.tensors().size() == whole.tensors().size());
  CHECK(header.data_offset() == whole.data_offset());
  for (size_t i = 0; i < whole.tensors().size(); ++i) {
    CHECK(header.tensors()[i].name == whole.tensors()[i].name);
    CHECK(header.tensors()[i].offset == whole.tensors()[i].offset);
    CHECK(header.tensors()[i].n_bytes == whole.tensors()[i].n_bytes);
    CHECK(header.tensors()[i].data == nullptr);
  }
  const gguf::TensorInfo* table = whole.FindTensor("token_embd.weight");
  REQUIRE(table != nullptr);
  const uint64_t row_bytes = table->n_bytes / table->rows();
  CHECK(Bundle::PassedTensorBytes(header, *header.FindTensor("token_embd.weight")) + 2 * 4096 >=
        table->n_bytes);

  std::vector<uint8_t> seen;
  uint64_t next_row = 0;
  const Bundle::PassedTensor pass{"token_embd.weight",
                                  [&](uint64_t first, uint64_t count, const uint8_t* bytes) {
                                    CHECK(first == next_row);
                                    CHECK(count >= 1);
                                    next_row = first + count;
                                    seen.insert(seen.end(), bytes, bytes + count * row_bytes);
                                  }};
  const gguf::GgufFile passed = b.LoadResident(&pass);
  CHECK(next_row == table->rows());
  // Its pages in the loaded section were never written, so never backed;
  // the whole load's are.
  CHECK(BackedPagesWithin(passed.FindTensor("token_embd.weight")->data, table->n_bytes) == 0);
  CHECK(BackedPagesWithin(table->data, table->n_bytes) > 0);
  REQUIRE(seen.size() == table->n_bytes);
  CHECK(std::memcmp(seen.data(), table->data, seen.size()) == 0);
  for (const gguf::TensorInfo& t : whole.tensors()) {
    if (t.name == "token_embd.weight") continue;
    CAPTURE(t.name);
    const gguf::TensorInfo* p = passed.FindTensor(t.name);
    REQUIRE(p != nullptr);
    CHECK(std::memcmp(p->data, t.data, t.n_bytes) == 0);
  }

  // A changed byte in the passed tensor fails the section's checksum, as
  // it does without passing it.
  const uint64_t in_table = b.resident_offset() + whole.data_offset() + table->offset +
                            7 * row_bytes + 3;
  {
    const FlippedByte flip(path, in_table);
    const std::string without = ErrorOf([&] { b.LoadResident(); });
    CHECK(Contains(without, "resident section checksum mismatch"));
    const Bundle::PassedTensor quiet{"token_embd.weight",
                                     [](uint64_t, uint64_t, const uint8_t*) {}};
    CHECK(ErrorOf([&] { b.LoadResident(&quiet); }) == without);
  }
  const Bundle::PassedTensor absent{"no_such.weight", [](uint64_t, uint64_t, const uint8_t*) {}};
  CHECK_THROWS_AS(b.LoadResident(&absent), std::logic_error);
}

// A bundle's model has no FFN weights: its sessions run the engine's one
// streamed FFN (its unit caches are what the budget holds), taking turns.
// A session cannot be made without it, and two passes cannot overlap.
TEST_CASE("a bundle's sessions share its streamed FFN one pass at a time") {
  TempDir dir;
  const std::string path = dir.File("stories.sparrow");
  ConvertGgufToBundle(Stories(), path, ConvertOptions{});
  EngineOptions options;
  options.n_ctx = 64;
  LoadedModel loaded = OpenModel(path, options);
  CHECK_FALSE(loaded.model->has_ffn_weights());
  CHECK_THROWS_AS(Session(*loaded.model, 64), std::logic_error);
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 301, 29};
  const std::unique_ptr<Session> a = loaded.NewSession(), b = loaded.NewSession();
  const float* la = a->Eval(prompt.data(), prompt.size(), false);
  const std::vector<float> first(la, la + loaded.model->config().n_vocab);
  const float* lb = b->Eval(prompt.data(), prompt.size(), false);
  for (size_t i = 0; i < first.size(); ++i) REQUIRE(lb[i] == first[i]);
  CHECK(loaded.streamed->stats().per_token().size() == 2);
  loaded.ffn->BeginPass(1);
  CHECK_THROWS_AS(b->Eval(prompt.data(), 1, false), std::logic_error);
  loaded.ffn->EndPass(true);
  CHECK(b->n_past() == prompt.size());
}

TEST_CASE("a re-quantized GGUF counts what it converted; a type no weight can take is refused") {
  TempDir dir;
  const std::string out = dir.File("st.gguf");
  // stories260K's rows are 64 (and 172) wide: Q4_0 takes the 64-wide ones,
  // Q4_K's 256-element blocks none, and nothing is written then.
  const GgufWriteSummary q4_0 = WriteGguf(Stories(), out, false, {}, TensorType::kQ4_0);
  CHECK(q4_0.requantized > 0);
  CHECK(q4_0.kept == 5);
  CHECK(q4_0.kept_row_elems == 172);
  const gguf::GgufFile written = gguf::GgufFile::Open(out);
  size_t q4_tensors = 0;
  for (const gguf::TensorInfo& t : written.tensors()) q4_tensors += t.type == TensorType::kQ4_0;
  CHECK(q4_tensors == q4_0.requantized);
  const std::string other = dir.File("st-q4k.gguf");
  CHECK(ErrorOf([&] { WriteGguf(Stories(), other, false, {}, TensorType::kQ4_K); }) ==
        "convert: no weight can be re-quantized to q4_K: rows of 64 elements are not whole "
        "blocks of 256");
  CHECK(dir.EntryCount() == 1);
}

TEST_CASE("a truncated bundle is refused at open") {
  TempDir dir;
  const std::string good = dir.File("good.sparrow");
  ConvertOptions options;
  options.layout = Layout::kDip;
  options.record_type = TensorType::kF16;
  ConvertGgufToBundle(Stories(), good, options);
  const std::vector<uint8_t> original = ReadAll(good);
  const Bundle b = Bundle::Open(good);
  const UnitGroup& last = b.groups().back();
  const std::string path = dir.File("cut.sparrow");
  for (uint64_t size : {uint64_t{0}, uint64_t{10}, uint64_t{64}, b.header_bytes() - 1,
                        b.resident_offset() + 100, last.offset + last.record_bytes * 3 + 5,
                        uint64_t{original.size()} - 4096, uint64_t{original.size()} - 1}) {
    CAPTURE(size);
    WriteAll(path, std::vector<uint8_t>(original.begin(), original.begin() + static_cast<long>(size)));
    const std::string msg = ErrorOf([&] { Bundle::Open(path); });
    CHECK(Contains(msg, path));
    CHECK((Contains(msg, "truncated") || Contains(msg, "too short")));
  }
  CHECK(Contains(ErrorOf([&] { Bundle::Open(dir.File("missing.sparrow")); }), "cannot open"));
  CHECK(Contains(ErrorOf([&] { Bundle::Open(Stories()); }), "it is a GGUF file"));
  CHECK_FALSE(Bundle::LooksLikeBundle(Stories()));
}

// ---- Structural validation behind a valid checksum ------------------------

// Where a header key's value starts in a bundle's bytes (the key is found
// with its length prefix, so one key cannot match inside another).
uint64_t ValueOffset(const std::vector<uint8_t>& bytes, const std::string& key) {
  std::vector<uint8_t> pattern(8);
  for (int i = 0; i < 8; ++i) pattern[i] = static_cast<uint8_t>(uint64_t{key.size()} >> (8 * i));
  pattern.insert(pattern.end(), key.begin(), key.end());
  const auto it = std::search(bytes.begin(), bytes.end(), pattern.begin(), pattern.end());
  REQUIRE(it != bytes.end());
  return static_cast<uint64_t>(it - bytes.begin()) + pattern.size() + 4;  // past the type id
}

// Recomputes the header CRC so that only the structural checks can object.
void Restamp(std::vector<uint8_t>& bytes) {
  uint64_t header_end = 0;
  for (int i = 0; i < 8; ++i) header_end |= uint64_t{bytes[16 + i]} << (8 * i);
  const uint32_t crc = Crc32c(bytes.data() + 64, header_end - 64, Crc32c(bytes.data(), 60));
  for (int i = 0; i < 4; ++i) bytes[60 + i] = static_cast<uint8_t>(crc >> (8 * i));
}

void PutLE(std::vector<uint8_t>& bytes, uint64_t at, uint64_t value, int width) {
  for (int i = 0; i < width; ++i) bytes[at + i] = static_cast<uint8_t>(value >> (8 * i));
}

TEST_CASE("header contents are validated, not only checksummed") {
  TempDir dir;
  const std::string good = dir.File("good.sparrow");
  ConvertOptions options;
  options.record_type = TensorType::kQ4_0;
  ConvertGgufToBundle(Stories(), good, options);
  const std::vector<uint8_t> original = ReadAll(good);
  const Bundle b = Bundle::Open(good);
  const std::string path = dir.File("edited.sparrow");

  struct Edit {
    const char* what;
    std::function<void(std::vector<uint8_t>&)> apply;
    const char* message;
  };
  const std::string perm0 = bundle::keys::GroupPermutationKey(0);
  const std::vector<Edit> edits = {
      {"a permutation with a repeated slot",
       [&](std::vector<uint8_t>& v) {
         const uint64_t at = ValueOffset(v, perm0) + 4 + 8;  // element type, count
         PutLE(v, at + 4, 0, 4);                              // unit 1 -> slot 0
       },
       "not a permutation"},
      {"a permutation slot out of range",
       [&](std::vector<uint8_t>& v) { PutLE(v, ValueOffset(v, perm0) + 12, 1u << 20, 4); },
       "not a permutation"},
      {"record_bytes that disagrees with the model",
       [&](std::vector<uint8_t>& v) {
         PutLE(v, ValueOffset(v, bundle::keys::kGroupRecordBytes) + 12, 12345, 4);
       },
       "record_bytes"},
      {"a misaligned resident section",
       [&](std::vector<uint8_t>& v) {
         PutLE(v, ValueOffset(v, bundle::keys::kResidentOffset), b.resident_offset() + 8, 8);
       },
       "not a multiple of 4096"},
      {"a group overlapping the resident section",
       [&](std::vector<uint8_t>& v) {
         PutLE(v, ValueOffset(v, bundle::keys::kGroupOffset) + 12, b.resident_offset(), 8);
       },
       "overlap"},
      {"a section past the end of the file",
       [&](std::vector<uint8_t>& v) {
         PutLE(v, ValueOffset(v, bundle::keys::kGroupOffset) + 12, uint64_t{1} << 40, 8);
       },
       "extends past the end"},
      {"an unknown layout",
       [&](std::vector<uint8_t>& v) { v[ValueOffset(v, bundle::keys::kLayout) + 8] = 'X'; },
       "unknown bundle layout"},
      {"a missing key",
       [&](std::vector<uint8_t>& v) {
         v[ValueOffset(v, bundle::keys::kRecordType) - 5] = 'X';  // last char of the key
       },
       "lacks 'sparrow.record_type'"},
      {"a key of the wrong type",
       [&](std::vector<uint8_t>& v) {
         PutLE(v, ValueOffset(v, bundle::keys::kResidentBytes) - 4, 11, 4);  // u64 -> i64
       },
       "expected u64"},
      {"a wrong version", [&](std::vector<uint8_t>& v) { PutLE(v, 8, 3, 4); },
       "version 3 is not supported"},
      {"a version 1 bundle (records not bound to their place)",
       [&](std::vector<uint8_t>& v) { PutLE(v, 8, 1, 4); }, "re-convert it"},
      {"a negative largest block scale",
       [&](std::vector<uint8_t>& v) {
         PutLE(v, ValueOffset(v, bundle::keys::kGroupLargestScale) + 12, 0xBF800000u, 4);  // -1
       },
       "largest block scale -1"},
      {"an infinite largest block scale",
       [&](std::vector<uint8_t>& v) {
         PutLE(v, ValueOffset(v, bundle::keys::kGroupLargestScale) + 12, 0x7F800000u, 4);
       },
       "largest block scale inf"},
      {"largest block scales of the wrong type",
       [&](std::vector<uint8_t>& v) {
         PutLE(v, ValueOffset(v, bundle::keys::kGroupLargestScale), 4, 4);  // f32 -> u32
       },
       "not an array of"},
  };
  for (const Edit& e : edits) {
    CAPTURE(e.what);
    std::vector<uint8_t> bytes = original;
    e.apply(bytes);
    Restamp(bytes);
    WriteAll(path, bytes);
    const std::string msg = ErrorOf([&] { Bundle::Open(path); });
    CHECK(Contains(msg, e.message));
    CHECK(Contains(msg, path));
  }
  // The untouched bytes, re-stamped, still open: the edits caused the errors.
  std::vector<uint8_t> same = original;
  Restamp(same);
  CHECK(same == original);

  // A bundle written before the largest scales were (the key renamed
  // away) opens with them unknown.
  std::vector<uint8_t> older = original;
  older[ValueOffset(older, bundle::keys::kGroupLargestScale) - 5] = 'X';  // last char of the key
  Restamp(older);
  WriteAll(path, older);
  const Bundle opened = Bundle::Open(path);
  CHECK(b.groups()[0].largest_scale > 0.0f);
  for (const UnitGroup& g : opened.groups()) CHECK(g.largest_scale == 0.0f);
}

TEST_CASE("records are bound to their bundle and their place") {
  TempDir dir;
  ConvertOptions options;
  options.layout = Layout::kNeuron;
  options.record_type = TensorType::kQ8_0;
  const std::string a_path = dir.File("a.sparrow"), b_path = dir.File("b.sparrow");
  ConvertGgufToBundle(Stories(), a_path, options);
  ConvertGgufToBundle(Stories(), b_path, options);
  const std::vector<uint8_t> a = ReadAll(a_path), other = ReadAll(b_path);
  const Bundle ba = Bundle::Open(a_path);
  // Same source, same options: the same weights, but two bundles.
  CHECK(ba.bundle_id() != Bundle::Open(b_path).bundle_id());
  CHECK(ba.bundle_id() != 0);
  const UnitGroup& g = *ba.FindGroup(1, RecordKind::kNeuron);
  const std::string path = dir.File("edited.sparrow");

  // A record of another bundle of the same shape, written over this one's
  // (dd conv=notrunc): identical payload, refused.
  {
    std::vector<uint8_t> bytes = a;
    const uint64_t at = g.UnitOffset(5);
    REQUIRE(std::memcmp(bytes.data() + at, other.data() + at, g.payload_bytes) == 0);
    std::memcpy(bytes.data() + at, other.data() + at, g.record_bytes);
    WriteAll(path, bytes);
    const std::string msg = ErrorOf([&] { Bundle::Open(path).VerifyAll(); });
    CHECK(Contains(msg, "layer 1 neuron unit 5 "));
    CHECK(Contains(msg, "another bundle"));
  }
  // A header whose group offsets were swapped (layers 1 and 2, same shape),
  // checksum recomputed: every offset is in bounds, every record refused.
  {
    std::vector<uint8_t> bytes = a;
    const uint64_t offsets = ValueOffset(bytes, bundle::keys::kGroupOffset) + 12;
    const UnitGroup& g2 = *ba.FindGroup(2, RecordKind::kNeuron);
    PutLE(bytes, offsets + 8 * 1, g2.offset, 8);
    PutLE(bytes, offsets + 8 * 2, g.offset, 8);
    Restamp(bytes);
    WriteAll(path, bytes);
    const Bundle swapped = Bundle::Open(path);
    CHECK(swapped.FindGroup(1, RecordKind::kNeuron)->offset == g2.offset);
    CHECK(Contains(ErrorOf([&] { swapped.VerifyAll(); }), "layer 1 neuron unit 0 "));
  }
  // Two units' slots swapped in a permutation: refused too.
  {
    std::vector<uint8_t> bytes = a;
    const uint64_t perm = ValueOffset(bytes, bundle::keys::GroupPermutationKey(1)) + 12;
    PutLE(bytes, perm, 1, 4);
    PutLE(bytes, perm + 4, 0, 4);
    Restamp(bytes);
    WriteAll(path, bytes);
    // Slot 0 now claims to hold unit 1.
    CHECK(Contains(ErrorOf([&] { Bundle::Open(path).VerifyAll(); }), "layer 1 neuron unit 1 "));
  }
  Bundle::Open(a_path).VerifyAll();
}

TEST_CASE("an open bundle keeps reading its own file when the path is replaced") {
  TempDir dir;
  ConvertOptions options;
  options.layout = Layout::kDip;
  options.record_type = TensorType::kQ8_0;
  const std::string path = dir.File("model.sparrow"), next = dir.File("next.sparrow");
  ConvertGgufToBundle(Stories(), path, options);
  options.record_type = TensorType::kF16;  // another bundle, same shape
  ConvertGgufToBundle(Stories(), next, options);
  const std::vector<uint8_t> original = ReadAll(path);
  const Bundle b = Bundle::Open(path);
  // `convert --force` or `mv` replaces the path while the model runs.
  REQUIRE(::rename(next.c_str(), path.c_str()) == 0);
  const gguf::GgufFile resident = b.LoadResident();  // the old resident section
  CHECK(resident.tensors().size() > 0);
  b.VerifyAll();                                      // and the old records
  const UnitGroup& g = b.groups().back();
  for (IoMode mode : {IoMode::kPread, IoMode::kDirect, IoMode::kMmap}) {
    CAPTURE(IoModeName(mode));
    std::unique_ptr<Loader> loader = MakeLoader(mode, LoaderSource(b.path(), b.fd()), 2);
    const uint64_t begin = g.UnitOffset(3) / 4096 * 4096;
    AlignedBuffer<uint8_t> buffer(8192, 4096);
    loader->ReadAll({{begin, 8192, buffer.data()}});
    const uint64_t within = g.UnitOffset(3) - begin;
    REQUIRE(within + g.record_bytes <= 8192);
    b.VerifyRecord(g, 3, buffer.data() + within);
    CHECK(std::memcmp(buffer.data() + within, original.data() + g.UnitOffset(3), g.record_bytes) == 0);
  }
  // A fresh open sees the new file.
  CHECK(Bundle::Open(path).record_type() == TensorType::kF16);
}

// ---- The writer's API: permutations, misuse ----------------------------

TEST_CASE("BundleWriter stores records in slot order under a permutation") {
  TempDir dir;
  const std::string path = dir.File("perm.sparrow");
  const uint32_t d_model = 64, d_ff = 96;
  {
    bundle::BundleWriter w(path, false);
    w.AddMetadata("general.architecture", gguf::Value::String("llama"));
    w.AddMetadata("llama.block_count", gguf::Value::U32(2));
    w.AddMetadata("llama.embedding_length", gguf::Value::U32(d_model));
    w.AddMetadata("llama.feed_forward_length", gguf::Value::U32(d_ff));
    w.DeclareGroups(Layout::kDip, TensorType::kF32, 2, d_model, d_ff);
    REQUIRE(w.groups().size() == 4);
    std::vector<uint32_t> reversed(w.groups()[3].n_units);
    for (uint32_t u = 0; u < reversed.size(); ++u) reversed[u] = static_cast<uint32_t>(reversed.size()) - 1 - u;
    w.SetPermutation(3, reversed);
    CHECK_THROWS_AS(w.SetPermutation(2, std::vector<uint32_t>(d_model, 0)), std::logic_error);
    gguf::GgufWriter& r = w.BeginResident();
    r.AddTensor("token_embd.weight", {d_model, 3}, TensorType::kF32);
    std::vector<float> embd(d_model * 3, 0.5f);
    r.WriteTensorData(embd.data(), embd.size() * sizeof(float));
    w.EndResident();
    CHECK_THROWS_AS(w.Finish(), std::logic_error);  // records missing
    size_t index = 0;
    while (const UnitGroup* g = w.NextGroup()) {
      // Slot s holds the unit the permutation puts there; its payload is
      // that unit's id (and the group index) so the reader can be checked.
      std::vector<uint32_t> unit_of_slot(g->n_units);
      for (uint32_t u = 0; u < g->n_units; ++u) unit_of_slot[g->slot_of_unit[u]] = u;
      std::vector<uint8_t> records(size_t{g->n_units} * g->record_bytes);
      for (uint32_t s = 0; s < g->n_units; ++s) {
        std::vector<float> payload(g->payload_bytes / 4, static_cast<float>(unit_of_slot[s] + 1000 * index));
        std::memcpy(records.data() + size_t{s} * g->record_bytes, payload.data(), g->payload_bytes);
      }
      const uint32_t n = g->n_units;
      w.AppendRecords(records.data(), 5);
      w.AppendRecords(records.data() + 5 * size_t{g->record_bytes}, n - 5);
      ++index;
    }
    w.Finish();
  }
  const Bundle b = Bundle::Open(path);
  const std::vector<uint8_t> file = ReadAll(path);
  for (size_t i = 0; i < b.groups().size(); ++i) {
    const UnitGroup& g = b.groups()[i];
    for (uint32_t u = 0; u < g.n_units; ++u) {
      const uint8_t* rec = file.data() + g.UnitOffset(u);
      b.VerifyRecord(g, u, rec);
      float first;
      std::memcpy(&first, rec, sizeof(first));
      REQUIRE(first == static_cast<float>(u + 1000 * i));
    }
  }
  CHECK(b.FindGroup(1, RecordKind::kDipOutput) == &b.groups()[3]);
  CHECK(b.FindGroup(1, RecordKind::kNeuron) == nullptr);
  CHECK(b.FindGroup(2, RecordKind::kDipInput) == nullptr);
  CHECK(b.groups()[3].slot_of_unit[0] == d_ff - 1);
  CHECK(b.LoadResident().tensors().size() == 1);
}

// ---- Output handling -----------------------------------------------------

TEST_CASE("convert refuses to overwrite without force and leaves nothing when it fails") {
  TempDir dir;
  const std::string out = dir.File("model.sparrow");
  WriteAll(out, {'k', 'e', 'e', 'p'});
  ConvertOptions options;
  CHECK(Contains(ErrorOf([&] { ConvertGgufToBundle(Stories(), out, options); }), "exists"));
  CHECK(ReadAll(out) == std::vector<uint8_t>{'k', 'e', 'e', 'p'});
  CHECK(dir.Entries() == std::vector<std::string>{"model.sparrow"});
  options.force = true;
  ConvertGgufToBundle(Stories(), out, options);
  CHECK(Bundle::Open(out).record_type() == TensorType::kF32);  // the source's type
  ::unlink(out.c_str());

  // Bad inputs: nothing is created.
  CHECK(Contains(ErrorOf([&] { ConvertGgufToBundle(dir.File("absent.gguf"), out, options); }),
                 "absent.gguf"));
  const std::string not_gguf = dir.File("not.gguf");
  WriteAll(not_gguf, std::vector<uint8_t>(1000, 7));
  ErrorOf([&] { ConvertGgufToBundle(not_gguf, out, options); });
  options.record_type = TensorType::kQ4_K;
  CHECK(Contains(ErrorOf([&] { ConvertGgufToBundle(Stories(), out, options); }), "q4_K"));
  options.record_type.reset();
  CHECK(dir.Entries() == std::vector<std::string>{"not.gguf"});

  // A write failing half way (the file size limit stands in for a full
  // disk): an error, and neither the output nor the temporary file remains.
  struct rlimit old_limit {};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
  void (*old_handler)(int) = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 300 << 10;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  std::string msg;
  try {
    ConvertGgufToBundle(Stories(), out, options);
  } catch (const InputError& e) {
    msg = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::signal(SIGXFSZ, old_handler);
  CHECK(Contains(msg, "cannot write"));
  CHECK(dir.Entries() == std::vector<std::string>{"not.gguf"});
}

}  // namespace
}  // namespace sparrow
