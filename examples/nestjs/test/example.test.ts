// The example run for real: a redis-server, the simulated LLM provider and the NestJS
// application (the API and the processor's worker in one process, on taskfleet-nestjs) as
// their own `node` processes, driven over HTTP as a client would. The queue's budget is
// set so that only what the processor reports after each call lets a third article in:
// three articles are written, the fourth waits for tokens. No Python is needed.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { Queue } from "taskfleet";

import { Program, RedisServer, TASKFLEET_NODE, configure, freePort, until } from "./processes.js";

const QUEUE = "llm.articles";
// Each article: "Write an article about <one word>." (5 tokens) and at most 100 tokens
// written: enqueued with a cost of 105. The provider writes 75: each call uses 80.
const MAX_TOKENS = 100;
const RESERVED = 105;
const USED = 80;
const ARTICLE_TOKENS = 75;
// A bucket of 280 tokens (refilled over an hour, so not within the test): reserving 105
// and settling at 80, three articles fit (280 → 200 → 120 → 40); reserving without
// settling, only two would (280 → 175 → 70).
const TOKENS_BUDGET = 280;

interface View {
  id: string;
  state: string;
  attempts: number;
  progress: { done?: number; total?: number; fraction?: number; message?: string } | null;
  result: { title: string; text: string; usage: { total_tokens: number } } | null;
  error: string | null;
  tokens: { reserved: number; used: number | null };
}

describe("the NestJS example", () => {
  const redis = new RedisServer();
  const programs: Program[] = [];
  let api = "";

  async function post(body: unknown, key?: string): Promise<{ status: number; body: Record<string, unknown> }> {
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (key !== undefined) headers["idempotency-key"] = key;
    const response = await fetch(`${api}/articles`, { method: "POST", headers, body: JSON.stringify(body) });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  }

  async function get(id: string, wait?: number): Promise<{ status: number; body: View }> {
    const response = await fetch(`${api}/articles/${encodeURIComponent(id)}${wait === undefined ? "" : `?wait=${wait}`}`);
    return { status: response.status, body: (await response.json()) as View };
  }

  function logs(): string {
    return programs.map((p) => `--- ${p.name}\n${p.output}`).join("\n");
  }

  let llmUrl = "";
  /** The article left waiting for the tokens budget. */
  let waiting = "";

  before(async () => {
    await redis.start();
    configure(redis.url, QUEUE, { rate_limit_tasks: 60, rate_limit_cost: TOKENS_BUDGET, rate_limit_period_s: 3600 });
    const [llmPort, apiPort] = [await freePort(), await freePort()];
    llmUrl = `http://127.0.0.1:${llmPort}`;
    const llm = new Program("llm-server", process.execPath, ["dist/llm-server.js"], {
      PORT: String(llmPort), HOST: "127.0.0.1", LLM_CHUNK_DELAY_MS: "200", LLM_CHUNK_TOKENS: "8", LLM_ARTICLE_TOKENS: String(ARTICLE_TOKENS),
    });
    const app = new Program("app", process.execPath, ["dist/main.js"], {
      PORT: String(apiPort), TASKFLEET_REDIS_URL: redis.url, ARTICLES_QUEUE: QUEUE, ARTICLES_CONCURRENCY: "1", LLM_URL: llmUrl,
    });
    programs.push(llm, app);
    await Promise.all([llm.printed("llm-server listening"), app.printed("api listening")]);
    api = `http://127.0.0.1:${apiPort}`;
  });

  after(async () => {
    await Promise.all(programs.map(async (p) => p.stop()));
    await redis.stop();
  });

  it("refuses bad requests with one line, and answers 404 for an unknown task", async () => {
    const bad = await post({ topic: "" });
    assert.equal(bad.status, 400);
    assert.match(String(bad.body.message), /^topic must be/);
    assert.equal((await post({ topic: "x", maxTokens: 1.5 })).status, 400);
    assert.equal((await get("no-such-task")).status, 404);
    const { status } = await fetch(`${api}/articles/no-such-task?wait=99`);
    assert.equal(status, 400);
  });

  it("writes articles within the tokens budget, charged what each call used, with progress", async () => {
    const topics = ["queues", "leases", "drains", "budgets"];
    const ids: string[] = [];
    for (const [i, topic] of topics.entries()) {
      const created = await post({ topic, maxTokens: MAX_TOKENS }, `article-${i}`);
      assert.equal(created.status, 202, JSON.stringify(created.body));
      ids.push(String(created.body.id));
    }
    const [first, , , last] = ids as [string, string, string, string];
    waiting = last;

    // The progress the worker streams while the provider writes.
    await until("the first article's progress part-way", async () => {
      const { body } = await get(first);
      if (body.state === "done") throw new Error(`the first article finished before its progress was seen part-way:\n${logs()}`);
      const done = body.progress?.done ?? 0;
      return body.state === "running" && done > 0 && done < ARTICLE_TOKENS;
    });

    // Waiting without polling: each GET answers once its task is done.
    for (const id of ids.slice(0, 3)) {
      const { status, body } = await get(id, 30);
      assert.equal(status, 200);
      assert.equal(body.state, "done", `${JSON.stringify(body)}\n${logs()}`);
      assert.equal(body.attempts, 1);
      assert.deepEqual(body.progress, { done: ARTICLE_TOKENS, total: ARTICLE_TOKENS, fraction: 1, message: `${ARTICLE_TOKENS} tokens written` });
      assert.equal(body.result?.usage.total_tokens, USED);
      assert.equal(body.result.text.split(" ").length, ARTICLE_TOKENS);
      assert.deepEqual(body.tokens, { reserved: RESERVED, used: USED });
    }

    // The fourth waits for the budget to refill; a wait for it ends at its timeout with
    // the state as it is.
    const waited = await get(last, 1);
    assert.equal(waited.status, 200);
    assert.equal(waited.body.state, "pending", JSON.stringify(waited.body));
    assert.equal(waited.body.attempts, 0);

    // The same Idempotency-Key is the same task; with another request it is refused.
    const again = await post({ topic: "budgets", maxTokens: MAX_TOKENS }, "article-3");
    assert.deepEqual([again.status, again.body.id], [202, last]);
    assert.equal((await post({ topic: "other", maxTokens: MAX_TOKENS }, "article-3")).status, 409);
  });

  it("answers GET /health through terminus: 200 while the processor's worker runs and Redis answers", async () => {
    const response = await fetch(`${api}/health`);
    const body = (await response.json()) as { status: string; info?: { taskfleet?: { status: string; queues: Record<string, { redis: string; worker?: string }> } } };
    assert.equal(response.status, 200, JSON.stringify(body));
    assert.equal(body.status, "ok");
    assert.deepEqual([body.info?.taskfleet?.queues[QUEUE]?.redis, body.info?.taskfleet?.queues[QUEUE]?.worker], ["up", "running"], JSON.stringify(body));
  });

  it("runs the same processor under taskfleet-node worker, as the operator's pods do, which drains to exit 0", async () => {
    const queue = new Queue("llm.pods", { redisUrl: redis.url });
    const worker = new Program("taskfleet-node worker", process.execPath, [TASKFLEET_NODE, "worker", "--queue", "llm.pods", "--handler", "./dist/handlers.js:writeArticle", "--concurrency", "2"], {
      TASKFLEET_REDIS_URL: redis.url, LLM_URL: llmUrl, TASKFLEET_RUNTIME_DIR: `${redis.dir}/runtime`,
    });
    programs.push(worker);
    try {
      await worker.printed("event=worker_started");
      const ids = await queue.enqueueMany(["pods", "drains"].map((topic) => ({ payload: { topic, maxTokens: MAX_TOKENS } })));
      const done = await queue.wait(ids, { timeoutMs: 30_000 });
      for (const id of ids) {
        assert.equal(done[id]?.state, "done", `${JSON.stringify(done[id])}\n${logs()}`);
        assert.equal((done[id].result as { usage: { total_tokens: number } }).usage.total_tokens, USED);
      }
    } finally {
      await queue.close();
    }
    assert.equal(await worker.stop(), 0, logs());
  });

  it("drains on SIGTERM and exits 0, as in a pod; the article waiting for the budget stays, not lost", async () => {
    const app = programs.find((p) => p.name === "app");
    assert.ok(app);
    assert.equal(await app.stop(), 0, logs());
    assert.match(app.output, /event=drain_started/);
    const queue = new Queue(QUEUE, { redisUrl: redis.url });
    try {
      const task = await queue.get(waiting);
      assert.deepEqual([task?.state, task?.attempts], ["pending", 0], JSON.stringify(task));
      assert.equal((await queue.stats()).running, 0);
    } finally {
      await queue.close();
    }
  });
});
