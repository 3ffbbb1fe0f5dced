/**
 * What the example's programs read from their environment, checked once at start:
 * a bad value is one line saying what to fix and exit 2, as taskfleet's own commands do.
 */

export class BadSetting extends Error {}

function text(name: string, fallback: string): string {
  const value = process.env[name];
  return value === undefined || value === "" ? fallback : value;
}

function integer(name: string, fallback: number, min: number, max: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new BadSetting(`${name} must be a whole number from ${min} to ${max}, not ${JSON.stringify(raw)}`);
  }
  return value;
}

/**
 * The queue's name, read once when the program loads: `@InjectQueue` and `@Processor` name
 * it in their decorators. On a cluster the operator names it `<namespace>.<TaskQueue>`.
 */
export const ARTICLES_QUEUE = text("ARTICLES_QUEUE", "llm.articles");

/** The application's settings. */
export interface AppSettings {
  readonly port: number;
  readonly redisUrl: string;
  /** Requests waiting on tasks at once; past it a GET answers the state without waiting. */
  readonly maxWaiters: number;
  /** Whether this process runs the processor's worker (0: an API whose workers run elsewhere). */
  readonly worker: boolean;
  /** Articles this process's worker writes at once. */
  readonly concurrency: number;
  /** How long a drain lets held articles finish before it hands them back. */
  readonly drainTimeoutMs: number;
  /** Where the LLM provider answers. */
  readonly llmUrl: string;
}

export function appSettings(): AppSettings {
  return {
    port: integer("PORT", 3000, 0, 65535),
    // taskfleet-node's commands read the same variable (--redis-url).
    redisUrl: text("TASKFLEET_REDIS_URL", "redis://127.0.0.1:6379/0"),
    maxWaiters: integer("ARTICLES_MAX_WAITERS", 64, 0, 10_000),
    worker: integer("ARTICLES_WORKER", 1, 0, 1) === 1,
    concurrency: integer("ARTICLES_CONCURRENCY", 4, 1, 1000),
    drainTimeoutMs: integer("ARTICLES_DRAIN_TIMEOUT_MS", 30_000, 0, 3_600_000),
    llmUrl: llmUrl(),
  };
}

/** Where the LLM provider answers. */
export function llmUrl(): string {
  const url = text("LLM_URL", "http://127.0.0.1:8090");
  try {
    new URL(url);
  } catch {
    throw new BadSetting(`LLM_URL must be an http(s) URL, not ${JSON.stringify(url)}`);
  }
  return url.replace(/\/+$/, "");
}

/** The simulated provider's settings. */
export interface LlmServerSettings {
  readonly port: number;
  readonly host: string;
  /** Pause between two streamed chunks. */
  readonly chunkDelayMs: number;
  /** Tokens per streamed chunk. */
  readonly chunkTokens: number;
  /** How long an article comes out when max_tokens allows it. */
  readonly articleTokens: number;
}

export function llmServerSettings(): LlmServerSettings {
  return {
    port: integer("PORT", 8090, 0, 65535),
    host: text("HOST", "0.0.0.0"),
    chunkDelayMs: integer("LLM_CHUNK_DELAY_MS", 50, 0, 60_000),
    chunkTokens: integer("LLM_CHUNK_TOKENS", 8, 1, 4096),
    articleTokens: integer("LLM_ARTICLE_TOKENS", 300, 1, 100_000),
  };
}

/** Run `main`; a `BadSetting` is one line on stderr and exit 2. */
export function exitOnBadSetting(program: string, error: unknown): never {
  if (error instanceof BadSetting) {
    process.stderr.write(`${program}: error: ${error.message}\n`);
    process.exit(2);
  }
  throw error;
}
