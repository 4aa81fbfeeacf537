// The chat playground on the deployment page: POST the conversation to the panel's chat passthrough
// (/api/v1/deployments/<id>/chat/, "stream": true) and show the answer token by token as the engine's
// server-sent events arrive. The conversation is kept in the page so follow-up questions have context.
import { formatNumber } from "./format.js";

const config = JSON.parse(document.getElementById("deployment-config").textContent);
const form = document.querySelector("[data-field=chat-form]");
const chatLog = document.querySelector("[data-field=chat-log]");
const stats = document.querySelector("[data-field=chat-stats]");
const stopButton = document.querySelector("[data-field=chat-stop]");
const conversation = [];
let controller = null;

function bubble(role, text = "") {
  const item = document.createElement("div");
  item.className = `chat-msg is-${role}`;
  item.textContent = text;
  chatLog.appendChild(item);
  chatLog.scrollTop = chatLog.scrollHeight;
  return item;
}

// Server-sent events arrive in arbitrary chunks: split on blank lines, keep the unfinished rest.
async function* sseData(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
      for (const line of block.split(/\r?\n/)) {
        if (line.startsWith("data:")) yield line.slice(5).trim();
      }
    }
  }
}

async function errorText(response) {
  try {
    const body = await response.json();
    return body.detail || body.error?.message || JSON.stringify(body);
  } catch {
    return `HTTP ${response.status}`;
  }
}

async function send(prompt, maxTokens, temperature) {
  conversation.push({ role: "user", content: prompt });
  bubble("user", prompt);
  const answer = bubble("assistant");
  answer.classList.add("is-streaming");
  controller = new AbortController();
  stopButton.hidden = false;
  const started = performance.now();
  let first = null;
  let tokens = 0;
  try {
    const response = await fetch(config.chatUrl, {
      method: "POST",
      credentials: "same-origin",
      signal: controller.signal,
      headers: { "Content-Type": "application/json", "X-CSRFToken": document.body.dataset.csrf },
      body: JSON.stringify({
        model: config.servedModel,
        messages: conversation,
        stream: true,
        max_tokens: maxTokens,
        temperature,
      }),
    });
    if (!response.ok) throw new Error(await errorText(response));
    for await (const data of sseData(response)) {
      if (data === "[DONE]") break;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message || JSON.stringify(chunk.error));
      const delta = chunk.choices?.[0]?.delta?.content;
      if (delta) {
        if (first === null) first = performance.now();
        tokens += 1;
        answer.textContent += delta;
        chatLog.scrollTop = chatLog.scrollHeight;
      }
    }
    conversation.push({ role: "assistant", content: answer.textContent });
  } catch (error) {
    if (error.name !== "AbortError") {
      answer.classList.add("is-error");
      answer.textContent = answer.textContent ? `${answer.textContent}\n\n${error.message}` : error.message;
    }
    conversation.pop(); // the question stays on screen but is not sent again as context
  } finally {
    answer.classList.remove("is-streaming");
    stopButton.hidden = true;
    controller = null;
    if (first !== null) {
      const seconds = (performance.now() - first) / 1000;
      const rate = tokens > 1 && seconds > 0 ? (tokens - 1) / seconds : null;
      stats.textContent = config.labels.chatStats
        .replace("{ttft}", formatNumber(first - started, { maximumFractionDigits: 0 }))
        .replace("{tokens}", tokens)
        .replace("{rate}", formatNumber(rate));
    }
  }
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  const prompt = form.prompt.value.trim();
  if (!prompt || controller) return;
  form.prompt.value = "";
  send(prompt, Number(form.max_tokens.value) || 256, Number(form.temperature.value));
});
form.prompt.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) form.requestSubmit();
});
stopButton.addEventListener("click", () => controller?.abort());
document.querySelector("[data-field=chat-clear]").addEventListener("click", () => {
  conversation.length = 0;
  chatLog.replaceChildren();
  stats.textContent = "";
});
