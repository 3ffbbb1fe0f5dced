// Every error class the package exports is a TaskfleetError, so one `instanceof` check
// catches what the library throws on purpose.
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import * as api from "../src/index.js";
import { TaskfleetError } from "../src/errors.js";
import * as workerApi from "../src/worker/index.js";

function errorClasses(module: Record<string, unknown>): [string, unknown][] {
  return Object.entries(module).filter(
    ([, value]) =>
      typeof value === "function" && (value as { prototype?: unknown }).prototype instanceof Error,
  );
}

describe("exported errors", () => {
  it("finds the error classes of both entry points", () => {
    const names = [...errorClasses(api), ...errorClasses(workerApi)].map(([name]) => name);
    assert.ok(names.includes("TaskExists"), names.join(", "));
    assert.ok(names.includes("NameInUse"), names.join(", "));
    assert.ok(names.includes("HandlerLoadError") || !("HandlerLoadError" in workerApi));
  });

  it("are each a TaskfleetError", () => {
    const outside = [...errorClasses(api), ...errorClasses(workerApi)]
      .filter(
        ([, value]) =>
          !((value as { prototype: unknown }).prototype instanceof TaskfleetError) &&
          value !== TaskfleetError,
      )
      .map(([name]) => name);
    assert.deepEqual(outside, []);
  });
});
