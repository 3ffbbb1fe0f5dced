/**
 * The HTTP API:
 *
 * - `POST /articles` `{"topic": "...", "maxTokens": 400}` (optional `Idempotency-Key`
 *   header: the same key is the same task) → 202 `{"id": "..."}`;
 * - `GET /articles/:id?wait=S` → the task's state, progress, result or error; with `wait`
 *   (0-30 s) it answers once the task has finished or the time is up.
 */

import { BadRequestException, Body, ConflictException, Controller, Get, Headers, HttpCode, Inject, NotFoundException, Param, Post, Query } from "@nestjs/common";
import { InvalidArgument, TaskExists } from "taskfleet";

import { parseRequest } from "./articles.js";
import { type ArticleView, ArticlesService } from "./articles.service.js";

export const MAX_WAIT_S = 30;

function parseWait(raw: string | undefined): number {
  if (raw === undefined || raw === "") return 0;
  const wait = Number(raw);
  if (!Number.isFinite(wait) || wait < 0 || wait > MAX_WAIT_S) throw new BadRequestException(`wait must be a number of seconds from 0 to ${MAX_WAIT_S}`);
  return wait;
}

@Controller("articles")
export class ArticlesController {
  constructor(@Inject(ArticlesService) private readonly articles: ArticlesService) {}

  @Post()
  @HttpCode(202)
  async create(@Body() body: unknown, @Headers("idempotency-key") key: string | undefined): Promise<{ id: string }> {
    const request = parseRequest(body);
    if (typeof request === "string") throw new BadRequestException(request);
    try {
      return { id: await this.articles.enqueue(request, key === "" ? undefined : key) };
    } catch (error) {
      if (error instanceof TaskExists) throw new ConflictException("this Idempotency-Key was used for another request");
      if (error instanceof InvalidArgument) throw new BadRequestException(error.message);
      throw error;
    }
  }

  @Get(":id")
  async show(@Param("id") id: string, @Query("wait") wait: string | undefined): Promise<ArticleView> {
    let found: ArticleView | null;
    try {
      found = await this.articles.get(id, parseWait(wait));
    } catch (error) {
      if (error instanceof InvalidArgument) throw new BadRequestException(error.message);
      throw error;
    }
    if (found === null) throw new NotFoundException(`no article task ${id}`);
    return found;
  }
}
