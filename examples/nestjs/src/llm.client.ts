/**
 * The LLM provider's client, a provider the processor gets by injection: it posts a
 * prompt to `LLM_URL` and reads the answer's event stream, handing each chunk to the
 * caller, and resolves to the token usage the provider reports at the end.
 *
 * Its failures say what the queue should do next: a 429 is `RateLimited` (every worker
 * stops claiming the queue's tasks until its Retry-After, and the attempt is given back),
 * another 4xx is `PermanentFailure` (dead at once), anything else fails the attempt and
 * the queue retries it with backoff.
 */

import { Inject, Injectable } from "@nestjs/common";
import { PermanentFailure, RateLimited, bounds } from "taskfleet";

import type { Usage } from "./articles.js";
import { SETTINGS } from "./settings.module.js";
import type { AppSettings } from "./settings.js";

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

@Injectable()
export class LlmClient {
  constructor(@Inject(SETTINGS) private readonly settings: AppSettings) {}

  /**
   * Generate up to `maxTokens` for `prompt`, streaming: `onText` gets each chunk and its
   * token count. `signal` aborts the call (a cancel, a timeout, a lost lease, a drain's deadline).
   */
  async generate(prompt: string, maxTokens: number, signal: AbortSignal, onText: (text: string, tokens: number) => void): Promise<Usage> {
    const response = await fetch(`${this.settings.llmUrl}/v1/generate`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ prompt, max_tokens: maxTokens, stream: true }),
      signal,
    });
    if (response.status === 429) {
      // the provider's quota is the fleet's: every worker stops claiming until it resets
      // (without a usable Retry-After: the queue's adaptive pause)
      const header = response.headers.get("retry-after");
      const after = header === null ? Number.NaN : Number(header);
      const ms = Number.isFinite(after) && after >= 0 ? Math.min(after, bounds.MAX_DELAY_S) * 1000 : null;
      throw new RateLimited(ms, "provider rate limit"); // milliseconds, as every Node duration
    }
    if (response.status >= 400 && response.status < 500) {
      throw new PermanentFailure(`provider refused the request: ${response.status} ${await response.text()}`);
    }
    if (!response.ok || response.body === null) throw new Error(`provider answered ${response.status}`);
    let usage: Usage | undefined;
    for await (const data of events(response.body)) {
      if (data === "[DONE]") break;
      const event = JSON.parse(data) as StreamEvent;
      if (typeof event.text === "string") onText(event.text, event.tokens ?? 0);
      if (isUsage(event.usage)) usage = event.usage;
    }
    if (usage === undefined) throw new Error("the provider's stream ended without its usage");
    return usage;
  }
}
