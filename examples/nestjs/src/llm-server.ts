/**
 * A simulated LLM provider, so the example runs anywhere: `POST /v1/generate` with
 * `{"prompt": "...", "max_tokens": N}` answers a server-sent event stream, as hosted
 * providers do: `data: {"text": "...", "tokens": n}` chunks at a steady pace, then
 * `data: {"usage": {...}}` with the real token count, then `data: [DONE]`. An article is LLM_ARTICLE_TOKENS
 * words (one token each) made from the prompt, cut at `max_tokens`: a call uses fewer
 * tokens than its caller reserved, as real ones do. `GET /healthz` answers 200.
 *
 * Settings (environment): PORT (8090), HOST (0.0.0.0), LLM_CHUNK_DELAY_MS (50),
 * LLM_CHUNK_TOKENS (8), LLM_ARTICLE_TOKENS (300).
 */

import { type IncomingMessage, type ServerResponse, createServer } from "node:http";

import { countTokens } from "./articles.js";
import { type LlmServerSettings, exitOnBadSetting, llmServerSettings } from "./settings.js";

const MAX_BODY_BYTES = 64 * 1024;
const WORDS = ["the", "queue", "keeps", "every", "task", "until", "a", "worker", "finishes", "it", "and", "nothing", "is", "lost"];

async function readBody(request: IncomingMessage): Promise<string> {
  let size = 0;
  const chunks: Buffer[] = [];
  for await (const chunk of request as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new RangeError("body too large");
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString("utf8");
}

function refuse(response: ServerResponse, status: number, message: string): void {
  response.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify({ error: message }));
}

/** The words of the completion: the prompt's own words, then the filler, in turn. */
function word(promptWords: readonly string[], index: number): string {
  const source = index % 3 === 0 && promptWords.length > 0 ? promptWords : WORDS;
  return source[index % source.length] ?? "word";
}

async function generate(settings: LlmServerSettings, request: IncomingMessage, response: ServerResponse): Promise<void> {
  let body: unknown;
  try {
    body = JSON.parse(await readBody(request));
  } catch {
    refuse(response, 400, "send a JSON object: {\"prompt\": \"...\", \"max_tokens\": N}");
    return;
  }
  const { prompt, max_tokens: maxTokens } = (typeof body === "object" && body !== null ? body : {}) as Record<string, unknown>;
  if (typeof prompt !== "string" || typeof maxTokens !== "number" || !Number.isInteger(maxTokens) || maxTokens < 1) {
    refuse(response, 400, "prompt must be a string and max_tokens a whole number >= 1");
    return;
  }
  response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  const gone = new AbortController();
  response.on("close", () => { gone.abort(); }); // the caller went away: stop writing
  const promptWords = prompt.split(/\s+/).filter((w) => w !== "");
  const length = Math.min(maxTokens, settings.articleTokens);
  let written = 0;
  while (written < length && !gone.signal.aborted) {
    const count = Math.min(settings.chunkTokens, length - written);
    const text = Array.from({ length: count }, (_, i) => word(promptWords, written + i)).join(" ");
    written += count;
    response.write(`data: ${JSON.stringify({ text: text + " ", tokens: count })}\n\n`);
    if (settings.chunkDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, settings.chunkDelayMs));
  }
  if (gone.signal.aborted) return;
  const promptTokens = countTokens(prompt);
  const usage = { prompt_tokens: promptTokens, completion_tokens: written, total_tokens: promptTokens + written };
  response.write(`data: ${JSON.stringify({ usage })}\n\n`);
  response.end("data: [DONE]\n\n");
}

function main(): void {
  let settings: LlmServerSettings;
  try {
    settings = llmServerSettings();
  } catch (error) {
    exitOnBadSetting("llm-server", error);
  }
  const server = createServer((request, response) => {
    if (request.method === "GET" && request.url === "/healthz") {
      response.writeHead(200, { "content-type": "text/plain" }).end("ok\n");
    } else if (request.method === "POST" && request.url === "/v1/generate") {
      generate(settings, request, response).catch((error: unknown) => {
        if (!response.headersSent) refuse(response, 400, String(error));
        else response.destroy();
      });
    } else {
      refuse(response, 404, "POST /v1/generate or GET /healthz");
    }
  });
  server.listen(settings.port, settings.host, () => {
    const address = server.address();
    const port = typeof address === "object" && address !== null ? address.port : settings.port;
    console.log(`llm-server listening port=${port}`);
  });
  const stop = (): void => {
    server.close();
    server.closeAllConnections();
  };
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);
}

main();
