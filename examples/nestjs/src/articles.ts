/**
 * What the API and the worker agree on: an article request, its token estimate (the cost
 * a task is enqueued with, reserved against the queue's tokens-per-minute budget), and
 * the result the worker stores.
 */

export const MAX_TOPIC_CHARS = 200;
export const MIN_MAX_TOKENS = 16;
export const MAX_MAX_TOKENS = 4000;
export const DEFAULT_MAX_TOKENS = 400;

/** The task's payload. */
export interface ArticleRequest {
  readonly topic: string;
  readonly maxTokens: number;
}

/** Token usage as the provider reports it. */
export interface Usage {
  readonly prompt_tokens: number;
  readonly completion_tokens: number;
  readonly total_tokens: number;
}

/** The task's result. */
export interface Article {
  readonly title: string;
  readonly text: string;
  readonly usage: Usage;
}

/** The prompt the worker sends for a request. */
export function prompt(request: ArticleRequest): string {
  return `Write an article about ${request.topic}.`;
}

/** Tokens of a text, as the simulated provider counts them: one per word. */
export function countTokens(text: string): number {
  return text.split(/\s+/).filter((word) => word !== "").length;
}

/**
 * The most a request can cost: its prompt and every token it may write. The task is
 * enqueued with this cost, so the claim reserves it against the budget; the worker
 * reports the real count after the call and the difference is given back.
 */
export function estimateTokens(request: ArticleRequest): number {
  return countTokens(prompt(request)) + request.maxTokens;
}

/** A request from an untrusted body, or the one line saying what to fix. */
export function parseRequest(body: unknown): ArticleRequest | string {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return "send a JSON object: {\"topic\": \"...\", \"maxTokens\": 400}";
  const { topic, maxTokens } = body as Record<string, unknown>;
  if (typeof topic !== "string" || topic.trim() === "" || topic.length > MAX_TOPIC_CHARS) {
    return `topic must be a non-empty string of at most ${MAX_TOPIC_CHARS} characters`;
  }
  if (maxTokens !== undefined && (typeof maxTokens !== "number" || !Number.isInteger(maxTokens) || maxTokens < MIN_MAX_TOKENS || maxTokens > MAX_MAX_TOKENS)) {
    return `maxTokens must be a whole number from ${MIN_MAX_TOKENS} to ${MAX_MAX_TOKENS}`;
  }
  return { topic: topic.trim(), maxTokens: maxTokens ?? DEFAULT_MAX_TOKENS };
}
