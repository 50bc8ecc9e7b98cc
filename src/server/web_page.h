// The page `GET /` serves: a small chat client for the server's own
// /v1/chat/completions, streaming replies as they come (HTML and JS in one
// string, so the binary needs no files beside it).
#pragma once

#include <string_view>

namespace sparrow::server {

inline constexpr std::string_view kChatPageHtml = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sparrow chat</title>
<style>
  body { font: 16px/1.45 system-ui, sans-serif; max-width: 46rem; margin: 0 auto; padding: 1rem; }
  #log { min-height: 50vh; }
  .msg { white-space: pre-wrap; margin: .6rem 0; padding: .5rem .7rem; border-radius: .5rem; }
  .user { background: #e8f0fe; }
  .assistant { background: #f1f3f4; }
  .error { background: #fde8e8; }
  form { display: flex; gap: .5rem; }
  textarea { flex: 1; font: inherit; min-height: 3rem; }
  details { margin-bottom: 1rem; color: #444; }
  details input { width: 100%; margin: .2rem 0 .5rem; }
</style>
</head>
<body>
<h1>Sparrow chat</h1>
<details>
  <summary>Settings</summary>
  <label>System message <input id="system" placeholder="You are a helpful assistant."></label>
  <label>API key (if the server asks for one) <input id="key" type="password"></label>
  <label>Temperature <input id="temperature" type="number" min="0" max="2" step="0.1" value="0.8"></label>
  <label>Most tokens per reply (empty: no limit) <input id="max-tokens" type="number" min="1"></label>
</details>
<div id="log"></div>
<form id="form">
  <textarea id="input" placeholder="Type a message; Enter sends, Shift+Enter is a new line" required></textarea>
  <button id="send" type="submit">Send</button>
  <button id="stop" type="button" disabled>Stop</button>
</form>
<script>
"use strict";
const log = document.getElementById("log");
const input = document.getElementById("input");
const sendButton = document.getElementById("send");
const stopButton = document.getElementById("stop");
const history = [];
let controller = null;

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  log.appendChild(div);
  div.scrollIntoView({block: "end"});
  return div;
}

async function send(text) {
  history.push({role: "user", content: text});
  addMessage("user", text);
  const reply = addMessage("assistant", "");
  const messages = [];
  const system = document.getElementById("system").value.trim();
  if (system) messages.push({role: "system", content: system});
  messages.push(...history);
  const headers = {"Content-Type": "application/json"};
  const key = document.getElementById("key").value;
  if (key) headers["Authorization"] = "Bearer " + key;
  const request = {messages, stream: true,
                   temperature: Number(document.getElementById("temperature").value)};
  const maxTokens = document.getElementById("max-tokens").value;
  if (maxTokens) request.max_tokens = Number(maxTokens);
  controller = new AbortController();
  sendButton.disabled = true;
  stopButton.disabled = false;
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST", headers, signal: controller.signal,
      body: JSON.stringify(request),
    });
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      throw new Error((body.error && body.error.message) || response.statusText);
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (!event.startsWith("data: ")) continue;
        const data = event.slice(6);
        if (data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
        if (delta && delta.content) {
          reply.dataset.chunks = Number(reply.dataset.chunks || 0) + 1;
          reply.textContent += delta.content;
          reply.scrollIntoView({block: "end"});
        }
      }
    }
    history.push({role: "assistant", content: reply.textContent});
  } catch (e) {
    if (e.name === "AbortError") {
      history.push({role: "assistant", content: reply.textContent});
    } else {
      history.pop();  // the message got no answer: it is not sent again
      reply.className = "msg error";
      reply.textContent += (reply.textContent ? "\n" : "") + "Error: " + e.message;
    }
  } finally {
    controller = null;
    sendButton.disabled = false;
    stopButton.disabled = true;
    reply.dataset.done = "true";
  }
}

document.getElementById("form").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = input.value.trim();
  if (!text || controller) return;
  input.value = "";
  send(text);
});
input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    document.getElementById("form").requestSubmit();
  }
});
stopButton.addEventListener("click", () => controller && controller.abort());
</script>
</body>
</html>
)HTML";

}  // namespace sparrow::server
