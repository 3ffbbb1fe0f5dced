// The package as its users load it: by name, from an ES module and from CommonJS (Node's
// require of an ES module, 20.19 and later), with the same classes either way.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));

function run(args: string[]): string {
  const out = spawnSync(process.execPath, args, { cwd: ROOT, encoding: "utf8" });
  assert.equal(out.status, 0, out.stderr);
  return out.stdout.trim();
}

describe("the package", () => {
  it("loads by name from an ES module", () => {
    const code =
      'import { Queue, TaskExists, TaskfleetError, PROTOCOL_VERSION } from "taskfleet"; console.log(typeof Queue, new TaskExists("a", "payload") instanceof TaskfleetError, PROTOCOL_VERSION)';
    assert.equal(run(["--input-type=module", "-e", code]), "function true 1");
  });

  it("loads by name from CommonJS", () => {
    const code =
      'const t = require("taskfleet"); const q = new t.Queue("jobs"); console.log(String(q), q.keys.prefix); q.close()';
    assert.equal(run(["-e", code]), 'Queue("jobs") tf:{jobs}:');
  });
});
