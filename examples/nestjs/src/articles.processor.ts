/**
 * The queue's processor: a provider whose `@Handle()` method writes an article. Its
 * worker starts with the application and drains when the application shuts down.
 *
 * `write` asks the provider (through the injected `LlmClient`) for the article,
 * streaming: each chunk moves the task's progress (tokens written of the most it may
 * write), which the API shows while the task runs. When the stream ends it reports the
 * real token count with `reportCost`, so the queue's tokens-per-minute budget is charged
 * what the call used, not the estimate the task was enqueued with.
 */

import { PermanentFailure, type TaskContext } from "taskfleet";
import { Handle, Processor } from "taskfleet-nestjs";

import { type Article, type ArticleRequest, parseRequest, prompt } from "./articles.js";
import { LlmClient } from "./llm.client.js";
import { ARTICLES_QUEUE } from "./settings.js";

@Processor(ARTICLES_QUEUE)
export class ArticlesProcessor {
  constructor(private readonly llm: LlmClient) {}

  @Handle()
  async write(payload: Record<string, unknown>, task: TaskContext): Promise<Article> {
    const request: ArticleRequest | string = parseRequest(payload);
    if (typeof request === "string") throw new PermanentFailure(request);
    const parts: string[] = [];
    let written = 0;
    task.progress({ done: 0, total: request.maxTokens, message: "writing" });
    const usage = await this.llm.generate(prompt(request), request.maxTokens, task.signal, (text, tokens) => {
      parts.push(text);
      written += tokens;
      task.progress({ done: Math.min(written, request.maxTokens), total: request.maxTokens, message: `${written} tokens written` });
    });
    task.progress({ done: written, total: written, message: `${written} tokens written` });
    task.reportCost(usage.total_tokens);
    return { title: `On ${request.topic}`, text: parts.join("").trim(), usage };
  }
}
