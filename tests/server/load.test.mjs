// Load and abuse: 64 concurrent clients, a few hundred random or malformed
// bodies, and clients that go away mid-reply. Every request gets an answer
// of 200, 400, 401, 413 or 503 (503 with Retry-After), and the server stays
// up. Environment: SPARROW_URL, SPARROW_API_KEY.
import { test } from "node:test";
import assert from "node:assert/strict";

const url = process.env.SPARROW_URL;
const auth = { Authorization: "Bearer " + process.env.SPARROW_API_KEY };

// A small deterministic generator, so a failure can be replayed.
let state = 12345;
const random = () => ((state = (state * 1103515245 + 12345) % 2147483648) / 2147483648);
const pick = (list) => list[Math.floor(random() * list.length)];

async function post(path, body, headers = auth) {
  const response = await fetch(url + path, {
    method: "POST", headers: { "Content-Type": "application/json", ...headers }, body,
  });
  const text = await response.text();
  return { status: response.status, text, retryAfter: response.headers.get("retry-after") };
}

function checkAnswer(r, what) {
  assert.ok([200, 400, 401, 413, 503].includes(r.status), `${what}: status ${r.status}`);
  if (r.status === 503) assert.ok(r.retryAfter, `${what}: 503 without Retry-After`);
  if (r.status !== 200) assert.ok(JSON.parse(r.text).error.message, `${what}: no error object`);
}

// One streamed request: its status, and the time to the first event that
// carries text (queue wait and prompt included) and to the end.
async function streamed(path, body) {
  const started = performance.now();
  const response = await fetch(url + path, {
    method: "POST", headers: { "Content-Type": "application/json", ...auth }, body: JSON.stringify(body),
  });
  const result = { status: response.status, retryAfter: response.headers.get("retry-after"), text: "" };
  if (response.status !== 200) {
    result.text = await response.text();
    return result;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (!event.startsWith("data: {")) continue;  // heartbeats, [DONE]
      const choice = JSON.parse(event.slice(6)).choices[0];
      const piece = choice ? (choice.text ?? choice.delta?.content ?? "") : "";
      if (piece && result.firstToken === undefined) result.firstToken = performance.now() - started;
    }
  }
  result.total = performance.now() - started;
  return result;
}

const percentile = (values, p) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p / 100 * sorted.length))];
};

async function rssKiB() {
  const { readFileSync } = await import("node:fs");
  const status = readFileSync(`/proc/${process.env.SPARROW_PID}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+)/.exec(status)[1]);
}

test("64 concurrent streaming clients all get an answer", async () => {
  const rssBefore = await rssKiB();
  const started = performance.now();
  const requests = [];
  for (let i = 0; i < 64; i++) {
    requests.push(i % 2
      ? streamed("/v1/chat/completions", { messages: [{ role: "user", content: `Story ${i}` }], max_tokens: 32, stream: true })
      : streamed("/v1/completions", { prompt: `Once upon a time ${i}`, max_tokens: 32, stream: true }));
  }
  const answers = await Promise.all(requests);
  const seconds = (performance.now() - started) / 1000;
  answers.forEach((r, i) => checkAnswer(r, `client ${i}`));
  const served = answers.filter((r) => r.status === 200);
  const statuses = {};
  for (const r of answers) statuses[r.status] = (statuses[r.status] || 0) + 1;
  assert.equal(served.length + (statuses[503] || 0), 64);
  assert.ok(served.length >= 5, `only ${served.length} served`);
  served.forEach((r, i) => assert.ok(r.firstToken !== undefined, `served request ${i} streamed no text`));
  const ttft = served.map((r) => r.firstToken);
  const rssAfter = await rssKiB();
  console.log(`load: 64 clients in ${seconds.toFixed(2)} s: ${(served.length / seconds).toFixed(1)} served/s; ` +
              `statuses ${JSON.stringify(statuses)}; time to first token p50 ${percentile(ttft, 50).toFixed(1)} ms, ` +
              `p99 ${percentile(ttft, 99).toFixed(1)} ms; server RSS ${(rssBefore / 1024).toFixed(1)} -> ` +
              `${(rssAfter / 1024).toFixed(1)} MiB (budget ${process.env.SPARROW_BUDGET_MIB} MiB)`);
  if (process.env.SPARROW_RSS_CHECK !== "0") {
    assert.ok(rssAfter <= Number(process.env.SPARROW_BUDGET_MIB) * 1024 * 1.05,
              `server RSS ${rssAfter} KiB is over the budget`);
  }
});

function randomBody() {
  const valid = JSON.stringify({ messages: [{ role: "user", content: "hi" }], max_tokens: 4 });
  const fields = ["temperature", "top_p", "top_k", "max_tokens", "seed", "stop", "stream", "n", "messages", "prompt"];
  const values = [null, -1, 0, 1, 2.5, 1e309, "x", "", [], {}, [1, "a"], true, 99999999999999999999, "\u0000", "\ud800"];
  switch (Math.floor(random() * 8)) {
    case 0: return valid.slice(0, Math.floor(random() * valid.length));  // cut short
    case 1: {  // flipped bytes
      const chars = [...valid];
      for (let k = 0; k < 3; k++) chars[Math.floor(random() * chars.length)] = String.fromCharCode(Math.floor(random() * 256));
      return chars.join("");
    }
    case 2: return JSON.stringify({ [pick(fields)]: pick(values), [pick(fields)]: pick(values) });
    case 3: return JSON.stringify({ messages: [{ role: "user", content: "hi" }], [pick(fields)]: pick(values), max_tokens: 2 });
    case 4: return "[".repeat(Math.floor(random() * 5000));  // deep nesting
    case 5: return Buffer.from(Array.from({ length: 200 }, () => Math.floor(random() * 256))).toString("latin1");
    case 6: return JSON.stringify({ messages: [{ role: pick(["user", "bot", 3]), content: pick(values) }], max_tokens: 2 });
    default: return JSON.stringify(pick(values));
  }
}

test("a few hundred random and malformed bodies", async () => {
  const counts = {};
  for (let i = 0; i < 300; i += 10) {
    const batch = [];
    for (let k = 0; k < 10; k++) {
      const path = pick(["/v1/chat/completions", "/v1/completions"]);
      const body = randomBody();
      batch.push(post(path, body).then((r) => { checkAnswer(r, `${path} ${JSON.stringify(body).slice(0, 80)}`); counts[r.status] = (counts[r.status] || 0) + 1; }));
    }
    await Promise.all(batch);
  }
  console.log("load: 300 random or malformed bodies, statuses:", JSON.stringify(counts));
  assert.ok(counts[400] > 100);
});

test("missing keys, wrong methods and huge bodies", async () => {
  checkAnswer(await post("/v1/completions", "{}", {}), "no key");
  assert.equal((await post("/v1/completions", "{}", {})).status, 401);
  assert.equal((await post("/v1/completions", "x".repeat(200000))).status, 413);
  assert.equal((await fetch(url + "/v1/nothing", { headers: auth })).status, 404);
  assert.equal((await fetch(url + "/health")).status, 200);
});

test("clients that leave mid-reply stop their generation", async () => {
  const health = async () => (await fetch(url + "/health")).json();
  const before = (await health()).requests_cancelled;
  for (let i = 0; i < 5; i++) {
    const controller = new AbortController();
    const response = await fetch(url + "/v1/completions", {
      method: "POST", headers: { "Content-Type": "application/json", ...auth }, signal: controller.signal,
      body: JSON.stringify({ prompt: "Once upon a time", max_tokens: 100000, stream: true }),
    });
    const reader = response.body.getReader();
    await reader.read();
    controller.abort();
  }
  // The model is free again: a short request completes.
  const r = await post("/v1/completions", JSON.stringify({ prompt: "Once", max_tokens: 4 }));
  assert.equal(r.status, 200);
  const after = await health();
  assert.equal(after.status, "ok");
  assert.ok(after.requests_cancelled > before, `no generation was stopped: ${JSON.stringify(after)}`);
  console.log("load: after 5 clients left mid-reply:", JSON.stringify(after), "RSS", (await rssKiB() / 1024).toFixed(1), "MiB");
});
