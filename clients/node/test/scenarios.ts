// The worker-behaviour scenarios (conformance/scenarios/*.json), as the Node worker runs
// them: real `taskfleet-node worker` processes on a real redis-server, signals, deadlines.
// conformance/scenarios/README.md describes the format; `check` refuses a file that strays
// from it before anything runs. The handler vocabulary is test/fixtures/scenario_handlers.mjs;
// tests/scenario_runner.py runs the same files with the Python worker.
import { isDeepStrictEqual } from "node:util";
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { basename, join } from "node:path";
import { fileURLToPath } from "node:url";

import { OlderWorker, Queue } from "../src/index.js";
import { WorkerProcess, cleanEnv } from "./workers.js";

export const SCENARIOS = fileURLToPath(
  new URL("../../../../conformance/scenarios/", import.meta.url),
);
const FORMAT = 1;
const HANDLER = "./scenario_handlers.mjs:run";
/** A condition is looked at this often while a step waits on it (ms). */
const INTERVAL_MS = 20;
/** Beats often by default, so a lease of a second is kept by a live worker. */
const HEARTBEAT_S = "0.2";

type Json = Record<string, unknown>;
type Kinds = Record<string, [required: string[], optional: string[]]>;

/** Each behaviour and the payload keys it takes (besides `do`), required. */
const BEHAVIOURS: Record<string, string[]> = {
  succeed: ["result"],
  fail: ["error"],
  hold: ["gate"],
  sleep: ["ms"],
  hang: [],
};
/** Worker options and the flags both workers take for them. */
const WORKER_OPTIONS: Record<string, string> = {
  concurrency: "--concurrency",
  drain_timeout_s: "--drain-timeout",
  heartbeat_s: "--heartbeat-interval",
  prefetch: "--prefetch",
};
const CONFIG: Record<string, string> = { lease_ttl_s: "leaseTtlMs", max_attempts: "maxAttempts" };
const ENQUEUE_OPTIONS: Record<string, string> = { group: "group", max_attempts: "maxAttempts" };
const SIGNALS = ["SIGTERM", "SIGINT", "SIGKILL", "SIGSTOP", "SIGCONT"];
const STEPS: Kinds = {
  configure: [[], []],
  start: [[], ["options"]],
  enqueue: [["payload"], ["options", "refused"]],
  signal: [["worker"], []],
  release: [[], []],
  cancel: [["outcome"], []],
  pause_claims: [[], ["refused"]],
  resume_claims: [[], []],
  older_worker: [[], []],
  older_worker_gone: [[], []],
  wait: [["within_s"], []],
  expect: [[], []],
  stays: [["for_s"], []],
};
const CONDITIONS: Kinds = {
  task: [[], ["state", "attempts", "lost", "worker", "result", "error", "reason"]],
  stats: [[], []],
  handled: [["count"], ["of", "by"]],
  exited: [[], ["code"]],
  logged: [["worker"], []],
  any: [[], []],
};
const STATS = [
  "pending",
  "delayed",
  "running",
  "done",
  "dead",
  "cancelled",
  "waiting",
  "workers",
  "enqueued",
  "completed",
  "failed",
  "retried",
  "dead_total",
  "requeued",
  "lost",
  "released",
  "stale",
  "expired",
  "cancelled_total",
  "deferred",
];
const CANCEL_OUTCOMES = ["cancelled", "requested", "done", "dead", "finished", "not_found"];
const NAME = /^[a-z0-9][a-z0-9-]*$/;

/** The file strays from the format: nothing ran. */
export class ScenarioFormatError extends Error {}
/** A step of the scenario did not hold. */
export class StepFailedError extends Error {}

// ------------------------------------------------------------------ the format

function isObject(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function only(where: string, value: unknown, allowed: readonly string[]): Json {
  if (!isObject(value))
    throw new ScenarioFormatError(`${where}: an object expected, got ${JSON.stringify(value)}`);
  const extra = Object.keys(value).filter((k) => !allowed.includes(k));
  if (extra.length > 0)
    throw new ScenarioFormatError(
      `${where}: unknown keys ${extra.join(", ")}; known: ${allowed.join(", ")}`,
    );
  return value;
}

/** The one kind key of `value`; its other keys must be those its kind takes. */
function kindOf(where: string, value: unknown, kinds: Kinds): string {
  if (!isObject(value))
    throw new ScenarioFormatError(`${where}: an object expected, got ${JSON.stringify(value)}`);
  const found = Object.keys(value).filter((k) => k in kinds);
  const [kind] = found;
  if (found.length !== 1 || kind === undefined) {
    throw new ScenarioFormatError(
      `${where}: exactly one of ${Object.keys(kinds).join(", ")} expected, got ${Object.keys(value).join(", ")}`,
    );
  }
  const [required, optional] = kinds[kind] ?? [[], []];
  const missing = required.filter((k) => !(k in value));
  if (missing.length > 0)
    throw new ScenarioFormatError(`${where} (${kind}): missing ${missing.join(", ")}`);
  only(`${where} (${kind})`, value, [kind, "doc", ...required, ...optional]);
  return kind;
}

function name(where: string, value: unknown): void {
  if (typeof value !== "string" || !NAME.test(value))
    throw new ScenarioFormatError(
      `${where}: a name ([a-z0-9][a-z0-9-]*) expected, got ${JSON.stringify(value)}`,
    );
}

function number(where: string, value: unknown): void {
  if (typeof value !== "number" || value < 0)
    throw new ScenarioFormatError(`${where}: a number >= 0 expected, got ${JSON.stringify(value)}`);
}

/** Throw `ScenarioFormatError` saying where `scenario` strays from the format. */
export function check(scenario: unknown, file: string): void {
  const top = only(file, scenario, ["format", "doc", "queue", "steps"]);
  if (top.format !== FORMAT)
    throw new ScenarioFormatError(
      `${file}: format ${FORMAT} expected, got ${JSON.stringify(top.format)}`,
    );
  if (
    typeof top.doc !== "string" ||
    typeof top.queue !== "string" ||
    !/^[a-z0-9._-]+$/.test(top.queue)
  ) {
    throw new ScenarioFormatError(`${file}: a doc and a queue name ([a-z0-9._-]+) expected`);
  }
  if (!Array.isArray(top.steps) || top.steps.length === 0)
    throw new ScenarioFormatError(`${file}: a non-empty list of steps expected`);
  top.steps.forEach((step: unknown, i) => {
    checkStep(`${file} step ${i}`, step);
  });
}

function checkStep(where: string, step: unknown): void {
  const kind = kindOf(where, step, STEPS);
  const s = step as Json;
  const value = s[kind];
  switch (kind) {
    case "configure":
      for (const [key, n] of Object.entries(only(where, value, Object.keys(CONFIG))))
        number(`${where} ${key}`, n);
      break;
    case "start":
    case "signal":
    case "older_worker":
    case "older_worker_gone":
      name(where, kind === "signal" ? s.worker : value);
      if (kind === "signal" && !SIGNALS.includes(value as string))
        throw new ScenarioFormatError(
          `${where}: one of ${SIGNALS.join(", ")} expected, got ${JSON.stringify(value)}`,
        );
      for (const [key, n] of Object.entries(
        only(where, s.options ?? {}, Object.keys(WORKER_OPTIONS)),
      ))
        number(`${where} ${key}`, n);
      break;
    case "enqueue": {
      name(where, value);
      const payload = only(where, s.payload, ["do", ...Object.values(BEHAVIOURS).flat()]);
      const wanted = BEHAVIOURS[String(payload.do)];
      const keys = Object.keys(payload).sort();
      if (wanted === undefined || !isDeepStrictEqual(keys, ["do", ...wanted].sort())) {
        throw new ScenarioFormatError(`${where}: a payload of the handler vocabulary expected`);
      }
      only(where, s.options ?? {}, Object.keys(ENQUEUE_OPTIONS));
      break;
    }
    case "release":
    case "cancel":
      name(where, value);
      if (kind === "cancel" && !CANCEL_OUTCOMES.includes(s.outcome as string))
        throw new ScenarioFormatError(
          `${where}: an outcome of ${CANCEL_OUTCOMES.join(", ")} expected`,
        );
      break;
    case "pause_claims":
      number(where, value);
      break;
    case "wait":
    case "expect":
    case "stays":
      if (!Array.isArray(value) || value.length === 0)
        throw new ScenarioFormatError(`${where}: a non-empty list of conditions expected`);
      checkConditions(where, value);
      for (const key of ["within_s", "for_s"]) if (key in s) number(`${where} ${key}`, s[key]);
      break;
  }
}

function checkConditions(where: string, conditions: readonly unknown[]): void {
  conditions.forEach((condition: unknown, j) => {
    const kind = kindOf(`${where} condition ${j}`, condition, CONDITIONS);
    if (kind === "stats") {
      for (const [key, n] of Object.entries(only(where, (condition as Json).stats, STATS)))
        number(`${where} stats ${key}`, n);
    } else if (kind === "any") {
      const inner = (condition as Json).any;
      if (!Array.isArray(inner) || inner.length < 2)
        throw new ScenarioFormatError(`${where} condition ${j}: 2 or more conditions expected`);
      checkConditions(`${where} condition ${j} any`, inner);
    }
  });
}

/** The scenario in `path`, checked. */
export function load(path: string): Json {
  let scenario: unknown;
  try {
    scenario = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new ScenarioFormatError(`${basename(path)}: not JSON: ${String(e)}`);
  }
  check(scenario, basename(path, ".json"));
  return scenario as Json;
}

// ------------------------------------------------------------------ running

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Runs one checked scenario with real worker processes; `close()` kills those left. */
export class Runner {
  readonly queue: Queue;
  private readonly workers = new Map<string, WorkerProcess>();

  constructor(
    private readonly scenario: Json,
    private readonly file: string,
    private readonly redisUrl: string,
    private readonly dir: string,
  ) {
    this.queue = new Queue(String(scenario.queue), { redisUrl });
  }

  async run(): Promise<void> {
    const steps = this.scenario.steps as Json[];
    for (const [i, step] of steps.entries()) {
      const kind = Object.keys(step).find((k) => k in STEPS) ?? "";
      try {
        await this.step(kind, step, step[kind]);
      } catch (e) {
        if (!(e instanceof StepFailedError)) throw e;
        throw new StepFailedError(`${this.file} step ${i} (${kind}): ${e.message}\n${this.logs()}`);
      }
    }
  }

  async close(): Promise<void> {
    await Promise.all([...this.workers.values()].map((w) => w.stop()));
    await this.queue.close();
  }

  logs(): string {
    return [...this.workers.entries()]
      .map(([n, w]) => `--- ${n}\n${w.output.slice(-3000)}`)
      .join("\n");
  }

  private async step(kind: string, step: Json, value: unknown): Promise<void> {
    switch (kind) {
      case "configure": {
        const changes = Object.fromEntries(
          Object.entries(value as Json).map(([k, v]) => [
            CONFIG[k] ?? k,
            k.endsWith("_s") ? Number(v) * 1000 : v,
          ]),
        );
        await this.queue.configure({ ...(await this.queue.config()), ...changes });
        return;
      }
      case "start": {
        const args = [
          "--queue",
          String(this.scenario.queue),
          "--redis-url",
          this.redisUrl,
          "--pod",
          String(value),
        ];
        args.push(
          "--runtime-dir",
          join(this.dir, `runtime-${String(value)}`),
          "--handler",
          HANDLER,
        );
        args.push(
          "--log-format",
          "json",
          "--no-fire-schedules",
          "--heartbeat-interval",
          HEARTBEAT_S,
        );
        for (const [key, n] of Object.entries((step.options ?? {}) as Json))
          args.push(WORKER_OPTIONS[key] ?? key, String(n));
        this.workers.set(
          String(value),
          WorkerProcess.node(args, cleanEnv({ TASKFLEET_SCENARIO_DIR: this.dir })),
        );
        return;
      }
      case "enqueue": {
        const options = Object.fromEntries(
          Object.entries((step.options ?? {}) as Json).map(([k, v]) => [
            ENQUEUE_OPTIONS[k] ?? k,
            v,
          ]),
        );
        await this.refusable(step, () =>
          this.queue.enqueue(step.payload as Json, { ...options, taskId: String(value) }),
        );
        return;
      }
      case "signal":
        this.worker(String(step.worker)).kill(value as NodeJS.Signals);
        return;
      case "release":
        writeFileSync(join(this.dir, `gate-${String(value)}`), "");
        return;
      case "cancel": {
        const outcome = await this.queue.cancel(String(value));
        if (outcome !== step.outcome)
          throw new StepFailedError(`cancel said ${outcome}, expected ${String(step.outcome)}`);
        return;
      }
      case "pause_claims":
        await this.refusable(step, () =>
          this.queue.pauseClaims({ forMs: (value as number) * 1000 }),
        );
        return;
      case "resume_claims":
        await this.queue.resumeClaims();
        return;
      case "older_worker": {
        // a live record as a worker of the first release (0.1.x) writes it: no level
        const [seconds, micros] = await this.queue.client.time();
        const heartbeatMs = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
        const record = {
          incarnation: "i0",
          inflight: 0,
          concurrency: 4,
          draining: false,
          heartbeat_ms: heartbeatMs,
        };
        await this.queue.client.hset(
          this.queue.keys.key("workers"),
          String(value),
          JSON.stringify(record),
        );
        return;
      }
      case "older_worker_gone":
        await this.queue.client.hdel(this.queue.keys.key("workers"), String(value));
        return;
      case "wait": {
        const end = Date.now() + (step.within_s as number) * 1000;
        for (;;) {
          const unmet = await this.unmet(value as Json[]);
          if (unmet === null) return;
          if (Date.now() > end)
            throw new StepFailedError(`not within ${String(step.within_s)} s: ${unmet}`);
          await sleep(INTERVAL_MS);
        }
      }
      case "expect": {
        const unmet = await this.unmet(value as Json[]);
        if (unmet !== null) throw new StepFailedError(unmet);
        return;
      }
      case "stays": {
        // what must not happen for a while (a claim during a pause): looked at throughout
        const end = Date.now() + (step.for_s as number) * 1000;
        while (Date.now() < end) {
          const unmet = await this.unmet(value as Json[]);
          if (unmet !== null) throw new StepFailedError(`within ${String(step.for_s)} s: ${unmet}`);
          await sleep(INTERVAL_MS);
        }
        return;
      }
    }
  }

  private async refusable(step: Json, call: () => Promise<unknown>): Promise<void> {
    const refused = step.refused;
    try {
      await call();
    } catch (e) {
      if (!(e instanceof OlderWorker)) throw e;
      if (e.feature !== refused)
        throw new StepFailedError(`refused for ${e.feature}, expected ${JSON.stringify(refused)}`);
      return;
    }
    if (refused !== undefined)
      throw new StepFailedError(`not refused, expected a refusal for ${JSON.stringify(refused)}`);
  }

  private worker(name: string): WorkerProcess {
    const worker = this.workers.get(name);
    if (worker === undefined) throw new StepFailedError(`no worker ${name} was started`);
    return worker;
  }

  // conditions: null when all hold, else what does not

  private async unmet(conditions: readonly Json[]): Promise<string | null> {
    for (const condition of conditions) {
      const kind = Object.keys(condition).find((k) => k in CONDITIONS) ?? "";
      const unmet = await this.holds(kind, condition, condition[kind]);
      if (unmet !== null) return `${JSON.stringify(condition)}: ${unmet}`;
    }
    return null;
  }

  private async holds(kind: string, condition: Json, value: unknown): Promise<string | null> {
    switch (kind) {
      case "task": {
        const task = await this.queue.get(String(value));
        if (task === null) return "no such task";
        const found: Json = {
          state: task.state,
          attempts: task.attempts,
          lost: task.lost,
          worker: task.pod,
          result: task.result,
          error: task.error,
          reason: task.reason,
        };
        for (const [key, expected] of Object.entries(condition)) {
          if (key === "task" || key === "doc") continue;
          const got = found[key];
          const ok =
            key === "error"
              ? typeof got === "string" && got.includes(String(expected))
              : isDeepStrictEqual(got, expected);
          if (!ok) return `${key} is ${JSON.stringify(got)}`;
        }
        return null;
      }
      case "stats": {
        const stats = (await this.queue.stats()) as unknown as Record<string, number>;
        const wrong = Object.entries(value as Json)
          .filter(([k, v]) => stats[k] !== v)
          .map(([k]) => `${k}=${String(stats[k])}`);
        return wrong.length > 0 ? `found ${wrong.join(", ")}` : null;
      }
      case "handled": {
        const path = join(this.dir, "handled");
        const lines = existsSync(path)
          ? readFileSync(path, "utf8")
              .split("\n")
              .filter((l) => l !== "")
              .map((l) => JSON.parse(l) as Json)
          : [];
        const count = lines.filter(
          (l) =>
            l.did === value &&
            (!("of" in condition) || l.task === condition.of) &&
            (!("by" in condition) || l.worker === condition.by),
        ).length;
        return count === condition.count ? null : `${count} such runs in ${JSON.stringify(lines)}`;
      }
      case "exited": {
        const child = this.worker(String(value)).child;
        if (child.exitCode === null && child.signalCode === null) return "still running";
        if ("code" in condition && child.exitCode !== condition.code)
          return `exit code ${String(child.exitCode)} (signal ${String(child.signalCode)})`;
        return null;
      }
      case "logged": {
        const output = this.worker(String(condition.worker)).output;
        const seen = output.split("\n").some((line) => {
          try {
            return (JSON.parse(line) as Json).event === value;
          } catch {
            return false;
          }
        });
        return seen ? null : "not logged yet";
      }
      case "any": {
        const unmet: string[] = [];
        for (const inner of value as Json[]) {
          const why = await this.unmet([inner]);
          if (why === null) return null;
          unmet.push(why);
        }
        return `none holds: ${unmet.join("; ")}`;
      }
    }
    return `unknown condition ${kind}`;
  }
}

/** Run the scenario in `path` on a flushed server; `StepFailedError` if a step fails. */
export async function runScenario(path: string, redisUrl: string, dir: string): Promise<void> {
  const runner = new Runner(load(path), basename(path, ".json"), redisUrl, dir);
  try {
    await runner.run();
  } finally {
    await runner.close();
  }
}
