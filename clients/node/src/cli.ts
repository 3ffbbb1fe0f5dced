/**
 * The `taskfleet-node` command: `worker` runs a Node worker, `drain` (the Kubernetes
 * preStop hook) tells the worker of this container to drain. The Python `taskfleet
 * worker`'s flags and `TASKFLEET_*` variables where they apply, its exit codes (0 after a
 * drain, 1 when the worker failed, 2 for bad input or configuration) and one line per
 * error on stderr (`taskfleet-node: error: ...`), never a stack trace.
 *
 * `drain` reads the same runtime file and signals the same way as `taskfleet drain`, so
 * either drains either worker; it loads nothing of the worker.
 *
 * @module
 */

import { readFileSync } from "node:fs";
import { join } from "node:path";

import { InvalidArgument, InvalidRedisURL, TaskfleetError } from "./errors.js";
import { CONFIG_FIELDS } from "./protocol/defaults.js";
import { formatG } from "./pyformat.js";

const PROG = "taskfleet-node";

/** Input the command can't use: one line, exit 2. */
export class BadInput extends Error {}
/** A command that failed: one line, exit 1. */
export class Failure extends Error {}

export type Kind = "string" | "int" | "float" | "flag" | "bool" | "choice" | "multi";

export interface Opt {
  readonly name: string;
  readonly kind: Kind;
  readonly env?: string;
  readonly choices?: readonly string[];
  readonly min?: number;
  readonly max?: number;
  readonly help: string;
}

export type Values = Record<string, string | number | boolean | string[] | undefined>;

const TRUE = ["1", "true", "t", "yes", "y", "on"];
const FALSE = ["0", "false", "f", "no", "n", "off"];

function convert(opt: Opt, raw: string, where: string): string | number | boolean {
  const bad = (why: string): never => {
    throw new BadInput(`invalid value for ${where}: ${why}`);
  };
  switch (opt.kind) {
    case "int": {
      if (!/^[+-]?[0-9]+$/.test(raw)) bad(`'${raw}' is not a valid integer`);
      const n = Number(raw);
      if ((opt.min !== undefined && n < opt.min) || (opt.max !== undefined && n > opt.max)) {
        bad(`${n} is not in the range ${opt.min ?? "-inf"}<=x<=${opt.max ?? "inf"}`);
      }
      return n;
    }
    case "float": {
      if (!/^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$/.test(raw))
        bad(`'${raw}' is not a valid finite number`);
      const n = Number(raw);
      if (!Number.isFinite(n)) bad(`'${raw}' is not a finite number`);
      if (opt.min !== undefined && n < opt.min)
        bad(`${formatG(n)} is not in the range x>=${opt.min}`);
      return n;
    }
    case "bool":
    case "flag": {
      const v = raw.toLowerCase();
      if (TRUE.includes(v)) return true;
      if (FALSE.includes(v)) return false;
      return bad(`'${raw}' is not a valid boolean`);
    }
    case "choice": {
      const v = opt.name === "log-level" ? raw.toLowerCase() : raw;
      if (!(opt.choices ?? []).includes(v))
        bad(`'${raw}' is not one of ${(opt.choices ?? []).map((c) => `'${c}'`).join(", ")}`);
      return v;
    }
    default:
      return raw;
  }
}

/** Parse `args` against `opts`, then fill in from the environment; flags named in `--x/--no-x` form for bools. */
export function parseArgs(
  args: readonly string[],
  opts: readonly Opt[],
  env: NodeJS.ProcessEnv = process.env,
): Values {
  const byName = new Map(opts.map((o) => [o.name, o]));
  const values: Values = {};
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    if (!arg.startsWith("--")) throw new BadInput(`unexpected argument '${arg}'`);
    const eq = arg.indexOf("=");
    let name = eq < 0 ? arg.slice(2) : arg.slice(2, eq);
    let negated = false;
    let opt = byName.get(name);
    if (opt === undefined && name.startsWith("no-") && byName.get(name.slice(3))?.kind === "bool") {
      name = name.slice(3);
      opt = byName.get(name);
      negated = true;
    }
    if (opt === undefined) throw new BadInput(`no such option: --${name}`);
    if (opt.kind === "flag" || opt.kind === "bool") {
      if (eq >= 0) throw new BadInput(`option --${name} does not take a value`);
      values[name] = !negated;
      continue;
    }
    let raw: string;
    if (eq >= 0) {
      raw = arg.slice(eq + 1);
    } else {
      const next = args[i + 1];
      if (next === undefined) throw new BadInput(`option --${name} requires an argument`);
      raw = next;
      i += 1;
    }
    if (opt.kind === "multi") {
      const list = (values[name] as string[] | undefined) ?? [];
      list.push(raw);
      values[name] = list;
    } else {
      values[name] = convert(opt, raw, `--${name}`);
    }
  }
  for (const opt of opts) {
    if (values[opt.name] !== undefined || opt.env === undefined) continue;
    const raw = env[opt.env];
    if (raw === undefined || raw === "") continue;
    const where = `--${opt.name} (env var: '${opt.env}')`;
    values[opt.name] =
      opt.kind === "multi" ? raw.split(/\s+/).filter((s) => s !== "") : convert(opt, raw, where);
  }
  return values;
}

export function help(title: string, opts: readonly Opt[]): string {
  const lines = [title, "", "Options:"];
  for (const o of opts) {
    const name = o.kind === "bool" ? `--${o.name}/--no-${o.name}` : `--${o.name}`;
    lines.push(
      `  ${name.padEnd(28)} ${o.help}${o.env !== undefined ? ` [env var: ${o.env}]` : ""}`,
    );
  }
  return lines.join("\n");
}

const WORKER_OPTIONS: readonly Opt[] = [
  { name: "queue", kind: "string", env: "TASKFLEET_QUEUE", help: "The queue to serve (required)." },
  {
    name: "app-dir",
    kind: "string",
    env: "TASKFLEET_APP_DIR",
    help: "Resolve handler modules from this directory [default: the current one].",
  },
  {
    name: "handler",
    kind: "multi",
    env: "TASKFLEET_HANDLER",
    help: "'./module.js:export' for tasks without a name, 'NAME=./module.js:export' for named ones, or './module.js:REGISTRY' (an object of names to functions). Repeat it (in the variable: separated by spaces).",
  },
  {
    name: "concurrency",
    kind: "int",
    env: "TASKFLEET_CONCURRENCY",
    help: "Tasks this process runs at once [default: 1].",
  },
  {
    name: "processes",
    kind: "int",
    env: "TASKFLEET_PROCESSES",
    min: 1,
    max: 256,
    help: "Worker processes, each with --concurrency slots; above 1 this process stays a supervisor that restarts a process that dies and drains them all on SIGTERM; process i is the worker <pod>#i and serves its metrics on --metrics-port + i - 1 [default: 1].",
  },
  {
    name: "isolation",
    kind: "choice",
    env: "TASKFLEET_ISOLATION",
    choices: ["thread", "process"],
    help: "'thread' (handlers run on this process's event loop) [default: thread].",
  },
  {
    name: "max-tasks-per-child",
    kind: "int",
    env: "TASKFLEET_MAX_TASKS_PER_CHILD",
    min: 1,
    help: "Needs --isolation process (not in the Node worker).",
  },
  {
    name: "prefetch",
    kind: "int",
    env: "TASKFLEET_PREFETCH",
    help: "Claimed tasks that may wait for a free slot while runs are short (under 10 ms on average); 0 = none [default: twice the concurrency].",
  },
  {
    name: "drain-timeout",
    kind: "float",
    env: "TASKFLEET_DRAIN_TIMEOUT",
    help: "Seconds in-flight tasks may finish after SIGTERM before they are released [default: 30].",
  },
  {
    name: "held-grace",
    kind: "float",
    env: "TASKFLEET_HELD_GRACE",
    help: "Seconds a slot may stay held by a call given up on (its task timed out, its lease was lost) before it is stuck; when every slot is stuck the worker drains and exits 3 to be restarted [default: 60].",
  },
  {
    name: "heartbeat-interval",
    kind: "float",
    env: "TASKFLEET_HEARTBEAT_INTERVAL",
    help: "[default: 5]",
  },
  {
    name: "lease-ttl",
    kind: "float",
    env: "TASKFLEET_LEASE_TTL",
    help: `Deprecated, ignored with a warning: the queue's config sets the lease TTL for all its workers (taskfleet configure QUEUE --lease-ttl S, or the TaskQueue's heartbeat.ttlSeconds) [queue default: ${String(CONFIG_FIELDS.leaseTtlS.default)}].`,
  },
  {
    name: "timeout",
    kind: "float",
    env: "TASKFLEET_TASK_TIMEOUT",
    help: "Seconds a task may run unless it sets its own timeout [default: none].",
  },
  {
    name: "pod",
    kind: "string",
    env: "TASKFLEET_POD_NAME",
    help: "Worker name, unique among the queue's live workers [default: <hostname>-<pid>-<random>].",
  },
  {
    name: "runtime-dir",
    kind: "string",
    env: "TASKFLEET_RUNTIME_DIR",
    help: "Where worker.json lives, for `drain` [default: $XDG_RUNTIME_DIR/taskfleet, else /tmp/taskfleet-<uid>].",
  },
  {
    name: "fire-schedules",
    kind: "bool",
    env: "TASKFLEET_FIRE_SCHEDULES",
    help: "Fire the queue's due schedules in the background [default: true].",
  },
  {
    name: "allow-eviction",
    kind: "flag",
    env: "TASKFLEET_ALLOW_EVICTION",
    help: "Start even if Redis's maxmemory-policy may delete keys.",
  },
  {
    name: "log-format",
    kind: "choice",
    env: "TASKFLEET_LOG_FORMAT",
    choices: ["kv", "json"],
    help: "[default: kv]",
  },
  {
    name: "log-level",
    kind: "choice",
    env: "TASKFLEET_LOG_LEVEL",
    choices: ["debug", "info", "warning", "error"],
    help: "[default: info]",
  },
  {
    name: "metrics-port",
    kind: "int",
    env: "TASKFLEET_METRICS_PORT",
    min: 0,
    max: 65535,
    help: "Serve Prometheus metrics on this port, all interfaces; 0 = off [default: 0].",
  },
  {
    name: "redis-url",
    kind: "string",
    env: "TASKFLEET_REDIS_URL",
    help: "Redis to use; a password in it is never printed [default: redis://localhost:6379/0].",
  },
  { name: "help", kind: "flag", help: "Show this message and exit." },
];

const DRAIN_OPTIONS: readonly Opt[] = [
  { name: "wait", kind: "flag", help: "Return only when the worker holds no task." },
  {
    name: "timeout",
    kind: "float",
    min: 0,
    help: "With --wait: give up after this many seconds (exit 1).",
  },
  {
    name: "runtime-dir",
    kind: "string",
    env: "TASKFLEET_RUNTIME_DIR",
    help: "Where the worker keeps worker.json.",
  },
  { name: "help", kind: "flag", help: "Show this message and exit." },
];

/** The package's version (its package.json). */
export function version(): string {
  try {
    const pkg = JSON.parse(
      readFileSync(new URL("../../package.json", import.meta.url), "utf8"),
    ) as { version?: string };
    return pkg.version ?? "0";
  } catch {
    return "0";
  }
}

async function drainCommand(args: readonly string[]): Promise<number> {
  const v = parseArgs(args, DRAIN_OPTIONS);
  if (v.help === true) {
    process.stdout.write(
      `${help(`Usage: ${PROG} drain [--wait] [--timeout S] [--runtime-dir D]\n\nTell the worker in this container to drain (the Kubernetes preStop hook).`, DRAIN_OPTIONS)}\n`,
    );
    return 0;
  }
  const { DrainError, FILE_NAME, UnsafeRuntimeDir, prepareRuntimeDir, requestDrain } =
    await import("./worker/runtime.js");
  const timeout = v.timeout as number | undefined;
  let drained: boolean;
  try {
    const path = join(prepareRuntimeDir(v["runtime-dir"] as string | undefined, false), FILE_NAME);
    drained = await requestDrain(path, v.wait === true, timeout ?? null);
  } catch (error) {
    if (error instanceof DrainError || error instanceof UnsafeRuntimeDir)
      throw new Failure(error.message);
    throw error;
  }
  if (!drained) throw new Failure(`worker still holds tasks after ${formatG(timeout ?? 0)}s`);
  return 0;
}

/** A flag's seconds as the milliseconds the Worker takes (not a number: passed on for the checks to refuse). */
function ms(seconds: unknown): number | undefined {
  if (seconds === undefined) return undefined;
  return typeof seconds === "number" ? seconds * 1000 : (seconds as number);
}

async function workerCommand(args: readonly string[]): Promise<number> {
  // Before anything else (the bin did already): a SIGTERM from here on drains the worker once it runs.
  const { handOver, rememberStopSignals, stopSignalled } = await import("./worker/early.js");
  rememberStopSignals();
  const v = parseArgs(args, WORKER_OPTIONS);
  if (v.help === true) {
    process.stdout.write(
      `${help(`Usage: ${PROG} worker --queue Q --handler ./handlers.js:export [options]\n\nRun tasks of a queue until SIGTERM/SIGINT or \`${PROG} drain\`, then drain and exit 0.`, WORKER_OPTIONS)}\n`,
    );
    return 0;
  }
  const queue = v.queue as string | undefined;
  if (queue === undefined) throw new BadInput("missing option --queue (or TASKFLEET_QUEUE)");
  const handlerRefs = (v.handler as string[] | undefined) ?? [];
  if (handlerRefs.length === 0)
    throw new BadInput("missing option --handler (or TASKFLEET_HANDLER)");
  // process i of a supervisor (--processes N): its name, runtime files and metrics port are its own
  const index = process.env.TASKFLEET_NODE_PROCESS;
  const processIndex = index !== undefined && /^[1-9][0-9]*$/.test(index) ? Number(index) : null;
  let pod = v.pod as string | undefined;
  if (pod?.includes("#") === true) {
    throw new BadInput(
      "--pod must not contain '#': it separates a pod's name from the number of its worker process",
    );
  }
  if (processIndex !== null)
    pod = `${process.env.TASKFLEET_NODE_POD ?? pod ?? "worker"}#${processIndex}`;
  const processes = processIndex === null ? ((v.processes as number | undefined) ?? 1) : 1;
  if (v.isolation === "process") {
    throw new BadInput(
      "the Node worker runs handlers on its event loop: --isolation must be thread",
    );
  }
  if (v["max-tasks-per-child"] !== undefined)
    throw new BadInput("max tasks per child needs process isolation (--isolation process)");
  const { appDir, HandlerLoadError, loadHandlers } = await import("./worker/handlers.js");
  const { UnsafeRuntimeDir, prepareRuntimeDir } = await import("./worker/runtime.js");
  const { checkSettings } = await import("./worker/settings.js");
  const { configureLogging, logEvent } = await import("./worker/log.js");
  let dir: string;
  try {
    dir = appDir(v["app-dir"] as string | undefined);
  } catch (error) {
    if (error instanceof HandlerLoadError) throw new BadInput(error.message);
    throw error;
  }
  let runtimeDir: string;
  try {
    runtimeDir = prepareRuntimeDir(v["runtime-dir"] as string | undefined, true);
    if (processIndex !== null)
      runtimeDir = prepareRuntimeDir(join(runtimeDir, `process-${processIndex}`), true);
  } catch (error) {
    if (error instanceof UnsafeRuntimeDir) throw new BadInput(error.message);
    throw new BadInput(
      `runtime directory: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
  const options = {
    redisUrl: (v["redis-url"] as string | undefined) ?? "redis://localhost:6379/0",
    pod,
    concurrency: (v.concurrency as number | undefined) ?? 1,
    prefetch: v.prefetch as number | undefined,
    // the flags are seconds, as the Python CLI's; the Worker takes ms
    drainTimeoutMs: ms(v["drain-timeout"]) ?? 30_000,
    heldGraceMs: ms(v["held-grace"]),
    heartbeatIntervalMs: ms(v["heartbeat-interval"]) ?? 5000,
    leaseTtlMs: ms(v["lease-ttl"]),
    taskTimeoutMs: ms(v.timeout),
    runtimeDir,
    fireSchedules: (v["fire-schedules"] as boolean | undefined) ?? true,
    allowEviction: (v["allow-eviction"] as boolean | undefined) ?? false,
  };
  try {
    checkSettings(queue, options, pod ?? "-", "-");
  } catch (error) {
    if (error instanceof InvalidArgument) throw new BadInput(error.message);
    if (error instanceof InvalidRedisURL) {
      throw new BadInput(
        `invalid value for --redis-url: not a Redis URL taskfleet can use: ${error.message}; expected ` +
          "redis://[[user]:password@]host[:port][/db], rediss://... or unix:///path",
      );
    }
    throw error;
  }
  configureLogging(
    (v["log-format"] as "kv" | "json" | undefined) ?? "kv",
    (v["log-level"] as "debug" | "info" | "warning" | "error" | undefined) ?? "info",
  );
  if (processes > 1) {
    const { supervise } = await import("./worker/supervisor.js");
    const { defaultPodName } = await import("./worker/identity.js");
    return await supervise({
      processes,
      args,
      pod: pod ?? defaultPodName(),
      queue,
      runtimeDir,
      early: stopSignalled(),
    });
  }
  let handlerSet;
  try {
    handlerSet = await loadHandlers(handlerRefs, dir);
  } catch (error) {
    if (error instanceof HandlerLoadError) throw new BadInput(error.message);
    throw error;
  }
  const { Worker } = await import("./worker/worker.js");
  const { NameInUse, PodGone } = await import("./worker/broker.js");
  const { RedisEvicts } = await import("./worker/start.js");
  const { formatError } = await import("./worker/failures.js");
  const worker = new Worker(queue, { ...options, handlerSet });
  const basePort = (v["metrics-port"] as number | undefined) ?? 0;
  const port = basePort !== 0 && processIndex !== null ? basePort + processIndex - 1 : basePort;
  if (port !== 0) {
    const { MetricsUnavailable, serve } = await import("./worker/metrics.js");
    try {
      await serve(worker, port, version());
    } catch (error) {
      if (error instanceof MetricsUnavailable) throw new BadInput(error.message);
      throw error;
    }
  }
  handOver(() => {
    worker.drain();
  });
  try {
    return await worker.run();
  } catch (error) {
    if (error instanceof NameInUse || error instanceof RedisEvicts || error instanceof PodGone)
      throw new BadInput(error.message);
    logEvent("error", "worker_failed", { error: formatError(error) });
    return 1;
  }
}

const USAGE = `Usage: ${PROG} COMMAND [options]

Commands:
  worker  Run tasks of a queue until SIGTERM/SIGINT or \`${PROG} drain\`, then drain and exit 0.
  drain   Tell the worker in this container to drain (the Kubernetes preStop hook).

  configure  Show or change the queue's shared settings.
  stats      Counts of a queue's tasks by state, its workers and its counters.
  ls         List a queue's tasks in one state (alias: list).
  task       Show one task (alias: show).
  cancel     Cancel tasks.
  retry      Send dead tasks back to pending.
  purge      Delete finished tasks of one state now.
  workers    A queue's workers and what each holds.
  schedule   A queue's schedules: add, ls, rm, pause, resume.
  provider-quota  A quota every queue shares: configure, show, pause, resume.

Run '${PROG} COMMAND --help' for a command's options.`;

/** Run the command line `argv` (without node and the script); resolves to the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    if (command === "worker") return await workerCommand(rest);
    if (command === "drain") return await drainCommand(rest);
    const { EVERYDAY } = await import("./cli/commands.js");
    const everyday = command === undefined ? undefined : EVERYDAY[command];
    if (everyday !== undefined) return await everyday(rest);
    if (command === "--version") {
      process.stdout.write(`${PROG}, version ${version()}\n`);
      return 0;
    }
    if (command === undefined || command === "--help" || command === "-h") {
      process.stdout.write(`${USAGE}\n`);
      return command === undefined ? 2 : 0;
    }
    throw new BadInput(`no such command '${command}'; run '${PROG} --help' for the commands`);
  } catch (error) {
    if (error instanceof BadInput) return fail(error.message, 2);
    if (error instanceof Failure) return fail(error.message, 1);
    if (error instanceof TaskfleetError) return fail(error.message, 2);
    return fail(error instanceof Error ? `${error.name}: ${error.message}` : String(error), 1);
  }
}

function fail(message: string, code: number): number {
  process.stderr.write(`${PROG}: error: ${message.replace(/\s*\n\s*/g, " ")}\n`);
  return code;
}
