/**
 * The worker's handlers: run by `taskfleet-node worker --handler ./dist/handlers.js:writeArticle`.
 *
 * `writeArticle` asks the LLM provider (LLM_URL) for the article, streaming: each chunk
 * moves the task's progress (tokens written of the most it may write), which the API
 * shows while the task runs. When the stream ends it reports the real token count with
 * `reportCost`, so the queue's tokens-per-minute budget is charged what the call used, not
 * the estimate the task was enqueued with. The run's `signal` aborts the call when the
 * task is cancelled, times out, loses its lease or is handed back by a drain.
 *
 * Failures say what should happen next: a 429 from the provider is `RateLimited` (the
 * whole fleet stops claiming this queue's tasks until its Retry-After, and the attempt is
 * given back), another 4xx is `PermanentFailure` (dead at once), anything else fails the
 * attempt and the queue retries it with backoff.
 */

import { PermanentFailure, RateLimited, type TaskContext, bounds } from "taskfleet";

import { type Article, type ArticleRequest, type Usage, parseRequest, prompt } from "./articles.js";
import { llmUrl } from "./settings.js";

/** One event of the provider's stream. */
interface StreamEvent {
  readonly text?: string;
  readonly tokens?: number;
  readonly usage?: Usage;
}

/** The `data:` payloads of a server-sent event stream, as they arrive. */
async function* events(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of block.split("\n")) {
        if (line.startsWith("data: ")) yield line.slice("data: ".length);
      }
    }
  }
}

function isUsage(value: unknown): value is Usage {
  if (typeof value !== "object" || value === null) return false;
  const usage = value as Record<string, unknown>;
  return ["prompt_tokens", "completion_tokens", "total_tokens"].every((key) => Number.isInteger(usage[key]));
}

export async function writeArticle(payload: Record<string, unknown>, task: TaskContext): Promise<Article> {
  const request: ArticleRequest | string = parseRequest(payload);
  if (typeof request === "string") throw new PermanentFailure(request);
  const response = await fetch(`${llmUrl()}/v1/generate`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt: prompt(request), max_tokens: request.maxTokens, stream: true }),
    signal: task.signal,
  });
  if (response.status === 429) {
    // the provider's quota is the fleet's: every worker stops claiming until it resets
    // (without a usable Retry-After: the queue's adaptive pause)
    const header = response.headers.get("retry-after");
    const after = header === null ? Number.NaN : Number(header);
    const seconds = Number.isFinite(after) && after >= 0 ? Math.min(after, bounds.MAX_DELAY_S) : null;
    throw new RateLimited(seconds, "provider rate limit");
  }
  if (response.status >= 400 && response.status < 500) {
    throw new PermanentFailure(`provider refused the request: ${response.status} ${await response.text()}`);
  }
  if (!response.ok || response.body === null) throw new Error(`provider answered ${response.status}`);

  const parts: string[] = [];
  let written = 0;
  let usage: Usage | undefined;
  task.progress({ done: 0, total: request.maxTokens, message: "writing" });
  for await (const data of events(response.body)) {
    if (data === "[DONE]") break;
    const event = JSON.parse(data) as StreamEvent;
    if (typeof event.text === "string") {
      parts.push(event.text);
      written += event.tokens ?? 0;
      task.progress({ done: Math.min(written, request.maxTokens), total: request.maxTokens, message: `${written} tokens written` });
    }
    if (isUsage(event.usage)) usage = event.usage;
  }
  if (usage === undefined) throw new Error("the provider's stream ended without its usage");
  task.progress({ done: written, total: written, message: `${written} tokens written` });
  task.reportCost(usage.total_tokens);
  return { title: `On ${request.topic}`, text: parts.join("").trim(), usage };
}
