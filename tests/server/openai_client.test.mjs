// `sparrow serve` through OpenAI's own npm client: chat and completions,
// streamed and not, stop sequences, greedy output against `sparrow run` and
// llama.cpp's reference, and the errors a client sees.
// Environment: SPARROW_URL (http://host:port), SPARROW_API_KEY,
// REFERENCE_FILE (llama.cpp's greedy 200 tokens), RUN_FILE (`sparrow run`'s).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const baseURL = process.env.SPARROW_URL + "/v1";
const apiKey = process.env.SPARROW_API_KEY;
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const model = "stories260K";
const prompt = "Once upon a time";

test("models lists the served model", async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [model]);
});

test("greedy completion equals llama.cpp's reference and sparrow run", async () => {
  const r = await client.completions.create({ model, prompt, max_tokens: 200, temperature: 0 });
  const text = prompt + r.choices[0].text;
  const strip = (s) => s.replace(/[ \t]+$/gm, "").trimEnd();
  assert.equal(strip(text), strip(readFileSync(process.env.REFERENCE_FILE, "utf8")));
  assert.equal(strip(text), strip(readFileSync(process.env.RUN_FILE, "utf8")));
  assert.equal(r.object, "text_completion");
  assert.equal(r.usage.completion_tokens, 200);
  assert.equal(r.usage.prompt_tokens, 5);
  assert.equal(r.usage.total_tokens, 205);
  assert.equal(r.choices[0].finish_reason, "length");
});

test("streamed completion gives the same text in pieces", async () => {
  const whole = await client.completions.create({ model, prompt, max_tokens: 40, temperature: 0 });
  const stream = await client.completions.create({ model, prompt, max_tokens: 40, temperature: 0, stream: true });
  let text = "";
  let chunks = 0;
  let finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0].text;
    chunks += 1;
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  assert.equal(text, whole.choices[0].text);
  assert.ok(chunks > 10, `only ${chunks} chunks`);
  assert.equal(finish, "length");
});

test("chat completion, non-stream and stream, agree at temperature 0", async () => {
  const messages = [
    { role: "system", content: "You tell stories." },
    { role: "user", content: "Once upon a time" },
  ];
  const r = await client.chat.completions.create({ model, messages, max_tokens: 30, temperature: 0 });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.role, "assistant");
  assert.ok(r.choices[0].message.content.length > 0);
  assert.ok(r.usage.prompt_tokens > 10);

  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 30, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = "";
  let role = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices.length === 0) continue;
    role = chunk.choices[0].delta.role ?? role;
    text += chunk.choices[0].delta.content ?? "";
  }
  assert.equal(role, "assistant");
  assert.equal(text, r.choices[0].message.content);
  assert.equal(usage.completion_tokens, r.usage.completion_tokens);
  // The second request found the same prompt in the KV cache.
  assert.ok(usage.prompt_tokens_details.cached_tokens > 0);
});

test("stop sequences end the text before them, streamed or not", async () => {
  const full = (await client.completions.create({ model, prompt, max_tokens: 60, temperature: 0 })).choices[0].text;
  const stop = full.slice(20, 26);
  const r = await client.completions.create({ model, prompt, max_tokens: 60, temperature: 0, stop: [stop, "zzzz"] });
  assert.equal(r.choices[0].text, full.slice(0, full.indexOf(stop)));
  assert.equal(r.choices[0].finish_reason, "stop");
  const stream = await client.completions.create({ model, prompt, max_tokens: 60, temperature: 0, stop, stream: true });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0].text;
  assert.equal(text, r.choices[0].text);
});

test("a seed makes sampling repeatable", async () => {
  const ask = () => client.completions.create({ model, prompt, max_tokens: 30, temperature: 1, seed: 1234 });
  assert.equal((await ask()).choices[0].text, (await ask()).choices[0].text);
});

test("log-probabilities, streamed or not, in both endpoints' shapes", async () => {
  const messages = [{ role: "user", content: prompt }];
  const ask = { model, messages, max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 2 };
  const r = await client.chat.completions.create(ask);
  const entries = r.choices[0].logprobs.content;
  assert.equal(entries.length, r.usage.completion_tokens);
  assert.equal(entries.map((e) => e.token).join(""), r.choices[0].message.content);
  for (const e of entries) {
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 2);
    assert.equal(e.top_logprobs[0].token, e.token);  // greedy takes the likeliest
    assert.ok(e.top_logprobs[1].logprob <= e.top_logprobs[0].logprob);
    assert.equal(Buffer.from(e.bytes).toString("utf8"), e.token);
  }
  // Streamed: the chunks' entries, joined, are the same tokens.
  const streamed = [];
  for await (const chunk of await client.chat.completions.create({ ...ask, stream: true })) {
    streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []));
  }
  assert.deepEqual(streamed.map((e) => e.token), entries.map((e) => e.token));
  // Figures agree to rounding: the second request reuses the first one's KV
  // cache and evaluates the prompt's last token alone (a GEMV, not the batch
  // product), which moves later log-probabilities by about 1e-4.
  streamed.forEach((e, i) => assert.ok(Math.abs(e.logprob - entries[i].logprob) < 2e-3,
                                       `token ${i}: ${e.logprob} streamed, ${entries[i].logprob} not`));

  const c = await client.completions.create({ model, prompt, max_tokens: 6, temperature: 0, logprobs: 3 });
  const lp = c.choices[0].logprobs;
  assert.equal(lp.tokens.join(""), c.choices[0].text);
  assert.equal(lp.token_logprobs.length, lp.tokens.length);
  assert.equal(lp.text_offset[1], lp.tokens[0].length);
  assert.ok(Object.keys(lp.top_logprobs[0]).includes(lp.tokens[0]));
  const plain = await client.chat.completions.create({ model, messages, max_tokens: 3 });
  assert.equal(plain.choices[0].logprobs ?? null, null);
});

test("echoed prompts scored as lm-evaluation-harness asks (token ids, echo, logprobs)", async () => {
  // Its loglikelihood payload: the prompt's token ids, one greedy token,
  // the chosen tokens' log-probabilities, the prompt echoed.
  const ask = { model, temperature: 0, max_tokens: 1, logprobs: 1, seed: 1234, echo: true };
  const byText = await client.completions.create({ ...ask, prompt });
  const lp = byText.choices[0].logprobs;
  assert.equal(lp.tokens.length, byText.usage.prompt_tokens + 1);
  assert.equal(lp.token_logprobs[0], null);
  assert.equal(lp.top_logprobs[0], null);
  assert.equal(byText.choices[0].text, lp.tokens.join(""));
  // A prompt as token ids gives the same figures as its text.
  const short = await client.completions.create({ ...ask, prompt: "Once upon" });
  const byIds = await client.completions.create({ ...ask, prompt: [[1, 403, 407]] });  // BOS " Once" " upon"
  assert.deepEqual(byIds.choices[0].logprobs.tokens, short.choices[0].logprobs.tokens);
  byIds.choices[0].logprobs.token_logprobs.slice(1).forEach((v, i) =>
    assert.ok(Math.abs(v - short.choices[0].logprobs.token_logprobs[i + 1]) < 1e-4));
  // The harness's greedy check: each scored token is its position's best.
  for (let i = 1; i < lp.tokens.length; i++) {
    assert.ok(lp.token_logprobs[i] <= Math.max(...Object.values(lp.top_logprobs[i])) + 1e-6);
  }
});

test("penalties and logit biases shape the reply", async () => {
  const greedy = { model, prompt, max_tokens: 200, temperature: 0 };
  const plain = (await client.completions.create(greedy)).choices[0].text;
  assert.ok(plain.includes("\n"), "the plain greedy text has a line break");
  // Token 13 is stories260K's byte token for "\n": banned, no line breaks.
  const banned = (await client.completions.create({ ...greedy, logit_bias: { 13: -100 } })).choices[0].text;
  assert.ok(!banned.includes("\n"));
  const penalized = (await client.completions.create({ ...greedy, presence_penalty: 1.5 })).choices[0].text;
  assert.notEqual(penalized, plain);
  await assert.rejects(
    client.completions.create({ ...greedy, logit_bias: { 600: 1 } }),
    (e) => e instanceof OpenAI.BadRequestError && /not in the vocabulary/.test(e.message));
});

test("errors arrive as the client's error classes", async () => {
  await assert.rejects(
    client.chat.completions.create({ model, messages: [], max_tokens: 5 }),
    (e) => e instanceof OpenAI.BadRequestError && /messages/.test(e.message));
  await assert.rejects(
    client.completions.create({ model, prompt, temperature: 7 }),
    (e) => e instanceof OpenAI.BadRequestError && /temperature/.test(e.message));
  await assert.rejects(
    client.completions.create({ model, prompt: "a ".repeat(3000), max_tokens: 5 }),
    (e) => e instanceof OpenAI.BadRequestError && /context/.test(e.message));
  // What the server cannot give is refused, not silently left out of the reply.
  await assert.rejects(
    client.completions.create({ model, prompt, max_tokens: 5, best_of: 3 }),
    (e) => e instanceof OpenAI.BadRequestError && /'best_of' is not supported/.test(e.message));
  const wrongKey = new OpenAI({ baseURL, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(wrongKey.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
  await assert.rejects(
    client.completions.create({ model, prompt: "x".repeat(100000), max_tokens: 1 }),
    (e) => e instanceof OpenAI.APIError && e.status === 413);
});
