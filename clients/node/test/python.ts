// The repository's Python (its .venv, made by `make install`), for the tests that check
// this package against the Python client: the same bytes stored, the same slots computed,
// tasks crossing between the two. Without it those tests are skipped, unless
// TASKFLEET_REQUIRE_PYTHON=1 (as `make node-check` sets) makes its absence a failure.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

export const REPOSITORY = fileURLToPath(new URL("../../../../", import.meta.url));
export const PYTHON = process.env.TASKFLEET_PYTHON ?? `${REPOSITORY}.venv/bin/python`;
const available = existsSync(PYTHON);

if (!available && process.env.TASKFLEET_REQUIRE_PYTHON === "1") {
  throw new Error(`no Python at ${PYTHON}: run make install at the repository's root`);
}

/** `{ skip }` for a test that needs the repository's Python. */
export const needsPython = available ? {} : { skip: `no Python at ${PYTHON} (make install)` };

/** Run `code` in the repository's Python with `input` as JSON on stdin; its stdout parsed as JSON. */
export function python<T>(code: string, input: unknown = null): T {
  const run = spawnSync(PYTHON, ["-c", code], {
    input: JSON.stringify(input),
    encoding: "utf8",
    cwd: REPOSITORY,
  });
  if (run.status !== 0) throw new Error(`python failed (${String(run.status)}): ${run.stderr}`);
  return JSON.parse(run.stdout) as T;
}
