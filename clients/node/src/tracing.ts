/**
 * OpenTelemetry spans for enqueue and run, as the Python package makes them
 * (`protocol/tracing.py`): a producer's `send <queue>` span around each enqueue call, its
 * context stored with the task (the carrier as compact JSON), and the worker's
 * `process <queue>` span around each run of a handler, a child of that context. Same names,
 * kinds and attributes in both languages, so one trace shows a Node producer and a Python
 * worker alike.
 *
 * `@opentelemetry/api` is an optional peer dependency: looked up once, on the first
 * enqueue or at a worker's start. Without it, or with no tracer provider registered (the
 * API's no-op default), nothing here runs on the enqueue or run path. The producer asks
 * `configured()` on each enqueue, so a provider registered after a `Queue` was made is
 * seen at once: "configured" is kept for good (a provider, once set, stays); "not
 * configured" is asked of the API each time, which costs well under a microsecond here
 * (Python caches it for a second: its look-up costs 5 µs). The worker asks once, at its
 * start.
 *
 * @module
 */

import type * as OtelApi from "@opentelemetry/api";

type Api = typeof OtelApi;

/** A stored carrier is at most this long (a foreign writer's field is ignored beyond it). */
export const MAX_CARRIER_CHARS = 4096;

// undefined: not looked up yet; null: not installed
let api: Api | null | undefined;
let loading: Promise<Api | null> | undefined;
let noopProvider: unknown;
const seen = { configured: false };

/** `@opentelemetry/api`, or null when it is not installed (imported once). */
export async function loadApi(): Promise<Api | null> {
  if (api !== undefined) return api;
  loading ??= import("@opentelemetry/api").then(
    (found: Api) => found,
    () => null,
  );
  api = await loading;
  if (api !== null) noopProvider = new api.ProxyTracerProvider().getDelegate();
  return api;
}

/** A tracer provider other than the API's no-op is registered, asked of the API now. */
export function configuredNow(): boolean {
  if (api === undefined || api === null) return false;
  const provider: unknown = api.trace.getTracerProvider();
  const real =
    provider instanceof api.ProxyTracerProvider ? provider.getDelegate() : (provider as object);
  if (real === noopProvider) return false;
  seen.configured = true;
  return true;
}

/**
 * Whether to trace an enqueue: the API is installed and a provider registered. A promise
 * only on the first call, which looks the API up: an enqueue waits for no extra tick
 * after that.
 */
export function configured(): boolean | Promise<boolean> {
  if (seen.configured) return true;
  if (api === null) return false;
  if (api === undefined) return loadApi().then(() => configuredNow());
  return configuredNow();
}

function tracer(a: Api): OtelApi.Tracer {
  return a.trace.getTracer("taskfleet");
}

/**
 * Run `send` inside the producer's `send <queue>` span (of `taskIds`); `send` gets the
 * span's context as the stored carrier ('' when the propagator gives nothing).
 */
export async function enqueueSpan<T>(
  queue: string,
  taskIds: readonly string[],
  send: (carrier: string) => Promise<T>,
): Promise<T> {
  const a = api as Api;
  return tracer(a).startActiveSpan(
    `send ${queue}`,
    {
      kind: a.SpanKind.PRODUCER,
      attributes: {
        "messaging.system": "taskfleet",
        "messaging.operation.type": "send",
        "messaging.destination.name": queue,
        "messaging.batch.message_count": taskIds.length,
      },
    },
    async (span) => {
      // one task's span names it, as Python's does
      if (taskIds.length === 1) span.setAttribute("messaging.message.id", taskIds[0] as string);
      try {
        return await send(carrierText(a));
      } catch (error) {
        failed(a, span, error);
        throw error;
      } finally {
        span.end();
      }
    },
  );
}

/**
 * Run `fn` inside the worker's `process <queue>` span, a child of the stored `carrier`'s
 * context. An error `fn` throws is recorded on the span (its status an error) and goes on.
 */
export async function runSpan<T>(
  queue: string,
  taskId: string,
  attempt: number,
  carrier: string | null,
  fn: () => T | Promise<T>,
): Promise<T> {
  const a = api as Api;
  return tracer(a).startActiveSpan(
    `process ${queue}`,
    {
      kind: a.SpanKind.CONSUMER,
      attributes: {
        "messaging.system": "taskfleet",
        "messaging.operation.type": "process",
        "messaging.destination.name": queue,
        "messaging.message.id": taskId,
        "taskfleet.task.attempt": attempt,
      },
    },
    contextFrom(a, carrier),
    async (span) => {
      try {
        return await fn();
      } catch (error) {
        failed(a, span, error);
        throw error;
      } finally {
        span.end();
      }
    },
  );
}

function failed(a: Api, span: OtelApi.Span, error: unknown): void {
  span.recordException(error instanceof Error ? error : String(error));
  span.setStatus({
    code: a.SpanStatusCode.ERROR,
    message: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
  });
}

/** The active context as the stored carrier (compact JSON, keys sorted; '' for none). */
function carrierText(a: Api): string {
  const carrier: Record<string, string> = {};
  a.propagation.inject(a.context.active(), carrier);
  const keys = Object.keys(carrier).sort();
  if (keys.length === 0) return "";
  return JSON.stringify(Object.fromEntries(keys.map((k) => [k, carrier[k]])));
}

/**
 * The context a stored carrier names; the active one for none or an unreadable one (a
 * task's trace is a courtesy: it never stops the task from running).
 */
function contextFrom(a: Api, text: string | null): OtelApi.Context {
  if (text === null || text === "" || text.length > MAX_CARRIER_CHARS) return a.context.active();
  let carrier: unknown;
  try {
    carrier = JSON.parse(text);
  } catch {
    return a.context.active();
  }
  if (
    typeof carrier !== "object" ||
    carrier === null ||
    Array.isArray(carrier) ||
    !Object.values(carrier).every((v) => typeof v === "string")
  )
    return a.context.active();
  return a.propagation.extract(a.context.active(), carrier as Record<string, string>);
}
