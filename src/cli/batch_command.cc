// sparrow batch: many prompts from a JSONL file, decoded a block at a time
// (src/block_decoder.h), one JSON line out per prompt, in input order.
//
// Input lines: {"id": any, "prompt": "...", "n_predict": N, "temperature": T,
// "top_k": K, "top_p": P, "min_p": M, "seed": S, "repeat_penalty": R, "presence_penalty":
// A, "frequency_penalty": F}; only "prompt" is required (the others
// default to the command line's -n, --temp, --top-k, --top-p, penalties,
// and to --seed plus the line's index, so each prompt's sampling is reproducible
// whatever block it lands in). Blank lines are skipped; anything else that
// is not such an object is refused with its line number before any work.
// Output lines: {"id", "text", "stop", "prompt_tokens", "generated_tokens",
// "seconds"}, each as soon as every line before it is done: to stdout, or
// with -o to OUT.partial (base/line_journal.h), each line on disk before
// the next, renamed to OUT when the last is in. A run stopped part way
// keeps the lines it finished; --resume checks them against the prompts
// (same ids, in order) and decodes only the rest.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/line_journal.h"
#include "base/output_file.h"
#include "base/read_file.h"
#include "base/timer.h"
#include "src/block_decoder.h"
#include "src/cli/commands.h"
#include "src/cli/common.h"
#include "src/engine.h"
#include "src/model/model.h"

namespace sparrow::cli {

namespace {

using json = nlohmann::json;

struct Job {
  json id;
  std::string prompt;
  long long n_predict = 0;  // -1: until end of text or context
  SamplerParams sampling;
};

constexpr uint64_t kMaxJobsFileBytes = uint64_t{1} << 30;

// The lines of `path` as jobs; InputError "FILE:LINE: reason" for a bad one.
std::vector<Job> ReadJobs(const std::string& path, long long default_n,
                          const SamplerParams& defaults) {
  const std::string text = ReadWholeFile(path, "prompts file", kMaxJobsFileBytes);
  std::vector<Job> jobs;
  size_t line_no = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto fail = [&](const std::string& why) {
      ThrowInputError(path, ":", line_no, ": ", why);
    };
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      fail(std::string("not valid JSON (") + e.what() + ")");
    }
    if (!j.is_object()) fail("each line must be a JSON object");
    Job job;
    job.id = json(jobs.size());
    job.n_predict = default_n;
    job.sampling = defaults;
    job.sampling.seed = defaults.seed + jobs.size();
    bool has_prompt = false;
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& key = it.key();
      const json& v = it.value();
      auto number = [&](double lo, double hi) {
        if (!v.is_number()) fail("\"" + key + "\" must be a number");
        const double x = v.get<double>();
        if (!(x >= lo && x <= hi)) fail("\"" + key + "\" is out of range");
        return x;
      };
      auto integer = [&](double lo, double hi) {
        if (!v.is_number_integer() && !v.is_number_unsigned()) {
          fail("\"" + key + "\" must be an integer");
        }
        return static_cast<long long>(number(lo, hi));
      };
      if (key == "id") {
        job.id = v;
      } else if (key == "prompt") {
        if (!v.is_string()) fail("\"prompt\" must be a string");
        job.prompt = v.get<std::string>();
        has_prompt = true;
      } else if (key == "n_predict") {
        job.n_predict = integer(-1, 1e9);
      } else if (key == "temperature") {
        job.sampling.temperature = static_cast<float>(number(0, 1e6));
      } else if (key == "top_k") {
        job.sampling.top_k = static_cast<int>(integer(0, 1e9));
      } else if (key == "top_p") {
        job.sampling.top_p = static_cast<float>(number(1e-9, 1));
      } else if (key == "seed") {
        if (!v.is_number_unsigned()) fail("\"seed\" must be a non-negative integer");
        job.sampling.seed = v.get<uint64_t>();
      } else if (key == "min_p") {
        job.sampling.min_p = static_cast<float>(number(0, 1));
      } else if (key == "repeat_penalty") {
        job.sampling.repeat_penalty = static_cast<float>(number(1e-6, 1e6));
      } else if (key == "presence_penalty") {
        job.sampling.presence_penalty = static_cast<float>(number(-1e6, 1e6));
      } else if (key == "frequency_penalty") {
        job.sampling.frequency_penalty = static_cast<float>(number(-1e6, 1e6));
      } else {
        fail("unknown field \"" + key +
             "\" (known: id, prompt, n_predict, temperature, top_k, top_p, min_p, seed, "
             "repeat_penalty, presence_penalty, frequency_penalty)");
      }
    }
    if (!has_prompt) fail("\"prompt\" is missing");
    jobs.push_back(std::move(job));
  }
  if (jobs.empty()) ThrowInputError(path, ": no prompts (one JSON object per line)");
  return jobs;
}

// How many prompts an interrupted run finished: the lines it left in the
// journal must be the results of the first prompts, in order (their ids
// are compared). InputError naming the line otherwise, since then the
// journal belongs to another job.
size_t CheckKeptResults(const LineJournal& journal, const std::vector<Job>& jobs,
                        const std::string& jobs_path) {
  const std::vector<std::string>& kept = journal.kept();
  if (kept.size() > jobs.size()) {
    ThrowInputError("'", journal.path(), "' holds ", kept.size(), " results but ", jobs_path,
                    " has only ", jobs.size(), " prompts: it is another job's");
  }
  for (size_t i = 0; i < kept.size(); ++i) {
    const json line = json::parse(kept[i], nullptr, /*allow_exceptions=*/false);
    if (!line.is_object() || !line.contains("id") || !line.contains("text")) {
      ThrowInputError("'", journal.path(), "':", i + 1, ": not a result line of sparrow batch");
    }
    if (line["id"] != jobs[i].id) {
      ThrowInputError("'", journal.path(), "':", i + 1, ": the result for id ", line["id"].dump(),
                      ", but prompt ", i + 1, " of ", jobs_path, " has id ", jobs[i].id.dump(),
                      ": it is another job's");
    }
  }
  return kept.size();
}

// Progress on stderr: one line redrawn on a terminal; with --progress
// elsewhere, a line every tenth of the prompts.
class BatchProgress {
 public:
  explicit BatchProgress(bool forced) : terminal_(isatty(STDERR_FILENO) == 1), forced_(forced) {}
  ~BatchProgress() { Finish(); }
  // Ends the redrawn line (before other output on stderr).
  void Finish() {
    if (drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }
  void Update(const BlockProgress& p) {
    const double now = NowSeconds();
    if (terminal_) {
      if (now - last_ < 0.1 && p.done < p.total) return;
      last_ = now;
      std::fprintf(stderr, "\rbatch: %zu/%zu prompts, %zu tokens, %.1f tok/s   ", p.done, p.total,
                   p.generated, p.generated / std::max(p.seconds, 1e-9));
      drawn_ = true;
    } else if (forced_) {
      const size_t tenth = p.done * 10 / std::max<size_t>(p.total, 1);
      if (static_cast<int>(tenth) <= last_tenth_) return;
      last_tenth_ = static_cast<int>(tenth);
      std::fprintf(stderr, "batch: %zu/%zu prompts, %zu tokens, %.1f tok/s\n", p.done, p.total,
                   p.generated, p.generated / std::max(p.seconds, 1e-9));
    }
  }

 private:
  bool terminal_, forced_, drawn_ = false;
  double last_ = 0.0;
  int last_tenth_ = 0;
};

}  // namespace

int BatchCommand(int argc, char** argv) {
  cxxopts::Options options("sparrow batch",
                           "Generate text for every prompt of a JSONL file, decoding a block of "
                           "prompts together (each weight read once per block).");
  options.add_options()
      ("m,model", "Model file (GGUF or bundle)", cxxopts::value<std::string>())
      ("f,file", "Prompts, one JSON object per line: {\"id\":..., \"prompt\":..., "
                 "\"n_predict\":..., \"temperature\":...}", cxxopts::value<std::string>())
      ("o,output", "Write the results here (JSONL; each line goes to OUTPUT.partial as it is "
                   "done, renamed to OUTPUT at the end; default: stdout)",
       cxxopts::value<std::string>())
      ("resume", "Keep the results an interrupted run with the same -o left in OUTPUT.partial "
                 "and decode only the prompts after them")
      ("block", "Sequences decoded together, or auto (the most the DRAM budget holds, up to 32)",
       cxxopts::value<std::string>()->default_value("auto"))
      ("n,n-predict", "Tokens to generate per prompt unless its line says (-1: until end of "
                      "text or context)", cxxopts::value<int>()->default_value("128"))
      ("progress", "Show progress on stderr also when it is not a terminal");
  AddContextOption(options, "the most a prompt and its n_predict reach, at most the model's "
                            "context or 4096");
  AddSamplingOptions(options);
  // f32: a pass mixes sequences (prompts with others' decoding steps), and
  // bf16 rounding would let a sequence's text depend on its pass-mates.
  AddEngineOptions(options, "f32");
  AddModelOptions(options);
  AddStatsOptions(options);
  cxxopts::ParseResult args;
  if (!Parse(options, argc, argv, &args)) return 0;
  ApplyEngineOptions(args);

  const std::string model_path = Require(args, "model");
  const std::string jobs_path = Require(args, "file");
  const int n_predict = args["n-predict"].as<int>();
  if (n_predict < -1) ThrowInputError("-n must be -1 or more");
  const SamplerParams sampling = ParseSamplingOptions(args);
  const std::vector<Job> jobs = ReadJobs(jobs_path, n_predict, sampling);
  const std::string output = args.count("output") ? args["output"].as<std::string>() : "";
  if (!output.empty()) CheckWritable(output, "-o");
  const bool resume = args.count("resume") > 0;
  if (resume && output.empty()) ThrowInputError("--resume needs -o (the results to go on from)");
  std::optional<LineJournal> journal;
  size_t done_before = 0;
  if (!output.empty()) {
    journal.emplace(output, resume);
    done_before = CheckKeptResults(*journal, jobs, jobs_path);
    if (done_before == jobs.size()) {
      journal->Commit();
      std::fprintf(stderr, "batch: all %zu results were in %s already; wrote %s\n", jobs.size(),
                   LineJournal::PartialPath(output).c_str(), output.c_str());
      return 0;
    }
  }

  EngineOptions engine = ParseModelOptions(args, model_path);
  engine.n_ctx = ParseContextSize(args);
  // Without -c, the context is the most any job can reach (as run's), and
  // every sequence's KV cache is charged at it: --block auto fits more
  // sequences under a budget. A job without a length keeps the default.
  for (const Job& job : jobs) {
    const size_t reached = ContextReachedBy(job.prompt, job.n_predict);
    if (reached == 0) {
      engine.n_ctx_used_at_most = 0;
      break;
    }
    engine.n_ctx_used_at_most = std::max(engine.n_ctx_used_at_most, reached);
  }
  const std::string block_text = args["block"].as<std::string>();
  if (block_text == "auto") {
    engine.n_seqs = 0;
    engine.max_auto_seqs = std::min<size_t>(32, jobs.size() - done_before);
  } else {
    const std::vector<int> b = ParseIntList(block_text, "--block");
    if (b.size() != 1 || b[0] < 1) ThrowInputError("--block must be a positive number or auto");
    engine.n_seqs = static_cast<size_t>(b[0]);
  }
  const LoadedModel loaded = OpenModel(model_path, engine);
  const Model& model = *loaded.model;
  CheckLogitBias(sampling, model.config().n_vocab, "--logit-bias");
  const Tokenizer& tok = model.tokenizer();
  const size_t n_ctx = loaded.n_ctx;

  // Every prompt is checked, also those a resumed run has done already.
  std::vector<BlockRequest> requests(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    requests[i].prompt = tok.Encode(jobs[i].prompt, tok.add_bos());
    if (requests[i].prompt.empty()) {
      ThrowInputError(jobs_path, ": prompt ", i + 1,
                      " is empty and the model adds no BOS token");
    }
    if (requests[i].prompt.size() >= n_ctx) {
      ThrowInputError(jobs_path, ": prompt ", i + 1, " has ", requests[i].prompt.size(),
                      " tokens, which leaves no room in a context of ", n_ctx);
    }
    requests[i].n_predict = jobs[i].n_predict < 0 ? n_ctx : static_cast<size_t>(jobs[i].n_predict);
    requests[i].sampling = jobs[i].sampling;
  }
  if (args.count("stats") && !loaded.block_note.empty()) {
    std::fprintf(stderr, "%s\n", loaded.block_note.c_str());
  }

  const std::unique_ptr<Session> owned_session = loaded.NewSession(n_ctx, loaded.n_seqs);
  Session& session = *owned_session;
  BlockDecoder decoder(model, session);
  // Lines go out in input order: each waits here for those before it.
  std::map<size_t, std::string> pending;
  size_t next_out = done_before;
  auto emit = [&](size_t index, std::string line) {
    pending.emplace(index, std::move(line));
    for (auto it = pending.find(next_out); it != pending.end(); it = pending.find(next_out)) {
      if (journal) {
        journal->Append(it->second);
      } else {
        std::fwrite(it->second.data(), 1, it->second.size(), stdout);
        std::fflush(stdout);
        if (std::ferror(stdout)) ThrowInputError("cannot write to standard output");
      }
      pending.erase(it);
      ++next_out;
    }
  };
  const std::vector<BlockRequest> todo(requests.begin() + static_cast<ptrdiff_t>(done_before),
                                       requests.end());
  BatchProgress bar(args.count("progress") > 0);
  const double t0 = NowSeconds();
  size_t generated = 0, passes = 0;
  decoder.Run(
      todo,
      [&](BlockResult&& result) {
        BlockResult r = std::move(result);
        r.request += done_before;  // index in `jobs`
        nlohmann::ordered_json out;
        out["id"] = jobs[r.request].id;
        // The continuation as `sparrow run` prints it: the tokens' pieces
        // (Decode would drop a leading space, as at the start of a text).
        std::string text;
        for (int32_t t : r.generated) text += tok.TokenToPiece(t);
        out["text"] = text;
        out["stop"] = r.stop;
        out["prompt_tokens"] = requests[r.request].prompt.size();
        out["generated_tokens"] = r.generated.size();
        out["seconds"] = r.finish_seconds - r.start_seconds;
        emit(r.request, out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
      },
      [&](const BlockProgress& p) {
        generated = p.generated;
        passes = p.passes;
        bar.Update(p);
      });
  const double seconds = NowSeconds() - t0;
  bar.Finish();
  if (journal) journal->Commit();

  ReportStats(args, loaded);
  std::fprintf(stderr,
               "batch: %zu prompts%s, block %zu, %zu tokens generated in %.2f s (%zu passes): "
               "%.2f tok/s, peak rss: %.1f MiB\n",
               todo.size(),
               done_before > 0 ? StrCat(" (+", done_before, " done before this run)").c_str() : "",
               loaded.n_seqs, generated, seconds, passes,
               generated / std::max(seconds, 1e-9), PeakRssBytes() / (1024.0 * 1024.0));
  return 0;
}

}  // namespace sparrow::cli
