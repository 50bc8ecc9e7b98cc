// The OpenAI request rules (src/server/openai_api.h): what each endpoint
// accepts, the errors that name the field, and the shapes of responses.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "base/error.h"
#include "src/server/openai_api.h"

namespace sparrow::server {
namespace {

using nlohmann::json;

RequestDefaults Defaults() {
  RequestDefaults d;
  d.sampling.temperature = 0.8f;
  d.sampling.top_k = 40;
  d.n_vocab = 512;  // stories260K's, for logit_bias
  d.sampling.top_p = 0.95f;
  return d;
}

CompletionRequest Chat(const std::string& body) {
  return ParseCompletionRequest(body, true, Defaults(), 42);
}
CompletionRequest Plain(const std::string& body) {
  return ParseCompletionRequest(body, false, Defaults(), 42);
}

std::string ErrorOf(const std::string& body, bool chat) {
  try {
    ParseCompletionRequest(body, chat, Defaults(), 1);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("openai api: chat requests") {
  const CompletionRequest r = Chat(R"({"model": "x", "messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null}],
      "temperature": 0, "top_p": 0.5, "top_k": 3, "seed": 7, "max_tokens": 12,
      "stop": ["\n", "END"], "stream": true, "stream_options": {"include_usage": true},
      "frequency_penalty": 0, "user": "ignored"})");
  CHECK(r.chat);
  REQUIRE(r.messages.size() == 3);
  CHECK(r.messages[0].role == "system");
  CHECK(r.messages[1].content == "Hi there");
  CHECK(r.messages[2].content.empty());
  CHECK(r.generation.sampling.temperature == 0.0f);
  CHECK(r.generation.sampling.top_p == 0.5f);
  CHECK(r.generation.sampling.top_k == 3);
  CHECK(r.generation.sampling.seed == 7);
  CHECK(r.generation.max_tokens == 12);
  CHECK(r.generation.stop == std::vector<std::string>{"\n", "END"});
  CHECK(r.stream);
  CHECK(r.include_usage);

  const CompletionRequest d = Chat(R"({"messages": [{"role": "user", "content": "x"}]})");
  CHECK(d.generation.sampling.temperature == 0.8f);
  CHECK(d.generation.max_tokens == -1);
  CHECK(d.generation.sampling.seed == 21);  // from the seed source
  CHECK_FALSE(d.stream);
  CHECK(Chat(R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 5})")
            .generation.max_tokens == 5);
}

TEST_CASE("openai api: completion requests") {
  const CompletionRequest r = Plain(R"({"prompt": "Once", "stop": "x"})");
  CHECK_FALSE(r.chat);
  CHECK(r.prompt == "Once");
  CHECK(r.generation.max_tokens == 16);
  CHECK(r.generation.stop == std::vector<std::string>{"x"});
  CHECK(Plain(R"({"prompt": ["one"]})").prompt == "one");
}

TEST_CASE("openai api: bad requests name what is wrong") {
  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  const std::vector<std::pair<std::string, std::string>> chat_cases = {
      {"", "not valid JSON"},
      {"{", "not valid JSON"},
      {"[]", "must be a JSON object"},
      {"{}", "'messages' is required"},
      {R"({"messages": []})", "'messages' must be a non-empty list"},
      {R"({"messages": [3]})", "'messages[0]' must be an object"},
      {R"({"messages": [{"content": "x"}]})", "'messages[0].role' must be a string"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", "must be 'system', 'user' or 'assistant'"},
      {R"({"messages": [{"role": "user"}]})", "'messages[0].content' is required"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "must be a string or a list of text parts"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "parts of type 'text'"},
      {"{" + m + R"(, "temperature": "hot"})", "'temperature' must be a number"},
      {"{" + m + R"(, "temperature": 3})", "'temperature' must be between 0 and 2"},
      {"{" + m + R"(, "top_p": 0})", "'top_p' must be more than 0"},
      {"{" + m + R"(, "top_k": -1})", "'top_k' is out of range"},
      {"{" + m + R"(, "max_tokens": 0})", "'max_tokens' is out of range"},
      {"{" + m + R"(, "max_tokens": 1.5})", "'max_tokens' must be an integer"},
      {"{" + m + R"(, "max_tokens": 18446744073709551615})", "'max_tokens' is too large"},
      {"{" + m + R"(, "n": 2})", "'n' must be 1"},
      {"{" + m + R"(, "stream": "yes"})", "'stream' must be true or false"},
      {"{" + m + R"(, "stop": [1]})", "'stop' must be a string or a list of up to 4 strings"},
      {"{" + m + R"(, "stop": ["a","b","c","d","e"]})", "up to 4 strings"},
      {"{" + m + R"(, "stream_options": 1})", "'stream_options' must be an object"},
      // What the server does not do is refused, not silently left out.
      {"{" + m + R"(, "top_logprobs": 3})", "'top_logprobs' needs \"logprobs\": true"},
      {"{" + m + R"(, "logprobs": true, "top_logprobs": 21})", "'top_logprobs' is out of range"},
      {"{" + m + R"(, "logprobs": 1})", "'logprobs' must be true or false"},
      {"{" + m + R"(, "logit_bias": [1]})", "'logit_bias' must be an object"},
      {"{" + m + R"(, "logit_bias": {"x1": 5}})", "'logit_bias.x1' must be a token id"},
      {"{" + m + R"(, "logit_bias": {"1": "5"}})", "'logit_bias.1' must be a number"},
      {"{" + m + R"(, "logit_bias": {"1": 101}})", "'logit_bias.1' must be between -100 and 100"},
      {"{" + m + R"(, "logit_bias": {"999": 1}})", "'logit_bias': token 999 is not in the vocabulary (0..511)"},
      {"{" + m + R"(, "presence_penalty": 3})", "'presence_penalty' must be between -2 and 2"},
      {"{" + m + R"(, "min_p": 2})", "'min_p' must be between 0 and 1"},
      {"{" + m + R"(, "frequency_penalty": "x"})", "'frequency_penalty' must be a number"},
      {"{" + m + R"(, "tools": [{"type": "function"}]})", "'tools' is not supported"},
      {"{" + m + R"(, "tool_choice": "required"})", "'tool_choice' is not supported"},
      {"{" + m + R"(, "response_format": {"type": "json_object"}})", "'response_format' is not supported"},
  };
  for (const auto& [body, want] : chat_cases) {
    const auto& body_ = body;  // clang 14 cannot capture a structured binding
    CAPTURE(body_);
    CHECK(ErrorOf(body, true).find(want) != std::string::npos);
  }
  CHECK(ErrorOf("{}", false).find("'prompt' is required") != std::string::npos);
  CHECK(ErrorOf(R"({"prompt": ["a", "b"]})", false).find("one prompt per request") != std::string::npos);
  CHECK(ErrorOf(R"({"prompt": 1})", false).find("'prompt' must be a string") != std::string::npos);
  CHECK(ErrorOf(R"({"prompt": []})", false).find("'prompt' must be a string or a list of token ids") !=
        std::string::npos);
  CHECK(ErrorOf(R"({"prompt": [1, "a"]})", false).find("'prompt' must be") != std::string::npos);
  CHECK(ErrorOf(R"({"prompt": "x", "echo": true, "stream": true})", false)
            .find("'echo' is not supported with 'stream'") != std::string::npos);
  CHECK(ErrorOf(R"({"prompt": [1, 512]})", false).find("token 512, which is not in the vocabulary") !=
        std::string::npos);
  CHECK(ErrorOf(R"({"prompt": [-1]})", false).find("token -1") != std::string::npos);
  CHECK(ErrorOf(R"({"prompt": "x", "max_tokens": 0})", false).find("'max_tokens' is out of range") !=
        std::string::npos);
  CHECK(ErrorOf(R"({"prompt": "x", "logprobs": 6})", false).find("'logprobs' is out of range") !=
        std::string::npos);
  CHECK(ErrorOf(R"({"prompt": "x", "logprobs": true})", false).find("'logprobs' must be an integer") !=
        std::string::npos);
  for (const char* field : {R"("best_of": 2)",
                            R"("suffix": "x")"}) {
    CAPTURE(field);
    const std::string body = std::string(R"({"prompt": "x", )") + field + "}";
    CHECK(ErrorOf(body, false).find("is not supported") != std::string::npos);
  }
}

TEST_CASE("openai api: the default values of unsupported fields are accepted") {
  // Clients often send these spelled out; they ask for nothing more.
  const std::string chat = R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false,
      "top_logprobs": 0, "logit_bias": {}, "presence_penalty": 0, "frequency_penalty": 0.0,
      "tools": [], "tool_choice": "none", "function_call": "auto", "functions": null,
      "response_format": {"type": "text"}})";
  CHECK_NOTHROW(ParseCompletionRequest(chat, true, Defaults(), 1));
  const std::string completion = R"({"prompt": "x", "logprobs": null, "echo": false,
      "best_of": 1, "suffix": "", "logit_bias": {}, "presence_penalty": 0})";
  CHECK_NOTHROW(ParseCompletionRequest(completion, false, Defaults(), 1));
  // Fields that only the other endpoint checks are ignored here, as before.
  CHECK_NOTHROW(ParseCompletionRequest(R"({"prompt": "x", "tools": [1]})", false, Defaults(), 1));
}

TEST_CASE("openai api: responses, chunks and errors") {
  const CompletionRequest chat = Chat(R"({"messages": [{"role": "user", "content": "x"}]})");
  CompletionOutcome o;
  o.text = "Hello";
  o.finish_reason = "length";
  o.prompt_tokens = 10;
  o.cached_tokens = 4;
  o.completion_tokens = 3;
  const json r = CompletionResponse(chat, "chatcmpl-1", "m", 5, o);
  CHECK(r["object"] == "chat.completion");
  CHECK(r["choices"][0]["message"]["content"] == "Hello");
  CHECK(r["choices"][0]["finish_reason"] == "length");
  CHECK(r["usage"]["total_tokens"] == 13);
  CHECK(r["usage"]["prompt_tokens_details"]["cached_tokens"] == 4);
  CHECK(r["timings"]["prompt_n"] == 6);

  const json first = StreamChunk(chat, "id", "m", 5, "He", true, nullptr);
  CHECK(first["choices"][0]["delta"]["role"] == "assistant");
  CHECK(first["choices"][0]["delta"]["content"] == "He");
  CHECK(first["choices"][0]["finish_reason"].is_null());
  const json last = StreamChunk(chat, "id", "m", 5, "", false, "stop");
  CHECK(last["choices"][0]["delta"].empty());
  CHECK(last["choices"][0]["finish_reason"] == "stop");

  const CompletionRequest plain = Plain(R"({"prompt": "x"})");
  CHECK(CompletionResponse(plain, "cmpl-1", "m", 5, o)["choices"][0]["text"] == "Hello");
  CHECK(StreamChunk(plain, "id", "m", 5, "lo", false, nullptr)["object"] == "text_completion");

  const json e = ErrorBody("bad", "invalid_request_error");
  CHECK(e["error"]["message"] == "bad");
  CHECK(e["error"]["code"].is_null());
  CHECK(ServerSentEvent(json{{"a", 1}}) == "data: {\"a\":1}\n\n");
  // Invalid UTF-8 (a token cut inside a character) still makes valid JSON.
  CHECK(DumpJson(json("a\xC3")) == "\"a\xEF\xBF\xBD\"");
  CHECK(NewCompletionId(true).rfind("chatcmpl-", 0) == 0);
  CHECK(NewCompletionId(false) != NewCompletionId(false));
}

TEST_CASE("openai api: token-id prompts and echo, as evaluation harnesses send them") {
  // lm-evaluation-harness's loglikelihood request: token ids, one prompt in
  // a list, echo, the chosen tokens' log-probabilities.
  const CompletionRequest r = Plain(R"({"prompt": [[1, 403, 407]], "temperature": 0,
      "max_tokens": 1, "logprobs": 1, "echo": true, "seed": 1234})");
  CHECK(r.prompt_tokens == std::vector<int32_t>{1, 403, 407});
  CHECK(r.prompt.empty());
  CHECK(r.echo);
  CHECK(r.generation.prompt_logprobs);
  CHECK(r.generation.top_logprobs == 1);
  CHECK(Plain(R"({"prompt": [5, 6]})").prompt_tokens == std::vector<int32_t>{5, 6});
  CHECK(Plain(R"({"prompt": "x", "echo": true, "max_tokens": 0})").generation.max_tokens == 0);
  CHECK_FALSE(Plain(R"({"prompt": "x", "echo": true})").generation.prompt_logprobs);

  // The first echoed token has nothing before it: null figures.
  CompletionOutcome o;
  o.text = "ab";
  o.logprobs = {{"a", NAN, {}, 0}, {"b", -1.0f, {{"b", -1.0f}}, 1}};
  const json lp = CompletionResponse(r, "id", "m", 5, o)["choices"][0]["logprobs"];
  CHECK(lp["token_logprobs"][0].is_null());
  CHECK(lp["top_logprobs"][0].is_null());
  CHECK(lp["top_logprobs"][1]["b"] == -1.0);
  CHECK(DumpJson(lp).find("NaN") == std::string::npos);
}

TEST_CASE("openai api: penalties and logit biases reach the sampler") {
  const CompletionRequest r = Chat(R"({"messages": [{"role": "user", "content": "x"}],
      "presence_penalty": 0.5, "frequency_penalty": -1, "logit_bias": {"7": -100, "42": 2.5}})");
  CHECK(r.generation.sampling.presence_penalty == 0.5f);
  CHECK(r.generation.sampling.min_p == 0.0f);
  CHECK(Chat(R"({"messages": [{"role": "user", "content": "x"}], "min_p": 0.1})").generation.sampling.min_p ==
        0.1f);
  CHECK(r.generation.sampling.frequency_penalty == -1.0f);
  CHECK(r.generation.sampling.logit_bias ==
        std::vector<std::pair<int32_t, float>>{{42, 2.5f}, {7, -100.0f}});
  // Without them, the server's own (its command line's) stay.
  CHECK(Plain(R"({"prompt": "x"})").generation.sampling.logit_bias.empty());
  CHECK(Plain(R"({"prompt": "x"})").generation.sampling.presence_penalty == 0.0f);
}

TEST_CASE("openai api: log-probabilities, asked for and given in OpenAI's shapes") {
  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  CHECK(Chat("{" + m + "}").generation.top_logprobs == -1);
  CHECK(Chat("{" + m + R"(, "logprobs": true})").generation.top_logprobs == 0);
  CHECK(Chat("{" + m + R"(, "logprobs": true, "top_logprobs": 5})").generation.top_logprobs == 5);
  CHECK(Chat("{" + m + R"(, "logprobs": false, "top_logprobs": 0})").generation.top_logprobs == -1);
  CHECK(Plain(R"({"prompt": "x"})").generation.top_logprobs == -1);
  CHECK(Plain(R"({"prompt": "x", "logprobs": null})").generation.top_logprobs == -1);
  CHECK(Plain(R"({"prompt": "x", "logprobs": 0})").generation.top_logprobs == 0);
  CHECK(Plain(R"({"prompt": "x", "logprobs": 2})").generation.top_logprobs == 2);

  CompletionOutcome o;
  o.text = "Hi\xC3";  // the second token is half a character
  o.logprobs = {{"Hi", -0.5f, {{"Hi", -0.5f}, {"Ho", -1.5f}}, 0},
                {"\xC3", -2.0f, {{"x", -1.0f}, {"\xC3", -2.0f}}, 2}};
  const json chat = CompletionResponse(Chat("{" + m + R"(, "logprobs": true, "top_logprobs": 2})"),
                                       "id", "m", 5, o)["choices"][0]["logprobs"];
  REQUIRE(chat["content"].size() == 2);
  CHECK(chat["refusal"].is_null());
  CHECK(chat["content"][0]["token"] == "Hi");
  CHECK(chat["content"][0]["logprob"] == -0.5);
  CHECK(chat["content"][0]["bytes"] == json::array({72, 105}));
  CHECK(chat["content"][0]["top_logprobs"][1]["token"] == "Ho");
  CHECK(chat["content"][0]["top_logprobs"][1]["logprob"] == -1.5);
  CHECK(chat["content"][1]["bytes"] == json::array({0xC3}));  // the exact bytes
  CHECK(DumpJson(chat).find("\"\xEF\xBF\xBD\"") != std::string::npos);  // valid JSON

  const json plain =
      CompletionResponse(Plain(R"({"prompt": "x", "logprobs": 2})"), "id", "m", 5, o)["choices"][0]["logprobs"];
  CHECK(plain["tokens"] == json::array({"Hi", "\xC3"}));
  CHECK(plain["token_logprobs"] == json::array({-0.5, -2.0}));
  CHECK(plain["text_offset"] == json::array({0, 2}));
  CHECK(plain["top_logprobs"][0]["Ho"] == -1.5);
  CHECK(plain["top_logprobs"][1].size() == 2);
  // logprobs 0: the chosen tokens, no alternatives.
  CHECK(CompletionResponse(Plain(R"({"prompt": "x", "logprobs": 0})"), "id", "m", 5, o)
            ["choices"][0]["logprobs"]["top_logprobs"].is_null());
  // Not asked for: null, as before.
  CHECK(CompletionResponse(Chat("{" + m + "}"), "id", "m", 5, o)["choices"][0]["logprobs"].is_null());

  // A stream chunk carries the entries of the tokens it completes.
  const CompletionRequest streamed = Chat("{" + m + R"(, "logprobs": true, "stream": true})");
  const json chunk = StreamChunk(streamed, "id", "m", 5, "Hi", true, nullptr,
                                 std::span<const TokenLogprob>(o.logprobs).first(1));
  REQUIRE(chunk["choices"][0]["logprobs"]["content"].size() == 1);
  CHECK(chunk["choices"][0]["logprobs"]["content"][0]["token"] == "Hi");
  CHECK(StreamChunk(streamed, "id", "m", 5, "", false, "stop")["choices"][0]["logprobs"]["content"]
            .empty());
}

}  // namespace
}  // namespace sparrow::server
